// MatMulInteger and QLinearMatMul: 8-bit matrix products with zero points (numpy matmul
// broadcasting over batch dims), accumulated in int32 on native::Int8Gemm (AVX-512 VNNI, AVX2 or
// scalar, chosen at load); a constant B is packed once, at load.

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/broadcast.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/native/int8_gemm.h"
#include "engine/kernels/native/int8_gemm_dnnl.h"
#include "engine/kernels/native/post_ops.h"
#include "engine/kernels/native/register_families.h"

namespace loopserve::engine::native {
namespace {

// The validated geometry of A @ B: [batch..., m, k] x [batch..., k, n] with broadcast batches.
struct IntMatMulPlan {
  int64_t m = 0, k = 0, n = 0;
  Broadcast<2> batches;
  Shape out_shape;
};

// The operands of (A - azp) @ (B - bzp); a zero point that is absent is null.
struct IntOperands {
  const Tensor* a;
  const Tensor* b;
  const Tensor* azp;
  const Tensor* bzp;
};

// MatMulInteger's operands (and those of its fused form): inputs 0 to 3.
IntOperands MatMulIntegerOperands(const KernelContext& ctx) {
  return {&ctx.input(0), &ctx.input(1), ctx.has_input(2) ? &ctx.input(2) : nullptr,
          ctx.has_input(3) ? &ctx.input(3) : nullptr};
}

absl::Status PrepareIntMatMul(const IntOperands& factors, IntMatMulPlan* plan) {
  const Tensor& a = *factors.a;
  const Tensor& b = *factors.b;
  const Tensor* azp = factors.azp;
  const Tensor* bzp = factors.bzp;
  for (const Tensor* t : {&a, &b}) {
    if (t->dtype() != DataType::kInt8 && t->dtype() != DataType::kUint8) {
      return UnsupportedType("A/B", t->dtype());
    }
    if (t->rank() < 1) return absl::InvalidArgumentError("inputs must have rank >= 1");
  }
  Shape as = a.shape();
  Shape bs = b.shape();
  if (as.rank() == 1) as.mutable_dims().insert(as.mutable_dims().begin(), 1);
  if (bs.rank() == 1) bs.mutable_dims().push_back(1);
  plan->m = as[as.rank() - 2];
  plan->k = as[as.rank() - 1];
  plan->n = bs[bs.rank() - 1];
  if (bs[bs.rank() - 2] != plan->k) {
    return absl::InvalidArgumentError(absl::StrCat("shapes ", a.shape().ToString(), " and ",
                                                   b.shape().ToString(), " cannot be multiplied"));
  }
  if (azp != nullptr && azp->NumElements() != 1 && azp->NumElements() != plan->m) {
    return absl::InvalidArgumentError("a_zero_point must be a scalar or have one value per row");
  }
  if (bzp != nullptr && bzp->NumElements() != 1 && bzp->NumElements() != plan->n) {
    return absl::InvalidArgumentError("b_zero_point must be a scalar or have one value per column");
  }
  for (const Tensor* zp : {azp, bzp}) {
    if (zp != nullptr && zp->dtype() != DataType::kInt8 && zp->dtype() != DataType::kUint8) {
      return UnsupportedType("zero point", zp->dtype());
    }
  }
  const Shape a_batch(as.dims().subspan(0, as.rank() - 2));
  const Shape b_batch(bs.dims().subspan(0, bs.rank() - 2));
  LS_RETURN_IF_ERROR(PrepareBroadcast<2>({&a_batch, &b_batch}, &plan->batches));
  Shape::Dims dims(plan->batches.out_shape.dims().begin(), plan->batches.out_shape.dims().end());
  if (a.rank() > 1) dims.push_back(plan->m);
  if (b.rank() > 1) dims.push_back(plan->n);
  plan->out_shape = Shape(dims);
  return absl::OkStatus();
}

// Per-frame buffers: the product's scratch, a non-constant B packed per call, QLinearMatMul's
// int32 product before requantization.
struct IntMatMulState : KernelState {
  Int8GemmScratch scratch;
  Int8Gemm b;
  std::vector<int32_t> product;
  std::vector<uint8_t> a_moved;  // an int8 A moved to uint8 for oneDNN
  DnnlInt8GemmBinding dnnl;
};

// What MatMulInteger and QLinearMatMul share: the product of A (input a_index) and B (input
// b_index) on Int8Gemm, B packed at load when it is a 2-D (or 1-D) uint8/int8 constant; such a
// product with a per-tensor A zero point runs on oneDNN's brgemm instead where DnnlInt8Gemm
// measured faster (at least kMinRows rows and kMinMultiplyAdds, a brgemm primitive for its row
// count).
class IntProduct {
 public:
  IntProduct(const KernelInit& init, int b_index) {
    const Tensor* b = init.constant_input(b_index);
    if (b != nullptr && (b->dtype() == DataType::kInt8 || b->dtype() == DataType::kUint8) &&
        (b->rank() == 1 || b->rank() == 2)) {
      const int64_t k = b->dim(0);
      const int64_t n = b->rank() == 2 ? b->dim(1) : 1;
      constant_b_ =
          std::make_shared<const Int8Gemm>(b->raw_data(), b->dtype() == DataType::kInt8, k, n);
      dnnl_b_ =
          std::make_shared<const DnnlInt8Gemm>(b->raw_data(), b->dtype() == DataType::kInt8, k, n);
    }
  }

