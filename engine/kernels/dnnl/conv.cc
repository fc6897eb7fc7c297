// oneDNN Conv (1-D to 3-D, groups, dilations, strides, pads, auto_pad, optional bias, the
// post-ops of a fused Conv as a native epilogue) and ConvTranspose.

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/dnnl/dnnl_kernel.h"
#include "engine/kernels/dnnl/dnnl_util.h"
#include "engine/kernels/dnnl/kernels.h"
#include "engine/kernels/dnnl/layout.h"
#include "engine/kernels/dnnl/window_attrs.h"
#include "engine/kernels/native/post_ops.h"
#include "engine/kernels/native/vector_math.h"
#include "engine/runtime/plan.h"

namespace loopserve::engine {
namespace {

// A Conv node, optionally fused (engine/transform/fuse_conv.h): inputs X, W, B (omitted when the
// Conv has no bias), then the post-ops' operands, which run as a native epilogue over the result.
// In a blocked chain (engine/transform/blocked_layout.h) X (`blocked_src`) and the result
// (`blocked_dst`) may be held in the chain's layout (dnnl/layout.h: nChw16c, nChw8c or nhwc); the
// epilogue's operands are then one-element constants, so it runs over the blocked result as over a
// plain one.
class ConvKernel final : public DnnlKernel {
 public:
  ConvKernel(int num_inputs, reference::WindowAttrs attrs, int64_t group,
             const Tensor* constant_weights, std::shared_ptr<const FusionSpec> spec,
             bool blocked_src, bool blocked_dst)
      : DnnlKernel(num_inputs, /*required_inputs=*/2),
        attrs_(std::move(attrs)),
        group_(group),
        constant_weights_(constant_weights),
        spec_(std::move(spec)),
        blocked_src_(blocked_src),
        blocked_dst_(blocked_dst) {}

  // Builds the epilogue of a fused node's post-ops.
  absl::Status Init(int num_inputs) {
    if (spec_ == nullptr) return absl::OkStatus();
    LS_ASSIGN_OR_RETURN(epilogue_,
                        native::ChainOfPostOps(spec_->post_ops, num_inputs, &epilogue_inputs_));
    return absl::OkStatus();
  }

 protected:
  // A fused node computes float32 only (its epilogue is native float code); other types run the
  // nodes it replaced. A blocked one computes float32 only.
  bool UsesDnnl(DataType type) const override {
    return type == DataType::kFloat32 ||
           (spec_ == nullptr && !blocked() &&
            (type == DataType::kFloat16 || type == DataType::kBFloat16));
  }

  absl::StatusOr<std::unique_ptr<PreparedOp>> Prepare(
      DataType type, absl::Span<const Shape* const> shapes) const override {
    LS_ASSIGN_OR_RETURN(const Shape x, PlainInput(*shapes[0]));
    const Shape& w = *shapes[1];
    reference::Window window;
    LS_ASSIGN_OR_RETURN(Shape out, reference::ConvShapes(x, w, shapes[2], attrs_, group_, &window));
    if (blocked_dst_ && (out.rank() != 4 || out[1] % ChainChannelMultiple() != 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("a blocked Conv result must be [N, C, H, W] with C a multiple of ",
                       ChainChannelMultiple(), ", got ", out.ToString()));
    }
    auto prepared = std::make_unique<PreparedOp>();
    prepared->output_shape = blocked_dst_ ? ChainShape(out) : out;
    if (out.NumElements() == 0) {
      prepared->mode = PreparedOp::Mode::kEmpty;
      return prepared;
    }
    LS_ASSIGN_OR_RETURN(const bool fused, PrepareEpilogue(shapes, *prepared));
    if (!fused) {
      if (blocked()) return absl::InvalidArgumentError("a blocked Conv's post-op grows its result");
      prepared->mode = PreparedOp::Mode::kReference;
      return prepared;
    }
    // No input channels (the output is the bias) or more than 3 spatial dims: not for oneDNN.
    if (x.NumElements() == 0 || w.NumElements() == 0 || window.rank > 3) {
      if (blocked())
        return absl::InvalidArgumentError("a blocked Conv cannot run on the reference");
      prepared->mode = PreparedOp::Mode::kReference;
      return prepared;
    }
    const ConvDescs descs = Descs(type, x, w, out, window, shapes[2] != nullptr);
    const Tensor* constant = constant_weights_ != nullptr && constant_weights_->dtype() == type &&
                                     constant_weights_->shape() == w
                                 ? constant_weights_
                                 : nullptr;
    if (constant != nullptr && !RunsPlainGemm(descs, window) &&
        PrepareOwnLayouts(descs, *constant, *prepared)) {
      return prepared;
    }
    if (blocked()) {
      return absl::InvalidArgumentError("a blocked Conv needs its constant float32 weights");
    }
    const dnnl::convolution_forward::primitive_desc pd =
        MakePd(descs, descs.src, descs.weights, descs.dst);
    prepared->primitive = dnnl::convolution_forward(pd);
    prepared->bindings = {{DNNL_ARG_SRC, BufferSource::kInput0, descs.src},
                          {DNNL_ARG_WEIGHTS, BufferSource::kInput1, descs.weights},
                          {DNNL_ARG_DST, BufferSource::kOutput, descs.dst}};
    if (descs.has_bias) {
      prepared->bindings.push_back({DNNL_ARG_BIAS, BufferSource::kInput2, descs.bias});
    }
    AddScratchpad(pd, *prepared);
    return prepared;
  }

