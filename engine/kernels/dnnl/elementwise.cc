// oneDNN Add/Sub/Mul/Div (binary primitive) and Relu/Tanh/Sigmoid/Exp/Log/Sqrt/Abs/Neg (eltwise).

#include <algorithm>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/dnnl/dnnl_kernel.h"
#include "engine/kernels/dnnl/dnnl_util.h"
#include "engine/kernels/dnnl/kernels.h"
#include "engine/kernels/native/post_ops.h"
#include "engine/kernels/reference/broadcast.h"
#include "engine/runtime/plan.h"

namespace loopserve::engine {
namespace {

using reference::BinaryOp;
using reference::UnaryOp;

// Makes `op` a kNative op running `chain` over `shapes`.
absl::Status UseNativeChain(const native::ElementwiseChain& chain,
                            absl::Span<const Shape* const> shapes, PreparedOp& op) {
  LS_ASSIGN_OR_RETURN(op.chain_prepared, chain.Prepare(shapes));
  op.mode = PreparedOp::Mode::kNative;
  op.chain = &chain;
  op.output_shape = op.chain_prepared.output;
  return absl::OkStatus();
}

dnnl::algorithm BinaryAlgorithm(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
      return dnnl::algorithm::binary_add;
    case BinaryOp::kSub:
      return dnnl::algorithm::binary_sub;
    case BinaryOp::kMul:
      return dnnl::algorithm::binary_mul;
    case BinaryOp::kDiv:
      return dnnl::algorithm::binary_div;
    default:
      break;
  }
  return dnnl::algorithm::undef;
}

// ONNX before opset 7: B is broadcast onto A only when broadcast=1, aligned at `axis` when given
// (trailing dims otherwise, as numpy does).
struct LegacyBroadcast {
  bool broadcast = false;
  std::optional<int64_t> axis;
};

class BinaryKernel final : public DnnlKernel {
 public:
  BinaryKernel(BinaryOp op, std::optional<LegacyBroadcast> legacy)
      : DnnlKernel(/*num_inputs=*/2, /*required_inputs=*/2),
        op_(op),
        legacy_(legacy),
        chain_(2, {native::ChainStep::Binary(op, 1)}) {}

 protected:
  absl::StatusOr<std::unique_ptr<PreparedOp>> Prepare(
      DataType type, absl::Span<const Shape* const> shapes) const override {
    const Shape& a = *shapes[0];
    LS_ASSIGN_OR_RETURN(const Shape b, LegacyShapeOfB(a, *shapes[1]));
    LS_ASSIGN_OR_RETURN(Shape out, BroadcastShapes(a, b));
    auto prepared = std::make_unique<PreparedOp>();
    prepared->output_shape = out;
    if (out.NumElements() == 0) {
      prepared->mode = PreparedOp::Mode::kEmpty;
      return prepared;
    }
    const Shape* operands[] = {&a, &b};
    const reference::BroadcastLayout layout = reference::MakeBroadcastLayout(out, operands);
    if (type == DataType::kFloat32 &&
        (out.NumElements() <= NativeElementwiseLimit() || layout.rank() > DNNL_MAX_NDIMS)) {
      LS_RETURN_IF_ERROR(UseNativeChain(chain_, operands, *prepared));
      return prepared;
    }
    if (out.NumElements() <= DnnlSmallTensorLimit() || layout.rank() > DNNL_MAX_NDIMS) {
      prepared->mode = PreparedOp::Mode::kReference;
      return prepared;
    }
    const dnnl::memory::desc a_desc = Desc(layout.InputDims(0), type);
    const dnnl::memory::desc b_desc = Desc(layout.InputDims(1), type);
    const dnnl::memory::desc out_desc = Desc(layout.dims, type);
    // oneDNN broadcasts only src1, and dst has src0's dims.
    ArgBinding src0{DNNL_ARG_SRC_0, BufferSource::kInput0, a_desc};
    ArgBinding src1{DNNL_ARG_SRC_1, BufferSource::kInput1, b_desc};
    bool negate = false;
    if (layout.IsBroadcast(0)) {
      if (!layout.IsBroadcast(1) && op_ != BinaryOp::kDiv) {
        // b - a is exactly -(a - b): round-to-nearest is symmetric.
        src0 = {DNNL_ARG_SRC_0, BufferSource::kInput1, b_desc};
        src1 = {DNNL_ARG_SRC_1, BufferSource::kInput0, a_desc};
        negate = op_ == BinaryOp::kSub;
      } else {
        // Both sides broadcast (or a Div by a full-size b): expand a first.
        prepared->expansions.push_back({/*input=*/0, out});
        src0 = {DNNL_ARG_SRC_0, BufferSource::kAux0, out_desc};
      }
    }
    dnnl::primitive_attr attr = UserScratchpadAttr();
    if (negate) {
      dnnl::post_ops post_ops;
      post_ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_linear, -1.0f, 0.0f);
      attr.set_post_ops(post_ops);
    }
    const dnnl::binary::primitive_desc pd(
        dnnl::binary::desc(BinaryAlgorithm(op_), src0.desc, src1.desc, out_desc), attr,
        CpuEngine());
    prepared->primitive = dnnl::binary(pd);
    prepared->bindings = {src0, src1, {DNNL_ARG_DST, BufferSource::kOutput, out_desc}};
    AddScratchpad(pd, *prepared);
    return prepared;
  }

