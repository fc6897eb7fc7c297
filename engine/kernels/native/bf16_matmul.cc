// kBf16MatMulOp: A (float32) times a constant float32 B [k, n] in bfloat16 with float32
// accumulation on oneDNN's matmul, then the fused node's post-ops (engine/kernels/native/
// bf16_matmul.h). Products of fewer than kMinBf16Rows rows run in float32 on the same primitive
// family, so the choice is made per product, at run time.

#include "engine/kernels/native/bf16_matmul.h"

#include <array>
#include <cstring>
#include <dnnl.hpp>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "engine/base/status_macros.h"
#include "engine/ir/fusion.h"
#include "engine/kernels/backend.h"
#include "engine/kernels/dnnl/dnnl_kernel.h"
#include "engine/kernels/dnnl/dnnl_util.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/native/post_ops.h"
#include "engine/kernels/native/register_families.h"

namespace loopserve::engine::native {

bool CpuHasNativeBf16() {
  const CpuFeatures& f = DetectedCpuFeatures();
  return f.avx512_bf16 || f.amx_bf16;
}

bool Bf16MatMulAvailable() {
  static const bool available = [] {
    try {
      using dt = dnnl::memory::data_type;
      using tag = dnnl::memory::format_tag;
      const dnnl::memory::desc src({4, 16}, dt::bf16, tag::ab),
          weights({16, 16}, dt::bf16, tag::any), dst({4, 16}, dt::f32, tag::ab);
      dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, weights, dst), CpuEngine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return available;
}

namespace {

// Round to nearest even; NaN stays a (quiet) NaN.
void ToBf16(const float* in, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &in[i], 4);
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    out[i] = static_cast<uint16_t>(nan ? ((u >> 16) | 0x40u) : rounded);
  }
}

// The constant B and the primitives made for it, one per row count (bf16 from kMinBf16Rows rows,
// float32 below), each with B reordered into its layout. Bounded as DnnlKernel's caches are: row
// counts past DnnlKernel::kMaxCachedSignatures are prepared for the frame that asks and not kept,
// and B is packed once per layout (up to DnnlKernel::kMaxPackedConstants layouts), shared by
// every row count that uses it. Thread-safe.
class Bf16Product {
 public:
  struct Prepared {
    bool bf16 = false;
    dnnl::matmul primitive;
    dnnl::memory::desc src, dst, scratchpad;
    dnnl::memory packed_b;
  };

  Bf16Product(const Tensor& b) : k_(b.dim(0)), n_(b.dim(1)), b_(b.NumElements()) {
    std::memcpy(b_.data(), b.data<float>(), b_.size() * sizeof(float));
  }
  int64_t k() const { return k_; }
  int64_t n() const { return n_; }