  // out[plan.out_shape] = (a - azp) @ (b - bzp) in int32.
  absl::Status Run(const IntMatMulPlan& plan, const IntOperands& factors, int32_t* out,
                   IntMatMulState& state, RunContext& run) const {
    const Tensor& a = *factors.a;
    const Tensor& b = *factors.b;
    const int64_t m = plan.m, k = plan.k, n = plan.n;
    const bool a_signed = a.dtype() == DataType::kInt8;
    const bool b_signed = b.dtype() == DataType::kInt8;
    const Int8ZeroPoint za = ZeroPointOf(factors.azp);
    const Int8ZeroPoint zb = ZeroPointOf(factors.bzp);
    const uint8_t* a_data = static_cast<const uint8_t*>(a.raw_data());
    const uint8_t* b_data = static_cast<const uint8_t*>(b.raw_data());
    const bool b_2d = b.rank() <= 2;
    const Int8Gemm* gemm = constant_b_.get();
    if (b_2d && gemm == nullptr) {
      state.b.Repack(b_data, b_signed, k, n);
      gemm = &state.b;
    }
    if (b_2d && za.count <= 1) {
      // Every batch of A times the same B: one product over all rows.
      const int64_t rows = plan.batches.num_elements * m;
      if (dnnl_b_ != nullptr && rows >= DnnlInt8Gemm::kMinRows &&
          rows * k * n >= DnnlInt8Gemm::kMinMultiplyAdds && dnnl_b_->Usable(rows)) {
        const uint8_t* a_moved = a_data;
        if (a_signed) {
          state.a_moved.resize(rows * k);
          for (int64_t i = 0; i < rows * k; ++i) state.a_moved[i] = a_data[i] ^ 0x80;
          a_moved = state.a_moved.data();
        }
        return dnnl_b_->Run(a_moved, rows, za.At(0) + (a_signed ? 128 : 0), zb.data, zb.count, out,
                            state.dnnl, run);
      }
      gemm->Run(a_data, a_signed, rows, za, zb, out, state.scratch);
      return absl::OkStatus();
    }
    int64_t packed_batch = -1;
    ForEachBroadcast<2>(plan.batches, [&](int64_t batch, const std::array<int64_t, 2>& in) {
      if (!b_2d && in[1] != packed_batch) {
        state.b.Repack(b_data + in[1] * k * n, b_signed, k, n);
        gemm = &state.b;
        packed_batch = in[1];
      }
      gemm->Run(a_data + in[0] * m * k, a_signed, m, za, zb, out + batch * m * n, state.scratch);
    });
    return absl::OkStatus();
  }

 private:
  std::shared_ptr<const Int8Gemm> constant_b_;  // null when B is not a usable constant
  std::shared_ptr<const DnnlInt8Gemm> dnnl_b_;  // the same B for oneDNN, or null
};

class MatMulIntegerKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 2, 4));
    return std::unique_ptr<Kernel>(new MatMulIntegerKernel(init));
  }
  std::unique_ptr<KernelState> CreateState() const override {
    return std::make_unique<IntMatMulState>();
  }
  absl::Status Run(KernelContext& ctx) const override {
    const IntOperands factors = MatMulIntegerOperands(ctx);
    IntMatMulPlan plan;
    LS_RETURN_IF_ERROR(PrepareIntMatMul(factors, &plan));
    int32_t* out = ctx.output(0, DataType::kInt32, plan.out_shape)->mutable_data<int32_t>();
    return product_.Run(plan, factors, out, *ctx.state<IntMatMulState>(), ctx.run_context());
  }

 private:
  explicit MatMulIntegerKernel(const KernelInit& init) : product_(init, 1) {}
  IntProduct product_;
};

