// ov:Split: OpenVINO Split-1 (equal parts; the axis is an input, the part count the num_splits
// attribute) and VariadicSplit-1 (a third input lists the part lengths, one may be -1 for the
// rest). The axis may be negative.

#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/openvino/register_openvino.h"

namespace loopserve::engine::openvino {
namespace {

using native::DimVector;

class SplitKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(native::CheckArity(init, 2, 3, 1 << 20));
    const int outputs = static_cast<int>(init.node().outputs.size());
    LS_ASSIGN_OR_RETURN(int64_t num_splits, init.node().GetInt("num_splits", outputs));
    if (!init.has_input(2) && num_splits != outputs) {
      return absl::InvalidArgumentError(
          absl::StrCat("num_splits is ", num_splits, " but the node has ", outputs, " outputs"));
    }
    return std::unique_ptr<Kernel>(new SplitKernel());
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& data = ctx.input(0);
    const Tensor& axis_t = ctx.input(1);
    if (axis_t.NumElements() != 1 || !IsInteger(axis_t.dtype())) {
      return absl::InvalidArgumentError("input 'axis' must be a single integer");
    }
    LS_ASSIGN_OR_RETURN(const int axis, NormalizeAxis(axis_t.ScalarAsInt64(), data.rank()));
    const int64_t d = data.dim(axis);
    const int parts = ctx.num_outputs();
    DimVector lengths;
    if (ctx.has_input(2)) {
      LS_RETURN_IF_ERROR(native::ReadIndexList(ctx.input(2), "input 'split_lengths'", &lengths));
      if (static_cast<int>(lengths.size()) != parts) {
        return absl::InvalidArgumentError(
            absl::StrCat("split_lengths has ", lengths.size(), " entries for ", parts, " outputs"));
      }
      int fill = -1;
      int64_t sum = 0;
      for (int k = 0; k < parts; ++k) {
        if (lengths[k] == -1 && fill < 0) {
          fill = k;
        } else if (lengths[k] < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("split_lengths ", native::ListToString(lengths), " is invalid"));
        } else if (lengths[k] > d) {  // also keeps the sum from overflowing
          return absl::InvalidArgumentError(absl::StrCat("split_lengths ",
                                                         native::ListToString(lengths),
                                                         " do not add up to the axis size ", d));
        } else {
          sum += lengths[k];
        }
      }
      if (fill >= 0) lengths[fill] = d - sum;
      if ((fill >= 0 && lengths[fill] < 0) || (fill < 0 && sum != d)) {
        return absl::InvalidArgumentError(absl::StrCat("split_lengths ",
                                                       native::ListToString(lengths),
                                                       " do not add up to the axis size ", d));
      }
    } else {
      if (d % parts != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("axis ", axis, " of size ", d, " does not split into ", parts, " parts"));
      }
      lengths.assign(parts, d / parts);
    }
    const size_t elem = DataTypeSize(data.dtype());
    const int64_t outer = data.shape().NumElements(0, axis);
    const size_t inner =
        static_cast<size_t>(data.shape().NumElements(axis + 1, data.rank())) * elem;
    const char* src = static_cast<const char*>(data.raw_data());
    int64_t start = 0;
    for (int k = 0; k < parts; ++k) {
      Shape shape = data.shape();
      shape[axis] = lengths[k];
      Tensor* y = ctx.output(k, data.dtype(), shape);
      char* dst = static_cast<char*>(y->mutable_raw_data());
      const size_t chunk = static_cast<size_t>(lengths[k]) * inner;
      if (chunk > 0) {
        for (int64_t o = 0; o < outer; ++o) {
          std::memcpy(dst + o * chunk, src + (o * d + start) * inner, chunk);
        }
      }
      start += lengths[k];
    }
    return absl::OkStatus();
  }

 private:
  SplitKernel() = default;
};

}  // namespace

void RegisterSplitKernel(KernelRegistry& registry) {
  registry.Register("ov:Split", native::FactoryOf<SplitKernel>());
}

}  // namespace loopserve::engine::openvino
