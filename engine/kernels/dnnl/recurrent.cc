// ONNX RNN / GRU / LSTM (opsets 1 to 14: directions, sequence_lens, initial states, peepholes,
// layout, activations, clip, input_forget, linear_before_reset) and the OpenVINO RNNCell,
// GRUCell, LSTMCell and *Sequence-5 layers the importer lowers onto them (attributes _layout,
// _gate_order and _bias_summed: see native/recurrent.h).
//
// The weights are converted once, at load when they are constants, into one canonical form (the
// gate order of oneDNN). A layer runs on oneDNN's RNN primitives (vanilla_rnn_forward,
// lstm_forward, gru_forward, lbr_gru_forward: one call for all steps and directions), created once
// per input signature and OpenMP thread count (a primitive plans for the threads it is created
// with, and a Loop switches its body between its intra-op team and one thread:
// engine/runtime/thread_mode.h), with the constant weights reordered into the primitive's packed
// format when the signature is first prepared (shared between thread counts when the layout is the
// same). What those primitives do not compute (activations other than
// their fixed ones, clip, coupled input and forget gates, sequences shorter than the input, empty
// inputs) runs on the native implementation.

#include "engine/kernels/native/recurrent.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <dnnl.hpp>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/dnnl/dnnl_kernel.h"
#include "engine/kernels/dnnl/dnnl_util.h"
#include "engine/kernels/dnnl/kernels.h"
#include "engine/runtime/run_context.h"
#include "engine/runtime/thread_mode.h"

namespace loopserve::engine {
namespace {

using native::RecurrentActivation;
using native::RecurrentCell;
using native::RecurrentLayout;
using native::RecurrentShape;
using native::RecurrentSpec;
using native::RecurrentWeights;
using Kind = RecurrentActivation::Kind;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

// The most multiply-adds one primitive call may take (about 25 ms at 40 G a second); longer layers
// run natively, where the run's deadline and cancellation are checked every few steps.
constexpr double kMaxPrimitiveWork = 1 << 30;

// Node inputs (ONNX order; the OpenVINO lowering reorders its ports into it).
enum Input { kX = 0, kW, kR, kB, kLengths, kH0, kC0, kP, kNumInputs };

// Which oneDNN algorithm a spec maps onto, or none.
struct DnnlMapping {
  bool supported = false;
  dnnl::algorithm activation = dnnl::algorithm::eltwise_tanh;  // vanilla RNN only
  float alpha = 0;
};

DnnlMapping MapToDnnl(const RecurrentSpec& spec) {
  DnnlMapping m;
  if (spec.clip > 0 || spec.input_forget) return m;
  const int f = spec.functions();
  for (int d = 0; d < spec.num_directions; ++d) {
    const RecurrentActivation* a = spec.activations.data() + d * f;
    switch (spec.cell) {
      case RecurrentCell::kLstm:
        if (a[0].kind != Kind::kSigmoid || a[1].kind != Kind::kTanh || a[2].kind != Kind::kTanh) {
          return m;
        }
        break;
      case RecurrentCell::kGru:
        if (a[0].kind != Kind::kSigmoid || a[1].kind != Kind::kTanh) return m;
        break;
      case RecurrentCell::kRnn: {
        DnnlMapping one;
        if (a[0].kind == Kind::kTanh) {
          one.activation = dnnl::algorithm::eltwise_tanh;
        } else if (a[0].kind == Kind::kSigmoid) {
          one.activation = dnnl::algorithm::eltwise_logistic;
        } else if (a[0].kind == Kind::kRelu) {
          one.activation = dnnl::algorithm::eltwise_relu;
        } else if (a[0].kind == Kind::kLeakyRelu) {
          one.activation = dnnl::algorithm::eltwise_relu;
          one.alpha = a[0].alpha;
        } else {
          return m;
        }
        // Both directions of one primitive share its activation.
        if (d > 0 && (one.activation != m.activation || one.alpha != m.alpha)) return DnnlMapping();
        m.activation = one.activation;
        m.alpha = one.alpha;
        break;
      }
    }
  }
  m.supported = true;
  return m;
}

// One input signature's primitive. Immutable once made; shared by every frame.
struct PreparedRnn {
  dnnl::primitive primitive;
  // Memory descriptors, indexed like kArgs below (zero descriptors for unused arguments).
  std::vector<dnnl::memory::desc> descs;
  size_t scratchpad_bytes = 0;
  // The canonical weights reordered into the primitive's layout (constant weights only).
  std::shared_ptr<const Tensor> packed_layer;
  std::shared_ptr<const Tensor> packed_iter;
  dnnl::memory::desc user_layer;  // the canonical W / R as oneDNN sees them
  dnnl::memory::desc user_iter;
};

// Primitive arguments in a fixed order.
constexpr int kArgs[] = {DNNL_ARG_SRC_LAYER,     DNNL_ARG_SRC_ITER,     DNNL_ARG_SRC_ITER_C,
                         DNNL_ARG_WEIGHTS_LAYER, DNNL_ARG_WEIGHTS_ITER, DNNL_ARG_WEIGHTS_PEEPHOLE,
                         DNNL_ARG_BIAS,          DNNL_ARG_DST_LAYER,    DNNL_ARG_DST_ITER,
                         DNNL_ARG_DST_ITER_C,    DNNL_ARG_SCRATCHPAD};
enum ArgIndex {
  kSrcLayer = 0,
  kSrcIter,
  kSrcIterC,
  kWeightsLayer,
  kWeightsIter,
  kPeephole,
  kBias,
  kDstLayer,
  kDstIter,
  kDstIterC,
  kScratchpad,
  kNumArgs
};

struct Signature {
  int64_t steps = -1, batch = -1, input = -1;
  bool h0 = false, c0 = false;
  int threads = 0;  // the calling thread's OpenMP thread count
  bool SameShapes(const Signature& o) const {
    return steps == o.steps && batch == o.batch && input == o.input && h0 == o.h0 && c0 == o.c0;
  }
  bool operator==(const Signature& o) const { return SameShapes(o) && threads == o.threads; }
  template <typename H>
  friend H AbslHashValue(H h, const Signature& s) {
    return H::combine(std::move(h), s.steps, s.batch, s.input, s.h0, s.c0, s.threads);
  }
};

// A signature's primitive bound to memory objects in one frame.
struct BoundRnn {
  Signature signature;
  std::shared_ptr<const PreparedRnn> op;
  std::vector<dnnl::memory> memories;
  std::vector<dnnl_exec_arg_t> args;
};

class RecurrentState : public KernelState {
 public:
  native::RecurrentScratch scratch;
  RecurrentWeights weights;      // when the weights are not constants
  std::vector<int32_t> lengths;  // sequence lengths as int32
  // The oneDNN signature this frame ran last at one thread ([0]) and at more ([1]): a Loop may
  // switch between the two every few iterations.
  BoundRnn bound[2];
  Tensor packed_layer, packed_iter;  // reordered per run when the weights are not constants
  Tensor src_iter, src_iter_c, dst_layer, dst_iter, dst_iter_c;  // layout conversions
};

class RecurrentKernel final : public Kernel {
 public:
  RecurrentKernel(RecurrentSpec spec, std::vector<bool> has_output)
      : spec_(std::move(spec)), dnnl_(MapToDnnl(spec_)), has_output_(std::move(has_output)) {}