  absl::Status RunReference(KernelContext& ctx) const override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    Tensor& out = ctx.output_value(0).mutable_tensor();
    if (!legacy_.has_value()) return reference::Binary(op_, a, b, out);
    LS_ASSIGN_OR_RETURN(Shape b_shape, LegacyShapeOfB(a.shape(), b.shape()));
    return reference::Binary(op_, a, Tensor::View(b.dtype(), std::move(b_shape), b.raw_data()),
                             out);
  }

 private:
  // The shape B takes under the opset < 7 rules (its own shape from opset 7 on).
  absl::StatusOr<Shape> LegacyShapeOfB(const Shape& a, const Shape& b) const {
    if (!legacy_.has_value()) return b;
    if (!legacy_->broadcast) {
      if (a == b) return b;
      return absl::InvalidArgumentError(
          absl::StrCat("input shapes ", a.ToString(), " and ", b.ToString(),
                       " differ and the node does not set broadcast=1 (opset < 7)"));
    }
    Shape adjusted = b;
    if (legacy_->axis.has_value()) {
      absl::StatusOr<int> axis = NormalizeAxis(*legacy_->axis, a.rank());
      if (!axis.ok() || *axis + b.rank() > a.rank()) {
        return absl::InvalidArgumentError(
            absl::StrCat("B of shape ", b.ToString(), " cannot be aligned at axis ", *legacy_->axis,
                         " of A of shape ", a.ToString()));
      }
      Shape::Dims dims(a.rank(), 1);
      for (int i = 0; i < b.rank(); ++i) dims[*axis + i] = b[i];
      adjusted = Shape(std::move(dims));
    }
    absl::StatusOr<Shape> out = BroadcastShapes(a, adjusted);
    if (!out.ok() || *out != a) {
      return absl::InvalidArgumentError(absl::StrCat(
          "B of shape ", b.ToString(), " does not broadcast onto A of shape ", a.ToString()));
    }
    return adjusted;
  }

  const BinaryOp op_;
  const std::optional<LegacyBroadcast> legacy_;
  const native::ElementwiseChain chain_;
};

class UnaryKernel final : public DnnlKernel {
 public:
  explicit UnaryKernel(UnaryOp op)
      : DnnlKernel(/*num_inputs=*/1, /*required_inputs=*/1),
        op_(op),
        chain_(1, {native::ChainStep::Unary(op)}) {}

 protected:
  absl::StatusOr<std::unique_ptr<PreparedOp>> Prepare(
      DataType type, absl::Span<const Shape* const> shapes) const override {
    auto prepared = std::make_unique<PreparedOp>();
    prepared->output_shape = *shapes[0];
    const int64_t n = shapes[0]->NumElements();
    if (n == 0) {
      prepared->mode = PreparedOp::Mode::kEmpty;
      return prepared;
    }
    if (type == DataType::kFloat32 && n <= NativeElementwiseLimit()) {
      LS_RETURN_IF_ERROR(UseNativeChain(chain_, shapes, *prepared));
      return prepared;
    }
    if (n <= DnnlSmallTensorLimit()) {
      prepared->mode = PreparedOp::Mode::kReference;
      return prepared;
    }
    // Elementwise: any shape is a flat vector to oneDNN.
    const dnnl::memory::desc desc = Desc({n}, type);
    float alpha = 0.0f;
    float beta = 0.0f;
    dnnl::algorithm algorithm = dnnl::algorithm::undef;
    switch (op_) {
      case UnaryOp::kRelu:
        algorithm = dnnl::algorithm::eltwise_relu;
        break;
      case UnaryOp::kTanh:
        algorithm = dnnl::algorithm::eltwise_tanh;
        break;
      case UnaryOp::kSigmoid:
        algorithm = dnnl::algorithm::eltwise_logistic;
        break;
      case UnaryOp::kExp:
        algorithm = dnnl::algorithm::eltwise_exp;
        break;
      case UnaryOp::kLog:
        algorithm = dnnl::algorithm::eltwise_log;
        break;
      case UnaryOp::kSqrt:
        algorithm = dnnl::algorithm::eltwise_sqrt;
        break;
      case UnaryOp::kAbs:
        algorithm = dnnl::algorithm::eltwise_abs;
        break;
      case UnaryOp::kNeg:
        algorithm = dnnl::algorithm::eltwise_linear;
        alpha = -1.0f;
        break;
      default:
        return absl::InternalError(absl::StrCat("no oneDNN eltwise for ", EltwiseFnName(op_)));
    }
    const dnnl::eltwise_forward::primitive_desc pd(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, algorithm, desc, alpha,
                                    beta),
        UserScratchpadAttr(), CpuEngine());
    prepared->primitive = dnnl::eltwise_forward(pd);
    prepared->bindings = {{DNNL_ARG_SRC, BufferSource::kInput0, desc},
                          {DNNL_ARG_DST, BufferSource::kOutput, desc}};
    AddScratchpad(pd, *prepared);
    return prepared;
  }

  absl::Status RunReference(KernelContext& ctx) const override {
    return reference::Unary(op_, ctx.input(0), ctx.output_value(0).mutable_tensor());
  }

 private:
  const UnaryOp op_;
  const native::ElementwiseChain chain_;
};