  absl::StatusOr<std::shared_ptr<const Prepared>> Prepare(int64_t m) const {
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [rows, prepared] : prepared_) {
        if (rows == m) return prepared;
      }
    }
    auto p = std::make_shared<Prepared>();
    try {
      using dt = dnnl::memory::data_type;
      using tag = dnnl::memory::format_tag;
      p->bf16 = m >= kMinBf16Rows && Bf16MatMulAvailable();
      const dt in_type = p->bf16 ? dt::bf16 : dt::f32;
      p->src = dnnl::memory::desc({m, k_}, in_type, tag::ab);
      p->dst = dnnl::memory::desc({m, n_}, dt::f32, tag::ab);
      const dnnl::memory::desc weights_any({k_, n_}, in_type, tag::any);
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p->src, weights_any, p->dst), attr,
                                            CpuEngine());
      p->primitive = dnnl::matmul(pd);
      CountDnnlPrimitiveCreation();
      p->scratchpad = pd.scratchpad_desc();
      p->packed_b = PackedB(pd.weights_desc(), in_type);
    } catch (const dnnl::error& e) {
      return FromDnnlError(e);
    }
    absl::MutexLock lock(&mu_);
    for (const auto& [rows, prepared] : prepared_) {
      if (rows == m) return prepared;  // another thread prepared it meanwhile
    }
    if (prepared_.size() < DnnlKernel::kMaxCachedSignatures) prepared_.emplace_back(m, p);
    return std::shared_ptr<const Prepared>(p);
  }

 private:
  // B in `layout` (of element type `type`): the one already packed in that layout, or packed now.
  // May throw dnnl::error.
  dnnl::memory PackedB(const dnnl::memory::desc& layout, dnnl::memory::data_type type) const {
    {
      absl::MutexLock lock(&mu_);
      for (const dnnl::memory& packed : packed_) {
        if (packed.get_desc() == layout) return packed;
      }
    }
    std::vector<uint16_t> b16;
    void* b_data = const_cast<float*>(b_.data());
    if (type == dnnl::memory::data_type::bf16) {
      b16.resize(b_.size());
      ToBf16(b_.data(), static_cast<int64_t>(b_.size()), b16.data());
      b_data = b16.data();
    }
    dnnl::memory user(dnnl::memory::desc({k_, n_}, type, dnnl::memory::format_tag::ab), CpuEngine(),
                      b_data);
    dnnl::memory packed(layout, CpuEngine());
    dnnl::stream stream(CpuEngine());
    dnnl::reorder(user, packed).execute(stream, user, packed);
    stream.wait();
    absl::MutexLock lock(&mu_);
    for (const dnnl::memory& kept : packed_) {
      if (kept.get_desc() == layout) return kept;  // another thread packed it meanwhile
    }
    if (packed_.size() < DnnlKernel::kMaxPackedConstants) packed_.push_back(packed);
    return packed;
  }

  int64_t k_, n_;
  std::vector<float> b_;
  mutable absl::Mutex mu_;
  mutable std::vector<std::pair<int64_t, std::shared_ptr<const Prepared>>> prepared_
      ABSL_GUARDED_BY(mu_);
  mutable std::vector<dnnl::memory> packed_ ABSL_GUARDED_BY(mu_);  // B in each layout met
};