  // Converts constant weights once.
  absl::Status PrepareWeights(const KernelInit& init) {
    const Tensor* w = init.constant_input(kW);
    const Tensor* r = init.constant_input(kR);
    const Tensor* b = init.has_input(kB) ? init.constant_input(kB) : nullptr;
    const Tensor* p = init.has_input(kP) ? init.constant_input(kP) : nullptr;
    if (w == nullptr || r == nullptr || (init.has_input(kB) && b == nullptr) ||
        (init.has_input(kP) && p == nullptr)) {
      return absl::OkStatus();  // converted per run
    }
    auto weights = std::make_shared<RecurrentWeights>();
    LS_RETURN_IF_ERROR(
        native::CanonicalRecurrentWeights(spec_, *w, *r, b, p, /*pack=*/true, *weights));
    weights_ = std::move(weights);
    return absl::OkStatus();
  }

  std::unique_ptr<KernelState> CreateState() const override {
    return std::make_unique<RecurrentState>();
  }

  absl::Status Run(KernelContext& ctx) const override {
    RecurrentState& state = *ctx.state<RecurrentState>();
    const Tensor& x = ctx.input(kX);
    if (x.dtype() != DataType::kFloat32) {
      return absl::UnimplementedError(absl::StrCat("input 'X' has element type ",
                                                   DataTypeName(x.dtype()),
                                                   "; recurrent layers compute float32"));
    }
    LS_ASSIGN_OR_RETURN(RecurrentShape shape, native::ResolveRecurrentShape(spec_, x.shape()));
    const RecurrentWeights* weights = weights_.get();
    if (weights == nullptr) {
      LS_RETURN_IF_ERROR(native::CanonicalRecurrentWeights(
          spec_, ctx.input(kW), ctx.input(kR), ctx.has_input(kB) ? &ctx.input(kB) : nullptr,
          ctx.has_input(kP) ? &ctx.input(kP) : nullptr, /*pack=*/false, state.weights));
      weights = &state.weights;
    }
    if (weights->input_size != shape.input) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input 'X' has ", shape.input, " features but 'W' expects ", weights->input_size));
    }
    const Shape state_shape = native::RecurrentStateShape(spec_, shape);
    const Tensor* h0 = ctx.has_input(kH0) ? &ctx.input(kH0) : nullptr;
    const Tensor* c0 =
        ctx.has_input(kC0) && spec_.cell == RecurrentCell::kLstm ? &ctx.input(kC0) : nullptr;
    for (const auto& [t, name] : {std::pair{h0, "initial_h"}, std::pair{c0, "initial_c"}}) {
      if (t != nullptr && (t->dtype() != DataType::kFloat32 || t->shape() != state_shape)) {
        return absl::InvalidArgumentError(
            absl::StrCat("input '", name, "' is ", DataTypeName(t->dtype()), t->shape().ToString(),
                         ", expected float32", state_shape.ToString()));
      }
    }
    bool full_lengths = true;
    const int32_t* lengths = nullptr;
    if (ctx.has_input(kLengths)) {
      LS_RETURN_IF_ERROR(ReadLengths(ctx.input(kLengths), shape, state.lengths, full_lengths));
      if (!full_lengths) lengths = state.lengths.data();
    }

