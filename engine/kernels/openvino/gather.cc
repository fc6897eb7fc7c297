// ov:Gather: OpenVINO Gather-7/8. The axis is an input; the first batch_dims dimensions of data and
// indices are batch dimensions gathered pairwise; negative indices count from the end.
// out.shape = data.shape[:axis] + indices.shape[batch_dims:] + data.shape[axis+1:].

#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/openvino/register_openvino.h"

namespace loopserve::engine::openvino {
namespace {

class GatherKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(native::CheckArity(init, 3, 3));
    LS_ASSIGN_OR_RETURN(int64_t batch_dims, init.node().GetInt("batch_dims", 0));
    return std::unique_ptr<Kernel>(new GatherKernel(batch_dims));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& indices = ctx.input(1);
    if (indices.dtype() == DataType::kInt64) return Gather<int64_t>(ctx, indices);
    if (indices.dtype() == DataType::kInt32) return Gather<int32_t>(ctx, indices);
    return absl::InvalidArgumentError(
        absl::StrCat("indices must be int32 or int64, got ", DataTypeName(indices.dtype())));
  }

 private:
  explicit GatherKernel(int64_t batch_dims) : batch_dims_(batch_dims) {}

  template <typename I>
  absl::Status Gather(KernelContext& ctx, const Tensor& indices) const {
    const Tensor& data = ctx.input(0);
    const Tensor& axis_t = ctx.input(2);
    if (axis_t.NumElements() != 1 || !IsInteger(axis_t.dtype())) {
      return absl::InvalidArgumentError("input 'axis' must be a single integer");
    }
    const int rank = data.rank();
    if (rank == 0) return absl::InvalidArgumentError("cannot gather from a scalar");
    LS_ASSIGN_OR_RETURN(const int axis, NormalizeAxis(axis_t.ScalarAsInt64(), rank));
    int64_t b = batch_dims_ < 0 ? batch_dims_ + indices.rank() : batch_dims_;
    if (b < 0 || b > indices.rank() || b > axis) {
      return absl::InvalidArgumentError(absl::StrCat("batch_dims ", batch_dims_,
                                                     " is out of range for axis ", axis,
                                                     " and indices of rank ", indices.rank()));
    }
    for (int d = 0; d < b; ++d) {
      if (data.dim(d) != indices.dim(d)) {
        return absl::InvalidArgumentError(absl::StrCat("batch dimension ", d, " differs: data ",
                                                       data.shape().ToString(), ", indices ",
                                                       indices.shape().ToString()));
      }
    }
    const int bd = static_cast<int>(b);
    Shape out_shape;
    Shape::Dims& dims = out_shape.mutable_dims();
    for (int d = 0; d < axis; ++d) dims.push_back(data.dim(d));
    for (int d = bd; d < indices.rank(); ++d) dims.push_back(indices.dim(d));
    for (int d = axis + 1; d < rank; ++d) dims.push_back(data.dim(d));
    const int64_t axis_dim = data.dim(axis);
    const int64_t batches = data.shape().NumElements(0, bd);
    const int64_t outer = data.shape().NumElements(bd, axis);
    const int64_t per_batch = indices.shape().NumElements(bd, indices.rank());
    const I* idx = indices.data<I>();
    for (int64_t j = 0; j < indices.NumElements(); ++j) {
      if (idx[j] < -axis_dim || idx[j] >= axis_dim) {
        return absl::InvalidArgumentError(absl::StrCat(
            "index ", idx[j], " is out of range for axis ", axis, " of size ", axis_dim));
      }
    }
    Tensor* y = ctx.output(0, data.dtype(), out_shape);
    const size_t inner =
        static_cast<size_t>(data.shape().NumElements(axis + 1, rank)) * DataTypeSize(data.dtype());
    const char* src = static_cast<const char*>(data.raw_data());
    char* dst = static_cast<char*>(y->mutable_raw_data());
    if (inner == 0) return absl::OkStatus();
    for (int64_t bi = 0; bi < batches; ++bi) {
      const I* batch_idx = idx + bi * per_batch;
      for (int64_t o = 0; o < outer; ++o) {
        const char* row = src + ((bi * outer + o) * axis_dim) * inner;
        for (int64_t j = 0; j < per_batch; ++j) {
          int64_t k = batch_idx[j];
          if (k < 0) k += axis_dim;
          std::memcpy(dst, row + k * inner, inner);
          dst += inner;
        }
      }
    }
    return absl::OkStatus();
  }

  int64_t batch_dims_;
};

}  // namespace

void RegisterGatherKernel(KernelRegistry& registry) {
  registry.Register("ov:Gather", native::FactoryOf<GatherKernel>());
}

}  // namespace loopserve::engine::openvino
