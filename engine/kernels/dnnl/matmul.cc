// oneDNN MatMul (numpy semantics) and Gemm on the matmul primitive (or the packed one-row kernel),
// with the post-ops of fused nodes (engine/ir/fusion.h) applied as a native epilogue.

#include <algorithm>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/dnnl/dnnl_kernel.h"
#include "engine/kernels/dnnl/dnnl_util.h"
#include "engine/kernels/dnnl/kernels.h"
#include "engine/kernels/native/post_ops.h"
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
bool BindPackedWeights(const DnnlKernel& kernel, const Tensor* constant,
                       const dnnl::memory::desc& plain, const dnnl::matmul::primitive_desc& pd,
                       PreparedOp& op) {
  if (constant == nullptr) return false;
  const dnnl::memory::desc packed = pd.weights_desc();
  if (packed == plain) return false;
  kernel.PackConstant(*constant, plain, packed, op);
  return true;
}

// The activation of a fused epilogue that the packed one-row kernel computes itself.
std::optional<native::PackedGemv::Activation> GemvActivation(const PostOp& p) {
  if (p.kind != PostOp::Kind::kUnary) return std::nullopt;
  switch (p.fn) {
    case EltwiseFn::kTanh:
      return native::PackedGemv::Activation::kTanh;
    case EltwiseFn::kRelu:
      return native::PackedGemv::Activation::kRelu;
    case EltwiseFn::kSigmoid:
      return native::PackedGemv::Activation::kSigmoid;
    default:
      return std::nullopt;
  }
}

// `shape` with its last two dims swapped (a transposed operand's logical shape).
Shape SwapLastTwo(const Shape& shape) {
  Shape::Dims dims(shape.dims().begin(), shape.dims().end());
  if (dims.size() >= 2) std::swap(dims[dims.size() - 1], dims[dims.size() - 2]);
  return Shape(std::move(dims));
}

// A row-major [batch..., rows, cols] operand, or one stored as [batch..., cols, rows] and read
// transposed.
dnnl::memory::desc OperandDesc(absl::Span<const int64_t> batch, int64_t rows, int64_t cols,
                               bool transposed, DataType type) {
  const dnnl::memory::dims dims = Concat(batch, rows, cols);
  if (!transposed || rows == 1 || cols == 1) return PlainDesc(Shape(dims), ToDnnl(type));
  dnnl::memory::dims strides(dims.size());
  const int r = static_cast<int>(dims.size());
  strides[r - 2] = 1;
  strides[r - 1] = rows;
  int64_t stride = rows * cols;
  for (int i = r - 3; i >= 0; --i) {
    strides[i] = stride;
    stride *= std::max<int64_t>(dims[i], 1);
  }
  return dnnl::memory::desc(dims, ToDnnl(type), strides);
}

// Adds op.row_parts (DnnlKernel::PrepareRowSplit) to a prepared oneDNN matmul of `rows` x `k`
// row-major source rows (input 0) into a row-major output, created with `attr`: one primitive
// per part row count on the op's own weights binding (packed or not) and bias binding, each
// with its own page-aligned slice of the scratchpad. Leaves op unsplit when the op binds other
// buffers or oneDNN would pick its reference kernel or another weights layout for a part.
void SplitRows(DataType type, int64_t rows, int64_t k, const dnnl::primitive_attr& attr, int parts,
               PreparedOp& op) {
  if (op.staging != nullptr || !op.expansions.empty() || !op.extra_outputs.empty() || k <= 0) {
    return;
  }
  const ArgBinding* weights = nullptr;
  const ArgBinding* bias = nullptr;
  for (const ArgBinding& b : op.bindings) {
    if (b.arg == DNNL_ARG_WEIGHTS) weights = &b;
    if (b.arg == DNNL_ARG_BIAS) bias = &b;
    if (b.arg == DNNL_ARG_SRC && b.source != BufferSource::kInput0) return;
    if (b.arg == DNNL_ARG_DST && b.source != BufferSource::kOutput) return;
  }
  if (weights == nullptr || weights->desc.dims().size() != 2 || weights->desc.dims()[0] != k) {
    return;
  }
  const int64_t n = weights->desc.dims()[1];
  if (op.output_shape.NumElements() != rows * n) return;
  const dnnl::memory::data_type dt = ToDnnl(type);
  const dnnl::memory::desc bias_desc = PlainDesc(Shape{1, n}, dt);
  absl::InlinedVector<PreparedOp::RowPart, 2> row_parts;
  size_t scratchpad = 0;
  size_t part_scratchpad = 0;  // the last created primitive's, rounded to pages
  int64_t first = 0;
  for (int p = 0; p < parts; ++p) {
    PreparedOp::RowPart part;
    part.first_row = first;
    part.rows = rows / parts + (p < rows % parts ? 1 : 0);
    first += part.rows;
    if (!row_parts.empty() && row_parts.back().rows == part.rows) {
      part.primitive = row_parts.back().primitive;
      part.bindings = row_parts.back().bindings;
    } else {
      const dnnl::memory::desc src = PlainDesc(Shape{part.rows, k}, dt);
      const dnnl::memory::desc dst = PlainDesc(Shape{part.rows, n}, dt);
      const dnnl::matmul::primitive_desc pd =
          bias != nullptr
              ? dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, weights->desc, bias_desc, dst),
                                             attr, CpuEngine())
              : dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, weights->desc, dst), attr,
                                             CpuEngine());
      if (std::string(pd.impl_info_str()).rfind("ref", 0) == 0) return;
      if (pd.weights_desc() != weights->desc) return;
      part.primitive = dnnl::matmul(pd);
      part.bindings = {{DNNL_ARG_SRC, BufferSource::kInput0, src},
                       {DNNL_ARG_WEIGHTS, weights->source, weights->desc},
                       {DNNL_ARG_DST, BufferSource::kOutput, dst}};
      if (bias != nullptr) part.bindings.push_back({DNNL_ARG_BIAS, bias->source, bias_desc});
      const dnnl::memory::desc pad = pd.scratchpad_desc();
      part_scratchpad = (pad.get_size() + 4095) / 4096 * 4096;
      if (part_scratchpad > 0) {
        part.bindings.push_back({DNNL_ARG_SCRATCHPAD, BufferSource::kScratchpad, pad});
      }
    }
    part.scratchpad_offset = scratchpad;
    scratchpad += part_scratchpad;
    row_parts.push_back(std::move(part));
  }
  op.row_parts = std::move(row_parts);
  op.row_parts_scratchpad_bytes = std::max<size_t>(scratchpad, 64);
  op.src_row_bytes = static_cast<size_t>(k) * DataTypeSize(type);
  op.dst_row_bytes = static_cast<size_t>(n) * DataTypeSize(type);
}

