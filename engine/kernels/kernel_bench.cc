// Kernel-level micro-benchmarks (Google Benchmark). Engine-internal, so they live with the kernels
// rather than in bench/ (whose programs use only engine/engine.h): the oneDNN-against-native
// crossover for small elementwise ops that decides which kernel a tiny body op uses, and the
// one-row matmul + bias + tanh of a batch-1 RNN cell on the packed native kernel (PackedGemv)
// against the prepacked oneDNN matmul primitive it replaces, alone and inside whole bench models.
//
//   build/bin/kernel_bench --models=build/bench/bench_models [--threads=1] [benchmark flags]

#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <dnnl.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_model.h"
#include "engine/engine.h"
#include "engine/kernels/dnnl/dnnl_util.h"
#include "engine/kernels/native/packed_gemm.h"
#include "engine/kernels/native/packed_gemv.h"
#include "engine/kernels/native/vector_math.h"

namespace loopserve {
namespace {

using bench::RunBenchModel;

// The crossover between a oneDNN binary primitive (execute floor ~0.2 us, plus its internal heap
// allocations) and a plain loop, for an f32 add of n elements.
void BM_DnnlAdd(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n);
  const dnnl::memory::desc d({n}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::a);
  const dnnl::engine& eng = engine::CpuEngine();
  dnnl::binary prim(
      dnnl::binary::primitive_desc(dnnl::binary::desc(dnnl::algorithm::binary_add, d, d, d), eng));
  dnnl::memory ma(d, eng, a.data()), mb(d, eng, b.data()), mc(d, eng, c.data());
  dnnl::stream s(eng);
  const dnnl_exec_arg_t args[] = {
      {DNNL_ARG_SRC_0, ma.get()}, {DNNL_ARG_SRC_1, mb.get()}, {DNNL_ARG_DST, mc.get()}};
  for (auto _ : state) {
    dnnl_primitive_execute(prim.get(), s.get(), 3, args);
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_DnnlAdd)->RangeMultiplier(8)->Range(16, 1 << 20);

void BM_NativeAdd(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n);
  for (auto _ : state) {
    const float* pa = a.data();
    const float* pb = b.data();
    float* pc = c.data();
    for (int64_t i = 0; i < n; ++i) pc[i] = pa[i] + pb[i];
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_NativeAdd)->RangeMultiplier(4)->Range(1, 16384);

// Transcendental elementwise ops on n floats: the oneDNN eltwise primitive (execute through the C
// API with a prebuilt argument table) against vector_math (SLEEF) and against a scalar libm loop.
void BM_DnnlTanh(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> a(n, 0.3f), c(n);
  const dnnl::memory::desc d({n}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::a);
  const dnnl::engine& eng = engine::CpuEngine();
  dnnl::eltwise_forward prim(dnnl::eltwise_forward::primitive_desc(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::eltwise_tanh,
                                  d, 0.0f, 0.0f),
      eng));
  dnnl::memory ma(d, eng, a.data()), mc(d, eng, c.data());
  dnnl::stream s(eng);
  const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, ma.get()}, {DNNL_ARG_DST, mc.get()}};
  for (auto _ : state) {
    dnnl_primitive_execute(prim.get(), s.get(), 2, args);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_DnnlTanh)->RangeMultiplier(8)->Range(16, 1 << 20);