  // Multiply-adds: the output's elements times the inputs each one reads (strides included: a
  // strided Conv, like Silero VAD's STFT, computes a fraction of its input's positions).
  int64_t Work(absl::Span<const Shape* const> shapes) const override {
    if (shapes[0] == nullptr || shapes[1] == nullptr || shapes[1]->rank() < 2) {
      return DnnlKernel::Work(shapes);
    }
    absl::StatusOr<Shape> x = PlainInput(*shapes[0]);
    if (!x.ok()) return DnnlKernel::Work(shapes);  // Prepare reports the error
    reference::Window window;
    absl::StatusOr<Shape> out =
        reference::ConvShapes(*x, *shapes[1], shapes[2], attrs_, group_, &window);
    if (!out.ok()) return DnnlKernel::Work(shapes);
    const Shape& w = *shapes[1];
    double work = static_cast<double>(out->NumElements());
    for (int i = 1; i < w.rank(); ++i) work *= static_cast<double>(w.dims()[i]);
    return work > 9e18 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(work);
  }

  absl::Status RunReference(KernelContext& ctx) const override {
    if (blocked()) {
      return absl::InvalidArgumentError(
          absl::StrCat("a Conv in a blocked chain computes float32 only, got ",
                       DataTypeName(ctx.input(0).dtype())));
    }
    return reference::Conv(ctx.input(0), ctx.input(1), ctx.has_input(2) ? &ctx.input(2) : nullptr,
                           attrs_, group_, ctx.output_value(0).mutable_tensor());
  }

 private:
  // The memory descriptors of one signature: oneDNN's dims (a 1-D depthwise Conv as 2-D), the
  // layouts input 0 and the result have (plain, or blocked in a chain), the window.
  struct ConvDescs {
    dnnl::memory::desc src, weights, dst, bias;
    bool has_bias = false;
    DnnlWindow win;
  };

  bool blocked() const { return blocked_src_ || blocked_dst_; }

  // Input 0 as the plain shape it stands for.
  absl::StatusOr<Shape> PlainInput(const Shape& x) const {
    if (!blocked_src_) return x;
    return PlainOfChain(x);
  }

  // A fused node's epilogue over the result; false when a post-op operand would grow it (then
  // the nodes run unfused).
  absl::StatusOr<bool> PrepareEpilogue(absl::Span<const Shape* const> shapes,
                                       PreparedOp& prepared) const {
    if (spec_ == nullptr) return true;
    std::vector<const Shape*> operand_shapes = {&prepared.output_shape};
    for (int input : epilogue_inputs_) operand_shapes.push_back(shapes[input]);
    LS_ASSIGN_OR_RETURN(native::ElementwiseChain::Prepared epilogue,
                        epilogue_.Prepare(operand_shapes));
    if (epilogue.output != prepared.output_shape) return false;
    prepared.epilogue_prepared = std::move(epilogue);
    prepared.epilogue = &epilogue_;
    prepared.epilogue_inputs.assign(epilogue_inputs_.begin(), epilogue_inputs_.end());
    return true;
  }