// Whether a product of `rows` x `k` by `k` x `n` is worth splitting over `parts` threads: from
// kMinSplitWork multiply-adds with at least kMinPartRows rows per part (measured: bench/RESULTS.md
// "SpinTeam").
constexpr int64_t kMinSplitWork = int64_t{1} << 16;
constexpr int64_t kMinPartRows = 2;
bool WorthSplitting(int64_t rows, int64_t k, int64_t n, int parts) {
  return parts <= PreparedOp::kMaxRowParts && rows >= kMinPartRows * parts &&
         rows * k * n >= kMinSplitWork;
}

// The numpy MatMul of inputs 0 and 1 (either read transposed when the fusion folded a Transpose)
// followed by the fused node's post-ops, whose operands are inputs 2, 3, ...; a plain MatMul node
// has neither. The product runs on the packed one-row kernel (one row, constant 2-D float
// weights: batch-1 RNN cells and decoders) or on a oneDNN matmul primitive; a first post-op
// adding one row of n values becomes the kernel's bias (free), the rest run as a native epilogue
// over the output while it is in cache (one pass per post-op; cheaper than the matmul by orders
// of magnitude, and never a fallback to a reference kernel). Element types other than float32
// run the nodes the fusion replaced.
class MatMulKernel final : public DnnlKernel {
 public:
  MatMulKernel(int num_inputs, std::shared_ptr<const FusionSpec> spec,
               const Tensor* constant_weights)
      : DnnlKernel(num_inputs, num_inputs),
        spec_(std::move(spec)),
        constant_weights_(constant_weights) {}

  // Builds the epilogue chains: all post-ops, or all but a first one that can be the bias.
  absl::Status Init(int num_inputs) {
    if (spec_ == nullptr) return absl::OkStatus();
    const auto& post_ops = spec_->post_ops;
    epilogues_.resize(post_ops.size() + 1);
    epilogue_inputs_.resize(post_ops.size() + 1);
    for (size_t skip = 0; skip <= post_ops.size(); ++skip) {
      std::vector<int> inputs;
      LS_ASSIGN_OR_RETURN(
          native::ElementwiseChain chain,
          native::ChainOfPostOps(absl::MakeConstSpan(post_ops).subspan(skip), num_inputs, &inputs));
      epilogues_[skip] = std::move(chain);
      epilogue_inputs_[skip] = std::move(inputs);
    }
    return absl::OkStatus();
  }

 protected:
  bool UsesDnnl(DataType type) const override {
    // Fused nodes compute float32 only; a plain MatMul also takes f16/bf16 on oneDNN.
    return type == DataType::kFloat32 ||
           (spec_ == nullptr && (type == DataType::kFloat16 || type == DataType::kBFloat16));
  }