class Bf16MatMulKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 2, 2 + ElementwiseChain::kMaxOperands));
    const FusionSpec* spec = init.node().fusion.get();
    if (spec == nullptr) return absl::InvalidArgumentError("bf16 MatMul without a spec");
    if (spec->trans_a || spec->trans_b) {
      return absl::InvalidArgumentError("bf16 MatMul with a transposed operand");
    }
    const Tensor* b = init.constant_input(1);
    if (b == nullptr || b->dtype() != DataType::kFloat32 || b->rank() != 2) {
      return absl::InvalidArgumentError("bf16 MatMul needs a constant float32 matrix B");
    }
    std::vector<int> epilogue_inputs;
    LS_ASSIGN_OR_RETURN(ElementwiseChain chain,
                        ChainOfPostOps(spec->post_ops, init.num_inputs(), &epilogue_inputs));
    for (int input : epilogue_inputs) {
      if (input < 2) return absl::InvalidArgumentError("a post-op reads a product input");
    }
    return std::unique_ptr<Kernel>(new Bf16MatMulKernel(
        std::make_shared<const Bf16Product>(*b), std::move(chain), std::move(epilogue_inputs)));
  }

  std::unique_ptr<KernelState> CreateState() const override { return std::make_unique<State>(); }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& a = ctx.input(0);
    if (a.dtype() != DataType::kFloat32) return UnsupportedType("A", a.dtype());
    const int64_t k = product_->k(), n = product_->n();
    if (a.rank() < 1 || a.dim(a.rank() - 1) != k) {
      return absl::InvalidArgumentError(
          absl::StrCat("A ", a.shape().ToString(), " does not match B [", k, ", ", n, "]"));
    }
    Shape::Dims dims(a.shape().dims().begin(), a.shape().dims().end());
    dims.back() = n;
    const Shape out_shape(std::move(dims));
    const int64_t m = k == 0 ? a.NumElements() : a.NumElements() / k;
    State& state = *ctx.state<State>();
    // The epilogue's plan, kept while the shapes stay the same.
    const int num_operands = 1 + static_cast<int>(epilogue_inputs_.size());
    bool same = state.prepared.has_value() &&
                state.shapes.size() == static_cast<size_t>(num_operands) &&
                state.shapes[0] == out_shape;
    for (int i = 1; same && i < num_operands; ++i) {
      same = state.shapes[i] == ctx.input(epilogue_inputs_[i - 1]).shape();
    }
    if (!same) {
      state.shapes.assign(1, out_shape);
      for (int input : epilogue_inputs_) state.shapes.push_back(ctx.input(input).shape());
      std::vector<const Shape*> shapes;
      for (const Shape& shape : state.shapes) shapes.push_back(&shape);
      LS_ASSIGN_OR_RETURN(state.prepared, chain_.Prepare(shapes));
    }
    for (int input : epilogue_inputs_) {
      if (ctx.input(input).dtype() != DataType::kFloat32) {
        return UnsupportedType("post-op operand", ctx.input(input).dtype());
      }
    }
    const bool in_place = state.prepared->output == out_shape;
    Tensor* y = ctx.output(0, DataType::kFloat32, state.prepared->output);
    float* product = y->mutable_data<float>();
    if (!in_place) {
      state.product.resize(out_shape.NumElements());
      product = state.product.data();
    }
    if (m > 0 && n > 0) {
      if (k == 0) {
        std::memset(product, 0, sizeof(float) * m * n);
      } else {
        LS_RETURN_IF_ERROR(Multiply(a.data<float>(), m, product, state, ctx.run_context()));
      }
    }
    if (chain_.steps().empty() && in_place) return absl::OkStatus();
    std::array<const float*, ElementwiseChain::kMaxOperands> operands{};
    operands[0] = product;
    for (size_t i = 0; i < epilogue_inputs_.size(); ++i) {
      operands[i + 1] = ctx.input(epilogue_inputs_[i]).data<float>();
    }
    chain_.Run(*state.prepared, absl::MakeConstSpan(operands.data(), num_operands),
               y->mutable_data<float>());
    return absl::OkStatus();
  }

 private:
  struct State final : KernelState {
    int64_t m = -1;
    std::shared_ptr<const Bf16Product::Prepared> prepared_product;
    dnnl::memory src, dst, scratchpad;
    std::vector<uint16_t> a16;
    std::vector<float> product;  // when the post-ops broadcast the output larger
    std::vector<Shape> shapes;
    std::optional<ElementwiseChain::Prepared> prepared;
  };

  absl::Status Multiply(const float* a, int64_t m, float* y, State& state, RunContext& run) const {
    try {
      if (state.m != m || state.prepared_product == nullptr) {
        LS_ASSIGN_OR_RETURN(state.prepared_product, product_->Prepare(m));
        state.m = m;
        state.src = dnnl::memory(state.prepared_product->src, CpuEngine(), DNNL_MEMORY_NONE);
        state.dst = dnnl::memory(state.prepared_product->dst, CpuEngine(), DNNL_MEMORY_NONE);
        state.scratchpad =
            dnnl::memory(state.prepared_product->scratchpad, CpuEngine(), DNNL_MEMORY_NONE);
      }
      const Bf16Product::Prepared& p = *state.prepared_product;
      if (p.bf16) {
        state.a16.resize(m * product_->k());
        ToBf16(a, m * product_->k(), state.a16.data());
        state.src.set_data_handle(state.a16.data());
      } else {
        state.src.set_data_handle(const_cast<float*>(a));
      }
      state.dst.set_data_handle(y);
      DnnlRunResource& resource = run.Resource<DnnlRunResource>();
      const size_t pad_bytes = p.scratchpad.get_size();
      state.scratchpad.set_data_handle(pad_bytes > 0 ? resource.Scratchpad(pad_bytes) : nullptr);
      p.primitive.execute(resource.stream(), {{DNNL_ARG_SRC, state.src},
                                              {DNNL_ARG_WEIGHTS, p.packed_b},
                                              {DNNL_ARG_DST, state.dst},
                                              {DNNL_ARG_SCRATCHPAD, state.scratchpad}});
    } catch (const dnnl::error& e) {
      return FromDnnlError(e);
    }
    return absl::OkStatus();
  }

  Bf16MatMulKernel(std::shared_ptr<const Bf16Product> product, ElementwiseChain chain,
                   std::vector<int> epilogue_inputs)
      : product_(std::move(product)),
        chain_(std::move(chain)),
        epilogue_inputs_(std::move(epilogue_inputs)) {}

  std::shared_ptr<const Bf16Product> product_;
  ElementwiseChain chain_;
  std::vector<int> epilogue_inputs_;  // the node input of each chain operand 1, 2, ...
};

}  // namespace

void RegisterBf16MatMulKernels(KernelRegistry& registry) {
  registry.Register(kBf16MatMulOp, FactoryOf<Bf16MatMulKernel>());
}

}  // namespace loopserve::engine::native
