// oneDNN MatMul (numpy semantics) and Gemm, both on the matmul primitive.

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/dnnl/dnnl_kernel.h"
#include "engine/kernels/dnnl/dnnl_util.h"
#include "engine/kernels/dnnl/kernels.h"
#include "engine/runtime/plan.h"

namespace loopserve::engine {
namespace {

dnnl::memory::dims Concat(absl::Span<const int64_t> batch, int64_t rows, int64_t cols) {
  dnnl::memory::dims dims(batch.begin(), batch.end());
  dims.push_back(rows);
  dims.push_back(cols);
  return dims;
}

// The weights constant when this signature's weights are it (same type and shape), else null.
const Tensor* ConstantWeights(const Tensor* constant, DataType type, const Shape& shape) {
  if (constant == nullptr || constant->dtype() != type || constant->shape() != shape)
    return nullptr;
  return constant;
}

// `desc`'s dims and type with the layout left to the primitive.
dnnl::memory::desc AnyLayout(const dnnl::memory::desc& desc) {
  return dnnl::memory::desc(desc.dims(), desc.data_type(), dnnl::memory::format_tag::any);
}

// Weights in oneDNN's preferred layout for `pd` when `constant` (non-null) is the weights input:
// binds them as BufferSource::kPacked (reordered once, here) and returns true. A plain-layout
// weights matrix makes the brgemm matmul repack it on every execute (for a 1x256 * 256x1024
// product that doubled the time: it reads and writes the whole matrix again).
bool BindPackedWeights(const Tensor* constant, const dnnl::memory::desc& plain,
                       const dnnl::matmul::primitive_desc& pd, PreparedOp& op) {
  if (constant == nullptr) return false;
  const dnnl::memory::desc packed = pd.weights_desc();
  if (packed == plain) return false;
  DnnlKernel::PackConstant(*constant, plain, packed, op);
  return true;
}

// The activation a fusion pass attached ("Tanh", "Relu", "Sigmoid" or empty for none).
absl::StatusOr<std::optional<reference::UnaryOp>> ParseActivation(const std::string& name) {
  if (name.empty()) return std::optional<reference::UnaryOp>();
  if (name == "Tanh") return std::optional<reference::UnaryOp>(reference::UnaryOp::kTanh);
  if (name == "Relu") return std::optional<reference::UnaryOp>(reference::UnaryOp::kRelu);
  if (name == "Sigmoid") return std::optional<reference::UnaryOp>(reference::UnaryOp::kSigmoid);
  return absl::InvalidArgumentError(absl::StrCat("unknown fused activation '", name, "'"));
}

dnnl::algorithm FusedEltwiseAlgorithm(reference::UnaryOp op) {
  switch (op) {
    case reference::UnaryOp::kRelu:
      return dnnl::algorithm::eltwise_relu;
    case reference::UnaryOp::kSigmoid:
      return dnnl::algorithm::eltwise_logistic;
    default:
      return dnnl::algorithm::eltwise_tanh;
  }
}

native::PackedGemv::Activation GemvActivation(std::optional<reference::UnaryOp> op) {
  if (!op.has_value()) return native::PackedGemv::Activation::kNone;
  switch (*op) {
    case reference::UnaryOp::kRelu:
      return native::PackedGemv::Activation::kRelu;
    case reference::UnaryOp::kSigmoid:
      return native::PackedGemv::Activation::kSigmoid;
    default:
      return native::PackedGemv::Activation::kTanh;
  }
}

// The packed one-row kernel for a float32 product of one row by constant 2-D weights, when the CPU
// has it and the weights are small enough to be worth no more threads; else null.
std::shared_ptr<const native::PackedGemv> MaybePackedGemv(
    DataType type, const reference::MatMulDims& dims, const Tensor* constant,
    native::PackedGemv::Activation activation) {
  if (type != DataType::kFloat32 || constant == nullptr || constant->rank() != 2 ||
      dims.batch.NumElements() * dims.m != 1 || dims.k == 0 ||
      dims.k * dims.n > native::PackedGemv::kMaxElements || !native::PackedGemv::Available()) {
    return nullptr;
  }
  return std::make_shared<const native::PackedGemv>(*constant, activation);
}

class MatMulKernel final : public DnnlKernel {
 public:
  explicit MatMulKernel(const Tensor* constant_weights)
      : DnnlKernel(/*num_inputs=*/2, /*required_inputs=*/2), constant_weights_(constant_weights) {}

