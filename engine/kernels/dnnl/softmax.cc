// oneDNN Softmax and LogSoftmax.

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/dnnl/dnnl_kernel.h"
#include "engine/kernels/dnnl/dnnl_util.h"
#include "engine/kernels/dnnl/kernels.h"
#include "engine/kernels/native/vector_math.h"

namespace loopserve::engine {
namespace {

class SoftmaxKernel final : public DnnlKernel {
 public:
  SoftmaxKernel(int64_t axis, bool coerce_2d, bool log)
      : DnnlKernel(/*num_inputs=*/1, /*required_inputs=*/1),
        axis_(axis),
        coerce_2d_(coerce_2d),
        log_(log) {}

 protected:
  absl::StatusOr<std::unique_ptr<PreparedOp>> Prepare(
      DataType type, absl::Span<const Shape* const> shapes) const override {
    LS_ASSIGN_OR_RETURN(const reference::SoftmaxDims dims,
                        reference::SoftmaxShapes(*shapes[0], axis_, coerce_2d_));
    auto prepared = std::make_unique<PreparedOp>();
    prepared->output_shape = *shapes[0];
    if (shapes[0]->NumElements() == 0) {
      prepared->mode = PreparedOp::Mode::kEmpty;
      return prepared;
    }
    // Rows normalised along their contiguous last dim: native vector code (a max, one exp-and-sum
    // pass, one scaling pass per row). No primitive to create per shape (an attention's scores
    // grow with its KV cache every iteration), and as fast as oneDNN's JIT kernel per element.
    if (type == DataType::kFloat32 && dims.inner == 1 &&
        shapes[0]->NumElements() <= NativeElementwiseLimit()) {
      prepared->mode = PreparedOp::Mode::kNativeCustom;
      prepared->native_dims[0] = dims.outer;
      prepared->native_dims[1] = dims.axis_dim;
      return prepared;
    }
    // Any input is [outer, axis_dim, inner] normalised along dim 1; drop inner when it is 1.
    const dnnl::memory::desc desc = dims.inner == 1
                                        ? Desc({dims.outer, dims.axis_dim}, type)
                                        : Desc({dims.outer, dims.axis_dim, dims.inner}, type);
    prepared->bindings = {{DNNL_ARG_SRC, BufferSource::kInput0, desc},
                          {DNNL_ARG_DST, BufferSource::kOutput, desc}};
    if (log_) {
      const dnnl::logsoftmax_forward::primitive_desc pd(
          dnnl::logsoftmax_forward::desc(dnnl::prop_kind::forward_inference, desc, /*axis=*/1),
          UserScratchpadAttr(), CpuEngine());
      prepared->primitive = dnnl::logsoftmax_forward(pd);
      AddScratchpad(pd, *prepared);
      return prepared;
    }
    const dnnl::softmax_forward::primitive_desc pd(
        dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, desc, /*axis=*/1),
        UserScratchpadAttr(), CpuEngine());
    prepared->primitive = dnnl::softmax_forward(pd);
    AddScratchpad(pd, *prepared);
    return prepared;
  }

  absl::Status RunNative(const PreparedOp& op, const Tensor* const* inputs,
                         Tensor& out) const override {
    const int64_t rows = op.native_dims[0];
    const int64_t n = op.native_dims[1];
    const float* x = inputs[0]->data<float>();
    float* y = out.mutable_data<float>();
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * n;
      float* yr = y + r * n;
      const float max = native::MaxF32(xr, n);
      const float sum = native::ExpShiftSumF32(xr, max, yr, n);
      if (log_) {
        native::UnaryF32(native::VecUnary::kLinear, xr, yr, n, 1.0f, -(max + std::log(sum)));
      } else {
        native::UnaryF32(native::VecUnary::kLinear, yr, yr, n, 1.0f / sum, 0.0f);
      }
    }
    return absl::OkStatus();
  }

  absl::Status RunReference(KernelContext& ctx) const override {
    Tensor& out = ctx.output_value(0).mutable_tensor();
    return log_ ? reference::LogSoftmax(ctx.input(0), axis_, coerce_2d_, out)
                : reference::Softmax(ctx.input(0), axis_, coerce_2d_, out);
  }

 private:
  const int64_t axis_;
  const bool coerce_2d_;
  const bool log_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlSoftmaxKernel(const KernelInit& init, bool log) {
  const Node& node = init.node();
  if (init.num_inputs() != 1 || node.outputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected 1 input and 1 output, got ", init.num_inputs(), " and ", node.outputs.size()));
  }
  // Opset 13 changed Softmax and LogSoftmax from "flatten to 2-D at axis (default 1)" to "along
  // axis (default -1)".
  const bool coerce_2d = node.opset < 13;
  LS_ASSIGN_OR_RETURN(const int64_t axis, node.GetInt("axis", coerce_2d ? 1 : -1));
  auto kernel = std::make_unique<SoftmaxKernel>(axis, coerce_2d, log);
  kernel->WarmUp(init);
  return kernel;
}

}  // namespace loopserve::engine