  absl::StatusOr<std::unique_ptr<PreparedOp>> Prepare(
      DataType type, absl::Span<const Shape* const> shapes) const override {
    const bool trans_a = spec_ != nullptr && spec_->trans_a;
    const bool trans_b = spec_ != nullptr && spec_->trans_b;
    const Shape a_shape = trans_a ? SwapLastTwo(*shapes[0]) : *shapes[0];
    const Shape b_shape = trans_b ? SwapLastTwo(*shapes[1]) : *shapes[1];
    LS_ASSIGN_OR_RETURN(const reference::MatMulDims dims,
                        reference::MatMulShapes(a_shape, b_shape));
    auto prepared = std::make_unique<PreparedOp>();
    prepared->output_shape = dims.output;
    const Tensor* constant = ConstantWeights(constant_weights_, type, *shapes[1]);
    ProductChoice choice = ChooseProduct(type, shapes, dims, constant, trans_a);
    std::shared_ptr<const native::PackedGemv> gemv =
        MakePackedGemv(type, dims, constant, trans_b, choice.absorbed);

    // The epilogue over the product, unless a post-op operand would grow the result (then the
    // nodes run unfused).
    if (choice.absorbed < PostOps().size()) {
      const native::ElementwiseChain& chain = epilogues_[choice.absorbed];
      std::vector<const Shape*> operand_shapes = {&dims.output};
      for (int input : epilogue_inputs_[choice.absorbed]) operand_shapes.push_back(shapes[input]);
      LS_ASSIGN_OR_RETURN(prepared->epilogue_prepared, chain.Prepare(operand_shapes));
      if (prepared->epilogue_prepared.output != dims.output) {
        prepared->mode = PreparedOp::Mode::kReference;
        return prepared;
      }
      prepared->epilogue = &chain;
      prepared->epilogue_inputs.assign(epilogue_inputs_[choice.absorbed].begin(),
                                       epilogue_inputs_[choice.absorbed].end());
    }
    if (dims.output.NumElements() == 0) {
      prepared->mode = PreparedOp::Mode::kEmpty;
      return prepared;
    }
    if (dims.k == 0) {
      prepared->mode = PreparedOp::Mode::kZeroFill;
      // No kernel absorbs the bias here: the full epilogue runs over the zeros.
      if (choice.bias_input >= 0) LS_RETURN_IF_ERROR(UseFullEpilogue(dims, shapes, *prepared));
      return prepared;
    }
    if (gemv != nullptr) {
      prepared->mode = PreparedOp::Mode::kPackedGemv;
      prepared->gemv = std::move(gemv);
      prepared->gemv_bias_input = choice.bias_input;
      return prepared;
    }
    if (choice.batched_gemv) {
      if (choice.bias_input >= 0) LS_RETURN_IF_ERROR(UseFullEpilogue(dims, shapes, *prepared));
      prepared->mode = PreparedOp::Mode::kBatchedGemv;
      prepared->batched_gemv = std::make_shared<const native::BatchedGemv>(dims, trans_a, trans_b);
      return prepared;
    }
    if (choice.packed_rows) {
      prepared->mode = PreparedOp::Mode::kPackedGemm;
      prepared->gemm = packed_gemm_.Get(constant->data<float>(), dims.k, dims.n, trans_b);
      prepared->gemm_rows = choice.rows;
      prepared->gemm_bias_input = choice.bias_input;
      prepared->gemm_addend_input = choice.addend_input;
      prepared->gemm_activation = choice.rows_activation;
      prepared->gemm_bias_first = choice.bias_first;
      return prepared;
    }
    if (dims.batch.rank() + 2 > DNNL_MAX_NDIMS) {
      prepared->mode = PreparedOp::Mode::kReference;
      return prepared;
    }
    LS_RETURN_IF_ERROR(PrepareOneDnn(type, shapes, dims, constant, trans_a, trans_b,
                                     choice.bias_input, *prepared));
    return prepared;
  }

 private:
  const std::vector<PostOp>& PostOps() const {
    static const std::vector<PostOp> none;
    return spec_ != nullptr ? spec_->post_ops : none;
  }

  // Which native product runs and which leading post-ops it absorbs.
  struct ProductChoice {
    int bias_input = -1;  // the node input that is the product's row bias, or -1
    size_t absorbed = 0;  // post-ops [0, absorbed) run inside the product kernel
    bool batched_gemv = false;
    bool packed_rows = false;  // native::PackedGemm
    int64_t rows = 0;          // batch x m
    int addend_input = -1;     // packed rows: an addend of the output's shape
    bool bias_first = false;   // packed rows: the bias came before the addend
    native::PackedGemv::Activation rows_activation = native::PackedGemv::Activation::kNone;
  };

