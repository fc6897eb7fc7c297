// f32 products of the grid's shapes ([m, k] x [k, n], constant [k, n] weights, m = 8..64,
// k, n = 64..2048) on the libraries a Loop body could run them on, to choose the AVX2 path by
// measurement (bench/RESULTS.md, "AVX2 GEMM"):
//   onednn_matmul  oneDNN 2.6 matmul, weights in the layout it asks for (packed once);
//   onednn_conv1x1 oneDNN 1x1 convolution with the reorders of A and the result around it, weights
//                  packed once: loopserve's path for a constant-weight product below AVX-512
//                  (engine/kernels/dnnl/matmul.cc, PrepareAsConvolution);
//   onednn_ip      oneDNN inner product, weights packed once;
//   openblas       cblas_sgemm (packs B on every call);
//   xnnpack        XNNPACK fully_connected_nc_f32 (weights packed at creation);
//   packed_gemm    loopserve's own AVX2 + FMA3 kernel (engine/kernels/native/packed_gemm.h:
//                  weights packed once into 24-column panels, 4x24 register tiles), run whatever
//                  --isa says (it has no AVX-512 variant).
// Each is timed in the process's CPU time, median of 9 batches of repeated runs, 1 thread
// (OMP_NUM_THREADS=1 for oneDNN, OpenBLAS's serial build, XNNPACK without a thread pool), and
// printed as GFLOP/s and % of the core's FMA peak (measured here as lstm_bound_bench does).
//
//   gemm_isa_bench [--isa=avx2|native]
//
// --isa=avx2 (default) caps every library to AVX2 + FMA on an AVX-512 CPU: ONEDNN_MAX_CPU_ISA=AVX2,
// OPENBLAS_CORETYPE=Haswell (set by this program before either library initializes), and for
// XNNPACK, which has no switch, cpuinfo's AVX-512 flags cleared after cpuinfo_initialize() and
// before xnn_initialize() (XNNPACK then picks its FMA3 kernels, as on an AVX2-only CPU).
// Built only when OpenBLAS (libopenblas-dev) and XNNPACK (libxnnpack-dev) are installed; not run
// by CI.

#include <cblas.h>
#include <cpuinfo.h>
#include <immintrin.h>
#include <time.h>
#include <unistd.h>
#include <xnnpack.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bench/fma_kernels.h"
#include "engine/kernels/native/packed_gemm.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace {

using loopserve::bench::Fma256;

// The process's CPU time: every thread a library might use counts (all run one thread here).
double ThreadSeconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// Seconds per call: median over 9 batches, each of enough calls to take about 3 ms.
double TimePerCall(const std::function<void()>& f) {
  for (int i = 0; i < 3; ++i) f();
  double start = ThreadSeconds();
  f();
  const double once = std::max(ThreadSeconds() - start, 1e-7);
  const int calls = std::max(1, static_cast<int>(3e-3 / once));
  std::vector<double> times;
  for (int b = 0; b < 9; ++b) {
    start = ThreadSeconds();
    for (int i = 0; i < calls; ++i) f();
    times.push_back((ThreadSeconds() - start) / calls);
  }
  std::sort(times.begin(), times.end());
  return times[4];
}

struct Shape {
  long m, k, n;
};

using dnnl::memory;
using Tag = memory::format_tag;
constexpr auto kF32 = memory::data_type::f32;

// Max |x - reference| over the result, the reference computed in double.
double MaxError(const Shape& s, const std::vector<float>& a, const std::vector<float>& b,
                const float* c) {
  double err = 0;
  for (long i = 0; i < s.m; ++i) {
    for (long j = 0; j < s.n; ++j) {
      double acc = 0;
      for (long p = 0; p < s.k; ++p) acc += static_cast<double>(a[i * s.k + p]) * b[p * s.n + j];
      err = std::max(err, std::fabs(acc - c[i * s.n + j]));
    }
  }
  return err;
}

class Runner {
 public:
  Runner() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