    native::RecurrentIo io;
    io.x = x.data<float>();
    io.lengths = lengths;
    io.h0 = h0 != nullptr ? h0->data<float>() : nullptr;
    io.c0 = c0 != nullptr ? c0->data<float>() : nullptr;
    if (has_output_[0]) {
      io.y = ctx.output(0, DataType::kFloat32, native::RecurrentOutputShape(spec_, shape))
                 ->mutable_data<float>();
    }
    if (has_output_[1]) {
      io.y_h = ctx.output(1, DataType::kFloat32, state_shape)->mutable_data<float>();
    }
    if (has_output_[2]) {
      io.y_c = ctx.output(2, DataType::kFloat32, state_shape)->mutable_data<float>();
    }
    // A batch of one recurs on the packed one-row kernel (bench/RESULTS.md: hidden 256, 64 steps,
    // 1.20 ms against 1.74 ms for lstm_forward); larger batches on the primitive, which runs all
    // steps in one uninterruptible call: so only up to kMaxPrimitiveWork multiply-adds (tens of
    // milliseconds). Longer runs take the native path, which checks the deadline and
    // cancellation every few steps.
    const bool packed_batch1 =
        shape.batch == 1 && (!weights->packed_r.empty() || !weights->fused_lstm.empty());
    const double work = static_cast<double>(shape.steps) * static_cast<double>(shape.batch) *
                        spec_.num_directions * spec_.gates() * spec_.hidden *
                        static_cast<double>(spec_.hidden + shape.input);
    if (dnnl_.supported && full_lengths && !packed_batch1 && work <= kMaxPrimitiveWork &&
        shape.steps > 0 && shape.batch > 0 && shape.input > 0) {
      return RunDnnl(ctx, *weights, shape, io, state);
    }
    InterruptPacer pacer(ctx.run_context());
    return native::RunNativeRecurrent(spec_, *weights, shape, io, state.scratch, &pacer);
  }

 private:
  static absl::Status ReadLengths(const Tensor& t, const RecurrentShape& shape,
                                  std::vector<int32_t>& lengths, bool& full) {
    if (t.rank() != 1 || t.dim(0) != shape.batch ||
        (t.dtype() != DataType::kInt32 && t.dtype() != DataType::kInt64)) {
      return absl::InvalidArgumentError(absl::StrCat("input 'sequence_lens' is ",
                                                     DataTypeName(t.dtype()), t.shape().ToString(),
                                                     ", expected int32[", shape.batch, "]"));
    }
    lengths.resize(shape.batch);
    full = true;
    for (int64_t b = 0; b < shape.batch; ++b) {
      const int64_t v = t.dtype() == DataType::kInt32 ? t.data<int32_t>()[b] : t.data<int64_t>()[b];
      if (v < 0 || v > shape.steps) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sequence_lens[", b, "] is ", v, "; it must be within [0, ", shape.steps, "]"));
      }
      lengths[b] = static_cast<int32_t>(v);
      full = full && v == shape.steps;
    }
    return absl::OkStatus();
  }

  // Whether Y and the final states have oneDNN's layouts already (tnc / ntc, ldnc), so the
  // primitive writes them in place; otherwise they go through the state's buffers.
  bool DirectStates() const {
    return spec_.num_directions == 1 || spec_.layout == RecurrentLayout::kSequenceMajor;
  }
  bool DirectY() const { return spec_.num_directions == 1; }

