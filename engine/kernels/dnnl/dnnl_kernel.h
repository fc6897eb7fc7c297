#pragma once

// The machinery every oneDNN kernel shares: a per-kernel cache of primitives keyed by the input
// signature (element type and shapes), and a per-frame state that keeps the primitive of the last
// signature bound to pre-built dnnl::memory objects and an argument table. On a run whose
// signature matches the previous one in the same frame (every Loop iteration after the first) a
// kernel takes no lock, creates no primitive and allocates nothing: it swaps data handles in
// (memory::set_data_handle, ~4 ns each) and executes.

#include <atomic>
#include <cstdint>
#include <dnnl.hpp>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "engine/kernels/native/batched_gemv.h"
#include "engine/kernels/native/elementwise_chain.h"
#include "engine/kernels/native/packed_gemm.h"
#include "engine/kernels/native/packed_gemv.h"
#include "engine/runtime/kernel.h"
#include "engine/tensor/shape.h"
#include "engine/tensor/tensor.h"

namespace loopserve::engine {

// Primitives the oneDNN kernels of this process have created (signature-cache misses, including
// those at load). Tests use it to prove that steady-state runs create none. Thread-safe.
int64_t DnnlPrimitiveCreationCount();
// Counts one creation, for the oneDNN kernels outside DnnlKernel (recurrent.cc). Thread-safe.
void CountDnnlPrimitiveCreation();

// Elementwise ops (Add/Sub/Mul/Div, cheap unary ops; transcendental ones up to 16 elements) whose
// output has at most this many elements run on the reference loops instead of a oneDNN primitive:
// a primitive execute has a floor of ~0.2-0.6 us, allocates on the heap inside oneDNN 2.6 and,
// with more than one thread, forks an OpenMP team, while a plain loop adds 1024 floats in ~0.3 us
// (bench/engine_bench.cc, BM_DnnlAdd against BM_NativeAdd: the loop wins up to ~4096). Default
// kDefaultDnnlSmallTensorLimit; process-wide. The oneDNN kernel tests set 0 to exercise oneDNN on
// every shape.
inline constexpr int64_t kDefaultDnnlSmallTensorLimit = 1024;

// Float32 elementwise ops (unary, binary, fused chains) whose output has at most this many
// elements run on native vector code (native/elementwise_chain.h) rather than a oneDNN
// primitive. One thread: the SLEEF tanh and oneDNN's eltwise tanh both do ~1.9-2.0 G floats/s at
// 32K-1M elements, but oneDNN pays 0.15-0.3 us per execute (10x slower at 16-512 elements); an
// add is 37 ns against 285 ns at 512 floats and equal from 32K (engine/kernels/kernel_bench.cc).
// Above the limit oneDNN's threads can help; shapes oneDNN cannot take stay native at any size.
// Process-wide; the oneDNN kernel tests set 0 to exercise oneDNN on every shape oneDNN takes.
inline constexpr int64_t kNativeElementwiseLimit = int64_t{1} << 16;
void SetNativeElementwiseLimit(int64_t elements);
int64_t NativeElementwiseLimit();
void SetDnnlSmallTensorLimit(int64_t elements);

// Whether `impl_name` (a primitive descriptor's impl_info_str) names one of oneDNN's reference
// implementations: plain C++ loops written for correctness, 10-50x slower than its jit kernels
// ("ref:any", "bnorm_ref:any", "ref_int8:any", ...). oneDNN 2.6 picks them silently whenever no
// optimized implementation takes the layout (a BatchNormalization on a 3-D plain tensor, a
// ConvTranspose on plain source and destination). "simple:" ones (concat, sum, reorder,
// simple_layer_normalization) are memcpy loops or vectorised C++ and are not counted.
bool IsDnnlReferenceImpl(absl::string_view impl_name);
// The impl_info_str of the primitive `primitive` was created from ("" if oneDNN has none).
std::string DnnlImplName(const dnnl::primitive& primitive);
int64_t DnnlSmallTensorLimit();

// Where a primitive argument's buffer comes from on each run.
// kOutput is output 0; kOutput1/kOutput2 are PreparedOp::extra_outputs; kAux0/kAux1 are the frame's
// copies of PreparedOp::expansions.
enum class BufferSource : uint8_t {
  kInput0,
  kInput1,
  kInput2,
  kInput3,
  kInput4,
  kOutput,
  kOutput1,
  kOutput2,
  kScratchpad,
  kAux0,
  kAux1,
  kPacked,     // PreparedOp::packed: a constant input reordered once into oneDNN's preferred layout
  kStagedSrc,  // the frame's copy of input 0 in the primitive's layout (PreparedOp::Staging)
  kStagedDst,  // the frame's buffer for output 0 in the primitive's layout (PreparedOp::Staging)
};

struct ArgBinding {
  int arg = 0;  // DNNL_ARG_*
  BufferSource source = BufferSource::kOutput;
  dnnl::memory::desc desc;
};

// What a kernel does for one input signature. Built by DnnlKernel::Prepare, then immutable and
// shared by every frame (and thread) that runs the signature.
struct PreparedOp {
  enum class Mode : uint8_t {
    kExecute,       // run `primitive`
    kEmpty,         // the output has no elements: only size it (oneDNN takes no zero dims)
    kZeroFill,      // the output is all zeros (a MatMul whose inner dim is 0)
    kReference,     // oneDNN cannot take this signature (rank > 12, ...): run the reference kernel
    kPackedGemv,    // a one-row float matmul with constant weights: run `gemv` (no primitive)
    kNative,        // float32 elementwise work on native vector code: run `chain` over the inputs
    kBatchedGemv,   // float32 matrix-vector products per batch item: run `batched_gemv`
    kNativeCustom,  // the kernel's own native code: DnnlKernel::RunNative
    kPackedGemm,    // rows times constant float weights on native AVX2 code: run `gemm`
  };
  Mode mode = Mode::kExecute;
  Shape output_shape;
  dnnl::primitive primitive;
  // kExecute: `primitive` (or a row part's) is one of oneDNN's reference implementations
  // (IsDnnlReferenceImpl); each run of the step counts in RunStats::reference_steps.
  bool reference_impl = false;
  std::vector<ArgBinding> bindings;
  size_t scratchpad_bytes = 0;
  // Before executing: input `input` is broadcast-copied into the frame's aux buffer k (bound as
  // BufferSource::kAux0 + k) of shape `shape` (oneDNN binary broadcasts only its second source;
  // InstanceNormalization tiles its scale over the batch).
  struct Expansion {
    int input = -1;
    Shape shape;
  };
  absl::InlinedVector<Expansion, 2> expansions;
  // Before executing: when >= 0, input `prefill_input` is broadcast-copied into the output (Gemm's
  // C, which a sum post-op then scales by beta).
  int prefill_input = -1;
  // Outputs 1, 2, ... (bound as kOutput1, kOutput2), sized to these types and shapes on every run
  // in kExecute and kEmpty modes. Only as many as the node has; Finish post-processes them.
  absl::InlinedVector<std::pair<DataType, Shape>, 2> extra_outputs;
  // Created and executed with one OpenMP thread (DnnlKernel::Work below kOpenMpParallelWork,
  // engine/runtime/thread_mode.h):
  // an OpenMP fork/join costs more than a small primitive's whole run.
  bool single_threaded = false;
  // A constant operand (MatMul weights) already in the primitive's preferred layout, made when the
  // signature is prepared (at load when shapes are declared) and bound as BufferSource::kPacked.
  // Shared with the kernel's other signatures that use the same layout (PackConstant).
  std::shared_ptr<const Tensor> packed;
  // kExecute on the primitive's own layouts for input 0 and output 0 (a convolution's blocked
  // nChw16c, ~2x faster than its plain-layout gemm path): input 0 is reordered into the frame's
  // staged source before executing, and the result out of the staged destination into output 0
  // after (both reorders take no scratchpad). Absent (stage_in null) for plain-layout ops.
  // A side whose layouts agree has no reorder (its primitive is empty; bind that side as kInput0 /
  // kOutput): a blocked chain's Conv reads or writes the blocked tensor itself.
  struct Staging {
    dnnl::primitive stage_in;   // plain input 0 -> staged_src; empty when they agree
    dnnl::primitive stage_out;  // staged_dst -> plain output 0; empty when they agree
    dnnl::memory::desc plain_src, staged_src, staged_dst, plain_dst;
  };
  std::unique_ptr<const Staging> staging;
  // kPackedGemv: the packed weights and fused epilogue; computes output 0 from input 0 and, when
  // gemv_bias_input >= 0, that input as the bias.
  std::shared_ptr<const native::PackedGemv> gemv;
  int gemv_bias_input = -1;
  // kPackedGemm: output 0 ([gemm_rows, n]) = gemm_activation(input 0 ([gemm_rows, k], any batch
  // folded into the rows) times the packed weights + input gemm_addend_input (of the output's
  // shape) when >= 0 + gemm_bias_scale x input gemm_bias_input (n values) when >= 0), all applied
  // per register tile. Split by column panels over the OpenMP threads or the engaged SpinTeam when
  // large.
  std::shared_ptr<const native::PackedGemm> gemm;
  int64_t gemm_rows = 0;
  int gemm_bias_input = -1;
  int gemm_addend_input = -1;
  native::PackedGemv::Activation gemm_activation = native::PackedGemv::Activation::kNone;
  bool gemm_bias_first = false;  // the bias Add came before the addend's
  float gemm_bias_scale = 1.0f;  // Gemm's beta
  // kNativeCustom: dims the kernel's RunNative reads (e.g. a softmax's [outer, axis, inner]).
  int64_t native_dims[3] = {0, 0, 0};
  // kBatchedGemv: output 0 = input 0 x input 1 (native/batched_gemv.h).
  std::shared_ptr<const native::BatchedGemv> batched_gemv;
  // kNative: output 0 = chain(inputs 0, 1, ...) (native/elementwise_chain.h), prepared for this
  // signature's shapes. Not owned: the kernel's chain outlives its prepared ops.
  const native::ElementwiseChain* chain = nullptr;
  native::ElementwiseChain::Prepared chain_prepared;
  // After kExecute, kPackedGemv, kZeroFill and kNativeCustom: output 0 = epilogue(output 0, inputs
  // epilogue_inputs...) in place (a fused node's post-ops). Not owned, like `chain`.
  const native::ElementwiseChain* epilogue = nullptr;
  native::ElementwiseChain::Prepared epilogue_prepared;
  absl::InlinedVector<int, 4> epilogue_inputs;  // node input per chain operand 1, 2, ...
  // kExecute split by rows over the engaged SpinTeam (engine/runtime/spin_team.h), when the
  // signature was prepared for one and the kernel can split it (DnnlKernel::PrepareRowSplit):
  // part p computes output rows [first_row, first_row + rows) from the same input rows with its
  // own primitive (created for one thread, on the same packed weights) and its own slice of the
  // scratchpad; `primitive` and `bindings` above stay the unsplit op. Output 0 and input 0 are
  // row-major with src_row_bytes / dst_row_bytes per row. The epilogue runs after, unsplit.
  struct RowPart {
    int64_t first_row = 0;
    int64_t rows = 0;
    dnnl::primitive primitive;
    std::vector<ArgBinding> bindings;
    size_t scratchpad_offset = 0;  // bytes into the run's scratchpad
  };
  static constexpr int kMaxRowParts = 8;
  absl::InlinedVector<RowPart, 2> row_parts;  // at most kMaxRowParts
  size_t src_row_bytes = 0;
  size_t dst_row_bytes = 0;
  size_t row_parts_scratchpad_bytes = 0;  // all parts' scratchpads together
};

// Base of the oneDNN kernels. Subclasses describe their op for one signature (Prepare) and their
// fallback for element types oneDNN lacks (RunReference); this class caches, binds and executes.
//
// Thread-safe: Run may be called concurrently from many frames. The signature cache is guarded by
// a mutex that is only taken when a frame sees a signature different from its previous one. The
// cache holds at most kMaxCachedSignatures entries; past that, new signatures are prepared for
// the frame that needs them and not cached (a shape that changes every iteration would otherwise
// grow it without bound).
class DnnlKernel : public Kernel {
 public:
  static constexpr int kMaxInputs = 10;
  static constexpr int kMaxAux = 2;
  static constexpr size_t kMaxCachedSignatures = 64;
  static constexpr size_t kMaxPackedConstants = 16;
  // Products whose Work is below this are not split over a Loop's SpinTeam (helper threads that
  // spin while the Loop runs: a split costs about a microsecond). Splits over the OpenMP team
  // need kOpenMpParallelWork (engine/runtime/thread_mode.h).
  static constexpr int64_t kParallelWork = int64_t{1} << 18;