  ConvDescs Descs(DataType type, const Shape& x, const Shape& w, const Shape& out,
                  const reference::Window& window, bool has_bias) const {
    Shape::Dims x_dims(x.dims().begin(), x.dims().end());
    Shape::Dims out_dims(out.dims().begin(), out.dims().end());
    // ONNX's [M, C / group, k...] is, byte for byte, oneDNN's plain [group, M / group, C / group,
    // k...].
    Shape::Dims w_dims(w.dims().begin(), w.dims().end());
    if (group_ > 1) {
      w_dims[0] /= group_;
      w_dims.insert(w_dims.begin(), group_);
    }
    ConvDescs d;
    d.win = ToDnnlWindow(window);
    // A 1-D depthwise Conv (one input and one output channel per group) runs as 2-D with a height
    // of 1, the same bytes: oneDNN has a JIT depthwise kernel for 2-D only and runs 1-D ones as
    // a GEMM per group (Silero VAD v4's 258 channels x 24, kernel 5: 74 us -> 3 us).
    if (window.rank == 1 && group_ > 1 && group_ == x[1] && w[0] == group_) {
      x_dims.insert(x_dims.end() - 1, 1);
      out_dims.insert(out_dims.end() - 1, 1);
      w_dims.insert(w_dims.end() - 1, 1);
      d.win.strides.insert(d.win.strides.begin(), 1);
      d.win.kernel.insert(d.win.kernel.begin(), 1);
      d.win.dilations.insert(d.win.dilations.begin(), 0);
      d.win.padding_l.insert(d.win.padding_l.begin(), 0);
      d.win.padding_r.insert(d.win.padding_r.begin(), 0);
    }
    d.src = blocked_src_ ? ChainDesc(x) : Desc(x_dims, type);
    d.dst = blocked_dst_ ? ChainDesc(out) : Desc(out_dims, type);
    d.weights = Desc(w_dims, type);
    d.has_bias = has_bias;
    if (has_bias) d.bias = Desc({w[0]}, type);
    return d;
  }

  dnnl::convolution_forward::primitive_desc MakePd(const ConvDescs& d,
                                                   const dnnl::memory::desc& src,
                                                   const dnnl::memory::desc& weights,
                                                   const dnnl::memory::desc& dst) const {
    return dnnl::convolution_forward::primitive_desc(
        dnnl::convolution_forward::desc(
            dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src, weights,
            d.bias, dst, d.win.strides, d.win.dilations, d.win.padding_l, d.win.padding_r),
        UserScratchpadAttr(), CpuEngine());
  }

  // A pointwise Conv (1x1 kernel, stride 1, no padding, one group) on plain NCHW is one GEMM
  // per image, W [M, C] x X [C, spatial], which oneDNN's gemm path runs in place; the blocked
  // kernels would add two reorders of the whole tensor, which cost more than they save
  // (PP-OCR's classifier: 48 reorders of ~60 us, half its time). Unless oneDNN has only its
  // reference implementation for the plain layouts (a single output channel, ...), or the Conv
  // is in a blocked chain (no reorder to add).
  bool RunsPlainGemm(const ConvDescs& d, const reference::Window& window) const {
    if (blocked() || group_ != 1) return false;
    for (int i = 0; i < window.rank; ++i) {
      if (window.kernel[i] != 1 || window.strides[i] != 1 || window.pads_begin[i] != 0 ||
          window.pads_end[i] != 0) {
        return false;
      }
    }
    return !IsDnnlReferenceImpl(MakePd(d, d.src, d.weights, d.dst).impl_info_str());
  }

  // Constant weights: let oneDNN choose every layout (blocked nChw16c / nChw8c: its direct or
  // brgemm kernels instead of the im2col + gemm that plain layouts get). The weights are
  // reordered once, here; a plain source or result is reordered around each execute, which costs
  // far less than it saves: 1x16x32x32 3x3 110 us -> 52 us with both reorders (AVX-512),
  // 159 -> 61 us (AVX2); 8x32x16x16 675 -> 338 us. In a blocked chain the blocked side is bound
  // as it is. False when a reorder would need a scratchpad.
  bool PrepareOwnLayouts(const ConvDescs& d, const Tensor& constant, PreparedOp& prepared) const {
    const auto any = [](const dnnl::memory::desc& m) {
      return dnnl::memory::desc(m.dims(), m.data_type(), dnnl::memory::format_tag::any);
    };
    const dnnl::convolution_forward::primitive_desc pd =
        MakePd(d, any(d.src), any(d.weights), any(d.dst));
    const bool staged_src = pd.src_desc() != d.src;
    const bool staged_dst = pd.dst_desc() != d.dst;
    if ((staged_src || staged_dst) &&
        !AddStaging(d.src, pd.src_desc(), pd.dst_desc(), d.dst, prepared)) {
      return false;
    }
    prepared.primitive = dnnl::convolution_forward(pd);
    const bool packed = pd.weights_desc() != d.weights;
    if (packed) PackConstant(constant, d.weights, pd.weights_desc(), prepared);
    prepared.bindings = {
        {DNNL_ARG_SRC, staged_src ? BufferSource::kStagedSrc : BufferSource::kInput0,
         pd.src_desc()},
        {DNNL_ARG_WEIGHTS, packed ? BufferSource::kPacked : BufferSource::kInput1,
         pd.weights_desc()},
        {DNNL_ARG_DST, staged_dst ? BufferSource::kStagedDst : BufferSource::kOutput,
         pd.dst_desc()}};
    if (d.has_bias) prepared.bindings.push_back({DNNL_ARG_BIAS, BufferSource::kInput2, d.bias});
    AddScratchpad(pd, prepared);
    return true;
  }

