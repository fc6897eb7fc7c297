// Slice: opsets 1-9 read starts/ends/axes from attributes; opset 10+ from inputs, with optional
// axes and steps (negative steps walk backwards). Starts and ends are clamped as the spec says,
// so INT64_MAX / INT64_MIN mean "to the end" forwards / backwards.

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/broadcast.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/native/register_families.h"

namespace loopserve::engine::native {
namespace {

class SliceKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init, ListFrom from) {
    auto kernel = std::unique_ptr<SliceKernel>(new SliceKernel());
    kernel->from_ = from;
    if (from == ListFrom::kAttribute) {
      LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
      const Node& node = init.node();
      LS_ASSIGN_OR_RETURN(auto starts, OptionalIntsAttribute(node, "starts"));
      LS_ASSIGN_OR_RETURN(auto ends, OptionalIntsAttribute(node, "ends"));
      if (!starts.has_value() || !ends.has_value()) {
        return absl::InvalidArgumentError("attributes 'starts' and 'ends' are required");
      }
      LS_ASSIGN_OR_RETURN(kernel->attr_axes_, OptionalIntsAttribute(node, "axes"));
      kernel->attr_starts_ = *std::move(starts);
      kernel->attr_ends_ = *std::move(ends);
    } else {
      LS_RETURN_IF_ERROR(CheckArity(init, 3, 5));
    }
    return std::unique_ptr<Kernel>(std::move(kernel));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const int rank = x.rank();
    DimVector starts, ends, axes, steps;
    bool have_axes = false;
    bool have_steps = false;
    if (from_ == ListFrom::kAttribute) {
      starts = attr_starts_;
      ends = attr_ends_;
      if (attr_axes_.has_value()) {
        axes = *attr_axes_;
        have_axes = true;
      }
    } else {
      LS_RETURN_IF_ERROR(ReadIndexList(ctx.input(1), "input 'starts'", &starts));
      LS_RETURN_IF_ERROR(ReadIndexList(ctx.input(2), "input 'ends'", &ends));
      if (ctx.input(1).dtype() != ctx.input(2).dtype()) {
        return TypeMismatch("input 'starts'", ctx.input(1).dtype(), "input 'ends'",
                            ctx.input(2).dtype());
      }
      if (ctx.has_input(3)) {
        LS_RETURN_IF_ERROR(ReadIndexList(ctx.input(3), "input 'axes'", &axes));
        have_axes = true;
      }
      if (ctx.has_input(4)) {
        LS_RETURN_IF_ERROR(ReadIndexList(ctx.input(4), "input 'steps'", &steps));
        have_steps = true;
      }
    }
    const size_t n = starts.size();
    if (ends.size() != n || (have_axes && axes.size() != n) || (have_steps && steps.size() != n)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "starts, ends", have_axes ? ", axes" : "", have_steps ? ", steps" : "",
          " must have the same length; got starts ", ListToString(starts), ", ends ",
          ListToString(ends), have_axes ? absl::StrCat(", axes ", ListToString(axes)) : "",
          have_steps ? absl::StrCat(", steps ", ListToString(steps)) : ""));
    }
    if (!have_axes) {
      if (static_cast<int64_t>(n) > rank) {
        return absl::InvalidArgumentError(absl::StrCat(n, " starts given for an input of rank ",
                                                       rank, " (", x.shape().ToString(), ")"));
      }
      axes.resize(n);
      for (size_t i = 0; i < n; ++i) axes[i] = static_cast<int64_t>(i);
    }
    LS_RETURN_IF_ERROR(NormalizeAxes(axes, rank, "axes"));

    // Per output dim: count, input stride (element stride * step) and start.
    DimVector in_strides;
    RowMajorStrides(x.shape(), &in_strides);
    Shape out_shape = x.shape();
    int64_t offset = 0;
    bool empty = x.NumElements() == 0;
    for (size_t i = 0; i < n; ++i) {
      const int d = static_cast<int>(axes[i]);
      const int64_t dim = x.dim(d);
      const int64_t step = have_steps ? steps[i] : 1;
      if (step == 0) return absl::InvalidArgumentError("steps must not be 0");
      int64_t start = starts[i];
      int64_t end = ends[i];
      if (start < 0) start += dim;
      if (end < 0) end += dim;
      int64_t count;
      if (dim == 0) {
        count = 0;
      } else if (step > 0) {
        start = std::clamp<int64_t>(start, 0, dim);
        end = std::clamp<int64_t>(end, 0, dim);
        count = end > start ? 1 + (end - start - 1) / step : 0;
      } else {
        start = std::clamp<int64_t>(start, 0, dim - 1);
        end = std::clamp<int64_t>(end, -1, dim - 1);
        // -step overflows for INT64_MIN; any step that large takes one element anyway.
        const int64_t abs_step = step == std::numeric_limits<int64_t>::min()
                                     ? std::numeric_limits<int64_t>::max()
                                     : -step;
        count = start > end ? 1 + (start - end - 1) / abs_step : 0;
      }
      out_shape[d] = count;
      if (count == 0) {
        empty = true;
        continue;
      }
      offset += start * in_strides[d];
      // With one element the stride is never used (and step * stride could overflow).
      in_strides[d] = count == 1 ? 0 : in_strides[d] * step;
    }
    Tensor* y = ctx.output(0, x.dtype(), out_shape);
    if (empty) return absl::OkStatus();
    const char* base = static_cast<const char*>(x.raw_data()) +
                       offset * static_cast<int64_t>(DataTypeSize(x.dtype()));
    InterruptPacer pacer(ctx.run_context());
    if (!StridedCopyElements(x.dtype(), base, y->mutable_raw_data(), out_shape.dims(), in_strides,
                             &pacer)) {
      return pacer.status();
    }
    return absl::OkStatus();
  }

 private:
  SliceKernel() = default;
  ListFrom from_ = ListFrom::kInput;
  DimVector attr_starts_;
  DimVector attr_ends_;
  std::optional<DimVector> attr_axes_;
};

}  // namespace

void RegisterSliceKernels(KernelRegistry& registry) {
  registry.Register("Slice", FactoryOf<SliceKernel>(ListFrom::kAttribute), 1, 9);
  registry.Register("Slice", FactoryOf<SliceKernel>(ListFrom::kInput), 10);
}

}  // namespace loopserve::engine::native
