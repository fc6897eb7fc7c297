// Shape rules shared by the reference and oneDNN kernels; see reference.h.

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/reference/reference.h"

namespace loopserve::engine::reference {

absl::string_view BinaryOpName(BinaryOp op) { return ArithOpName(op); }

absl::string_view UnaryOpName(UnaryOp op) { return EltwiseFnName(op); }

absl::StatusOr<MatMulDims> MatMulShapes(const Shape& a, const Shape& b) {
  if (a.rank() == 0 || b.rank() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("MatMul operands must have rank >= 1, got ",
                                                   a.ToString(), " and ", b.ToString()));
  }
  MatMulDims dims;
  // numpy: a 1-D a is a row vector [1, k], a 1-D b a column vector [k, 1].
  const int a_batch_rank = std::max(a.rank() - 2, 0);
  const int b_batch_rank = std::max(b.rank() - 2, 0);
  dims.m = a.rank() == 1 ? 1 : a[a.rank() - 2];
  const int64_t k_a = a[a.rank() - 1];
  const int64_t k_b = b.rank() == 1 ? b[0] : b[b.rank() - 2];
  dims.n = b.rank() == 1 ? 1 : b[b.rank() - 1];
  if (k_a != k_b) {
    return absl::InvalidArgumentError(
        absl::StrCat("MatMul inner dims differ: ", a.ToString(), " times ", b.ToString()));
  }
  dims.k = k_a;
  const Shape a_batch(a.dims().subspan(0, a_batch_rank));
  const Shape b_batch(b.dims().subspan(0, b_batch_rank));
  absl::StatusOr<Shape> batch = BroadcastShapes(a_batch, b_batch);
  if (!batch.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("MatMul batch dims of ", a.ToString(), " and ",
                                                   b.ToString(), " cannot be broadcast"));
  }
  dims.batch = *std::move(batch);
  const int batch_rank = dims.batch.rank();
  Shape::Dims a_padded(batch_rank - a_batch_rank, 1);
  a_padded.insert(a_padded.end(), a_batch.dims().begin(), a_batch.dims().end());
  Shape::Dims b_padded(batch_rank - b_batch_rank, 1);
  b_padded.insert(b_padded.end(), b_batch.dims().begin(), b_batch.dims().end());
  dims.a_batch = Shape(std::move(a_padded));
  dims.b_batch = Shape(std::move(b_padded));

  Shape::Dims out(dims.batch.dims().begin(), dims.batch.dims().end());
  if (a.rank() > 1) out.push_back(dims.m);
  if (b.rank() > 1) out.push_back(dims.n);
  dims.output = Shape(std::move(out));
  return dims;
}

absl::StatusOr<GemmDims> GemmShapes(const Shape& a, const Shape& b, const Shape* c,
                                    const GemmAttrs& attrs) {
  if (a.rank() != 2 || b.rank() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gemm inputs A and B must be 2-D, got ", a.ToString(), " and ", b.ToString()));
  }
  GemmDims dims;
  dims.m = attrs.trans_a ? a[1] : a[0];
  dims.k = attrs.trans_a ? a[0] : a[1];
  const int64_t k_b = attrs.trans_b ? b[1] : b[0];
  dims.n = attrs.trans_b ? b[0] : b[1];
  if (dims.k != k_b) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Gemm inner dims differ: A ", a.ToString(), attrs.trans_a ? " (transposed)" : "",
        " times B ", b.ToString(), attrs.trans_b ? " (transposed)" : ""));
  }
  if (c != nullptr) {
    const Shape mn{dims.m, dims.n};
    bool ok = c->rank() <= 2;
    for (int i = 0; ok && i < c->rank(); ++i) {
      const int64_t target = mn[2 - c->rank() + i];
      ok = (*c)[i] == target || (*c)[i] == 1;
    }
    if (attrs.c_exact_shape) ok = *c == mn;
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Gemm input C of shape ", c->ToString(), " does not broadcast to the result shape ",
          mn.ToString(), attrs.c_exact_shape ? " (broadcast=0: the shapes must be equal)" : ""));
    }
  }
  return dims;
}

absl::StatusOr<SoftmaxDims> SoftmaxShapes(const Shape& x, int64_t axis, bool coerce_2d) {
  absl::StatusOr<int> normalized = NormalizeAxis(axis, x.rank());
  if (!normalized.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Softmax axis ", axis, " is out of range for input shape ", x.ToString()));
  }
  const int ax = *normalized;
  SoftmaxDims dims;
  dims.outer = x.NumElements(0, ax);
  if (coerce_2d) {
    dims.axis_dim = x.NumElements(ax, x.rank());
    dims.inner = 1;
  } else {
    dims.axis_dim = x[ax];
    dims.inner = x.NumElements(ax + 1, x.rank());
  }
  return dims;
}

}  // namespace loopserve::engine::reference