  const reference::WindowAttrs attrs_;
  const int64_t group_;
  const Tensor* const constant_weights_;          // owned by the model's graphs; may be null
  const std::shared_ptr<const FusionSpec> spec_;  // null for a plain Conv
  const bool blocked_src_;                        // input 0 is a blocked [N, C / b, H, W, b] tensor
  const bool blocked_dst_;                        // the result is written blocked
  native::ElementwiseChain epilogue_;
  std::vector<int> epilogue_inputs_;  // node input per epilogue operand 1, 2, ...
};

// ConvTranspose on oneDNN's deconvolution, with constant weights reordered once into the
// primitive's layout. Windows oneDNN cannot express (an output extended past what the input
// reaches, by output_padding or output_shape: a negative padding), more than 3 spatial dims and
// empty inputs run on the reference kernel.
class ConvTransposeKernel final : public DnnlKernel {
 public:
  // Output channels per group up to which constant weights run on the plain layouts.
  static constexpr int64_t kFewChannels = 4;

  ConvTransposeKernel(reference::ConvTransposeAttrs attrs, const Tensor* constant_weights)
      : DnnlKernel(/*num_inputs=*/3, /*required_inputs=*/2),
        attrs_(std::move(attrs)),
        constant_weights_(constant_weights) {}

 protected:
  absl::StatusOr<std::unique_ptr<PreparedOp>> Prepare(
      DataType type, absl::Span<const Shape* const> shapes) const override {
    const Shape& x = *shapes[0];
    const Shape& w = *shapes[1];
    reference::Window window;
    LS_ASSIGN_OR_RETURN(Shape out,
                        reference::ConvTransposeShapes(x, w, shapes[2], attrs_, &window));
    auto prepared = std::make_unique<PreparedOp>();
    prepared->output_shape = out;
    if (out.NumElements() == 0) {
      prepared->mode = PreparedOp::Mode::kEmpty;
      return prepared;
    }
    bool expressible = x.NumElements() > 0 && w.NumElements() > 0 && window.rank <= 3;
    for (int i = 0; i < window.rank; ++i) {
      expressible = expressible && window.pads_begin[i] >= 0 && window.pads_end[i] >= 0;
    }
    if (!expressible) {
      prepared->mode = PreparedOp::Mode::kReference;
      return prepared;
    }
    // oneDNN 2.6 adds a deconvolution's bias in a slow pass of its own (24 -> 24 channels at
    // 240x320: 5 ms without, 36-106 ms with, one thread): a float32 bias is added here instead,
    // per output plane, in Finish.
    const bool native_bias = shapes[2] != nullptr && type == DataType::kFloat32;
    prepared->native_dims[0] = native_bias ? 1 : 0;
    DeconvDescs d;
    d.src = Desc(x.dims(), type);
    d.dst = Desc(out.dims(), type);
    d.weights = WeightsDesc(w, type);
    d.has_bias = shapes[2] != nullptr && !native_bias;
    if (d.has_bias) d.bias = Desc({out[1]}, type);
    d.win = ToDnnlWindow(window);
    const Tensor* constant = constant_weights_ != nullptr && constant_weights_->dtype() == type &&
                                     constant_weights_->shape() == w
                                 ? constant_weights_
                                 : nullptr;
    if (constant != nullptr && PrepareOwnLayouts(d, *constant, w[1], *prepared)) return prepared;
    BindPrimitive(MakePd(d, d.src, d.weights, d.dst), d, BufferSource::kInput0,
                  BufferSource::kInput1, BufferSource::kOutput, *prepared);
    return prepared;
  }