  // The first `required_inputs` of `num_inputs` (<= kMaxInputs) inputs must be present.
  DnnlKernel(int num_inputs, int required_inputs);

  absl::Status Run(KernelContext& ctx) const final;
  std::unique_ptr<KernelState> CreateState() const final;

  // A fused node's original nodes (FusionSpec::unfused, compiled without transforms): run instead
  // of RunReference for element types or signatures the fused kernel does not compute, so a
  // fused node behaves exactly as the nodes it replaced. Set once, by the factory.
  void SetUnfused(std::shared_ptr<const Plan> plan) { unfused_ = std::move(plan); }

  // Prepares (and caches) the signature of the declared input types when they are fully known and
  // oneDNN computes the type, so the first request does not pay for primitive creation. Errors are
  // ignored here: the same inputs fail again, with the message, when they really arrive.
  void WarmUp(const KernelInit& init) const;

  // Sets `op.packed` to the plain `constant` (described by `plain`) reordered into the layout
  // `packed`. The kernel keeps what it packed (up to kMaxPackedConstants layouts) and gives the
  // same buffer to every signature that asks for the same constant in the same layout: products
  // with constant weights at many row counts (a growing attention length, changing batch sizes)
  // and at both thread counts (engine/runtime/thread_mode.h) pack and hold their weights once.
  void PackConstant(const Tensor& constant, const dnnl::memory::desc& plain,
                    const dnnl::memory::desc& packed, PreparedOp& op) const;