// QLinearMatMul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
// y = saturate(round((a - azp) @ (b - bzp) * a_scale * b_scale / y_scale) + y_zero_point), with
// a's scale and zero point per tensor or per row and b's per tensor or per column.
class QLinearMatMulKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 8, 8));
    return std::unique_ptr<Kernel>(new QLinearMatMulKernel(init));
  }
  std::unique_ptr<KernelState> CreateState() const override {
    return std::make_unique<IntMatMulState>();
  }
  absl::Status Run(KernelContext& ctx) const override {
    for (int i : {1, 4, 6}) {
      if (ctx.input(i).dtype() != DataType::kFloat32) {
        return absl::InvalidArgumentError("scales must be float32");
      }
    }
    const Tensor& yzp = ctx.input(7);
    if (yzp.NumElements() != 1 ||
        (yzp.dtype() != DataType::kInt8 && yzp.dtype() != DataType::kUint8)) {
      return absl::InvalidArgumentError("y_zero_point must be an int8 or uint8 scalar");
    }
    const bool is_signed = yzp.dtype() == DataType::kInt8;
    const int32_t z = ZeroPointOf(&yzp).At(0);
    const double lo = is_signed ? -128 : 0;
    const double hi = is_signed ? 127 : 255;
    const IntOperands factors{&ctx.input(0), &ctx.input(3), &ctx.input(2), &ctx.input(5)};
    IntMatMulPlan plan;
    LS_RETURN_IF_ERROR(PrepareIntMatMul(factors, &plan));
    // Scales per tensor, or per row of a and per column of b (as their zero points may be).
    const Tensor& a_scale = ctx.input(1);
    const Tensor& b_scale = ctx.input(4);
    const Tensor& y_scale = ctx.input(6);
    if (a_scale.NumElements() != 1 && a_scale.NumElements() != plan.m) {
      return absl::InvalidArgumentError("a_scale must be a scalar or have one value per row");
    }
    if (b_scale.NumElements() != 1 && b_scale.NumElements() != plan.n) {
      return absl::InvalidArgumentError("b_scale must be a scalar or have one value per column");
    }
    if (y_scale.NumElements() != 1) return absl::InvalidArgumentError("y_scale must be a scalar");
    const bool per_row = a_scale.NumElements() != 1;
    const bool per_column = b_scale.NumElements() != 1;
    const float* as = a_scale.data<float>();
    const float* bs = b_scale.data<float>();
    const float ys = y_scale.data<float>()[0];
    Tensor* y = ctx.output(0, yzp.dtype(), plan.out_shape);
    IntMatMulState& state = *ctx.state<IntMatMulState>();
    state.product.resize(plan.out_shape.NumElements());
    LS_RETURN_IF_ERROR(product_.Run(plan, factors, state.product.data(), state, ctx.run_context()));
    void* out = y->mutable_raw_data();
    const int64_t n = plan.n;
    const int64_t m = plan.m;
    for (size_t i = 0; i < state.product.size(); ++i) {
      const int64_t row = per_row ? static_cast<int64_t>(i) / n % m : 0;
      const int64_t column = per_column ? static_cast<int64_t>(i) % n : 0;
      const float multiplier = as[row] * bs[column] / ys;
      double v =
          std::nearbyint(static_cast<double>(static_cast<float>(state.product[i]) * multiplier)) +
          z;
      // NaN (a zero y_scale with a zero product scale or sum) is the lowest value, as in
      // QuantizeLinear, never an undefined float-to-integer conversion.
      v = std::isnan(v) ? lo : std::min(std::max(v, lo), hi);
      if (is_signed) {
        static_cast<int8_t*>(out)[i] = static_cast<int8_t>(v);
      } else {
        static_cast<uint8_t*>(out)[i] = static_cast<uint8_t>(v);
      }
    }
    return absl::OkStatus();
  }

 private:
  explicit QLinearMatMulKernel(const KernelInit& init) : product_(init, 3) {}
  IntProduct product_;
};