  // The bias Prepare left out of the primitive, added per output plane.
  absl::Status Finish(const PreparedOp& op, KernelContext& ctx) const override {
    if (op.native_dims[0] == 0) return absl::OkStatus();
    Tensor& out = ctx.output_value(0).mutable_tensor();
    const float* bias = ctx.input(2).data<float>();
    const int64_t channels = op.output_shape[1];
    const int64_t plane = op.output_shape.NumElements(2, op.output_shape.rank());
    float* y = out.mutable_data<float>();
    for (int64_t p = 0; p < op.output_shape[0] * channels; ++p) {
      native::UnaryF32(native::VecUnary::kLinear, y + p * plane, y + p * plane, plane, 1.0f,
                       bias[p % channels]);
    }
    return absl::OkStatus();
  }

  int64_t Work(absl::Span<const Shape* const> shapes) const override {
    // Multiply-adds: every input element through every kernel tap of its group's outputs.
    return shapes[0]->NumElements() * shapes[1]->NumElements(1, shapes[1]->rank());
  }

  absl::Status RunReference(KernelContext& ctx) const override {
    return reference::ConvTranspose(ctx.input(0), ctx.input(1),
                                    ctx.has_input(2) ? &ctx.input(2) : nullptr, attrs_,
                                    ctx.output_value(0).mutable_tensor());
  }

 private:
  struct DeconvDescs {
    dnnl::memory::desc src, weights, dst, bias;
    bool has_bias = false;
    DnnlWindow win;
  };

  // ONNX's [C, M / group, k...] as oneDNN's (group,) output, input, k... dims, by strides.
  dnnl::memory::desc WeightsDesc(const Shape& w, DataType type) const {
    const int64_t group = attrs_.group;
    const int64_t c_group = w[0] / group, m_group = w[1];
    const int64_t k_size = w.NumElements(2, w.rank());
    dnnl::memory::dims dims, strides;
    if (group > 1) {
      dims = {group, m_group, c_group};
      strides = {c_group * m_group * k_size, k_size, m_group * k_size};
    } else {
      dims = {m_group, c_group};
      strides = {k_size, m_group * k_size};
    }
    int64_t inner = k_size;
    for (int i = 2; i < w.rank(); ++i) {
      dims.push_back(w[i]);
      inner /= w[i];
      strides.push_back(inner);
    }
    return dnnl::memory::desc(dims, ToDnnl(type), strides);
  }

  static dnnl::deconvolution_forward::primitive_desc MakePd(const DeconvDescs& d,
                                                            const dnnl::memory::desc& src,
                                                            const dnnl::memory::desc& weights,
                                                            const dnnl::memory::desc& dst) {
    return dnnl::deconvolution_forward::primitive_desc(
        dnnl::deconvolution_forward::desc(
            dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct, src, weights,
            d.bias, dst, d.win.strides, d.win.dilations, d.win.padding_l, d.win.padding_r),
        UserScratchpadAttr(), CpuEngine());
  }

  // The primitive of `pd`, its source, weights and result bound from these buffers.
  static void BindPrimitive(const dnnl::deconvolution_forward::primitive_desc& pd,
                            const DeconvDescs& d, BufferSource src, BufferSource weights,
                            BufferSource dst, PreparedOp& prepared) {
    prepared.primitive = dnnl::deconvolution_forward(pd);
    prepared.bindings = {{DNNL_ARG_SRC, src, pd.src_desc()},
                         {DNNL_ARG_WEIGHTS, weights, pd.weights_desc()},
                         {DNNL_ARG_DST, dst, pd.dst_desc()}};
    if (d.has_bias) prepared.bindings.push_back({DNNL_ARG_BIAS, BufferSource::kInput2, d.bias});
    AddScratchpad(pd, prepared);
  }