 protected:
  // Whether oneDNN computes element type `type` for this op; others go to RunReference.
  virtual bool UsesDnnl(DataType type) const;

  // Describes the op for `type` and input shapes (`shapes[i]` null for an absent input). May
  // throw dnnl::error; a dnnl "unimplemented" makes the signature use the reference kernel.
  // InvalidArgument for shapes the op rejects.
  virtual absl::StatusOr<std::unique_ptr<PreparedOp>> Prepare(
      DataType type, absl::Span<const Shape* const> shapes) const = 0;

  // A rough operation count for the signature (default: the largest input's element count);
  // decides single- or multi-threaded execution.
  virtual int64_t Work(absl::Span<const Shape* const> shapes) const;

  // Whether a signature would be split over a SpinTeam of `parts` threads (cheap: decides the
  // cache key, so unsplittable signatures share the one-thread op). Default: never.
  virtual bool SplitsRows(DataType type, absl::Span<const Shape* const> shapes, int parts) const;
  // Adds op.row_parts for `parts` threads to a prepared kExecute op (called when SplitsRows said
  // yes); leaves op unsplit when oneDNN will not take the parts. May throw dnnl::error.
  virtual void PrepareRowSplit(DataType type, absl::Span<const Shape* const> shapes, int parts,
                               PreparedOp& op) const;