void BM_VecTanh(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> a(n, 0.3f), c(n);
  for (auto _ : state) {
    engine::native::UnaryF32(engine::native::VecUnary::kTanh, a.data(), c.data(), n);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_VecTanh)->RangeMultiplier(8)->Range(16, 1 << 20);

// One vector_math function over 4096 floats spread over [-4, 4], per ISA
// (LOOPSERVE_MAX_ISA=avx2 measures the AVX2 table on an AVX-512 machine).
void BM_VecUnary(benchmark::State& state, engine::native::VecUnary op) {
  const int64_t n = 4096;
  std::vector<float> a(n), c(n);
  for (int64_t i = 0; i < n; ++i) a[i] = -4.0f + 8.0f * static_cast<float>(i) / n;
  for (auto _ : state) {
    engine::native::UnaryF32(op, a.data(), c.data(), n);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK_CAPTURE(BM_VecUnary, exp, engine::native::VecUnary::kExp);
BENCHMARK_CAPTURE(BM_VecUnary, tanh, engine::native::VecUnary::kTanh);
BENCHMARK_CAPTURE(BM_VecUnary, sigmoid, engine::native::VecUnary::kSigmoid);
BENCHMARK_CAPTURE(BM_VecUnary, erf, engine::native::VecUnary::kErf);
BENCHMARK_CAPTURE(BM_VecUnary, softplus, engine::native::VecUnary::kSoftplus);

void BM_LibmTanh(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> a(n, 0.3f), c(n);
  for (auto _ : state) {
    for (int64_t i = 0; i < n; ++i) c[i] = static_cast<float>(std::tanh(static_cast<double>(a[i])));
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_LibmTanh)->RangeMultiplier(8)->Range(16, 4096);

void BM_VecAdd(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n);
  for (auto _ : state) {
    engine::native::BinaryF32(engine::native::VecBinary::kAdd, a.data(), 1, b.data(), 1, c.data(),
                              n);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_VecAdd)->RangeMultiplier(8)->Range(16, 1 << 20);

// Fixed-seed uniform values in [-scale, scale].
std::vector<float> RandomFloats(int64_t count, float scale, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> values(static_cast<size_t>(count));
  for (float& v : values) v = dist(gen);
  return values;
}

// The one-row product of a batch-1 RNN cell, y = tanh(x W + b) for x [1, k], W [k, n] constant:
// the packed native kernel, called directly (what a fused MatMul+Add+Tanh runs when it is
// enabled). Arguments: k, n.
void BM_PackedGemv(benchmark::State& state) {
  const int64_t k = state.range(0);
  const int64_t n = state.range(1);
  if (!engine::native::PackedGemv::Available()) {
    state.SkipWithError("PackedGemv is not available on this CPU");
    return;
  }
  engine::Tensor w(engine::DataType::kFloat32, engine::Shape{k, n});
  const std::vector<float> w_values = RandomFloats(k * n, 1.0f / 16, 1);
  std::memcpy(w.mutable_data<float>(), w_values.data(), w_values.size() * sizeof(float));
  const engine::native::PackedGemv gemv(w, engine::native::PackedGemv::Activation::kTanh);
  const std::vector<float> x = RandomFloats(k, 1.0f, 2);
  const std::vector<float> bias = RandomFloats(n, 0.1f, 3);
  std::vector<float> y(static_cast<size_t>(n));
  for (auto _ : state) {
    gemv.Run(x.data(), bias.data(), y.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * k * n);  // multiply-adds
}
BENCHMARK(BM_PackedGemv)->Args({256, 256})->Args({256, 1024})->Unit(benchmark::kMicrosecond);

// The same product on a oneDNN matmul primitive set up as the engine's fused MatMul kernel does
// (engine/kernels/dnnl/matmul.cc, dnnl_kernel.cc): 1xk * kxn + bias [1, n] with a tanh eltwise
// post-op, weights in the layout the primitive prefers (format_tag::any, reordered once), a user
// scratchpad, executed through the C API with a prebuilt argument table on this thread.
// Arguments: k, n.
void BM_DnnlMatMulRow(benchmark::State& state) {
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  const int64_t k = state.range(0);
  const int64_t n = state.range(1);
  const dnnl::engine& eng = engine::CpuEngine();
  const dnnl::memory::desc src_d({1, k}, dt::f32, tag::ab);
  const dnnl::memory::desc plain_w_d({k, n}, dt::f32, tag::ab);
  const dnnl::memory::desc any_w_d({k, n}, dt::f32, tag::any);
  const dnnl::memory::desc bias_d({1, n}, dt::f32, tag::ab);
  const dnnl::memory::desc dst_d({1, n}, dt::f32, tag::ab);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::post_ops post_ops;
  post_ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_tanh, 0.0f, 0.0f);
  attr.set_post_ops(post_ops);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_d, any_w_d, bias_d, dst_d), attr,
                                        eng);
  const dnnl::matmul prim(pd);
  state.SetLabel(pd.impl_info_str());

  std::vector<float> w = RandomFloats(k * n, 1.0f / 16, 1);
  std::vector<float> x = RandomFloats(k, 1.0f, 2);
  std::vector<float> bias = RandomFloats(n, 0.1f, 3);
  std::vector<float> y(static_cast<size_t>(n));
  dnnl::stream s(eng);
  // Weights reordered once into the primitive's layout (a no-op copy when it is the plain one).
  const dnnl::memory::desc packed_w_d = pd.weights_desc();
  std::vector<uint8_t> packed_w(packed_w_d.get_size());
  {
    dnnl::memory plain_w(plain_w_d, eng, w.data());
    dnnl::memory packed(packed_w_d, eng, packed_w.data());
    dnnl::reorder(plain_w, packed).execute(s, plain_w, packed);
    s.wait();
  }
  const dnnl::memory::desc scratchpad_d = pd.scratchpad_desc();
  std::vector<uint8_t> scratchpad(std::max<size_t>(scratchpad_d.get_size(), 1));
  dnnl::memory m_src(src_d, eng, x.data()), m_w(packed_w_d, eng, packed_w.data()),
      m_bias(bias_d, eng, bias.data()), m_dst(dst_d, eng, y.data()),
      m_scratchpad(scratchpad_d, eng, scratchpad.data());
  std::vector<dnnl_exec_arg_t> args = {{DNNL_ARG_SRC, m_src.get()},
                                       {DNNL_ARG_WEIGHTS, m_w.get()},
                                       {DNNL_ARG_BIAS, m_bias.get()},
                                       {DNNL_ARG_DST, m_dst.get()}};
  if (scratchpad_d.get_size() > 0) args.push_back({DNNL_ARG_SCRATCHPAD, m_scratchpad.get()});
  for (auto _ : state) {
    if (dnnl_primitive_execute(prim.get(), s.get(), static_cast<int>(args.size()), args.data()) !=
        dnnl_success) {
      state.SkipWithError("dnnl_primitive_execute failed");
      return;
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * k * n);  // multiply-adds
}
BENCHMARK(BM_DnnlMatMulRow)->Args({256, 256})->Args({256, 1024})->Unit(benchmark::kMicrosecond);

// Rows times constant weights, y = x W for x [m, k], W [k, n] (a batched RNN / MLP body's
// product), on the native packed kernel (PackedGemm: AVX-512 tiles on an AVX-512 CPU) and on the
// prepacked oneDNN matmul primitive it replaces there. Items are multiply-adds (GFLOP/s = 2 x
// items/s). Arguments: m, k, n.
void BM_PackedGemmRows(benchmark::State& state) {
  const int64_t m = state.range(0);
  const int64_t k = state.range(1);
  const int64_t n = state.range(2);
  if (!engine::native::PackedGemm::Available()) {
    state.SkipWithError("PackedGemm is not available on this CPU");
    return;
  }
  const std::vector<float> w = RandomFloats(k * n, 1.0f / 16, 1);
  const engine::native::PackedGemm gemm(w.data(), k, n, /*transposed=*/false);
  const std::vector<float> x = RandomFloats(m * k, 1.0f, 2);
  std::vector<float> y(static_cast<size_t>(m * n));
  for (auto _ : state) {
    gemm.Run(x.data(), m, engine::native::PackedGemm::Epilogue(), y.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * m * k * n);
}

void BM_DnnlMatMulRows(benchmark::State& state) {
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  const int64_t m = state.range(0);
  const int64_t k = state.range(1);
  const int64_t n = state.range(2);
  const dnnl::engine& eng = engine::CpuEngine();
  const dnnl::memory::desc src_d({m, k}, dt::f32, tag::ab);
  const dnnl::memory::desc plain_w_d({k, n}, dt::f32, tag::ab);
  const dnnl::memory::desc any_w_d({k, n}, dt::f32, tag::any);
  const dnnl::memory::desc dst_d({m, n}, dt::f32, tag::ab);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_d, any_w_d, dst_d), attr, eng);
  const dnnl::matmul prim(pd);
  state.SetLabel(pd.impl_info_str());
  std::vector<float> w = RandomFloats(k * n, 1.0f / 16, 1);
  std::vector<float> x = RandomFloats(m * k, 1.0f, 2);
  std::vector<float> y(static_cast<size_t>(m * n));
  dnnl::stream s(eng);
  const dnnl::memory::desc packed_w_d = pd.weights_desc();
  std::vector<uint8_t> packed_w(packed_w_d.get_size());
  {
    dnnl::memory plain_w(plain_w_d, eng, w.data());
    dnnl::memory packed(packed_w_d, eng, packed_w.data());
    dnnl::reorder(plain_w, packed).execute(s, plain_w, packed);
    s.wait();
  }
  const dnnl::memory::desc scratchpad_d = pd.scratchpad_desc();
  std::vector<uint8_t> scratchpad(std::max<size_t>(scratchpad_d.get_size(), 1));
  dnnl::memory m_src(src_d, eng, x.data()), m_w(packed_w_d, eng, packed_w.data()),
      m_dst(dst_d, eng, y.data()), m_scratchpad(scratchpad_d, eng, scratchpad.data());
  std::vector<dnnl_exec_arg_t> args = {
      {DNNL_ARG_SRC, m_src.get()}, {DNNL_ARG_WEIGHTS, m_w.get()}, {DNNL_ARG_DST, m_dst.get()}};
  if (scratchpad_d.get_size() > 0) args.push_back({DNNL_ARG_SCRATCHPAD, m_scratchpad.get()});
  for (auto _ : state) {
    if (dnnl_primitive_execute(prim.get(), s.get(), static_cast<int>(args.size()), args.data()) !=
        dnnl_success) {
      state.SkipWithError("dnnl_primitive_execute failed");
      return;
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * m * k * n);
}

// The grid's product shapes at hidden 128-1024, batch 8-64.
void GridRowShapes(benchmark::internal::Benchmark* b) {
  for (const auto& [m, k, n] : std::vector<std::array<int64_t, 3>>{{8, 512, 512},
                                                                   {16, 512, 512},
                                                                   {32, 512, 512},
                                                                   {16, 512, 1000},
                                                                   {16, 512, 1024},
                                                                   {16, 1024, 512},
                                                                   {64, 512, 2048},
                                                                   {64, 1024, 1024},
                                                                   {16, 256, 1024},
                                                                   {64, 128, 384},
                                                                   {64, 64, 64}}) {
    b->Args({m, k, n});
  }
  b->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_PackedGemmRows)->Apply(GridRowShapes);
BENCHMARK(BM_DnnlMatMulRows)->Apply(GridRowShapes);

// Sets PackedGemv::SetEnabled for its lifetime, then turns the kernel back on (the default).
class ScopedPackedGemv {
 public:
  explicit ScopedPackedGemv(bool enabled) { engine::native::PackedGemv::SetEnabled(enabled); }
  ~ScopedPackedGemv() { engine::native::PackedGemv::SetEnabled(true); }
  ScopedPackedGemv(const ScopedPackedGemv&) = delete;
  ScopedPackedGemv& operator=(const ScopedPackedGemv&) = delete;
};

// A whole bench model with the one-row matmuls on PackedGemv (packed) or on the oneDNN primitive
// (dnnl). The choice is made when a kernel is prepared, which is at load for shapes known then
// but at the first run for shapes known only then (a Loop body's), so the setting holds for the
// whole benchmark, not just the load.
void BM_ModelPackedGemv(benchmark::State& state, const char* name, bool enabled) {
  const ScopedPackedGemv scope(enabled);
  RunBenchModel(state, name, 0);
}
BENCHMARK_CAPTURE(BM_ModelPackedGemv, rnn_b1_packed, "rnn_b1", true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ModelPackedGemv, rnn_b1_dnnl, "rnn_b1", false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ModelPackedGemv, greedy_packed, "greedy", true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ModelPackedGemv, greedy_dnnl, "greedy", false)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace loopserve

int main(int argc, char** argv) {
  int threads = 1;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--models=", 9) == 0) {
      loopserve::bench::ModelsDir() = argv[i] + 9;
    } else if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      threads = std::atoi(argv[i] + 10);
    } else {
      rest.push_back(argv[i]);
    }
  }
  loopserve::engine::SetIntraOpThreads(threads);
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
