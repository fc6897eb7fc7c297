// oneDNN MaxPool, AveragePool, GlobalMaxPool and GlobalAveragePool (pooling_v2); LpPool and
// MaxPool's Indices output on the reference kernel.

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/dnnl/dnnl_kernel.h"
#include "engine/kernels/dnnl/dnnl_util.h"
#include "engine/kernels/dnnl/kernels.h"
#include "engine/kernels/dnnl/layout.h"
#include "engine/kernels/dnnl/window_attrs.h"

namespace loopserve::engine {
namespace {

using reference::PoolKind;

bool IsInt8(DataType type) { return type == DataType::kInt8 || type == DataType::kUint8; }

class PoolKernel final : public DnnlKernel {
 public:
  PoolKernel(reference::PoolAttrs attrs, bool with_indices)
      : DnnlKernel(/*num_inputs=*/1, /*required_inputs=*/1),
        attrs_(std::move(attrs)),
        with_indices_(with_indices) {}

 protected:
  bool UsesDnnl(DataType type) const override {
    if (with_indices_ || attrs_.kind == PoolKind::kLp) return false;
    return type == DataType::kFloat32 || (attrs_.kind == PoolKind::kMax && IsInt8(type));
  }

  absl::StatusOr<std::unique_ptr<PreparedOp>> Prepare(
      DataType type, absl::Span<const Shape* const> shapes) const override {
    const Shape& x = *shapes[0];
    LS_ASSIGN_OR_RETURN(const reference::Window window,
                        reference::ResolveWindow(x, attrs_.window.kernel_shape, attrs_.window,
                                                 /*pool=*/true, Name()));
    Shape::Dims out_dims = {x[0], x[1]};
    out_dims.insert(out_dims.end(), window.output.begin(), window.output.end());
    LS_ASSIGN_OR_RETURN(Shape out, ValidateDims(out_dims, "pool output"));
    auto prepared = std::make_unique<PreparedOp>();
    prepared->output_shape = out;
    if (out.NumElements() == 0) {
      prepared->mode = PreparedOp::Mode::kEmpty;
      return prepared;
    }
    DnnlWindow win = ToDnnlWindow(window);
    bool reference = window.rank > 3 || x.NumElements() == 0;
    for (int i = 0; i < window.rank && !reference; ++i) {
      // ceil_mode's last window may reach past the end pad: oneDNN sees a larger end pad. The
      // reference takes a window that would lie wholly in padding, and an average that counts
      // pads, which must not count the extra ones.
      const int64_t needed = (window.output[i] - 1) * window.strides[i] + window.extent(i) -
                             window.input[i] - window.pads_begin[i];
      if (needed > win.padding_r[i]) {
        if (needed >= window.extent(i) || attrs_.count_include_pad) reference = true;
        win.padding_r[i] = needed;
      }
    }
    if (reference) {
      prepared->mode = PreparedOp::Mode::kReference;
      return prepared;
    }
    const dnnl::algorithm algorithm = attrs_.kind == PoolKind::kMax ? dnnl::algorithm::pooling_max
                                      : attrs_.count_include_pad
                                          ? dnnl::algorithm::pooling_avg_include_padding
                                          : dnnl::algorithm::pooling_avg_exclude_padding;
    const dnnl::memory::desc src = Desc(x.dims(), type);
    const dnnl::memory::desc dst = Desc(out.dims(), type);
    const dnnl::pooling_v2_forward::primitive_desc pd(
        dnnl::pooling_v2_forward::desc(dnnl::prop_kind::forward_inference, algorithm, src, dst,
                                       win.strides, win.kernel, win.dilations, win.padding_l,
                                       win.padding_r),
        UserScratchpadAttr(), CpuEngine());
    prepared->primitive = dnnl::pooling_v2_forward(pd);
    prepared->bindings = {{DNNL_ARG_SRC, BufferSource::kInput0, src},
                          {DNNL_ARG_DST, BufferSource::kOutput, dst}};
    AddScratchpad(pd, *prepared);
    return prepared;
  }

  absl::Status RunReference(KernelContext& ctx) const override {
    return reference::Pool(ctx.input(0), attrs_, ctx.output_value(0).mutable_tensor(),
                           with_indices_ ? &ctx.output_value(1).mutable_tensor() : nullptr);
  }

 private:
  const char* Name() const {
    return attrs_.kind == PoolKind::kMax       ? "MaxPool"
           : attrs_.kind == PoolKind::kAverage ? "AveragePool"
                                               : "LpPool";
  }

  const reference::PoolAttrs attrs_;
  const bool with_indices_;
};

// GlobalAveragePool / GlobalMaxPool; in a blocked chain (`blocked`, engine/transform/
// blocked_layout.h) input and result are held in the chain's layout (dnnl/layout.h).
class GlobalPoolKernel final : public DnnlKernel {
 public:
  GlobalPoolKernel(PoolKind kind, bool blocked)
      : DnnlKernel(/*num_inputs=*/1, /*required_inputs=*/1), kind_(kind), blocked_(blocked) {}

 protected:
  bool UsesDnnl(DataType type) const override {
    return type == DataType::kFloat32 || (!blocked_ && kind_ == PoolKind::kMax && IsInt8(type));
  }