  // Constant weights: packed into the layout oneDNN prefers, and every other layout its choice
  // too (its blocked jit kernels; on plain source and destination oneDNN 2.6 often has only its
  // reference deconvolution, ref:any), with the source and result reordered around each
  // execute. Except for a few output channels per group (`m_group`): the blocked kernels pad
  // them to 16, and oneDNN's gemm path on the plain layouts is far faster (PP-OCRv4's last
  // ConvTranspose, 24 -> 1 channels at 480x640: 31 ms blocked, 1.2 ms gemm; at 24 -> 24 channels
  // blocked wins, 2.6 ms against 22 ms). False when neither applies.
  bool PrepareOwnLayouts(const DeconvDescs& d, const Tensor& constant, int64_t m_group,
                         PreparedOp& prepared) const {
    const auto any = [](const dnnl::memory::desc& m) {
      return dnnl::memory::desc(m.dims(), m.data_type(), dnnl::memory::format_tag::any);
    };
    if (m_group <= kFewChannels) {
      const dnnl::deconvolution_forward::primitive_desc pd =
          MakePd(d, d.src, any(d.weights), d.dst);
      if (!IsDnnlReferenceImpl(pd.impl_info_str())) {
        PackConstant(constant, d.weights, pd.weights_desc(), prepared);
        BindPrimitive(pd, d, BufferSource::kInput0, BufferSource::kPacked, BufferSource::kOutput,
                      prepared);
        return true;
      }
    }
    const dnnl::deconvolution_forward::primitive_desc pd =
        MakePd(d, any(d.src), any(d.weights), any(d.dst));
    const bool staged_src = pd.src_desc() != d.src;
    const bool staged_dst = pd.dst_desc() != d.dst;
    if ((staged_src || staged_dst) &&
        !AddStaging(d.src, pd.src_desc(), pd.dst_desc(), d.dst, prepared)) {
      return false;
    }
    PackConstant(constant, d.weights, pd.weights_desc(), prepared);
    BindPrimitive(pd, d, staged_src ? BufferSource::kStagedSrc : BufferSource::kInput0,
                  BufferSource::kPacked,
                  staged_dst ? BufferSource::kStagedDst : BufferSource::kOutput, prepared);
    return true;
  }

  const reference::ConvTransposeAttrs attrs_;
  const Tensor* const constant_weights_;  // owned by the model's graphs; may be null
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlConvTransposeKernel(const KernelInit& init) {
  const Node& node = init.node();
  if (init.num_inputs() < 2 || init.num_inputs() > 3 || node.outputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("expected 2 or 3 inputs and 1 output, got ",
                                                   init.num_inputs(), " and ",
                                                   node.outputs.size()));
  }
  reference::ConvTransposeAttrs attrs;
  LS_ASSIGN_OR_RETURN(attrs.window, ParseWindowAttrs(node, /*require_kernel_shape=*/false));
  LS_ASSIGN_OR_RETURN(attrs.group, node.GetInt("group", 1));
  if (attrs.group < 1 || attrs.group > reference::kMaxWindowAttr) {
    return absl::InvalidArgumentError(absl::StrCat("group ", attrs.group, " must be positive"));
  }
  LS_ASSIGN_OR_RETURN(attrs.output_padding, node.GetInts("output_padding", std::vector<int64_t>{}));
  LS_ASSIGN_OR_RETURN(attrs.output_shape, node.GetInts("output_shape", std::vector<int64_t>{}));
  auto kernel = std::make_unique<ConvTransposeKernel>(std::move(attrs), init.constant_input(1));
  kernel->WarmUp(init);
  return kernel;
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlConvKernel(const KernelInit& init) {
  const Node& node = init.node();
  const int max_inputs = node.fusion != nullptr ? DnnlKernel::kMaxInputs : 3;
  if (init.num_inputs() < 2 || init.num_inputs() > max_inputs || node.outputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("expected 2 to ", max_inputs,
                                                   " inputs and 1 output, got ", init.num_inputs(),
                                                   " and ", node.outputs.size()));
  }
  LS_ASSIGN_OR_RETURN(reference::WindowAttrs attrs,
                      ParseWindowAttrs(node, /*require_kernel_shape=*/false));
  LS_ASSIGN_OR_RETURN(const int64_t group, node.GetInt("group", 1));
  if (group < 1 || group > reference::kMaxWindowAttr) {
    return absl::InvalidArgumentError(absl::StrCat("group ", group, " must be positive"));
  }
  // Input 2 (B) is always a slot, present or not: Prepare reads shapes[2].
  const int num_inputs = std::max(3, init.num_inputs());
  LS_ASSIGN_OR_RETURN(const int64_t blocked_src, node.GetInt("_blocked_src", 0));
  LS_ASSIGN_OR_RETURN(const int64_t blocked_dst, node.GetInt("_blocked_dst", 0));
  auto kernel =
      std::make_unique<ConvKernel>(num_inputs, std::move(attrs), group, init.constant_input(1),
                                   node.fusion, blocked_src != 0, blocked_dst != 0);
  LS_RETURN_IF_ERROR(kernel->Init(num_inputs));
  if (node.fusion != nullptr && node.fusion->unfused != nullptr) {
    LS_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> unfused,
                        init.CompileUnfused(node.fusion->unfused));
    kernel->SetUnfused(std::move(unfused));
  }
  kernel->WarmUp(init);
  return kernel;
}

}  // namespace loopserve::engine