 protected:
  absl::StatusOr<std::unique_ptr<PreparedOp>> Prepare(
      DataType type, absl::Span<const Shape* const> shapes) const override {
    LS_ASSIGN_OR_RETURN(const reference::MatMulDims dims,
                        reference::MatMulShapes(*shapes[0], *shapes[1]));
    auto prepared = std::make_unique<PreparedOp>();
    prepared->output_shape = dims.output;
    if (dims.output.NumElements() == 0) {
      prepared->mode = PreparedOp::Mode::kEmpty;
      return prepared;
    }
    if (dims.k == 0) {
      prepared->mode = PreparedOp::Mode::kZeroFill;
      return prepared;
    }
    if (dims.batch.rank() + 2 > DNNL_MAX_NDIMS) {
      prepared->mode = PreparedOp::Mode::kReference;
      return prepared;
    }
    const Tensor* constant = ConstantWeights(constant_weights_, type, *shapes[1]);
    if (auto gemv = MaybePackedGemv(type, dims, constant, native::PackedGemv::Activation::kNone)) {
      prepared->mode = PreparedOp::Mode::kPackedGemv;
      prepared->gemv = std::move(gemv);
      return prepared;
    }
    // A 1-D operand is already laid out as the promoted [1, k] or [k, 1] matrix, and the result
    // as the [..., m, n] one.
    const dnnl::memory::desc src = Desc(Concat(dims.a_batch.dims(), dims.m, dims.k), type);
    const dnnl::memory::desc weights = Desc(Concat(dims.b_batch.dims(), dims.k, dims.n), type);
    const dnnl::memory::desc dst = Desc(Concat(dims.batch.dims(), dims.m, dims.n), type);
    const dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(src, constant != nullptr ? AnyLayout(weights) : weights, dst),
        UserScratchpadAttr(), CpuEngine());
    prepared->primitive = dnnl::matmul(pd);
    const bool packed = BindPackedWeights(constant, weights, pd, *prepared);
    prepared->bindings = {{DNNL_ARG_SRC, BufferSource::kInput0, src},
                          {DNNL_ARG_WEIGHTS, packed ? BufferSource::kPacked : BufferSource::kInput1,
                           packed ? pd.weights_desc() : weights},
                          {DNNL_ARG_DST, BufferSource::kOutput, dst}};
    AddScratchpad(pd, *prepared);
    return prepared;
  }

  // Multiply-adds of the product.
  int64_t Work(absl::Span<const Shape* const> shapes) const override {
    absl::StatusOr<reference::MatMulDims> dims = reference::MatMulShapes(*shapes[0], *shapes[1]);
    if (!dims.ok()) return 0;
    return dims->batch.NumElements() * dims->m * dims->n * dims->k;
  }

  absl::Status RunReference(KernelContext& ctx) const override {
    return reference::MatMul(ctx.input(0), ctx.input(1), ctx.output_value(0).mutable_tensor());
  }

 private:
  const Tensor* const constant_weights_;  // owned by the model's graphs; may be null
};

// MatMul + Add(bias) [+ Tanh | Relu | Sigmoid] as one matmul primitive: the bias is the
// primitive's bias argument (broadcast over rows) and the activation an eltwise post-op. Made by
// the compiler's fusion pass (kFusedMatMulOp). A bias that would change the output shape, 1-D
// operands, or a combination oneDNN does not implement run the three ops on the reference
// kernels, so results never depend on whether fusion applied.
class FusedMatMulKernel final : public DnnlKernel {
 public:
  FusedMatMulKernel(std::optional<reference::UnaryOp> activation, const Tensor* constant_weights)
      : DnnlKernel(/*num_inputs=*/3, /*required_inputs=*/3),
        activation_(activation),
        constant_weights_(constant_weights) {}