  // `sibling`: the same shapes' primitive at another thread count, if there is one: its packed
  // weights are shared when their layout is the same.
  absl::StatusOr<std::shared_ptr<const PreparedRnn>> Prepare(const Signature& sig,
                                                             const RecurrentWeights& weights,
                                                             const PreparedRnn* sibling) const {
    const int64_t d = spec_.num_directions, h = spec_.hidden, g = spec_.gates();
    const int64_t t = sig.steps, b = sig.batch, in = sig.input;
    const bool lstm = spec_.cell == RecurrentCell::kLstm;
    const bool batch_major = spec_.layout == RecurrentLayout::kBatchMajor ||
                             spec_.layout == RecurrentLayout::kOpenVinoSequence;
    auto op = std::make_shared<PreparedRnn>();
    op->descs.resize(kNumArgs);
    auto& desc = op->descs;
    desc[kSrcLayer] = dnnl::memory::desc({t, b, in}, dt::f32, batch_major ? tag::ntc : tag::tnc);
    const dnnl::memory::desc states({1, d, b, h}, dt::f32, tag::ldnc);
    if (sig.h0) desc[kSrcIter] = states;
    if (lstm && sig.c0) desc[kSrcIterC] = states;
    const dnnl::memory::desc any_layer({1, d, in, g, h}, dt::f32, tag::any);
    const dnnl::memory::desc any_iter({1, d, h, g, h}, dt::f32, tag::any);
    op->user_layer = dnnl::memory::desc({1, d, in, g, h}, dt::f32, tag::ldgoi);
    op->user_iter = dnnl::memory::desc({1, d, h, g, h}, dt::f32, tag::ldgoi);
    if (lstm && weights.peephole.defined()) {
      desc[kPeephole] = dnnl::memory::desc({1, d, 3, h}, dt::f32, tag::ldgo);
    }
    desc[kBias] = dnnl::memory::desc({1, d, spec_.bias_gates(), h}, dt::f32, tag::ldgo);
    desc[kDstLayer] =
        dnnl::memory::desc({t, b, d * h}, dt::f32, DirectY() && batch_major ? tag::ntc : tag::tnc);
    desc[kDstIter] = states;
    if (lstm) desc[kDstIterC] = states;
    const dnnl::rnn_direction direction = d == 2 ? dnnl::rnn_direction::bidirectional_concat
                                          : spec_.reverse
                                              ? dnnl::rnn_direction::unidirectional_right2left
                                              : dnnl::rnn_direction::unidirectional_left2right;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::prop_kind prop = dnnl::prop_kind::forward_inference;
    dnnl::memory::desc layer_desc, iter_desc;
    switch (spec_.cell) {
      case RecurrentCell::kLstm: {
        dnnl::lstm_forward::primitive_desc pd(
            dnnl::lstm_forward::desc(prop, direction, desc[kSrcLayer], desc[kSrcIter],
                                     desc[kSrcIterC], any_layer, any_iter, desc[kPeephole],
                                     desc[kBias], desc[kDstLayer], desc[kDstIter], desc[kDstIterC]),
            attr, CpuEngine());
        op->primitive = dnnl::lstm_forward(pd);
        layer_desc = pd.weights_layer_desc();
        iter_desc = pd.weights_iter_desc();
        desc[kScratchpad] = pd.scratchpad_desc();
        break;
      }
      case RecurrentCell::kGru:
        if (spec_.linear_before_reset) {
          dnnl::lbr_gru_forward::primitive_desc pd(
              dnnl::lbr_gru_forward::desc(prop, direction, desc[kSrcLayer], desc[kSrcIter],
                                          any_layer, any_iter, desc[kBias], desc[kDstLayer],
                                          desc[kDstIter]),
              attr, CpuEngine());
          op->primitive = dnnl::lbr_gru_forward(pd);
          layer_desc = pd.weights_layer_desc();
          iter_desc = pd.weights_iter_desc();
          desc[kScratchpad] = pd.scratchpad_desc();
        } else {
          dnnl::gru_forward::primitive_desc pd(
              dnnl::gru_forward::desc(prop, direction, desc[kSrcLayer], desc[kSrcIter], any_layer,
                                      any_iter, desc[kBias], desc[kDstLayer], desc[kDstIter]),
              attr, CpuEngine());
          op->primitive = dnnl::gru_forward(pd);
          layer_desc = pd.weights_layer_desc();
          iter_desc = pd.weights_iter_desc();
          desc[kScratchpad] = pd.scratchpad_desc();
        }
        break;
      case RecurrentCell::kRnn: {
        dnnl::vanilla_rnn_forward::primitive_desc pd(
            dnnl::vanilla_rnn_forward::desc(prop, dnnl_.activation, direction, desc[kSrcLayer],
                                            desc[kSrcIter], any_layer, any_iter, desc[kBias],
                                            desc[kDstLayer], desc[kDstIter], dnnl::rnn_flags::undef,
                                            dnnl_.alpha),
            attr, CpuEngine());
        op->primitive = dnnl::vanilla_rnn_forward(pd);
        layer_desc = pd.weights_layer_desc();
        iter_desc = pd.weights_iter_desc();
        desc[kScratchpad] = pd.scratchpad_desc();
        break;
      }
    }
    desc[kWeightsLayer] = layer_desc;
    desc[kWeightsIter] = iter_desc;
    op->scratchpad_bytes = desc[kScratchpad].get_size();
    if (weights_ != nullptr) {
      op->packed_layer = Packed(weights_->w, op->user_layer, layer_desc, sibling,
                                &PreparedRnn::packed_layer, kWeightsLayer);
      op->packed_iter = Packed(weights_->r, op->user_iter, iter_desc, sibling,
                               &PreparedRnn::packed_iter, kWeightsIter);
    }
    return std::shared_ptr<const PreparedRnn>(std::move(op));
  }