  // Which post-ops the product kernel absorbs: a first Add of one row of n values (the bias),
  // then, on the packed rows kernel, leading Adds of the bias and of an addend of the output's
  // shape, then one Tanh/Relu/Sigmoid (the packed one-row kernel's activation: MakePackedGemv).
  // The rest are the epilogue.
  ProductChoice ChooseProduct(DataType type, absl::Span<const Shape* const> shapes,
                              const reference::MatMulDims& dims, const Tensor* constant,
                              bool trans_a) const {
    const std::vector<PostOp>& post_ops = PostOps();
    auto is_bias = [&](const Shape& bias) {
      return bias.rank() >= 1 && bias.rank() <= dims.output.rank() &&
             bias[bias.rank() - 1] == dims.n && bias.NumElements() == dims.n;
    };
    auto is_add = [&](size_t i) {
      return post_ops[i].kind == PostOp::Kind::kBinary && post_ops[i].op == ArithOp::kAdd;
    };
    ProductChoice c;
    if (!post_ops.empty() && is_add(0) && shapes[0]->rank() >= 2 && shapes[1]->rank() >= 2 &&
        is_bias(*shapes[post_ops[0].input])) {
      c.bias_input = post_ops[0].input;
    }
    c.absorbed = c.bias_input >= 0 ? 1 : 0;
    // Matrix-vector products per batch item (one query's attention, a product whose shape
    // changes every iteration) on native code: no primitive to create per shape, and no brgemm
    // overhead at M = 1 or N = 1. Large ones with constant weights keep oneDNN (threads).
    // Not for rows of a batch against one constant matrix ([B, 1, k] x [k, n]: a decoder step
    // at batch B): the matrix would be streamed once per row, where a product of all B rows on
    // the packed weights reads it once (gpt_b4_h128: 4 x [1, 128] x [128, 384] per step).
    const bool rows_share_constant = constant != nullptr && dims.b_batch.NumElements() == 1 &&
                                     dims.m == 1 && dims.batch.NumElements() > 1;
    c.batched_gemv = type == DataType::kFloat32 && native::BatchedGemv::Applies(dims) &&
                     !rows_share_constant && (constant == nullptr || Work(shapes) < kParallelWork);
    // Rows (any batch of A folded in) times constant 2-D weights where the back-end table says
    // (every row count below AVX-512: 96% of the FMA peak on average over the grid's product
    // shapes, oneDNN's 1x1 convolution 86%: bench/RESULTS.md "AVX2 GEMM").
    c.rows = dims.batch.NumElements() * dims.m;
    c.packed_rows = type == DataType::kFloat32 && constant != nullptr && constant->rank() == 2 &&
                    !trans_a && !c.batched_gemv &&
                    dims.a_batch.NumElements() == dims.batch.NumElements() && c.rows > 1 &&
                    dims.k > 0 && dims.n > 0 && native::PackedGemm::Preferred(c.rows);
    if (!c.packed_rows) return c;
    for (; c.absorbed < post_ops.size() && is_add(c.absorbed); ++c.absorbed) {
      const Shape& operand = *shapes[post_ops[c.absorbed].input];
      if (c.addend_input < 0 && operand == dims.output) {
        c.addend_input = post_ops[c.absorbed].input;
        c.bias_first = c.bias_input >= 0;
      } else if (c.bias_input < 0 && is_bias(operand)) {
        c.bias_input = post_ops[c.absorbed].input;
      } else {
        break;
      }
    }
    if (c.absorbed < post_ops.size()) {
      if (auto act = GemvActivation(post_ops[c.absorbed])) {
        c.rows_activation = *act;
        ++c.absorbed;
      }
    }
    return c;
  }

  // The packed one-row kernel for a one-row product with constant 2-D weights, absorbing a last
  // post-op that is its activation (advancing `absorbed`); null when it does not apply.
  std::shared_ptr<const native::PackedGemv> MakePackedGemv(DataType type,
                                                           const reference::MatMulDims& dims,
                                                           const Tensor* constant, bool trans_b,
                                                           size_t& absorbed) const {
    if (!(type == DataType::kFloat32 && constant != nullptr && constant->rank() == 2 &&
          dims.batch.NumElements() * dims.m == 1 && dims.k > 0 && dims.n > 0 &&
          dims.k * dims.n <= native::PackedGemv::kMaxElements && native::PackedGemv::Available())) {
      return nullptr;
    }
    const std::vector<PostOp>& post_ops = PostOps();
    native::PackedGemv::Activation activation = native::PackedGemv::Activation::kNone;
    if (absorbed < post_ops.size() && absorbed + 1 == post_ops.size()) {
      if (auto act = GemvActivation(post_ops[absorbed])) {
        activation = *act;
        ++absorbed;
      }
    }
    Tensor w;
    if (trans_b) {
      // The constant is stored [n, k]: pack its transpose.
      w.Resize(DataType::kFloat32, Shape{dims.k, dims.n});
      const float* src = constant->data<float>();
      float* dst = w.mutable_data<float>();
      for (int64_t i = 0; i < dims.k; ++i) {
        for (int64_t j = 0; j < dims.n; ++j) dst[i * dims.n + j] = src[j * dims.k + i];
      }
    } else {
      w = Tensor::ViewOf(*constant);
    }
    return std::make_shared<const native::PackedGemv>(w, activation);
  }