// kElementwiseOp (engine/ir/fusion.h): input 0 followed by the node's post-ops, on the native
// chain for float32 (one pass, every operand broadcast); other element types run the nodes the
// fusion replaced.
class ElementwiseKernel final : public DnnlKernel {
 public:
  ElementwiseKernel(int num_inputs, native::ElementwiseChain chain)
      : DnnlKernel(num_inputs, num_inputs), chain_(std::move(chain)) {}

 protected:
  bool UsesDnnl(DataType type) const override { return type == DataType::kFloat32; }

  absl::StatusOr<std::unique_ptr<PreparedOp>> Prepare(
      DataType type, absl::Span<const Shape* const> shapes) const override {
    auto prepared = std::make_unique<PreparedOp>();
    LS_RETURN_IF_ERROR(UseNativeChain(chain_, shapes, *prepared));
    if (prepared->output_shape.NumElements() == 0) prepared->mode = PreparedOp::Mode::kEmpty;
    return prepared;
  }

  absl::Status RunReference(KernelContext& ctx) const override {
    return absl::InternalError("a fused elementwise node has no reference kernel of its own");
  }

 private:
  const native::ElementwiseChain chain_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlElementwiseKernel(const KernelInit& init) {
  const Node& node = init.node();
  if (node.fusion == nullptr || node.outputs.size() != 1 || init.num_inputs() < 1 ||
      init.num_inputs() > native::ElementwiseChain::kMaxOperands) {
    return absl::InvalidArgumentError(
        "a fused elementwise node needs its fusion spec, 1 output and "
        "1 to 8 inputs");
  }
  LS_ASSIGN_OR_RETURN(native::ElementwiseChain chain,
                      native::ChainOfPostOps(node.fusion->post_ops, init.num_inputs(), nullptr));
  auto kernel = std::make_unique<ElementwiseKernel>(init.num_inputs(), std::move(chain));
  if (node.fusion->unfused != nullptr) {
    LS_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> unfused,
                        init.CompileUnfused(node.fusion->unfused));
    kernel->SetUnfused(std::move(unfused));
  }
  kernel->WarmUp(init);
  return kernel;
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlBinaryKernel(BinaryOp op,
                                                               const KernelInit& init) {
  const Node& node = init.node();
  if ((ArithOpFlags(op) & kEltwiseDnnl) == 0) {
    return absl::InternalError(absl::StrCat("no oneDNN binary kernel for ", ArithOpName(op)));
  }
  if (init.num_inputs() != 2 || node.outputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected 2 inputs and 1 output, got ", init.num_inputs(), " and ", node.outputs.size()));
  }
  std::optional<LegacyBroadcast> legacy;
  if (node.opset < 7) {
    legacy.emplace();
    LS_ASSIGN_OR_RETURN(const int64_t broadcast, node.GetInt("broadcast", 0));
    legacy->broadcast = broadcast != 0;
    if (node.FindAttribute("axis") != nullptr) {
      LS_ASSIGN_OR_RETURN(legacy->axis, node.GetInt("axis", std::nullopt));
    }
  }
  auto kernel = std::make_unique<BinaryKernel>(op, legacy);
  kernel->WarmUp(init);
  return kernel;
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlUnaryKernel(UnaryOp op, const KernelInit& init) {
  if ((EltwiseFnFlags(op) & kEltwiseDnnl) == 0) {
    return absl::InternalError(absl::StrCat("no oneDNN eltwise kernel for ", EltwiseFnName(op)));
  }
  if (init.num_inputs() != 1 || init.node().outputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("expected 1 input and 1 output, got ",
                                                   init.num_inputs(), " and ",
                                                   init.node().outputs.size()));
  }
  auto kernel = std::make_unique<UnaryKernel>(op);
  kernel->WarmUp(init);
  return kernel;
}

}  // namespace loopserve::engine