  // Constant weights in the layout `to`: the sibling's when it has them so, else reordered.
  static std::shared_ptr<const Tensor> Packed(const Tensor& canonical,
                                              const dnnl::memory::desc& from,
                                              const dnnl::memory::desc& to,
                                              const PreparedRnn* sibling,
                                              std::shared_ptr<const Tensor> PreparedRnn::*packed,
                                              ArgIndex arg) {
    if (sibling != nullptr && sibling->descs[arg] == to) return sibling->*packed;
    auto tensor = std::make_shared<Tensor>();
    Reorder(canonical, from, to, *tensor);
    return tensor;
  }

  static void Reorder(const Tensor& canonical, const dnnl::memory::desc& from,
                      const dnnl::memory::desc& to, Tensor& packed) {
    packed.Resize(DataType::kUint8, Shape{static_cast<int64_t>(to.get_size())});
    dnnl::memory src(from, CpuEngine(), const_cast<void*>(canonical.raw_data()));
    dnnl::memory dst(to, CpuEngine(), packed.mutable_raw_data());
    dnnl::stream stream(CpuEngine());
    dnnl::reorder(src, dst).execute(stream, src, dst);
    stream.wait();
  }

  absl::StatusOr<std::shared_ptr<const PreparedRnn>> Lookup(const Signature& sig,
                                                            const RecurrentWeights& weights) const {
    std::shared_ptr<const PreparedRnn> sibling;
    {
      absl::ReaderMutexLock lock(&mu_);
      auto it = cache_.find(sig);
      if (it != cache_.end()) return it->second;
      for (const auto& [other, op] : cache_) {
        if (other.SameShapes(sig)) sibling = op;
      }
    }
    std::shared_ptr<const PreparedRnn> op;
    try {
      LS_ASSIGN_OR_RETURN(op, Prepare(sig, weights, sibling.get()));
    } catch (const dnnl::error& e) {
      return FromDnnlError(e);
    }
    CountDnnlPrimitiveCreation();
    absl::MutexLock lock(&mu_);
    if (cache_.size() >= kMaxCachedSignatures) return op;
    return cache_.emplace(sig, std::move(op)).first->second;
  }

  absl::Status RunDnnl(KernelContext& ctx, const RecurrentWeights& weights,
                       const RecurrentShape& shape, const native::RecurrentIo& io,
                       RecurrentState& state) const {
    const int64_t d = spec_.num_directions, h = spec_.hidden;
    const bool lstm = spec_.cell == RecurrentCell::kLstm;
    // oneDNN's LSTM takes both initial states or neither: a missing one is zeros.
    const bool initial = io.h0 != nullptr || io.c0 != nullptr;
    // The primitive is created for the thread count it runs at (the Loop's thread mode sets it);
    // a layer too small to pay for an OpenMP fork is created and run on one thread.
    const double work = static_cast<double>(shape.steps) * static_cast<double>(shape.batch) * d *
                        spec_.gates() * h * static_cast<double>(h + shape.input);
    ScopedOneOpenMpThread one_thread(work < static_cast<double>(kOpenMpParallelWork));
    const int threads = omp_get_max_threads();
    Signature sig{shape.steps, shape.batch, shape.input, initial, lstm && initial, threads};
    BoundRnn& bound = state.bound[threads > 1 ? 1 : 0];
    LS_RETURN_IF_ERROR(Bind(sig, weights, bound));
    const PreparedRnn& op = *bound.op;
    const bool cell = spec_.layout == RecurrentLayout::kOpenVinoCell;
    const int64_t state_elems = d * shape.batch * h;

    // Handles for every argument of the signature.
    void* handles[kNumArgs] = {};
    handles[kSrcLayer] = const_cast<float*>(io.x);
    if (sig.h0) handles[kSrcIter] = StateOrZeros(io.h0, shape, state.src_iter);
    if (sig.c0) handles[kSrcIterC] = StateOrZeros(io.c0, shape, state.src_iter_c);
    if (weights_ != nullptr) {
      handles[kWeightsLayer] = const_cast<void*>(op.packed_layer->raw_data());
      handles[kWeightsIter] = const_cast<void*>(op.packed_iter->raw_data());
    } else {
      Reorder(weights.w, op.user_layer, op.descs[kWeightsLayer], state.packed_layer);
      Reorder(weights.r, op.user_iter, op.descs[kWeightsIter], state.packed_iter);
      handles[kWeightsLayer] = state.packed_layer.mutable_raw_data();
      handles[kWeightsIter] = state.packed_iter.mutable_raw_data();
    }
    if (weights.peephole.defined()) {
      handles[kPeephole] = const_cast<void*>(weights.peephole.raw_data());
    }
    handles[kBias] = const_cast<void*>(weights.bias.raw_data());
    // A cell has no Y: its one step's output is Ho, which dst_iter writes.
    float* dst_layer = !cell && DirectY() && io.y != nullptr
                           ? io.y
                           : Buffer(state.dst_layer, shape.steps * shape.batch * d * h);
    handles[kDstLayer] = dst_layer;
    float* dst_iter_c = nullptr;
    float* dst_iter =
        DirectStates() && io.y_h != nullptr ? io.y_h : Buffer(state.dst_iter, state_elems);
    handles[kDstIter] = dst_iter;
    if (lstm) {
      dst_iter_c =
          DirectStates() && io.y_c != nullptr ? io.y_c : Buffer(state.dst_iter_c, state_elems);
      handles[kDstIterC] = dst_iter_c;
    }
    DnnlRunResource& run = ctx.run_context().Resource<DnnlRunResource>();
    if (op.scratchpad_bytes > 0) handles[kScratchpad] = run.Scratchpad(op.scratchpad_bytes);
    size_t m = 0;
    try {
      for (int a = 0; a < kNumArgs; ++a) {
        if (op.descs[a].is_zero()) continue;
        bound.memories[m++].set_data_handle(handles[a]);
      }
    } catch (const dnnl::error& e) {
      return FromDnnlError(e);
    }
    const dnnl_status_t status =
        dnnl_primitive_execute(op.primitive.get(), run.stream().get(),
                               static_cast<int>(bound.args.size()), bound.args.data());
    if (status != dnnl_success) {
      return absl::InternalError(absl::StrCat("oneDNN execution failed (status ", status, ")"));
    }

    CopyOutOfDnnlLayouts(shape, io, dst_layer, dst_iter, dst_iter_c);
    return absl::OkStatus();
  }