 protected:
  absl::StatusOr<std::unique_ptr<PreparedOp>> Prepare(
      DataType type, absl::Span<const Shape* const> shapes) const override {
    LS_ASSIGN_OR_RETURN(const reference::MatMulDims dims,
                        reference::MatMulShapes(*shapes[0], *shapes[1]));
    const Shape& bias = *shapes[2];
    auto prepared = std::make_unique<PreparedOp>();
    prepared->output_shape = dims.output;
    const int rank = dims.batch.rank() + 2;
    // The bias must be one row added to every row of the product ([n], [1, n], ...): other
    // broadcasts would either grow the result or make oneDNN pick its slow reference matmul.
    bool bias_fits = shapes[0]->rank() >= 2 && shapes[1]->rank() >= 2 && bias.rank() >= 1 &&
                     bias.rank() <= rank && rank <= DNNL_MAX_NDIMS && dims.k > 0 &&
                     dims.output.NumElements() > 0 && bias[bias.rank() - 1] == dims.n &&
                     bias.NumElements() == dims.n;
    dnnl::memory::dims bias_dims(rank, 1);
    bias_dims[rank - 1] = dims.n;
    if (!bias_fits) {
      prepared->mode = PreparedOp::Mode::kReference;
      return prepared;
    }
    const Tensor* constant = ConstantWeights(constant_weights_, type, *shapes[1]);
    if (auto gemv = MaybePackedGemv(type, dims, constant, GemvActivation(activation_))) {
      prepared->mode = PreparedOp::Mode::kPackedGemv;
      prepared->gemv = std::move(gemv);
      prepared->gemv_bias_input = 2;
      return prepared;
    }
    const dnnl::memory::desc src = Desc(Concat(dims.a_batch.dims(), dims.m, dims.k), type);
    const dnnl::memory::desc weights = Desc(Concat(dims.b_batch.dims(), dims.k, dims.n), type);
    const dnnl::memory::desc bias_desc = Desc(bias_dims, type);
    const dnnl::memory::desc dst = Desc(Concat(dims.batch.dims(), dims.m, dims.n), type);
    dnnl::primitive_attr attr = UserScratchpadAttr();
    if (activation_.has_value()) {
      dnnl::post_ops post_ops;
      post_ops.append_eltwise(1.0f, FusedEltwiseAlgorithm(*activation_), 0.0f, 0.0f);
      attr.set_post_ops(post_ops);
    }
    const dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(src, constant != nullptr ? AnyLayout(weights) : weights, bias_desc, dst),
        attr, CpuEngine());
    if (std::string(pd.impl_info_str()).rfind("ref", 0) == 0) {
      prepared->mode = PreparedOp::Mode::kReference;  // no faster than the reference kernels
      return prepared;
    }
    prepared->primitive = dnnl::matmul(pd);
    const bool packed = BindPackedWeights(constant, weights, pd, *prepared);
    prepared->bindings = {{DNNL_ARG_SRC, BufferSource::kInput0, src},
                          {DNNL_ARG_WEIGHTS, packed ? BufferSource::kPacked : BufferSource::kInput1,
                           packed ? pd.weights_desc() : weights},
                          {DNNL_ARG_BIAS, BufferSource::kInput2, bias_desc},
                          {DNNL_ARG_DST, BufferSource::kOutput, dst}};
    AddScratchpad(pd, *prepared);
    return prepared;
  }

  int64_t Work(absl::Span<const Shape* const> shapes) const override {
    absl::StatusOr<reference::MatMulDims> dims = reference::MatMulShapes(*shapes[0], *shapes[1]);
    if (!dims.ok()) return 0;
    return dims->batch.NumElements() * dims->m * dims->n * dims->k;
  }

  // The unfused chain on the reference kernels: MatMul into the output, then Add and the
  // activation in place when the bias does not grow the result (no temporaries).
  absl::Status RunReference(KernelContext& ctx) const override {
    Tensor& out = ctx.output_value(0).mutable_tensor();
    LS_RETURN_IF_ERROR(reference::MatMul(ctx.input(0), ctx.input(1), out));
    const Tensor& bias = ctx.input(2);
    LS_ASSIGN_OR_RETURN(const Shape shape, BroadcastShapes(out.shape(), bias.shape()));
    if (shape == out.shape()) {
      LS_RETURN_IF_ERROR(reference::Binary(reference::BinaryOp::kAdd, out, bias, out));
    } else {
      Tensor product;
      product.CopyFrom(out);
      LS_RETURN_IF_ERROR(reference::Binary(reference::BinaryOp::kAdd, product, bias, out));
    }
    if (activation_.has_value()) LS_RETURN_IF_ERROR(reference::Unary(*activation_, out, out));
    return absl::OkStatus();
  }

 private:
  const std::optional<reference::UnaryOp> activation_;
  const Tensor* const constant_weights_;  // owned by the model's graphs; may be null
};

// Gemm: Y = alpha * op(A) op(B) + beta * C [then Tanh | Relu | Sigmoid when the compiler fused
// the activation that reads Y: the internal attribute "_activation"].
class GemmKernel final : public DnnlKernel {
 public:
  GemmKernel(const reference::GemmAttrs& attrs, int required_inputs,
             std::optional<reference::UnaryOp> activation, const Tensor* constant_b)
      : DnnlKernel(/*num_inputs=*/3, required_inputs),
        attrs_(attrs),
        activation_(activation),
        constant_b_(constant_b) {}