  absl::StatusOr<std::unique_ptr<PreparedOp>> Prepare(
      DataType type, absl::Span<const Shape* const> shapes) const override {
    LS_ASSIGN_OR_RETURN(const Shape x,
                        blocked_ ? PlainOfChain(*shapes[0]) : absl::StatusOr<Shape>(*shapes[0]));
    LS_ASSIGN_OR_RETURN(Shape out,
                        reference::GlobalPoolShape(
                            x, kind_ == PoolKind::kMax ? "GlobalMaxPool" : "GlobalAveragePool"));
    auto prepared = std::make_unique<PreparedOp>();
    prepared->output_shape = blocked_ ? ChainShape(out) : out;
    if (out.NumElements() == 0) {
      prepared->mode = PreparedOp::Mode::kEmpty;
      return prepared;
    }
    if (x.rank() > 5) {
      prepared->mode = PreparedOp::Mode::kReference;
      return prepared;
    }
    const dnnl::memory::dims kernel(x.dims().begin() + 2, x.dims().end());
    const dnnl::memory::dims ones(kernel.size(), 1);
    const dnnl::memory::dims zeros(kernel.size(), 0);
    const dnnl::memory::desc src = blocked_ ? ChainDesc(x) : Desc(x.dims(), type);
    const dnnl::memory::desc dst = blocked_ ? ChainDesc(out) : Desc(out.dims(), type);
    const dnnl::pooling_v2_forward::primitive_desc pd(
        dnnl::pooling_v2_forward::desc(dnnl::prop_kind::forward_inference,
                                       kind_ == PoolKind::kMax
                                           ? dnnl::algorithm::pooling_max
                                           : dnnl::algorithm::pooling_avg_exclude_padding,
                                       src, dst, ones, kernel, zeros, zeros, zeros),
        UserScratchpadAttr(), CpuEngine());
    prepared->primitive = dnnl::pooling_v2_forward(pd);
    prepared->bindings = {{DNNL_ARG_SRC, BufferSource::kInput0, src},
                          {DNNL_ARG_DST, BufferSource::kOutput, dst}};
    AddScratchpad(pd, *prepared);
    return prepared;
  }

  absl::Status RunReference(KernelContext& ctx) const override {
    if (blocked_) {
      return absl::InvalidArgumentError(
          absl::StrCat("a global pool in a blocked chain computes float32 only, got ",
                       DataTypeName(ctx.input(0).dtype())));
    }
    return reference::GlobalPool(kind_, ctx.input(0), ctx.output_value(0).mutable_tensor());
  }

 private:
  const PoolKind kind_;
  const bool blocked_;  // input and result in the chain's layout
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlPoolKernel(PoolKind kind,
                                                             const KernelInit& init) {
  const Node& node = init.node();
  const size_t max_outputs = kind == PoolKind::kMax && node.opset >= 8 ? 2 : 1;
  if (init.num_inputs() != 1 || node.outputs.empty() || node.outputs.size() > max_outputs) {
    return absl::InvalidArgumentError(absl::StrCat("expected 1 input and at most ", max_outputs,
                                                   " outputs, got ", init.num_inputs(), " and ",
                                                   node.outputs.size()));
  }
  reference::PoolAttrs attrs;
  attrs.kind = kind;
  LS_ASSIGN_OR_RETURN(attrs.window, ParseWindowAttrs(node, /*require_kernel_shape=*/true));
  LS_ASSIGN_OR_RETURN(const int64_t count_include_pad, node.GetInt("count_include_pad", 0));
  attrs.count_include_pad = kind == PoolKind::kAverage && count_include_pad != 0;
  LS_ASSIGN_OR_RETURN(attrs.storage_order, node.GetInt("storage_order", 0));
  if (attrs.storage_order != 0 && attrs.storage_order != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("storage_order ", attrs.storage_order, " must be 0 or 1"));
  }
  if (kind == PoolKind::kLp) {
    // p is a float in LpPool-1 and an int from LpPool-2 on.
    const Attribute* p = node.FindAttribute("p");
    if (p != nullptr) {
      attrs.p = p->type == Attribute::Type::kFloat ? p->f : static_cast<float>(p->i);
    }
    if (!(attrs.p > 0) || attrs.p > 1e6f) {
      return absl::InvalidArgumentError(absl::StrCat("p ", attrs.p, " must be positive"));
    }
  }
  const bool with_indices = node.outputs.size() > 1 && node.outputs[1] != kNoValue;
  auto kernel = std::make_unique<PoolKernel>(std::move(attrs), with_indices);
  kernel->WarmUp(init);
  return kernel;
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlGlobalPoolKernel(PoolKind kind,
                                                                   const KernelInit& init) {
  if (init.num_inputs() != 1 || init.node().outputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("expected 1 input and 1 output, got ",
                                                   init.num_inputs(), " and ",
                                                   init.node().outputs.size()));
  }
  LS_ASSIGN_OR_RETURN(const int64_t blocked, init.node().GetInt("_blocked", 0));
  auto kernel = std::make_unique<GlobalPoolKernel>(kind, blocked != 0);
  kernel->WarmUp(init);
  return kernel;
}

}  // namespace loopserve::engine