  // The oneDNN matmul (or, for rows times constant weights where oneDNN's matmul is its sgemm,
  // the 1x1 convolution of PrepareAsConvolution), with the bias `bias_input` (-1: none) unless
  // oneDNN's implementation for it is a reference one (then the full epilogue adds it).
  absl::Status PrepareOneDnn(DataType type, absl::Span<const Shape* const> shapes,
                             const reference::MatMulDims& dims, const Tensor* constant,
                             bool trans_a, bool trans_b, int bias_input, PreparedOp& op) const {
    // A 1-D operand is already laid out as the promoted [1, k] or [k, 1] matrix, and the result
    // as the [..., m, n] one. When B has no batch and A has all of it, A's batch folds into its
    // rows: [..., m, k] x [k, n] is one [batch x m, k] product (oneDNN 2.6 runs a broadcast batch
    // as one product per batch item on unpacked weights: a [200, 8, 512] x [512, 512] product
    // took 2.7x the time of 200 [8, 512] ones on packed weights, AVX-512, 1 thread).
    const bool fold = !trans_a && dims.batch.NumElements() > 1 && dims.b_batch.NumElements() == 1 &&
                      dims.a_batch.NumElements() == dims.batch.NumElements();
    const Shape no_batch;
    const Shape& a_batch = fold ? no_batch : dims.a_batch;
    const Shape& b_batch = fold ? no_batch : dims.b_batch;
    const Shape& batch = fold ? no_batch : dims.batch;
    const int64_t m = fold ? dims.batch.NumElements() * dims.m : dims.m;
    const dnnl::memory::desc src = OperandDesc(a_batch.dims(), m, dims.k, trans_a, type);
    const dnnl::memory::desc weights = OperandDesc(b_batch.dims(), dims.k, dims.n, trans_b, type);
    const dnnl::memory::desc dst = Desc(Concat(batch.dims(), m, dims.n), type);
    const int rank = batch.rank() + 2;
    dnnl::memory::dims bias_dims(rank, 1);
    bias_dims[rank - 1] = dims.n;
    const dnnl::memory::desc bias_desc = Desc(bias_dims, type);
    std::optional<dnnl::matmul::primitive_desc> pd;
    if (bias_input >= 0) {
      pd.emplace(dnnl::matmul::desc(src, constant != nullptr ? AnyLayout(weights) : weights,
                                    bias_desc, dst),
                 UserScratchpadAttr(), CpuEngine());
      if (std::string(pd->impl_info_str()).rfind("ref", 0) == 0) {
        // oneDNN's own reference matmul for this bias: add it in the epilogue instead.
        pd.reset();
        bias_input = -1;
        LS_RETURN_IF_ERROR(UseFullEpilogue(dims, shapes, op));
      }
    }
    if (!pd.has_value()) {
      pd.emplace(dnnl::matmul::desc(src, constant != nullptr ? AnyLayout(weights) : weights, dst),
                 UserScratchpadAttr(), CpuEngine());
    }
    if (type == DataType::kFloat32 && constant != nullptr && !trans_a &&
        dims.b_batch.NumElements() == 1 && dims.batch.NumElements() * dims.m > 1 &&
        std::string(pd->impl_info_str()).rfind("gemm", 0) == 0 &&
        PrepareAsConvolution(dims, trans_b, *constant, bias_input, op)) {
      return absl::OkStatus();
    }
    op.primitive = dnnl::matmul(*pd);
    const bool packed = BindPackedWeights(*this, constant, weights, *pd, op);
    op.bindings = {{DNNL_ARG_SRC, BufferSource::kInput0, src},
                   {DNNL_ARG_WEIGHTS, packed ? BufferSource::kPacked : BufferSource::kInput1,
                    packed ? pd->weights_desc() : weights},
                   {DNNL_ARG_DST, BufferSource::kOutput, dst}};
    if (bias_input >= 0) {
      op.bindings.push_back(
          {DNNL_ARG_BIAS,
           static_cast<BufferSource>(static_cast<int>(BufferSource::kInput0) + bias_input),
           bias_desc});
    }
    AddScratchpad(*pd, op);
    return absl::OkStatus();
  }

 protected:
  // The product of rows = batch x m rows of A (contiguous, [rows, k]) and the constant [k, n]
  // (stored [n, k] when `trans_b`) as a 1x1 convolution of a [1, k, rows, 1] image with n output
  // channels, on the convolution's own layouts (A and the result reordered around it, weights
  // packed once). oneDNN 2.6 has brgemm matmul only from AVX-512; below that a matmul is its sgemm
  // ("gemm:jit"), which packs the weights again on every execute. On the AVX2 path (2-vCPU AMD
  // EPYC, ONEDNN_MAX_CPU_ISA=AVX2, 1 thread) [64, 1024] x [1024, 1024]: matmul 2913 us
  // (46 GFLOP/s), this 1402 us (96 GFLOP/s, the AVX-512 brgemm matmul's rate); [16, 512] x
  // [512, 512] 120 -> 76 us; [32, 512] x [512, 2048] 1513 -> 610 us. False (op untouched) when
  // oneDNN has no direct kernel for it or a reorder would need a scratchpad.
  bool PrepareAsConvolution(const reference::MatMulDims& dims, bool trans_b, const Tensor& constant,
                            int bias_input, PreparedOp& op) const {
    const int64_t rows = dims.batch.NumElements() * dims.m;
    const int64_t k = dims.k;
    const int64_t n = dims.n;
    const auto f32 = dnnl::memory::data_type::f32;
    const auto any = dnnl::memory::format_tag::any;
    const dnnl::memory::dims src_dims = {1, k, rows, 1};
    const dnnl::memory::dims dst_dims = {1, n, rows, 1};
    const dnnl::memory::dims w_dims = {n, k, 1, 1};
    const dnnl::memory::desc bias =
        bias_input >= 0 ? dnnl::memory::desc({n}, f32, {1}) : dnnl::memory::desc();
    const dnnl::convolution_forward::primitive_desc pd(
        dnnl::convolution_forward::desc(
            dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
            dnnl::memory::desc(src_dims, f32, any), dnnl::memory::desc(w_dims, f32, any), bias,
            dnnl::memory::desc(dst_dims, f32, any), {1, 1}, {0, 0}, {0, 0}),
        UserScratchpadAttr(), CpuEngine());
    const std::string impl = pd.impl_info_str();
    if (impl.rfind("gemm", 0) == 0 || impl.rfind("ref", 0) == 0) return false;
    // A's [rows, k] and the result's [rows, n] as the plain images they are.
    const dnnl::memory::desc src_plain(src_dims, f32, {rows * k, 1, k, 1});
    const dnnl::memory::desc dst_plain(dst_dims, f32, {rows * n, 1, n, 1});
    const bool staged = pd.src_desc() != src_plain || pd.dst_desc() != dst_plain;
    if (staged && !AddStaging(src_plain, pd.src_desc(), pd.dst_desc(), dst_plain, op)) {
      return false;
    }
    const dnnl::memory::desc w_plain(
        w_dims, f32, trans_b ? dnnl::memory::dims{k, 1, 1, 1} : dnnl::memory::dims{1, n, 1, 1});
    PackConstant(constant, w_plain, pd.weights_desc(), op);
    op.primitive = dnnl::convolution_forward(pd);
    op.bindings = {
        {DNNL_ARG_SRC, staged ? BufferSource::kStagedSrc : BufferSource::kInput0, pd.src_desc()},
        {DNNL_ARG_WEIGHTS, BufferSource::kPacked, pd.weights_desc()},
        {DNNL_ARG_DST, staged ? BufferSource::kStagedDst : BufferSource::kOutput, pd.dst_desc()}};
    if (bias_input >= 0) {
      op.bindings.push_back(
          {DNNL_ARG_BIAS,
           static_cast<BufferSource>(static_cast<int>(BufferSource::kInput0) + bias_input), bias});
    }
    AddScratchpad(pd, op);
    return true;
  }

