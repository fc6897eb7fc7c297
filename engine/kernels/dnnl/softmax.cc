// oneDNN Softmax and LogSoftmax.

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/dnnl/dnnl_kernel.h"
#include "engine/kernels/dnnl/dnnl_util.h"
#include "engine/kernels/dnnl/kernels.h"
#include "engine/kernels/native/post_ops.h"
#include "engine/kernels/native/vector_math.h"

namespace loopserve::engine {
namespace {

// Softmax / LogSoftmax, and a fused node's (engine/transform/fuse_softmax) post-ops, whose
// operands are inputs 1, 2, .... Float32 rows along the contiguous last dim run natively, the
// post-ops as an epilogue over each output while it is in cache; a LogSoftmax's single post-op
// adding (or subtracting) one value per row folds into the row's shift instead. Other fused
// signatures run the nodes the fusion replaced.
class SoftmaxKernel final : public DnnlKernel {
 public:
  SoftmaxKernel(int num_inputs, int64_t axis, bool coerce_2d, bool log,
                std::shared_ptr<const FusionSpec> spec)
      : DnnlKernel(num_inputs, num_inputs),
        axis_(axis),
        coerce_2d_(coerce_2d),
        log_(log),
        spec_(std::move(spec)) {}

  absl::Status Init(int num_inputs) {
    if (spec_ == nullptr) return absl::OkStatus();
    std::vector<int> inputs;
    LS_ASSIGN_OR_RETURN(epilogue_, native::ChainOfPostOps(spec_->post_ops, num_inputs, &inputs));
    epilogue_inputs_ = std::move(inputs);
    const std::vector<PostOp>& p = spec_->post_ops;
    // logp + c, c + logp, logp - c.
    if (log_ && p.size() == 1 && p[0].kind == PostOp::Kind::kBinary &&
        (p[0].op == ArithOp::kAdd || (p[0].op == ArithOp::kSub && !p[0].input_first))) {
      shift_input_ = p[0].input;
      shift_sign_ = p[0].op == ArithOp::kAdd ? 1.0f : -1.0f;
    }
    return absl::OkStatus();
  }

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
      if (spec_ == nullptr) return prepared;
      const int64_t stride = RowShiftStride(*shapes[0], shapes);
      if (stride >= 0) {
        prepared->native_dims[2] = stride == 0 ? kShiftScalar : kShiftPerRow;
        return prepared;
      }
      std::vector<const Shape*> operand_shapes = {shapes[0]};
      for (int input : epilogue_inputs_) operand_shapes.push_back(shapes[input]);
      absl::StatusOr<native::ElementwiseChain::Prepared> chain = epilogue_.Prepare(operand_shapes);
      if (chain.ok() && chain->output == *shapes[0]) {
        prepared->epilogue_prepared = *std::move(chain);
        prepared->epilogue = &epilogue_;
        prepared->epilogue_inputs.assign(epilogue_inputs_.begin(), epilogue_inputs_.end());
        return prepared;
      }
    }
    if (spec_ != nullptr) {
      // The softmax primitive and the post-ops as they were (FusionSpec::unfused).
      prepared->mode = PreparedOp::Mode::kReference;
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
    // A folded per-row shift: its value for row r is shift[r * shift_stride].
    const float* shift = op.native_dims[2] != 0 ? inputs[shift_input_]->data<float>() : nullptr;
    const int64_t shift_stride = op.native_dims[2] == kShiftPerRow ? 1 : 0;
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * n;
      float* yr = y + r * n;
      const float max = native::MaxF32(xr, n);
      const float sum = native::ExpShiftSumF32(xr, max, yr, n);
      if (log_) {
        // x + (c - lse): one pass (the unfused pair rounds (x - lse) + c; within an ulp).
        const float lse = max + std::log(sum);
        const float c = shift == nullptr ? 0.0f : shift_sign_ * shift[r * shift_stride];
        native::UnaryF32(native::VecUnary::kLinear, xr, yr, n, 1.0f, c - lse);
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
  // PreparedOp::native_dims[2] of a folded shift: one value for all rows, or one per row.
  static constexpr int64_t kShiftScalar = 1;
  static constexpr int64_t kShiftPerRow = 2;

  // For a LogSoftmax whose one post-op adds a value that is constant along each row (an operand
  // of one element, or of the output's shape with a last dim of 1): that operand's stride per
  // row (0 or 1); else -1.
  int64_t RowShiftStride(const Shape& out, absl::Span<const Shape* const> shapes) const {
    if (shift_input_ < 0 || out.rank() == 0) return -1;
    const Shape& c = *shapes[shift_input_];
    if (c.NumElements() == 1 && c.rank() <= out.rank()) return 0;
    if (c.rank() > out.rank() || c.rank() == 0 || c[c.rank() - 1] != 1) return -1;
    // Leading dims of c (left-padded with 1s) must equal out's: row r reads c[r].
    const int pad = out.rank() - c.rank();
    for (int d = 0; d + 1 < out.rank(); ++d) {
      const int64_t cd = d < pad ? 1 : c[d - pad];
      if (cd != out[d]) return -1;
    }
    return 1;
  }

  const int64_t axis_;
  const bool coerce_2d_;
  const bool log_;
  const std::shared_ptr<const FusionSpec> spec_;
  native::ElementwiseChain epilogue_;
  std::vector<int> epilogue_inputs_;
  int shift_input_ = -1;  // the node input of a foldable per-row shift
  float shift_sign_ = 1.0f;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlSoftmaxKernel(const KernelInit& init, bool log) {
  const Node& node = init.node();
  const int expected_inputs = node.fusion != nullptr ? init.num_inputs() : 1;
  if (init.num_inputs() != expected_inputs || init.num_inputs() < 1 ||
      init.num_inputs() > DnnlKernel::kMaxInputs || node.outputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected 1 input and 1 output, got ", init.num_inputs(), " and ", node.outputs.size()));
  }
  // Opset 13 changed Softmax and LogSoftmax from "flatten to 2-D at axis (default 1)" to "along
  // axis (default -1)".
  const bool coerce_2d = node.opset < 13;
  LS_ASSIGN_OR_RETURN(const int64_t axis, node.GetInt("axis", coerce_2d ? 1 : -1));
  auto kernel =
      std::make_unique<SoftmaxKernel>(init.num_inputs(), axis, coerce_2d, log, node.fusion);
  LS_RETURN_IF_ERROR(kernel->Init(init.num_inputs()));
  if (node.fusion != nullptr && node.fusion->unfused != nullptr) {
    LS_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> unfused,
                        init.CompileUnfused(node.fusion->unfused));
    kernel->SetUnfused(std::move(unfused));
  }
  kernel->WarmUp(init);
  return kernel;
}

}  // namespace loopserve::engine