  // Seconds per product for each library; checks every result against the double reference.
  std::map<std::string, double> Run(const Shape& s) {
    std::vector<float> a(s.m * s.k), b(s.k * s.n), c(s.m * s.n);
    for (size_t i = 0; i < a.size(); ++i)
      a[i] = static_cast<float>(static_cast<long>(i * 37 % 101) - 50) * 0.01f;
    for (size_t i = 0; i < b.size(); ++i)
      b[i] = static_cast<float>(static_cast<long>(i * 53 % 97) - 48) * 0.01f;
    std::map<std::string, double> t;
    auto check = [&](const char* name) {
      const double err = MaxError(s, a, b, c.data());
      if (err > 1e-3 * std::sqrt(static_cast<double>(s.k))) {
        std::fprintf(stderr, "%s [%ld,%ld]x[%ld,%ld]: max error %g\n", name, s.m, s.k, s.k, s.n,
                     err);
        std::exit(1);
      }
    };
    const memory::dims ad = {s.m, s.k}, bd = {s.k, s.n}, cd = {s.m, s.n};
    memory a_mem({ad, kF32, Tag::ab}, engine_, a.data());
    memory c_mem({cd, kF32, Tag::ab}, engine_, c.data());
    memory b_plain({bd, kF32, Tag::ab}, engine_, b.data());
    {
      dnnl::matmul::primitive_desc pd(
          dnnl::matmul::desc({ad, kF32, Tag::ab}, {bd, kF32, Tag::any}, {cd, kF32, Tag::ab}),
          engine_);
      memory w = Packed(b_plain, pd.weights_desc());
      dnnl::matmul p(pd);
      auto run = [&] {
        p.execute(stream_, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, c_mem}});
      };
      run();
      check("onednn_matmul");
      t["onednn_matmul"] = TimePerCall(run);
      impl_["onednn_matmul"] = pd.impl_info_str();
    }
    {
      const memory::dims src = {1, s.k, s.m, 1}, dst = {1, s.n, s.m, 1}, wd = {s.n, s.k, 1, 1};
      dnnl::convolution_forward::primitive_desc pd(
          dnnl::convolution_forward::desc(
              dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
              {src, kF32, Tag::any}, {wd, kF32, Tag::any}, memory::desc(), {dst, kF32, Tag::any},
              {1, 1}, {0, 0}, {0, 0}),
          engine_);
      const memory::desc src_plain(src, kF32, memory::dims{s.m * s.k, 1, s.k, 1});
      const memory::desc dst_plain(dst, kF32, memory::dims{s.m * s.n, 1, s.n, 1});
      const memory::desc w_plain(wd, kF32, memory::dims{1, s.n, 1, 1});
      memory w = Packed(memory(w_plain, engine_, b.data()), pd.weights_desc());
      memory a_view(src_plain, engine_, a.data()), c_view(dst_plain, engine_, c.data());
      memory a_staged(pd.src_desc(), engine_), c_staged(pd.dst_desc(), engine_);
      dnnl::reorder to_src(a_view, a_staged), from_dst(c_staged, c_view);
      dnnl::convolution_forward p(pd);
      auto run = [&] {
        to_src.execute(stream_, a_view, a_staged);
        p.execute(stream_,
                  {{DNNL_ARG_SRC, a_staged}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, c_staged}});
        from_dst.execute(stream_, c_staged, c_view);
      };
      run();
      check("onednn_conv1x1");
      t["onednn_conv1x1"] = TimePerCall(run);
      impl_["onednn_conv1x1"] = pd.impl_info_str();
    }
    {
      const memory::dims wd = {s.n, s.k};
      dnnl::inner_product_forward::primitive_desc pd(
          dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_inference, {ad, kF32, Tag::ab},
                                            {wd, kF32, Tag::any}, memory::desc(),
                                            {cd, kF32, Tag::ab}),
          engine_);
      memory w = Packed(memory({wd, kF32, Tag::ba}, engine_, b.data()), pd.weights_desc());
      dnnl::inner_product_forward p(pd);
      auto run = [&] {
        p.execute(stream_, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, c_mem}});
      };
      run();
      check("onednn_ip");
      t["onednn_ip"] = TimePerCall(run);
      impl_["onednn_ip"] = pd.impl_info_str();
    }
    {
      auto run = [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.m, s.n, s.k, 1.0f, a.data(), s.k,
                    b.data(), s.n, 0.0f, c.data(), s.n);
      };
      run();
      check("openblas");
      t["openblas"] = TimePerCall(run);
    }
    {
      xnn_operator_t op = nullptr;
      if (xnn_create_fully_connected_nc_f32(s.k, s.n, s.k, s.n, b.data(), nullptr, -INFINITY,
                                            INFINITY, XNN_FLAG_TRANSPOSE_WEIGHTS,
                                            &op) != xnn_status_success ||
          xnn_setup_fully_connected_nc_f32(op, s.m, a.data(), c.data(), nullptr) !=
              xnn_status_success) {
        std::fprintf(stderr, "XNNPACK fully_connected failed\n");
        std::exit(1);
      }
      auto run = [&] { xnn_run_operator(op, nullptr); };
      run();
      check("xnnpack");
      t["xnnpack"] = TimePerCall(run);
      xnn_delete_operator(op);
    }
    {
      const loopserve::engine::native::PackedGemm gemm(b.data(), s.k, s.n, /*transposed=*/false);
      auto run = [&] { gemm.Run(a.data(), s.m, {}, c.data()); };
      run();
      check("packed_gemm");
      t["packed_gemm"] = TimePerCall(run);
    }
    return t;
  }

  const std::map<std::string, std::string>& impl() const { return impl_; }

 private:
  memory Packed(const memory& plain, const memory::desc& packed) {
    memory out(packed, engine_);
    dnnl::reorder(plain, out).execute(stream_, const_cast<memory&>(plain), out);
    stream_.wait();
    return out;
  }

  dnnl::engine engine_;
  dnnl::stream stream_;
  std::map<std::string, std::string> impl_;
};

}  // namespace