  // The prepared op for `sig` bound into `bound` (its memories and argument table), unless it
  // is bound already.
  absl::Status Bind(const Signature& sig, const RecurrentWeights& weights, BoundRnn& bound) const {
    if (bound.op != nullptr && bound.signature == sig) return absl::OkStatus();
    bound.op = nullptr;
    LS_ASSIGN_OR_RETURN(std::shared_ptr<const PreparedRnn> op, Lookup(sig, weights));
    bound.memories.clear();
    bound.args.clear();
    for (int a = 0; a < kNumArgs; ++a) {
      if (op->descs[a].is_zero()) continue;
      bound.memories.emplace_back(op->descs[a], CpuEngine(), static_cast<void*>(DNNL_MEMORY_NONE));
      bound.args.push_back({kArgs[a], bound.memories.back().get()});
    }
    bound.signature = sig;
    bound.op = std::move(op);
    return absl::OkStatus();
  }

  // The outputs whose layout differs from oneDNN's, copied from its buffers.
  void CopyOutOfDnnlLayouts(const RecurrentShape& shape, const native::RecurrentIo& io,
                            const float* dst_layer, const float* dst_iter,
                            const float* dst_iter_c) const {
    const int64_t d = spec_.num_directions, h = spec_.hidden;
    const bool cell = spec_.layout == RecurrentLayout::kOpenVinoCell;
    if (!cell && io.y != nullptr && dst_layer != io.y) {
      // dst_layer [T, B, D*H] -> Y.
      for (int64_t t = 0; t < shape.steps; ++t) {
        for (int64_t b = 0; b < shape.batch; ++b) {
          for (int64_t dir = 0; dir < d; ++dir) {
            std::memcpy(io.y + t * shape.y_t + dir * shape.y_d + b * shape.y_b,
                        dst_layer + ((t * shape.batch + b) * d + dir) * h, sizeof(float) * h);
          }
        }
      }
    }
    if (io.y_h != nullptr && dst_iter != nullptr && dst_iter != io.y_h) {
      FromLdnc(dst_iter, shape, io.y_h);
    }
    if (io.y_c != nullptr && dst_iter_c != nullptr && dst_iter_c != io.y_c) {
      FromLdnc(dst_iter_c, shape, io.y_c);
    }
  }

  static float* Buffer(Tensor& t, int64_t elements) {
    t.Resize(DataType::kFloat32, Shape{elements});
    return t.mutable_data<float>();
  }

  // An initial state in oneDNN's [D, B, H]: the input itself when its layout is that already,
  // zeros when it is absent.
  void* StateOrZeros(const float* s, const RecurrentShape& shape, Tensor& buffer) const {
    const int64_t d = spec_.num_directions, h = spec_.hidden;
    if (s == nullptr) {
      float* zeros = Buffer(buffer, d * shape.batch * h);
      std::fill_n(zeros, d * shape.batch * h, 0.0f);
      return zeros;
    }
    if (DirectStates()) return const_cast<float*>(s);
    float* out = Buffer(buffer, d * shape.batch * h);
    for (int64_t dir = 0; dir < d; ++dir) {
      for (int64_t b = 0; b < shape.batch; ++b) {
        std::memcpy(out + (dir * shape.batch + b) * h, s + dir * shape.s_d + b * shape.s_b,
                    sizeof(float) * h);
      }
    }
    return out;
  }