  // Makes every post-op the epilogue (for kernels that take no bias of their own).
  absl::Status UseFullEpilogue(const reference::MatMulDims& dims,
                               absl::Span<const Shape* const> shapes, PreparedOp& op) const {
    std::vector<const Shape*> operand_shapes = {&dims.output};
    for (int input : epilogue_inputs_[0]) operand_shapes.push_back(shapes[input]);
    LS_ASSIGN_OR_RETURN(op.epilogue_prepared, epilogues_[0].Prepare(operand_shapes));
    op.epilogue = &epilogues_[0];
    op.epilogue_inputs.assign(epilogue_inputs_[0].begin(), epilogue_inputs_[0].end());
    return absl::OkStatus();
  }

  // Rows of A (any batch folded in) times a 2-D B: split by rows into parts of the same product
  // on the same packed weights, each row computed by the same kernel as unsplit (so the outputs
  // are bitwise the same).
  bool SplitsRows(DataType type, absl::Span<const Shape* const> shapes, int parts) const override {
    if (type != DataType::kFloat32 || (spec_ != nullptr && spec_->trans_a)) return false;
    if (shapes.size() < 2 || shapes[0] == nullptr || shapes[1] == nullptr) return false;
    if (shapes[0]->rank() < 2 || shapes[1]->rank() != 2) return false;
    const int64_t k = (*shapes[0])[shapes[0]->rank() - 1];
    if (k <= 0) return false;
    const int64_t n = (*shapes[1])[spec_ != nullptr && spec_->trans_b ? 0 : 1];
    return WorthSplitting(shapes[0]->NumElements() / k, k, n, parts);
  }

  void PrepareRowSplit(DataType type, absl::Span<const Shape* const> shapes, int parts,
                       PreparedOp& op) const override {
    const int64_t k = (*shapes[0])[shapes[0]->rank() - 1];
    SplitRows(type, shapes[0]->NumElements() / k, k, UserScratchpadAttr(), parts, op);
  }

  // Multiply-adds of the product.
  int64_t Work(absl::Span<const Shape* const> shapes) const override {
    const Shape a = spec_ != nullptr && spec_->trans_a ? SwapLastTwo(*shapes[0]) : *shapes[0];
    const Shape b = spec_ != nullptr && spec_->trans_b ? SwapLastTwo(*shapes[1]) : *shapes[1];
    absl::StatusOr<reference::MatMulDims> dims = reference::MatMulShapes(a, b);
    if (!dims.ok()) return 0;
    return dims->batch.NumElements() * dims->m * dims->n * dims->k;
  }

  absl::Status RunReference(KernelContext& ctx) const override {
    if (spec_ != nullptr) {
      return absl::InternalError("a fused MatMul has no reference kernel of its own");
    }
    return reference::MatMul(ctx.input(0), ctx.input(1), ctx.output_value(0).mutable_tensor());
  }

 private:
  const std::shared_ptr<const FusionSpec> spec_;  // null for a plain MatMul
  const Tensor* const constant_weights_;          // owned by the model's graphs; may be null
  native::PackedGemmOnce packed_gemm_;            // the constant weights on native::PackedGemm
  // epilogues_[k]: the post-ops from the k-th on (k = 0 .. the number of post-ops), operands per
  // epilogue_inputs_[k]. Empty for a plain MatMul (which has no post-ops to absorb).
  std::vector<native::ElementwiseChain> epilogues_;
  std::vector<std::vector<int>> epilogue_inputs_;
};