int main(int argc, char** argv) {
  const bool avx2 = !(argc > 1 && std::strcmp(argv[1], "--isa=native") == 0);
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    std::fprintf(stderr, "needs AVX2 + FMA\n");
    return 1;
  }
  if ((avx2 && std::getenv("OPENBLAS_CORETYPE") == nullptr) ||
      std::getenv("OMP_NUM_THREADS") == nullptr) {
    // OpenBLAS reads its core type and OpenMP its thread count when they load, before main: run
    // again with them set.
    if (avx2) {
      setenv("OPENBLAS_CORETYPE", "Haswell", 1);
      setenv("ONEDNN_MAX_CPU_ISA", "AVX2", 1);
    }
    setenv("OMP_NUM_THREADS", "1", 1);
    execv("/proc/self/exe", argv);
    std::perror("execv");
    return 1;
  }
  if (avx2) {
    cpuinfo_initialize();
    cpuinfo_isa.avx512f = cpuinfo_isa.avx512cd = cpuinfo_isa.avx512dq = false;
    cpuinfo_isa.avx512bw = cpuinfo_isa.avx512vl = cpuinfo_isa.avx512ifma = false;
    cpuinfo_isa.avx512vbmi = cpuinfo_isa.avx512vbmi2 = cpuinfo_isa.avx512bitalg = false;
    cpuinfo_isa.avx512vpopcntdq = cpuinfo_isa.avx512vnni = cpuinfo_isa.avx512bf16 = false;
  }
  if (xnn_initialize(nullptr) != xnn_status_success) {
    std::fprintf(stderr, "xnn_initialize failed\n");
    return 1;
  }
  openblas_set_num_threads(1);
  dnnl::set_max_cpu_isa(avx2 ? dnnl::cpu_isa::avx2 : dnnl::cpu_isa::all);
  constexpr long kIterations = 20000000;
  const double peak = kIterations * 12.0 * 16 / TimePerCall([] { Fma256(kIterations); });  // FLOP/s
  std::printf("isa: %s; OpenBLAS core: %s; FMA peak (ymm, 1 core): %.1f GFLOP/s\n",
              avx2 ? "AVX2 (capped)" : "native", openblas_get_corename(), peak / 1e9);
  const long ms[] = {8, 16, 32, 64};
  const Shape kn[] = {{0, 64, 64},    {0, 128, 128},  {0, 128, 384},   {0, 256, 768},
                      {0, 256, 1024}, {0, 512, 512},  {0, 512, 1000},  {0, 512, 1024},
                      {0, 1024, 512}, {0, 512, 2048}, {0, 1024, 1024}, {0, 1024, 2048},
                      {0, 2048, 1024}};
  const char* names[] = {"onednn_matmul", "onednn_conv1x1", "onednn_ip",
                         "openblas",      "xnnpack",        "packed_gemm"};
  Runner runner;
  std::printf("%-18s", "m x k x n");
  for (const char* n : names) std::printf(" %15s", n);
  std::printf("   (%% of peak)\n");
  std::map<std::string, std::vector<double>> pct;
  for (const Shape& base : kn) {
    for (long m : ms) {
      const Shape s{m, base.k, base.n};
      const std::map<std::string, double> t = runner.Run(s);
      char label[64];
      std::snprintf(label, sizeof(label), "%ldx%ldx%ld", s.m, s.k, s.n);
      std::printf("%-18s", label);
      for (const char* n : names) {
        const double p = 100.0 * 2.0 * s.m * s.k * s.n / t.at(n) / peak;
        pct[n].push_back(p);
        std::printf(" %14.0f%%", p);
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  std::printf("\n%-18s", "worst");
  for (const char* n : names) {
    std::printf(" %14.0f%%", *std::min_element(pct[n].begin(), pct[n].end()));
  }
  std::printf("\n%-18s", "mean");
  for (const char* n : names) {
    double sum = 0;
    for (double p : pct[n]) sum += p;
    std::printf(" %14.0f%%", sum / static_cast<double>(pct[n].size()));
  }
  std::printf("\n%-18s", "geomean vs conv1x1");
  for (const char* n : names) {
    double log_sum = 0;
    for (size_t i = 0; i < pct[n].size(); ++i)
      log_sum += std::log(pct[n][i] / pct["onednn_conv1x1"][i]);
    std::printf(" %14.2fx", std::exp(log_sum / static_cast<double>(pct[n].size())));
  }
  std::printf("\n\noneDNN implementations at the last shape:");
  for (const auto& [name, impl] : runner.impl()) std::printf(" %s=%s", name.c_str(), impl.c_str());
  std::printf("\n");
  return 0;
}