 protected:
  absl::StatusOr<std::unique_ptr<PreparedOp>> Prepare(
      DataType type, absl::Span<const Shape* const> shapes) const override {
    LS_ASSIGN_OR_RETURN(const reference::GemmDims dims,
                        reference::GemmShapes(*shapes[0], *shapes[1], shapes[2], attrs_));
    auto prepared = std::make_unique<PreparedOp>();
    prepared->output_shape = Shape{dims.m, dims.n};
    if (dims.m == 0 || dims.n == 0) {
      prepared->mode = PreparedOp::Mode::kEmpty;
      return prepared;
    }
    if (dims.k == 0) {  // the result is beta * C (or zeros): nothing for oneDNN to do
      prepared->mode = PreparedOp::Mode::kReference;
      return prepared;
    }
    const Tensor* constant = ConstantWeights(constant_b_, type, *shapes[1]);
    if (std::shared_ptr<const native::PackedGemv> gemv = MaybeGemv(type, dims, shapes, constant)) {
      prepared->mode = PreparedOp::Mode::kPackedGemv;
      prepared->gemv = std::move(gemv);
      prepared->gemv_bias_input = shapes[2] != nullptr && attrs_.beta != 0.0f ? 2 : -1;
      return prepared;
    }
    const dnnl::memory::desc src = MatrixDesc(dims.m, dims.k, attrs_.trans_a, type);
    const dnnl::memory::desc weights = MatrixDesc(dims.k, dims.n, attrs_.trans_b, type);
    const dnnl::memory::desc dst = Desc({dims.m, dims.n}, type);
    dnnl::primitive_attr attr = UserScratchpadAttr();
    if (attrs_.alpha != 1.0f) attr.set_output_scales(0, {attrs_.alpha});
    dnnl::post_ops post_ops;
    if (shapes[2] != nullptr && attrs_.beta != 0.0f) {
      // dst is pre-filled with C broadcast to [M, N]; the sum post-op adds beta times it to
      // alpha * A * B.
      prepared->prefill_input = 2;
      post_ops.append_sum(attrs_.beta);
    }
    if (activation_.has_value()) {
      post_ops.append_eltwise(1.0f, FusedEltwiseAlgorithm(*activation_), 0.0f, 0.0f);
    }
    attr.set_post_ops(post_ops);
    // Constant weights (an initializer, as exporters write nn.Linear) are reordered once into
    // the layout the primitive prefers: a transposed B otherwise sends oneDNN to a kernel that
    // repacks it on every execute (5x slower for a 1x256 * 256x256 product).
    const dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(src, constant != nullptr ? AnyLayout(weights) : weights, dst), attr,
        CpuEngine());
    prepared->primitive = dnnl::matmul(pd);
    const bool packed = BindPackedWeights(constant, weights, pd, *prepared);
    prepared->bindings = {{DNNL_ARG_SRC, BufferSource::kInput0, src},
                          {DNNL_ARG_WEIGHTS, packed ? BufferSource::kPacked : BufferSource::kInput1,
                           packed ? pd.weights_desc() : weights},
                          {DNNL_ARG_DST, BufferSource::kOutput, dst}};
    AddScratchpad(pd, *prepared);
    return prepared;
  }

  int64_t Work(absl::Span<const Shape* const> shapes) const override {
    absl::StatusOr<reference::GemmDims> dims =
        reference::GemmShapes(*shapes[0], *shapes[1], shapes[2], attrs_);
    if (!dims.ok()) return 0;
    return dims->m * dims->n * dims->k;
  }

  absl::Status RunReference(KernelContext& ctx) const override {
    const Tensor* c = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    Tensor& out = ctx.output_value(0).mutable_tensor();
    LS_RETURN_IF_ERROR(reference::Gemm(ctx.input(0), ctx.input(1), c, attrs_, out));
    if (activation_.has_value()) LS_RETURN_IF_ERROR(reference::Unary(*activation_, out, out));
    return absl::OkStatus();
  }

 private:
  // The packed one-row kernel when the product is one row (op(A) is then k contiguous values
  // either way), B is a float constant, and C is absent, ignored (beta 0) or one row of n values
  // added as is (beta 1). alpha and the transpose of B are folded into the packed weights.
  std::shared_ptr<const native::PackedGemv> MaybeGemv(DataType type,
                                                      const reference::GemmDims& dims,
                                                      absl::Span<const Shape* const> shapes,
                                                      const Tensor* constant) const {
    const bool bias_ok = shapes[2] == nullptr || attrs_.beta == 0.0f ||
                         (attrs_.beta == 1.0f && shapes[2]->NumElements() == dims.n &&
                          (shapes[2]->rank() < 2 || (*shapes[2])[shapes[2]->rank() - 1] == dims.n));
    if (type != DataType::kFloat32 || constant == nullptr || dims.m != 1 || !bias_ok ||
        dims.k * dims.n > native::PackedGemv::kMaxElements || !native::PackedGemv::Available()) {
      return nullptr;
    }
    Tensor w(DataType::kFloat32, Shape{dims.k, dims.n});
    const float* b = constant->data<float>();
    float* dst = w.mutable_data<float>();
    for (int64_t i = 0; i < dims.k; ++i) {
      for (int64_t j = 0; j < dims.n; ++j) {
        dst[i * dims.n + j] =
            attrs_.alpha * (attrs_.trans_b ? b[j * dims.k + i] : b[i * dims.n + j]);
      }
    }
    return std::make_shared<const native::PackedGemv>(w, GemvActivation(activation_));
  }

  // A row-major [rows, cols] matrix, or the transpose of a stored [cols, rows] one.
  static dnnl::memory::desc MatrixDesc(int64_t rows, int64_t cols, bool transposed, DataType type) {
    // With a dim of 1 the transpose has the same layout as the plain matrix.
    if (!transposed || rows == 1 || cols == 1) return Desc({rows, cols}, type);
    return dnnl::memory::desc({rows, cols}, ToDnnl(type), {1, rows});
  }

  const reference::GemmAttrs attrs_;
  const std::optional<reference::UnaryOp> activation_;
  const Tensor* const constant_b_;  // owned by the model's graphs; may be null
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlMatMulKernel(const KernelInit& init) {
  if (init.num_inputs() != 2 || init.node().outputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("expected 2 inputs and 1 output, got ",
                                                   init.num_inputs(), " and ",
                                                   init.node().outputs.size()));
  }
  auto kernel = std::make_unique<MatMulKernel>(init.constant_input(1));
  kernel->WarmUp(init);
  return kernel;
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlFusedMatMulKernel(const KernelInit& init) {
  if (init.num_inputs() != 3 || init.node().outputs.size() != 1) {
    return absl::InvalidArgumentError("a fused MatMul takes 3 inputs and has 1 output");
  }
  LS_ASSIGN_OR_RETURN(const std::string activation, init.node().GetString("activation", ""));
  LS_ASSIGN_OR_RETURN(const std::optional<reference::UnaryOp> op, ParseActivation(activation));
  auto kernel = std::make_unique<FusedMatMulKernel>(op, init.constant_input(1));
  kernel->WarmUp(init);
  return kernel;
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlGemmKernel(const KernelInit& init) {
  const Node& node = init.node();
  // C is optional from opset 11 on.
  const int required_inputs = node.opset >= 11 ? 2 : 3;
  if (init.num_inputs() < required_inputs || init.num_inputs() > 3 || node.outputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected ", required_inputs == 2 ? "2 or 3" : "3", " inputs and 1 output, got ",
        init.num_inputs(), " and ", node.outputs.size()));
  }
  if (required_inputs == 3 && !init.has_input(2)) {
    return absl::InvalidArgumentError("input C is required before opset 11");
  }
  reference::GemmAttrs attrs;
  LS_ASSIGN_OR_RETURN(attrs.alpha, node.GetFloat("alpha", 1.0f));
  LS_ASSIGN_OR_RETURN(attrs.beta, node.GetFloat("beta", 1.0f));
  LS_ASSIGN_OR_RETURN(const int64_t trans_a, node.GetInt("transA", 0));
  LS_ASSIGN_OR_RETURN(const int64_t trans_b, node.GetInt("transB", 0));
  attrs.trans_a = trans_a != 0;
  attrs.trans_b = trans_b != 0;
  if (node.opset < 7) {
    LS_ASSIGN_OR_RETURN(const int64_t broadcast, node.GetInt("broadcast", 0));
    attrs.c_exact_shape = broadcast == 0;
  }
  LS_ASSIGN_OR_RETURN(const std::string activation, node.GetString(kFusedActivationAttribute, ""));
  LS_ASSIGN_OR_RETURN(const std::optional<reference::UnaryOp> op, ParseActivation(activation));
  auto kernel = std::make_unique<GemmKernel>(attrs, required_inputs, op, init.constant_input(1));
  kernel->WarmUp(init);
  return kernel;
}

}  // namespace loopserve::engine