// Gemm: Y = alpha * op(A) op(B) + beta * C [then Tanh | Relu | Sigmoid when the compiler fused
// the activation that reads Y: the internal attribute "_activation"].
class GemmKernel final : public DnnlKernel {
 public:
  GemmKernel(const reference::GemmAttrs& attrs, int required_inputs,
             std::shared_ptr<const FusionSpec> spec, const Tensor* constant_b)
      : DnnlKernel(/*num_inputs=*/3, required_inputs),
        attrs_(attrs),
        spec_(std::move(spec)),
        constant_b_(constant_b) {}

  // The epilogue of the activations the fusion put after the Gemm (unary post-ops only).
  absl::Status Init() {
    if (spec_ == nullptr) return absl::OkStatus();
    std::vector<int> inputs;
    LS_ASSIGN_OR_RETURN(epilogue_, native::ChainOfPostOps(spec_->post_ops, 3, &inputs));
    if (!inputs.empty()) {
      return absl::InvalidArgumentError("a Gemm's post-ops may only be activations");
    }
    if (spec_->post_ops.size() == 1) gemv_activation_ = GemvActivation(spec_->post_ops[0]);
    return absl::OkStatus();
  }

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
      if (!gemv_activation_.has_value()) SetEpilogue(shapes, *prepared);
      return prepared;
    }
    if (type == DataType::kFloat32 && constant != nullptr && !attrs_.trans_a && dims.m > 1 &&
        (shapes[2] == nullptr || attrs_.beta == 0.0f || IsRow(dims, *shapes[2])) &&
        native::PackedGemm::Preferred(dims.m)) {
      prepared->mode = PreparedOp::Mode::kPackedGemm;
      prepared->gemm =
          packed_gemm_.Get(constant->data<float>(), dims.k, dims.n, attrs_.trans_b, attrs_.alpha);
      prepared->gemm_rows = dims.m;
      prepared->gemm_bias_input = shapes[2] != nullptr && attrs_.beta != 0.0f ? 2 : -1;
      prepared->gemm_bias_scale = attrs_.beta;
      SetEpilogue(shapes, *prepared);
      return prepared;
    }
    const dnnl::memory::desc src = MatrixDesc(dims.m, dims.k, attrs_.trans_a, type);
    const dnnl::memory::desc weights = MatrixDesc(dims.k, dims.n, attrs_.trans_b, type);
    const dnnl::memory::desc dst = Desc({dims.m, dims.n}, type);
    const dnnl::primitive_attr attr = Attr(shapes);
    // dst is pre-filled with C broadcast to [M, N]; the sum post-op adds beta times it to
    // alpha * A * B.
    if (shapes[2] != nullptr && attrs_.beta != 0.0f) prepared->prefill_input = 2;
    SetEpilogue(shapes, *prepared);
    // Constant weights (an initializer, as exporters write nn.Linear) are reordered once into
    // the layout the primitive prefers: a transposed B otherwise sends oneDNN to a kernel that
    // repacks it on every execute (5x slower for a 1x256 * 256x256 product).
    const dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(src, constant != nullptr ? AnyLayout(weights) : weights, dst), attr,
        CpuEngine());
    prepared->primitive = dnnl::matmul(pd);
    const bool packed = BindPackedWeights(*this, constant, weights, pd, *prepared);
    prepared->bindings = {{DNNL_ARG_SRC, BufferSource::kInput0, src},
                          {DNNL_ARG_WEIGHTS, packed ? BufferSource::kPacked : BufferSource::kInput1,
                           packed ? pd.weights_desc() : weights},
                          {DNNL_ARG_DST, BufferSource::kOutput, dst}};
    AddScratchpad(pd, *prepared);
    return prepared;
  }

  // Rows of A (not transposed) split like MatMulKernel's, with the same attributes (alpha, the
  // sum post-op over the pre-filled C).
  bool SplitsRows(DataType type, absl::Span<const Shape* const> shapes, int parts) const override {
    if (type != DataType::kFloat32 || attrs_.trans_a) return false;
    absl::StatusOr<reference::GemmDims> dims =
        reference::GemmShapes(*shapes[0], *shapes[1], shapes[2], attrs_);
    return dims.ok() && WorthSplitting(dims->m, dims->k, dims->n, parts);
  }

  void PrepareRowSplit(DataType type, absl::Span<const Shape* const> shapes, int parts,
                       PreparedOp& op) const override {
    absl::StatusOr<reference::GemmDims> dims =
        reference::GemmShapes(*shapes[0], *shapes[1], shapes[2], attrs_);
    if (!dims.ok()) return;
    SplitRows(type, dims->m, dims->k, Attr(shapes), parts, op);
  }

  int64_t Work(absl::Span<const Shape* const> shapes) const override {
    absl::StatusOr<reference::GemmDims> dims =
        reference::GemmShapes(*shapes[0], *shapes[1], shapes[2], attrs_);
    if (!dims.ok()) return 0;
    return dims->m * dims->n * dims->k;
  }

  absl::Status RunReference(KernelContext& ctx) const override {
    if (spec_ != nullptr) {
      return absl::InternalError("a fused Gemm has no reference kernel of its own");
    }
    const Tensor* c = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    return reference::Gemm(ctx.input(0), ctx.input(1), c, attrs_,
                           ctx.output_value(0).mutable_tensor());
  }

 private:
  // The packed one-row kernel when the product is one row (op(A) is then k contiguous values
  // either way), B is a float constant, and C is absent, ignored (beta 0) or one row of n values
  // added as is (beta 1). alpha and the transpose of B are folded into the packed weights.
  std::shared_ptr<const native::PackedGemv> MaybeGemv(DataType type,
                                                      const reference::GemmDims& dims,
                                                      absl::Span<const Shape* const> shapes,
                                                      const Tensor* constant) const {
    if (type != DataType::kFloat32 || constant == nullptr || dims.m != 1 || !BiasOk(dims, shapes) ||
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
    return std::make_shared<const native::PackedGemv>(
        w, gemv_activation_.value_or(native::PackedGemv::Activation::kNone));
  }

  // Whether C is one row of n values (a bias).
  static bool IsRow(const reference::GemmDims& dims, const Shape& c) {
    return c.NumElements() == dims.n && (c.rank() < 2 || c[c.rank() - 1] == dims.n);
  }

  // Whether C is absent, ignored (beta 0) or one row of n values added as is (beta 1): a bias
  // the packed one-row kernel adds itself.
  bool BiasOk(const reference::GemmDims& dims, absl::Span<const Shape* const> shapes) const {
    return shapes[2] == nullptr || attrs_.beta == 0.0f ||
           (attrs_.beta == 1.0f && IsRow(dims, *shapes[2]));
  }

  // The product's attributes: a user scratchpad, alpha as the output scale, and a sum post-op of
  // beta times the pre-filled C when C is present.
  dnnl::primitive_attr Attr(absl::Span<const Shape* const> shapes) const {
    dnnl::primitive_attr attr = UserScratchpadAttr();
    if (attrs_.alpha != 1.0f) attr.set_output_scales(0, {attrs_.alpha});
    dnnl::post_ops post_ops;
    if (shapes[2] != nullptr && attrs_.beta != 0.0f) post_ops.append_sum(attrs_.beta);
    attr.set_post_ops(post_ops);
    return attr;
  }

  // The activations as the epilogue over the [M, N] output (none without a fusion spec).
  void SetEpilogue(absl::Span<const Shape* const> shapes, PreparedOp& op) const {
    if (spec_ == nullptr || spec_->post_ops.empty()) return;
    const Shape out = op.output_shape;
    const Shape* operand_shapes[] = {&out};
    absl::StatusOr<native::ElementwiseChain::Prepared> prepared = epilogue_.Prepare(operand_shapes);
    if (!prepared.ok()) return;  // cannot happen: one operand, no broadcast
    op.epilogue_prepared = *std::move(prepared);
    op.epilogue = &epilogue_;
  }

  // A row-major [rows, cols] matrix, or the transpose of a stored [cols, rows] one.
  static dnnl::memory::desc MatrixDesc(int64_t rows, int64_t cols, bool transposed, DataType type) {
    // With a dim of 1 the transpose has the same layout as the plain matrix.
    if (!transposed || rows == 1 || cols == 1) return Desc({rows, cols}, type);
    return dnnl::memory::desc({rows, cols}, ToDnnl(type), {1, rows});
  }

  const reference::GemmAttrs attrs_;
  const std::shared_ptr<const FusionSpec> spec_;  // activations fused after the Gemm; may be null
  const Tensor* const constant_b_;                // owned by the model's graphs; may be null
  native::PackedGemmOnce packed_gemm_;            // the constant B, alpha and transB folded in
  native::ElementwiseChain epilogue_;
  // The packed one-row kernel's own activation when the only post-op is one it computes.
  std::optional<native::PackedGemv::Activation> gemv_activation_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlMatMulKernel(const KernelInit& init) {
  if (init.num_inputs() != 2 || init.node().outputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("expected 2 inputs and 1 output, got ",
                                                   init.num_inputs(), " and ",
                                                   init.node().outputs.size()));
  }
  auto kernel = std::make_unique<MatMulKernel>(2, nullptr, init.constant_input(1));
  kernel->WarmUp(init);
  return kernel;
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateDnnlFusedMatMulKernel(const KernelInit& init) {
  const Node& node = init.node();
  if (node.fusion == nullptr || init.num_inputs() < 2 ||
      init.num_inputs() > DnnlKernel::kMaxInputs || node.outputs.size() != 1) {
    return absl::InvalidArgumentError(
        "a fused MatMul needs its fusion spec, 2 to 10 inputs and 1 output");
  }
  auto kernel =
      std::make_unique<MatMulKernel>(init.num_inputs(), node.fusion, init.constant_input(1));
  LS_RETURN_IF_ERROR(kernel->Init(init.num_inputs()));
  if (node.fusion->unfused != nullptr) {
    LS_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> unfused,
                        init.CompileUnfused(node.fusion->unfused));
    kernel->SetUnfused(std::move(unfused));
  }
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
  auto kernel =
      std::make_unique<GemmKernel>(attrs, required_inputs, node.fusion, init.constant_input(1));
  LS_RETURN_IF_ERROR(kernel->Init());
  if (node.fusion != nullptr && node.fusion->unfused != nullptr) {
    LS_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> unfused,
                        init.CompileUnfused(node.fusion->unfused));
    kernel->SetUnfused(std::move(unfused));
  }
  kernel->WarmUp(init);
  return kernel;
}

}  // namespace loopserve::engine