  void FromLdnc(const float* s, const RecurrentShape& shape, float* out) const {
    const int64_t d = spec_.num_directions, h = spec_.hidden;
    for (int64_t dir = 0; dir < d; ++dir) {
      for (int64_t b = 0; b < shape.batch; ++b) {
        std::memcpy(out + dir * shape.s_d + b * shape.s_b, s + (dir * shape.batch + b) * h,
                    sizeof(float) * h);
      }
    }
  }

  static constexpr size_t kMaxCachedSignatures = 64;

  const RecurrentSpec spec_;
  const DnnlMapping dnnl_;
  const std::vector<bool> has_output_;
  std::shared_ptr<const RecurrentWeights> weights_;  // null: converted per run
  mutable absl::Mutex mu_;
  mutable absl::flat_hash_map<Signature, std::shared_ptr<const PreparedRnn>> cache_
      ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::vector<float>> GetFloats(const Node& node, const std::string& name) {
  const Attribute* a = node.FindAttribute(name);
  if (a == nullptr) return std::vector<float>{};
  if (a->type != Attribute::Type::kFloats) {
    return absl::InvalidArgumentError(absl::StrCat("attribute '", name, "' is not a float list"));
  }
  return a->floats;
}

absl::StatusOr<std::vector<std::string>> GetStrings(const Node& node, const std::string& name) {
  const Attribute* a = node.FindAttribute(name);
  if (a == nullptr) return std::vector<std::string>{};
  if (a->type != Attribute::Type::kStrings) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute '", name, "' is not a list of strings"));
  }
  return a->strings;
}

// The direction and layout attributes (ONNX's, or the OpenVINO importer's internal _layout).
absl::Status ReadDirectionAndLayout(const Node& node, RecurrentSpec& spec) {
  LS_ASSIGN_OR_RETURN(const std::string direction, node.GetString("direction", "forward"));
  if (direction == "forward") {
    spec.num_directions = 1;
  } else if (direction == "reverse") {
    spec.num_directions = 1;
    spec.reverse = true;
  } else if (direction == "bidirectional") {
    spec.num_directions = 2;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("direction '", direction, "' is not forward, reverse or bidirectional"));
  }
  LS_ASSIGN_OR_RETURN(const int64_t layout, node.GetInt("layout", 0));
  LS_ASSIGN_OR_RETURN(const int64_t internal_layout, node.GetInt("_layout", -1));
  if (internal_layout >= 0) {
    if (internal_layout != static_cast<int64_t>(RecurrentLayout::kOpenVinoSequence) &&
        internal_layout != static_cast<int64_t>(RecurrentLayout::kOpenVinoCell)) {
      return absl::InvalidArgumentError(absl::StrCat("_layout ", internal_layout));
    }
    spec.layout = static_cast<RecurrentLayout>(internal_layout);
  } else if (layout == 0 || layout == 1) {
    spec.layout = layout == 0 ? RecurrentLayout::kSequenceMajor : RecurrentLayout::kBatchMajor;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("layout ", layout, " is not 0 or 1"));
  }
  if (spec.layout == RecurrentLayout::kOpenVinoCell && spec.num_directions != 1) {
    return absl::InvalidArgumentError("a cell runs in one direction");
  }
  return absl::OkStatus();
}

// hidden_size, or R's last dim when the attribute is absent (ONNX makes it optional).
absl::Status ReadHidden(const KernelInit& init, RecurrentSpec& spec) {
  const Node& node = init.node();
  LS_ASSIGN_OR_RETURN(int64_t hidden, node.GetInt("hidden_size", -1));
  if (hidden < 0) {
    // ONNX makes hidden_size optional: R's last dim.
    const Tensor* r = init.constant_input(kR);
    const ValueType& rt = init.input_type(kR);
    if (r != nullptr && r->rank() >= 1) {
      hidden = r->dim(r->rank() - 1);
    } else if (rt.dims.has_value() && !rt.dims->empty() && rt.dims->back() >= 0) {
      hidden = rt.dims->back();
    } else {
      return absl::UnimplementedError("hidden_size is not given and R's shape is not known");
    }
  }
  constexpr int64_t kMaxHidden = int64_t{1} << 20;
  if (hidden < 1 || hidden > kMaxHidden) {
    return absl::InvalidArgumentError(absl::StrCat("hidden_size ", hidden, " is out of range"));
  }
  spec.hidden = hidden;
  return absl::OkStatus();
}

