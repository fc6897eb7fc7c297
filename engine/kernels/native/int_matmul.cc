// MatMulInteger and QLinearMatMul: 8-bit matrix products with zero points (numpy matmul
// broadcasting over batch dims), accumulated in int32.

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/broadcast.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/native/register_families.h"

namespace loopserve::engine::native {
namespace {

// Zero point of row/column `i`: a scalar (or 1-element) tensor, or one value per row/column.
int32_t ZeroPoint(const Tensor* zp, int64_t i) {
  if (zp == nullptr) return 0;
  const int64_t k = zp->NumElements() == 1 ? 0 : i;
  return zp->dtype() == DataType::kInt8 ? zp->data<int8_t>()[k] : zp->data<uint8_t>()[k];
}

int32_t Element(const Tensor& t, int64_t i) {
  return t.dtype() == DataType::kInt8 ? t.data<int8_t>()[i] : t.data<uint8_t>()[i];
}

// The validated geometry of A @ B: [batch..., m, k] x [batch..., k, n] with broadcast batches.
struct IntMatMulPlan {
  int64_t m = 0, k = 0, n = 0;
  Broadcast<2> batches;
  Shape out_shape;
};

absl::Status PrepareIntMatMul(const Tensor& a, const Tensor& b, const Tensor* azp,
                              const Tensor* bzp, IntMatMulPlan* plan) {
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

// Calls sink(flat output index, sum_k (A[m, k] - azp[m]) * (B[k, n] - bzp[n])) for every output.
template <typename Sink>
void RunIntMatMul(const IntMatMulPlan& plan, const Tensor& a, const Tensor& b, const Tensor* azp,
                  const Tensor* bzp, Sink&& sink) {
  const int64_t m = plan.m, k = plan.k, n = plan.n;
  ForEachBroadcast<2>(plan.batches, [&](int64_t batch, const std::array<int64_t, 2>& in) {
    const int64_t a0 = in[0] * m * k;
    const int64_t b0 = in[1] * k * n;
    for (int64_t i = 0; i < m; ++i) {
      const int32_t za = ZeroPoint(azp, i);
      for (int64_t j = 0; j < n; ++j) {
        const int32_t zb = ZeroPoint(bzp, j);
        int32_t acc = 0;
        for (int64_t p = 0; p < k; ++p) {
          acc += (Element(a, a0 + i * k + p) - za) * (Element(b, b0 + p * n + j) - zb);
        }
        sink((batch * m + i) * n + j, acc);
      }
    }
  });
}

class MatMulIntegerKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 2, 4));
    return std::unique_ptr<Kernel>(new MatMulIntegerKernel());
  }
  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    const Tensor* azp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    const Tensor* bzp = ctx.has_input(3) ? &ctx.input(3) : nullptr;
    IntMatMulPlan plan;
    LS_RETURN_IF_ERROR(PrepareIntMatMul(a, b, azp, bzp, &plan));
    int32_t* out = ctx.output(0, DataType::kInt32, plan.out_shape)->mutable_data<int32_t>();
    RunIntMatMul(plan, a, b, azp, bzp, [out](int64_t i, int32_t v) { out[i] = v; });
    return absl::OkStatus();
  }
};

// QLinearMatMul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
// y = saturate(round((a - azp) @ (b - bzp) * a_scale * b_scale / y_scale) + y_zero_point).
class QLinearMatMulKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 8, 8));
    return std::unique_ptr<Kernel>(new QLinearMatMulKernel());
  }
  absl::Status Run(KernelContext& ctx) const override {
    for (int i : {1, 4, 6}) {
      if (ctx.input(i).dtype() != DataType::kFloat32 || ctx.input(i).NumElements() != 1) {
        return absl::InvalidArgumentError("scales must be float32 scalars");
      }
    }
    const Tensor& yzp = ctx.input(7);
    if (yzp.NumElements() != 1 ||
        (yzp.dtype() != DataType::kInt8 && yzp.dtype() != DataType::kUint8)) {
      return absl::InvalidArgumentError("y_zero_point must be an int8 or uint8 scalar");
    }
    const float multiplier = ctx.input(1).data<float>()[0] * ctx.input(4).data<float>()[0] /
                             ctx.input(6).data<float>()[0];
    const int32_t z = Element(yzp, 0);
    const bool is_signed = yzp.dtype() == DataType::kInt8;
    const double lo = is_signed ? -128 : 0;
    const double hi = is_signed ? 127 : 255;
    IntMatMulPlan plan;
    LS_RETURN_IF_ERROR(
        PrepareIntMatMul(ctx.input(0), ctx.input(3), &ctx.input(2), &ctx.input(5), &plan));
    Tensor* y = ctx.output(0, yzp.dtype(), plan.out_shape);
    void* out = y->mutable_raw_data();
    RunIntMatMul(
        plan, ctx.input(0), ctx.input(3), &ctx.input(2), &ctx.input(5),
        [&](int64_t i, int32_t acc) {
          double v = std::nearbyint(static_cast<double>(static_cast<float>(acc) * multiplier)) + z;
          // NaN (a zero y_scale with a zero product scale or sum) is the lowest value, as in
          // QuantizeLinear, never an undefined float-to-integer conversion.
          v = std::isnan(v) ? lo : std::min(std::max(v, lo), hi);
          if (is_signed) {
            static_cast<int8_t*>(out)[i] = static_cast<int8_t>(v);
          } else {
            static_cast<uint8_t*>(out)[i] = static_cast<uint8_t>(v);
          }
        });
    return absl::OkStatus();
  }
};

}  // namespace

void RegisterIntMatMulKernels(KernelRegistry& registry) {
  registry.Register("MatMulInteger", FactoryOf<MatMulIntegerKernel>(), 10);
  registry.Register("QLinearMatMul", FactoryOf<QLinearMatMulKernel>(), 10);
}

}  // namespace loopserve::engine::native
