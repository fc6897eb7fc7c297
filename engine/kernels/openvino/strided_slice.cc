// ov:StridedSlice (OpenVINO StridedSlice-1): numpy-style slicing driven by begin/end/stride inputs
// and five bit masks. A mask bit of 1 means: begin_mask/end_mask, ignore begin[i]/end[i] and use
// the full range; new_axis_mask, insert a dimension of 1; shrink_axis_mask, take the single element
// at begin[i] and drop the dimension; ellipsis_mask, cover every dimension the other entries leave.

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/broadcast.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/openvino/register_openvino.h"

namespace loopserve::engine::openvino {
namespace {

using native::DimVector;

class StridedSliceKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(native::CheckArity(init, 3, 4));
    auto kernel = std::unique_ptr<StridedSliceKernel>(new StridedSliceKernel());
    const Node& node = init.node();
    LS_ASSIGN_OR_RETURN(kernel->begin_mask_, node.GetInts("begin_mask", std::vector<int64_t>{}));
    LS_ASSIGN_OR_RETURN(kernel->end_mask_, node.GetInts("end_mask", std::vector<int64_t>{}));
    LS_ASSIGN_OR_RETURN(kernel->new_axis_mask_,
                        node.GetInts("new_axis_mask", std::vector<int64_t>{}));
    LS_ASSIGN_OR_RETURN(kernel->shrink_axis_mask_,
                        node.GetInts("shrink_axis_mask", std::vector<int64_t>{}));
    LS_ASSIGN_OR_RETURN(kernel->ellipsis_mask_,
                        node.GetInts("ellipsis_mask", std::vector<int64_t>{}));
    int ellipses = 0;
    for (int64_t bit : kernel->ellipsis_mask_) ellipses += bit != 0;
    if (ellipses > 1) {
      return absl::InvalidArgumentError("ellipsis_mask has more than one bit set");
    }
    return std::unique_ptr<Kernel>(std::move(kernel));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& data = ctx.input(0);
    DimVector begin;
    DimVector end;
    DimVector stride;
    LS_RETURN_IF_ERROR(native::ReadIndexList(ctx.input(1), "input 'begin'", &begin));
    LS_RETURN_IF_ERROR(native::ReadIndexList(ctx.input(2), "input 'end'", &end));
    const int n = static_cast<int>(begin.size());
    if (ctx.has_input(3)) {
      LS_RETURN_IF_ERROR(native::ReadIndexList(ctx.input(3), "input 'stride'", &stride));
    } else {
      stride.assign(n, 1);
    }
    if (static_cast<int>(end.size()) != n || static_cast<int>(stride.size()) != n) {
      return absl::InvalidArgumentError(
          absl::StrCat("begin, end and stride have different lengths (", n, ", ", end.size(), ", ",
                       stride.size(), ")"));
    }
    const int rank = data.rank();
    // Input dims consumed by the entries other than the ellipsis.
    int consumed = 0;
    for (int i = 0; i < n; ++i) {
      if (!Bit(ellipsis_mask_, i) && !Bit(new_axis_mask_, i)) ++consumed;
    }
    if (consumed > rank) {
      return absl::InvalidArgumentError(
          absl::StrCat("begin has ", n, " entries for an input of rank ", rank));
    }
    DimVector in_strides;
    native::RowMajorStrides(data.shape(), &in_strides);
    // Per output dim (before shrinking): its size and its element stride in the input.
    DimVector walk_dims;
    DimVector walk_strides;
    Shape out_shape;
    int64_t offset = 0;
    int axis = 0;
    auto full = [&](int a) {
      walk_dims.push_back(data.dim(a));
      walk_strides.push_back(in_strides[a]);
      out_shape.mutable_dims().push_back(data.dim(a));
    };
    bool seen_ellipsis = false;
    for (int i = 0; i < n; ++i) {
      if (Bit(ellipsis_mask_, i) && !seen_ellipsis) {
        seen_ellipsis = true;
        const int covered = rank - consumed;
        for (int k = 0; k < covered; ++k) full(axis++);
        continue;
      }
      if (Bit(new_axis_mask_, i)) {
        walk_dims.push_back(1);
        walk_strides.push_back(0);
        out_shape.mutable_dims().push_back(1);
        continue;
      }
      const int64_t d = data.dim(axis);
      if (Bit(shrink_axis_mask_, i)) {
        int64_t b = Bit(begin_mask_, i) ? 0 : begin[i];
        if (b < 0) b += d;
        if (b < 0 || b >= d) {
          return absl::InvalidArgumentError(absl::StrCat(
              "begin[", i, "] = ", begin[i], " is out of range for a shrunk axis of size ", d));
        }
        offset += b * in_strides[axis];
        ++axis;
        continue;
      }
      if (stride[i] == 0) return absl::InvalidArgumentError(absl::StrCat("stride[", i, "] is 0"));
      // A step of at least the axis size takes at most one element, so it is capped there: the
      // length and the input stride below cannot overflow, whatever the model says.
      const int64_t cap = std::max<int64_t>(d, 1);
      const int64_t s = std::min(std::max(stride[i], -cap), cap);
      int64_t b;
      int64_t e;
      int64_t len;
      if (s > 0) {
        b = Bit(begin_mask_, i) ? 0 : Clamp(begin[i], d, 0, d);
        e = Bit(end_mask_, i) ? d : Clamp(end[i], d, 0, d);
        len = e > b ? (e - b + s - 1) / s : 0;
      } else {
        b = Bit(begin_mask_, i) ? d - 1 : Clamp(begin[i], d, -1, d - 1);
        e = Bit(end_mask_, i) ? -1 : Clamp(end[i], d, -1, d - 1);
        len = b > e ? (b - e - s - 1) / -s : 0;
      }
      if (len > 0) offset += b * in_strides[axis];
      walk_dims.push_back(len);
      walk_strides.push_back(s * in_strides[axis]);
      out_shape.mutable_dims().push_back(len);
      ++axis;
    }
    while (axis < rank) full(axis++);
    Tensor* y = ctx.output(0, data.dtype(), out_shape);
    if (y->NumElements() == 0) return absl::OkStatus();
    native::StridedCopyElements(
        data.dtype(),
        static_cast<const char*>(data.raw_data()) + offset * DataTypeSize(data.dtype()),
        y->mutable_raw_data(), walk_dims, walk_strides);
    return absl::OkStatus();
  }

 private:
  StridedSliceKernel() = default;

  static bool Bit(const std::vector<int64_t>& mask, int i) {
    return i < static_cast<int>(mask.size()) && mask[i] != 0;
  }
  // A begin/end index: negative counts from the end; then clamped to [lo, hi].
  static int64_t Clamp(int64_t v, int64_t d, int64_t lo, int64_t hi) {
    if (v < 0) v += d;
    return std::min(std::max(v, lo), hi);
  }

  std::vector<int64_t> begin_mask_;
  std::vector<int64_t> end_mask_;
  std::vector<int64_t> new_axis_mask_;
  std::vector<int64_t> shrink_axis_mask_;
  std::vector<int64_t> ellipsis_mask_;
};

}  // namespace

void RegisterStridedSliceKernel(KernelRegistry& registry) {
  registry.Register("ov:StridedSlice", native::FactoryOf<StridedSliceKernel>());
}

}  // namespace loopserve::engine::openvino