// kFusedMatMulIntegerOp (engine/transform/fuse_int_matmul.h): MatMulInteger's int32 product
// converted to float32 (the Cast it replaced), then the node's post-ops over the output in one
// pass (native::ElementwiseChain, numpy broadcasting of their operands, inputs 4, 5, ...).
class FusedIntMatMulKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 2, 4 + ElementwiseChain::kMaxOperands));
    const FusionSpec* spec = init.node().fusion.get();
    if (spec == nullptr) return absl::InvalidArgumentError("fused MatMulInteger without a spec");
    std::vector<int> epilogue_inputs;
    LS_ASSIGN_OR_RETURN(ElementwiseChain chain,
                        ChainOfPostOps(spec->post_ops, init.num_inputs(), &epilogue_inputs));
    for (int input : epilogue_inputs) {
      if (input < 4) return absl::InvalidArgumentError("a post-op reads a product input");
    }
    return std::unique_ptr<Kernel>(
        new FusedIntMatMulKernel(init, std::move(chain), std::move(epilogue_inputs)));
  }
  std::unique_ptr<KernelState> CreateState() const override {
    return std::make_unique<FusedState>();
  }
  absl::Status Run(KernelContext& ctx) const override {
    const IntOperands factors = MatMulIntegerOperands(ctx);
    IntMatMulPlan plan;
    LS_RETURN_IF_ERROR(PrepareIntMatMul(factors, &plan));
    FusedState& state = *ctx.state<FusedState>();
    const int64_t size = plan.out_shape.NumElements();
    state.product.resize(size);
    LS_RETURN_IF_ERROR(product_.Run(plan, factors, state.product.data(), state, ctx.run_context()));
    // The epilogue's iteration plan, kept while the shapes stay the same (every Loop iteration
    // after the first).
    const int num_operands = 1 + static_cast<int>(epilogue_inputs_.size());
    bool same = state.prepared.has_value() &&
                state.shapes.size() == static_cast<size_t>(num_operands) &&
                state.shapes[0] == plan.out_shape;
    for (int i = 1; same && i < num_operands; ++i) {
      same = state.shapes[i] == ctx.input(epilogue_inputs_[i - 1]).shape();
    }
    if (!same) {
      state.shapes.assign(1, plan.out_shape);
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
    // The Cast: exact for |sum| <= 2^24, rounded to nearest even beyond, as static_cast does.
    const bool in_place = state.prepared->output == plan.out_shape;
    float* converted;
    Tensor* y = ctx.output(0, DataType::kFloat32, state.prepared->output);
    if (in_place) {
      converted = y->mutable_data<float>();
    } else {
      state.converted.resize(size);
      converted = state.converted.data();
    }
    for (int64_t i = 0; i < size; ++i) converted[i] = static_cast<float>(state.product[i]);
    if (chain_.steps().empty() && in_place) return absl::OkStatus();
    std::array<const float*, ElementwiseChain::kMaxOperands> operands{};
    operands[0] = converted;
    for (size_t i = 0; i < epilogue_inputs_.size(); ++i) {
      operands[i + 1] = ctx.input(epilogue_inputs_[i]).data<float>();
    }
    chain_.Run(*state.prepared, absl::MakeConstSpan(operands.data(), num_operands),
               y->mutable_data<float>());
    return absl::OkStatus();
  }

 private:
  struct FusedState final : IntMatMulState {
    std::vector<float> converted;  // the product in float when the output is broadcast larger
    std::vector<Shape> shapes;     // the operand shapes `prepared` was made for
    std::optional<ElementwiseChain::Prepared> prepared;
  };

  FusedIntMatMulKernel(const KernelInit& init, ElementwiseChain chain,
                       std::vector<int> epilogue_inputs)
      : product_(init, 1), chain_(std::move(chain)), epilogue_inputs_(std::move(epilogue_inputs)) {}

  IntProduct product_;
  ElementwiseChain chain_;
  std::vector<int> epilogue_inputs_;  // the node input of each chain operand 1, 2, ...
};

}  // namespace

void RegisterIntMatMulKernels(KernelRegistry& registry) {
  registry.Register("MatMulInteger", FactoryOf<MatMulIntegerKernel>(), 10);
  registry.Register("QLinearMatMul", FactoryOf<QLinearMatMulKernel>(), 10);
  registry.Register(kFusedMatMulIntegerOp, FactoryOf<FusedIntMatMulKernel>());
}

}  // namespace loopserve::engine::native