  // Computes every output with the reference kernel.
  virtual absl::Status RunReference(KernelContext& ctx) const = 0;

  // Computes output 0 (already sized to op.output_shape) for a kNativeCustom op.
  virtual absl::Status RunNative(const PreparedOp& op, const Tensor* const* inputs,
                                 Tensor& out) const;

  // Called after a kExecute op has run, to finish the outputs in place (turn a variance into an
  // inverse standard deviation, ...). Must not allocate in steady state.
  virtual absl::Status Finish(const PreparedOp& op, KernelContext& ctx) const;

  // Helpers for Prepare: the plain row-major descriptor of `dims`, and a finished kExecute op
  // (scratchpad binding added from `pd`).
  static dnnl::memory::desc Desc(absl::Span<const int64_t> dims, DataType type);
  static dnnl::primitive_attr UserScratchpadAttr();
  static void AddScratchpad(const dnnl::primitive_desc_base& pd, PreparedOp& op);
  // Sets op.staging for a primitive whose source `staged_src` or destination `staged_dst` differ
  // from the layouts `plain_src` / `plain_dst` of input 0 and output 0 (plain, or blocked in a
  // chain); false (op unchanged) when a reorder between them would need a scratchpad. When it
  // returns true, bind the primitive's SRC as kStagedSrc if staged_src != plain_src (else
  // kInput0) and DST as kStagedDst if staged_dst != plain_dst (else kOutput).
  static bool AddStaging(const dnnl::memory::desc& plain_src, const dnnl::memory::desc& staged_src,
                         const dnnl::memory::desc& staged_dst, const dnnl::memory::desc& plain_dst,
                         PreparedOp& op);