// clip, input_forget, linear_before_reset and the importers' _gate_order and _bias_summed.
absl::Status ReadCellAttributes(const Node& node, RecurrentSpec& spec) {
  const RecurrentCell cell = spec.cell;
  LS_ASSIGN_OR_RETURN(const float clip, node.GetFloat("clip", 0.0f));
  // 0 is OpenVINO's "no clip"; ONNX has no default (absent: no clip).
  if (clip < 0) return absl::InvalidArgumentError(absl::StrCat("clip ", clip, " is negative"));
  spec.clip = clip;
  LS_ASSIGN_OR_RETURN(const int64_t input_forget, node.GetInt("input_forget", 0));
  spec.input_forget = cell == RecurrentCell::kLstm && input_forget != 0;
  LS_ASSIGN_OR_RETURN(const int64_t lbr, node.GetInt("linear_before_reset", 0));
  spec.linear_before_reset = cell == RecurrentCell::kGru && lbr != 0;
  const char* default_order = cell == RecurrentCell::kLstm  ? "iofc"
                              : cell == RecurrentCell::kGru ? "zrh"
                                                            : "i";
  LS_ASSIGN_OR_RETURN(spec.gate_order, node.GetString("_gate_order", default_order));
  {
    std::string sorted = spec.gate_order, expected = default_order;
    std::sort(sorted.begin(), sorted.end());
    std::sort(expected.begin(), expected.end());
    if (sorted != expected) {
      return absl::InvalidArgumentError(absl::StrCat("gate order '", spec.gate_order,
                                                     "' is not an order of '", default_order, "'"));
    }
  }
  LS_ASSIGN_OR_RETURN(const int64_t summed, node.GetInt("_bias_summed", 0));
  spec.bias_summed = summed != 0;

  return absl::OkStatus();
}

// The activations with their alphas and betas (the defaults when absent; one set given for a
// bidirectional layer serves both directions).
absl::Status ReadActivations(const Node& node, RecurrentSpec& spec) {
  const RecurrentCell cell = spec.cell;
  LS_ASSIGN_OR_RETURN(std::vector<std::string> names, GetStrings(node, "activations"));
  LS_ASSIGN_OR_RETURN(std::vector<float> alphas, GetFloats(node, "activation_alpha"));
  LS_ASSIGN_OR_RETURN(std::vector<float> betas, GetFloats(node, "activation_beta"));
  const int f = spec.functions();
  if (names.empty()) {
    const std::vector<std::string> defaults =
        cell == RecurrentCell::kLstm  ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
        : cell == RecurrentCell::kGru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                      : std::vector<std::string>{"Tanh"};
    for (int d = 0; d < spec.num_directions; ++d) {
      names.insert(names.end(), defaults.begin(), defaults.end());
    }
  } else if (spec.num_directions == 2 && static_cast<int>(names.size()) == f) {
    // One set for both directions (as ONNX Runtime reads it).
    const std::vector<std::string> one_set = names;
    names.insert(names.end(), one_set.begin(), one_set.end());
    const std::vector<float> a = alphas, b = betas;
    alphas.insert(alphas.end(), a.begin(), a.end());
    betas.insert(betas.end(), b.begin(), b.end());
  }
  if (static_cast<int>(names.size()) != f * spec.num_directions) {
    return absl::InvalidArgumentError(absl::StrCat(
        "activations lists ", names.size(), " functions, expected ", f * spec.num_directions));
  }
  LS_ASSIGN_OR_RETURN(spec.activations, native::ParseRecurrentActivations(names, alphas, betas));

  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateRecurrentKernel(RecurrentCell cell,
                                                              const KernelInit& init) {
  const Node& node = init.node();
  const int max_inputs = cell == RecurrentCell::kLstm ? 8 : 6;
  const int outputs = cell == RecurrentCell::kLstm ? 3 : 2;
  if (init.num_inputs() < 3 || init.num_inputs() > max_inputs ||
      static_cast<int>(node.outputs.size()) > outputs) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected 3 to ", max_inputs, " inputs and at most ", outputs,
                     " outputs, got ", init.num_inputs(), " and ", node.outputs.size()));
  }
  for (int i : {kX, kW, kR}) {
    if (!init.has_input(i)) return absl::InvalidArgumentError("inputs X, W and R are required");
  }
  RecurrentSpec spec;
  spec.cell = cell;
  LS_RETURN_IF_ERROR(ReadDirectionAndLayout(node, spec));
  LS_RETURN_IF_ERROR(ReadHidden(init, spec));
  LS_RETURN_IF_ERROR(ReadCellAttributes(node, spec));
  LS_RETURN_IF_ERROR(ReadActivations(node, spec));
  std::vector<bool> has_output(3, false);
  for (size_t k = 0; k < node.outputs.size(); ++k) has_output[k] = node.outputs[k] != kNoValue;
  auto kernel = std::make_unique<RecurrentKernel>(std::move(spec), std::move(has_output));
  LS_RETURN_IF_ERROR(kernel->PrepareWeights(init));
  return kernel;
}

}  // namespace

void RegisterDnnlRecurrentKernels(KernelRegistry& registry) {
  registry.Register("RNN", [](const KernelInit& init) {
    return CreateRecurrentKernel(RecurrentCell::kRnn, init);
  });
  registry.Register("GRU", [](const KernelInit& init) {
    return CreateRecurrentKernel(RecurrentCell::kGru, init);
  });
  registry.Register("LSTM", [](const KernelInit& init) {
    return CreateRecurrentKernel(RecurrentCell::kLstm, init);
  });
}

}  // namespace loopserve::engine