 private:
  struct Bound;
  class State;
  using Key = absl::InlinedVector<int64_t, 16>;

  // Binds the op for the signature of `inputs` at `threads` OpenMP threads (split into `parts`
  // when the kernel splits it) into `state`.
  absl::Status Bind(DataType type, const Tensor* const* inputs, int threads, int parts,
                    Bound& state) const;
  // The buffer `source` names in a run of `op`: an input, outputs[0..2] (the output, the extra
  // outputs), `scratchpad`, the op's packed weights or the state's auxiliary / staged tensors.
  static void* BufferOf(BufferSource source, const PreparedOp& op, Bound& state,
                        const Tensor* const* inputs, Tensor* const* outputs, void* scratchpad);
  // Runs a prepared op's row parts over the engaged team.
  absl::Status RunRowParts(const PreparedOp& op, Bound& state, const Tensor* const* inputs,
                           Tensor* out, void* scratchpad, dnnl_stream_t stream) const;
  // The fallback for kReference signatures and types oneDNN lacks: the unfused nodes when the
  // kernel has them, else RunReference (counted in RunStats::reference_steps for float types).
  absl::Status RunFallback(KernelContext& ctx, DataType type, State& state) const;
  // Counts the step in RunStats::reference_steps (once per step in a frame).
  static void CountReferenceStep(KernelContext& ctx, State& state);
  // The op for a signature at `threads` OpenMP threads (the cache key has the count for ops of
  // kOpenMpParallelWork or more; below, every count shares the single-threaded op).
  absl::StatusOr<std::shared_ptr<const PreparedOp>> Lookup(DataType type,
                                                           const Shape* const* shapes, int threads,
                                                           int parts = 1) const;

  const int num_inputs_;
  const int required_inputs_;
  std::shared_ptr<const Plan> unfused_;
  mutable absl::Mutex mu_;
  mutable absl::flat_hash_map<Key, std::shared_ptr<const PreparedOp>> cache_ ABSL_GUARDED_BY(mu_);
  // What PackConstant made: the constant's data, its plain and packed layouts, the result.
  struct PackedConstant {
    const void* source;
    dnnl::memory::desc plain;
    dnnl::memory::desc packed;
    std::shared_ptr<const Tensor> tensor;
  };
  mutable absl::Mutex packed_mu_;
  mutable std::vector<PackedConstant> packed_ ABSL_GUARDED_BY(packed_mu_);
};

}  // namespace loopserve::engine
