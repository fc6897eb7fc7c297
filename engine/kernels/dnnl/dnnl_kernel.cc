#include "engine/kernels/dnnl/dnnl_kernel.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/dnnl/dnnl_util.h"
#include "engine/kernels/reference/broadcast.h"
#include "engine/runtime/execution_frame.h"
#include "engine/runtime/plan.h"
#include "engine/runtime/run_context.h"
#include "engine/runtime/spin_team.h"
#include "engine/runtime/thread_mode.h"

namespace loopserve::engine {
namespace {

std::atomic<int64_t> g_creations{0};
std::atomic<int64_t> g_small_tensor_limit{kDefaultDnnlSmallTensorLimit};
std::atomic<int64_t> g_native_elementwise_limit{kNativeElementwiseLimit};

}  // namespace

int64_t DnnlPrimitiveCreationCount() { return g_creations.load(std::memory_order_relaxed); }

void CountDnnlPrimitiveCreation() { g_creations.fetch_add(1, std::memory_order_relaxed); }

void SetDnnlSmallTensorLimit(int64_t elements) {
  g_small_tensor_limit.store(elements, std::memory_order_relaxed);
}
int64_t DnnlSmallTensorLimit() { return g_small_tensor_limit.load(std::memory_order_relaxed); }

void SetNativeElementwiseLimit(int64_t elements) {
  g_native_elementwise_limit.store(elements, std::memory_order_relaxed);
}
int64_t NativeElementwiseLimit() {
  return g_native_elementwise_limit.load(std::memory_order_relaxed);
}

bool IsDnnlReferenceImpl(absl::string_view impl_name) {
  // The part before ':' is the implementation, after it the ISA ("any" for plain C++).
  const absl::string_view impl = impl_name.substr(0, impl_name.find(':'));
  return impl == "ref" || absl::StartsWith(impl, "ref_") || absl::EndsWith(impl, "_ref");
}

std::string DnnlImplName(const dnnl::primitive& primitive) {
  if (!primitive) return "";
  const char* name = nullptr;
  if (dnnl_primitive_desc_query(primitive.get_primitive_desc(), dnnl_query_impl_info_str, 0,
                                &name) != dnnl_success ||
      name == nullptr) {
    return "";
  }
  return name;
}

// The signature a frame ran last at one thread count, with its op bound to memory objects and an
// argument table.
struct DnnlKernel::Bound {
  bool Matches(DataType type, const Tensor* const* inputs, int num_inputs, int thread_count,
               int part_count) const {
    if (op == nullptr || type != dtype || thread_count != threads || part_count != parts) {
      return false;
    }
    for (int i = 0; i < num_inputs; ++i) {
      if ((inputs[i] != nullptr) != present[i]) return false;
      if (inputs[i] != nullptr && inputs[i]->shape() != shapes[i]) return false;
    }
    return true;
  }

  DataType dtype = DataType::kUndefined;
  int threads = 0;  // the calling thread's OpenMP thread count when bound
  int parts = 1;    // the engaged SpinTeam's size when bound (1: none)
  bool present[kMaxInputs] = {};
  Shape shapes[kMaxInputs];
  std::shared_ptr<const PreparedOp> op;
  std::vector<dnnl::memory> memories;  // one per op->bindings entry
  std::vector<dnnl_exec_arg_t> args;   // the same, as oneDNN's C argument table
  Tensor aux[kMaxAux];                 // op->expansions' broadcast copies
  // op->staging's buffers, this run's (DnnlRunResource::Staging: one area that every step of the
  // run shares, as the staged copies live only while the step runs), and memories: plain input 0,
  // staged source, staged destination, plain output 0 (all get their data handles on each run).
  void* staged[2] = {};
  dnnl::memory stage_memories[4];
  // Per op->row_parts entry: its memories and argument table.
  std::vector<std::vector<dnnl::memory>> part_memories;
  std::vector<std::vector<dnnl_exec_arg_t>> part_args;
};

// A step's state in one frame. A Loop may switch the thread it runs on between its intra-op team
// and one thread (engine/runtime/thread_mode.h), and a primitive keeps the thread count it was
// created for, so the frame keeps one binding for one thread, one for more, and one for one
// thread with an engaged SpinTeam (row-split products).
class DnnlKernel::State : public KernelState {
 public:
  Bound bound[3];                           // [0]: one thread, [1]: more, [2]: one + SpinTeam
  std::unique_ptr<ExecutionFrame> unfused;  // the unfused nodes' frame, made on first use
  uint64_t reference_counted_run = 0;       // RunContext::id of the run whose reference_steps
                                            // counts this step
};

DnnlKernel::DnnlKernel(int num_inputs, int required_inputs)
    : num_inputs_(num_inputs), required_inputs_(required_inputs) {}

std::unique_ptr<KernelState> DnnlKernel::CreateState() const { return std::make_unique<State>(); }

absl::Status DnnlKernel::Finish(const PreparedOp& /*op*/, KernelContext& /*ctx*/) const {
  return absl::OkStatus();
}

absl::Status DnnlKernel::RunNative(const PreparedOp& /*op*/, const Tensor* const* /*inputs*/,
                                   Tensor& /*out*/) const {
  return absl::InternalError("this kernel has no native mode");
}

bool DnnlKernel::SplitsRows(DataType /*type*/, absl::Span<const Shape* const> /*shapes*/,
                            int /*parts*/) const {
  return false;
}

void DnnlKernel::PrepareRowSplit(DataType /*type*/, absl::Span<const Shape* const> /*shapes*/,
                                 int /*parts*/, PreparedOp& /*op*/) const {}

bool DnnlKernel::UsesDnnl(DataType type) const {
  return type == DataType::kFloat32 || type == DataType::kFloat16 || type == DataType::kBFloat16;
}

dnnl::memory::desc DnnlKernel::Desc(absl::Span<const int64_t> dims, DataType type) {
  return PlainDesc(Shape(dims), ToDnnl(type));
}

dnnl::primitive_attr DnnlKernel::UserScratchpadAttr() {
  dnnl::primitive_attr attr;
  // A user scratchpad (the run's) lets one const primitive run on any thread concurrently.
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

bool DnnlKernel::AddStaging(const dnnl::memory::desc& plain_src,
                            const dnnl::memory::desc& staged_src,
                            const dnnl::memory::desc& staged_dst,
                            const dnnl::memory::desc& plain_dst, PreparedOp& op) {
  const dnnl::primitive_attr attr = UserScratchpadAttr();
  auto staging = std::make_unique<PreparedOp::Staging>();
  // A side whose layouts agree (a blocked chain's input or result) is bound directly, no reorder.
  if (plain_src != staged_src) {
    const dnnl::reorder::primitive_desc in(CpuEngine(), plain_src, CpuEngine(), staged_src, attr);
    if (in.scratchpad_desc().get_size() != 0) return false;
    staging->stage_in = dnnl::reorder(in);
  }
  if (plain_dst != staged_dst) {
    const dnnl::reorder::primitive_desc out(CpuEngine(), staged_dst, CpuEngine(), plain_dst, attr);
    if (out.scratchpad_desc().get_size() != 0) return false;
    staging->stage_out = dnnl::reorder(out);
  }
  staging->plain_src = plain_src;
  staging->staged_src = staged_src;
  staging->staged_dst = staged_dst;
  staging->plain_dst = plain_dst;
  op.staging = std::move(staging);
  return true;
}

void DnnlKernel::AddScratchpad(const dnnl::primitive_desc_base& pd, PreparedOp& op) {
  const dnnl::memory::desc scratchpad = pd.scratchpad_desc();
  op.scratchpad_bytes = scratchpad.get_size();
  if (op.scratchpad_bytes > 0) {
    op.bindings.push_back({DNNL_ARG_SCRATCHPAD, BufferSource::kScratchpad, scratchpad});
  }
}

void DnnlKernel::PackConstant(const Tensor& constant, const dnnl::memory::desc& plain,
                              const dnnl::memory::desc& packed, PreparedOp& op) const {
  {
    absl::MutexLock lock(&packed_mu_);
    for (const PackedConstant& entry : packed_) {
      if (entry.source == constant.raw_data() && entry.plain == plain && entry.packed == packed) {
        op.packed = entry.tensor;
        return;
      }
    }
  }
  // Reordered outside the lock (megabytes of weights take a while); a racing signature may pack
  // the same layout too, and then the first one kept is shared from there on.
  auto tensor =
      std::make_shared<Tensor>(DataType::kUint8, Shape{static_cast<int64_t>(packed.get_size())});
  dnnl::memory src(plain, CpuEngine(), const_cast<void*>(constant.raw_data()));
  dnnl::memory dst(packed, CpuEngine(), tensor->mutable_raw_data());
  dnnl::stream stream(CpuEngine());
  dnnl::reorder(src, dst).execute(stream, src, dst);
  stream.wait();
  op.packed = tensor;
  absl::MutexLock lock(&packed_mu_);
  for (const PackedConstant& entry : packed_) {
    if (entry.source == constant.raw_data() && entry.plain == plain && entry.packed == packed) {
      op.packed = entry.tensor;
      return;
    }
  }
  if (packed_.size() < kMaxPackedConstants) {
    packed_.push_back({constant.raw_data(), plain, packed, std::move(tensor)});
  }
}

int64_t DnnlKernel::Work(absl::Span<const Shape* const> shapes) const {
  int64_t work = 0;
  for (const Shape* shape : shapes) {
    if (shape != nullptr) work = std::max(work, shape->NumElements());
  }
  return work;
}

namespace {

// kPackedGemm's product: on the calling thread, or split into contiguous ranges of column panels
// over the OpenMP threads (`threads` > 1) or the engaged SpinTeam `team` when it is large enough
// to pay for the fork (kOpenMpParallelWork / DnnlKernel::kParallelWork multiply-adds).
// Every output element is computed by the same tile code either way (bitwise the same result).
// Returns whether it split over the team.
bool RunPackedGemm(const PreparedOp& op, const Tensor* const* inputs, int threads, SpinTeam* team,
                   float* y) {
  const native::PackedGemm& gemm = *op.gemm;
  const float* x = inputs[0]->data<float>();
  native::PackedGemm::Epilogue epilogue;
  if (op.gemm_bias_input >= 0) epilogue.bias = inputs[op.gemm_bias_input]->data<float>();
  if (op.gemm_addend_input >= 0) epilogue.addend = inputs[op.gemm_addend_input]->data<float>();
  epilogue.activation = op.gemm_activation;
  epilogue.bias_first = op.gemm_bias_first;
  epilogue.bias_scale = op.gemm_bias_scale;
  const int64_t panels = gemm.panels();
  const int parts = team != nullptr ? team->size() : threads;
  const int64_t min_work = team != nullptr ? DnnlKernel::kParallelWork : kOpenMpParallelWork;
  if (parts <= 1 || panels < 2 || op.gemm_rows * gemm.k() * gemm.n() < min_work) {
    gemm.Run(x, op.gemm_rows, epilogue, y);
    return false;
  }
  const int chunks = static_cast<int>(std::min<int64_t>(parts, panels));
  auto run_chunk = [&](int chunk) {
    gemm.RunPanels(x, op.gemm_rows, epilogue, y, panels * chunk / chunks,
                   panels * (chunk + 1) / chunks);
  };
  if (team != nullptr) {
    team->ParallelFor(chunks, run_chunk);
    return true;
  }
#pragma omp parallel for num_threads(chunks) schedule(static, 1)
  for (int chunk = 0; chunk < chunks; ++chunk) run_chunk(chunk);
  return false;
}

// op.epilogue over output 0 in place (no-op without one).
void RunEpilogue(const PreparedOp& op, const Tensor* const* inputs, Tensor* out) {
  if (op.epilogue == nullptr) return;
  const float* operands[native::ElementwiseChain::kMaxOperands] = {};
  operands[0] = out->data<float>();
  const int count = op.epilogue->num_operands();
  for (int k = 1; k < count; ++k) operands[k] = inputs[op.epilogue_inputs[k - 1]]->data<float>();
  op.epilogue->Run(op.epilogue_prepared, absl::MakeConstSpan(operands, count),
                   out->mutable_data<float>());
}

}  // namespace

absl::StatusOr<std::shared_ptr<const PreparedOp>> DnnlKernel::Lookup(DataType type,
                                                                     const Shape* const* shapes,
                                                                     int threads, int parts) const {
  const bool single_threaded =
      threads <= 1 || Work(absl::MakeConstSpan(shapes, num_inputs_)) < kOpenMpParallelWork;
  if (parts > 1 && !SplitsRows(type, absl::MakeConstSpan(shapes, num_inputs_), parts)) parts = 1;
  Key key;
  key.push_back(static_cast<int64_t>(type));
  // A primitive plans for the thread count it is created with: one op per count.
  key.push_back(single_threaded ? 1 : threads);
  key.push_back(parts);
  for (int i = 0; i < num_inputs_; ++i) {
    if (shapes[i] == nullptr) {
      key.push_back(-1);
      continue;
    }
    key.push_back(shapes[i]->rank());
    key.insert(key.end(), shapes[i]->dims().begin(), shapes[i]->dims().end());
  }
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
  }
  // Prepared outside the lock: creation takes 20-300 us and other signatures need not wait.
  std::shared_ptr<PreparedOp> op;
  try {
    ScopedOneOpenMpThread scope(single_threaded && threads > 1);
    absl::StatusOr<std::unique_ptr<PreparedOp>> prepared =
        Prepare(type, absl::MakeConstSpan(shapes, num_inputs_));
    if (!prepared.ok()) return prepared.status();
    op = std::move(*prepared);
    op->single_threaded = single_threaded;
    if (parts > 1 && op->mode == PreparedOp::Mode::kExecute) {
      PrepareRowSplit(type, absl::MakeConstSpan(shapes, num_inputs_), parts, *op);
    }
  } catch (const dnnl::error& e) {
    if (e.status != dnnl_unimplemented) return FromDnnlError(e);
    op = std::make_shared<PreparedOp>();
    op->mode = PreparedOp::Mode::kReference;
  }
  if (op->mode == PreparedOp::Mode::kExecute) {
    g_creations.fetch_add(1, std::memory_order_relaxed);
    op->reference_impl = IsDnnlReferenceImpl(DnnlImplName(op->primitive));
    for (const PreparedOp::RowPart& part : op->row_parts) {
      op->reference_impl = op->reference_impl || IsDnnlReferenceImpl(DnnlImplName(part.primitive));
    }
  }
  absl::MutexLock lock(&mu_);
  if (cache_.size() >= kMaxCachedSignatures) return std::shared_ptr<const PreparedOp>(op);
  // A racing frame may have inserted the same signature; keep the first.
  return cache_.emplace(std::move(key), std::move(op)).first->second;
}

absl::Status DnnlKernel::Bind(DataType type, const Tensor* const* inputs, int threads, int parts,
                              Bound& state) const {
  state.op = nullptr;
  const Shape* shapes[kMaxInputs] = {};
  for (int i = 0; i < num_inputs_; ++i) {
    if (inputs[i] != nullptr) shapes[i] = &inputs[i]->shape();
  }
  LS_ASSIGN_OR_RETURN(std::shared_ptr<const PreparedOp> op, Lookup(type, shapes, threads, parts));
  state.memories.clear();
  state.args.clear();
  state.part_memories.resize(op->row_parts.size());
  state.part_args.resize(op->row_parts.size());
  for (size_t p = 0; p < op->row_parts.size(); ++p) {
    std::vector<dnnl::memory>& memories = state.part_memories[p];
    std::vector<dnnl_exec_arg_t>& args = state.part_args[p];
    memories.clear();
    args.clear();
    memories.reserve(op->row_parts[p].bindings.size());
    for (const ArgBinding& binding : op->row_parts[p].bindings) {
      memories.emplace_back(binding.desc, CpuEngine(), static_cast<void*>(DNNL_MEMORY_NONE));
      args.push_back({binding.arg, memories.back().get()});
    }
  }
  if (op->mode == PreparedOp::Mode::kExecute) {
    state.memories.reserve(op->bindings.size());
    state.args.reserve(op->bindings.size());
    for (const ArgBinding& binding : op->bindings) {
      state.memories.emplace_back(binding.desc, CpuEngine(), static_cast<void*>(DNNL_MEMORY_NONE));
      state.args.push_back({binding.arg, state.memories.back().get()});
    }
    for (size_t k = 0; k < op->expansions.size(); ++k) {
      state.aux[k].Resize(type, op->expansions[k].shape);
    }
    if (op->staging != nullptr) {
      const PreparedOp::Staging& staging = *op->staging;
      state.stage_memories[0] =
          dnnl::memory(staging.plain_src, CpuEngine(), static_cast<void*>(DNNL_MEMORY_NONE));
      state.stage_memories[1] =
          dnnl::memory(staging.staged_src, CpuEngine(), static_cast<void*>(DNNL_MEMORY_NONE));
      state.stage_memories[2] =
          dnnl::memory(staging.staged_dst, CpuEngine(), static_cast<void*>(DNNL_MEMORY_NONE));
      state.stage_memories[3] =
          dnnl::memory(staging.plain_dst, CpuEngine(), static_cast<void*>(DNNL_MEMORY_NONE));
    }
  }
  state.dtype = type;
  state.threads = threads;
  state.parts = parts;
  for (int i = 0; i < num_inputs_; ++i) {
    state.present[i] = inputs[i] != nullptr;
    if (inputs[i] != nullptr) state.shapes[i] = inputs[i]->shape();
  }
  state.op = std::move(op);
  return absl::OkStatus();
}

absl::Status DnnlKernel::Run(KernelContext& ctx) const {
  const Tensor* inputs[kMaxInputs] = {};
  DataType type = DataType::kUndefined;
  for (int i = 0; i < num_inputs_; ++i) {
    if (!ctx.has_input(i)) {
      if (i < required_inputs_) {
        return absl::InvalidArgumentError(absl::StrCat("input ", i, " is required"));
      }
      continue;
    }
    inputs[i] = &ctx.input(i);
    if (type == DataType::kUndefined) {
      type = inputs[i]->dtype();
    } else if (inputs[i]->dtype() != type) {
      return absl::InvalidArgumentError(absl::StrCat("inputs have element types ",
                                                     DataTypeName(type), " and ",
                                                     DataTypeName(inputs[i]->dtype())));
    }
  }
  State& frame_state = *ctx.state<State>();
  if (!UsesDnnl(type)) return RunFallback(ctx, type, frame_state);

  const int threads = omp_get_max_threads();
  SpinTeam* team = threads == 1 ? SpinTeam::Engaged() : nullptr;
  const int parts = team != nullptr ? team->size() : 1;
  Bound& state = frame_state.bound[parts > 1 ? 2 : threads > 1 ? 1 : 0];
  if (!state.Matches(type, inputs, num_inputs_, threads, parts)) {
    try {
      LS_RETURN_IF_ERROR(Bind(type, inputs, threads, parts, state));
    } catch (const dnnl::error& e) {
      return FromDnnlError(e);
    }
  }
  const PreparedOp& op = *state.op;
  switch (op.mode) {
    case PreparedOp::Mode::kReference:
      return RunFallback(ctx, type, frame_state);
    case PreparedOp::Mode::kEmpty:
      ctx.output(0, type, op.output_shape);
      for (size_t k = 0; k < op.extra_outputs.size(); ++k) {
        ctx.output(static_cast<int>(k) + 1, op.extra_outputs[k].first, op.extra_outputs[k].second);
      }
      return absl::OkStatus();
    case PreparedOp::Mode::kZeroFill: {
      Tensor* out = ctx.output(0, type, op.output_shape);
      std::memset(out->mutable_raw_data(), 0, out->ByteSize());
      RunEpilogue(op, inputs, out);
      return absl::OkStatus();
    }
    case PreparedOp::Mode::kPackedGemv: {
      Tensor* out = ctx.output(0, type, op.output_shape);
      const float* bias =
          op.gemv_bias_input >= 0 ? inputs[op.gemv_bias_input]->data<float>() : nullptr;
      op.gemv->Run(inputs[0]->data<float>(), bias, out->mutable_data<float>());
      RunEpilogue(op, inputs, out);
      return absl::OkStatus();
    }
    case PreparedOp::Mode::kNativeCustom: {
      Tensor* out = ctx.output(0, type, op.output_shape);
      LS_RETURN_IF_ERROR(RunNative(op, inputs, *out));
      RunEpilogue(op, inputs, out);
      return absl::OkStatus();
    }
    case PreparedOp::Mode::kPackedGemm: {
      Tensor* out = ctx.output(0, type, op.output_shape);
      if (RunPackedGemm(op, inputs, threads, team, out->mutable_data<float>())) {
        ++ctx.run_context().stats().team_splits;
      }
      RunEpilogue(op, inputs, out);
      return absl::OkStatus();
    }
    case PreparedOp::Mode::kBatchedGemv: {
      Tensor* out = ctx.output(0, type, op.output_shape);
      op.batched_gemv->Run(inputs[0]->data<float>(), inputs[1]->data<float>(),
                           out->mutable_data<float>());
      RunEpilogue(op, inputs, out);
      return absl::OkStatus();
    }
    case PreparedOp::Mode::kNative: {
      Tensor* out = ctx.output(0, type, op.output_shape);
      const float* operands[native::ElementwiseChain::kMaxOperands] = {};
      const int count = op.chain->num_operands();
      for (int i = 0; i < count; ++i) operands[i] = inputs[i]->data<float>();
      op.chain->Run(op.chain_prepared, absl::MakeConstSpan(operands, count),
                    out->mutable_data<float>());
      return absl::OkStatus();
    }
    case PreparedOp::Mode::kExecute:
      break;
  }
  if (op.reference_impl) CountReferenceStep(ctx, frame_state);

  Tensor* out = ctx.output(0, type, op.output_shape);
  Tensor* extra[2] = {};
  for (size_t k = 0; k < op.extra_outputs.size() && k < 2; ++k) {
    extra[k] =
        ctx.output(static_cast<int>(k) + 1, op.extra_outputs[k].first, op.extra_outputs[k].second);
  }
  DnnlRunResource& run = ctx.run_context().Resource<DnnlRunResource>();
  const size_t element_size = DataTypeSize(type);
  for (size_t k = 0; k < op.expansions.size(); ++k) {
    const Tensor& in = *inputs[op.expansions[k].input];
    reference::BroadcastCopy(in.raw_data(), in.shape(), state.aux[k].mutable_raw_data(),
                             op.expansions[k].shape, element_size);
  }
  if (op.prefill_input >= 0) {
    const Tensor& in = *inputs[op.prefill_input];
    reference::BroadcastCopy(in.raw_data(), in.shape(), out->mutable_raw_data(), out->shape(),
                             element_size);
  }
  if (op.staging != nullptr) {
    const size_t src_bytes =
        op.staging->stage_in ? (op.staging->staged_src.get_size() + 63) / 64 * 64 : 0;
    const size_t dst_bytes = op.staging->stage_out ? op.staging->staged_dst.get_size() : 0;
    char* staged = static_cast<char*>(run.Staging(src_bytes + dst_bytes));
    state.staged[0] = staged;
    state.staged[1] = staged + src_bytes;
    try {
      state.stage_memories[1].set_data_handle(state.staged[0]);
      state.stage_memories[2].set_data_handle(state.staged[1]);
    } catch (const dnnl::error& e) {
      return FromDnnlError(e);
    }
  }
  if (!op.row_parts.empty()) {
    try {
      void* scratchpad = run.Scratchpad(op.row_parts_scratchpad_bytes);
      LS_RETURN_IF_ERROR(RunRowParts(op, state, inputs, out, scratchpad, run.stream().get()));
    } catch (const dnnl::error& e) {
      return FromDnnlError(e);
    }
    ++ctx.run_context().stats().team_splits;
    RunEpilogue(op, inputs, out);
    return Finish(op, ctx);
  }
  try {
    void* scratchpad = op.scratchpad_bytes > 0 ? run.Scratchpad(op.scratchpad_bytes) : nullptr;
    Tensor* const outputs[3] = {out, extra[0], extra[1]};
    for (size_t i = 0; i < op.bindings.size(); ++i) {
      state.memories[i].set_data_handle(
          BufferOf(op.bindings[i].source, op, state, inputs, outputs, scratchpad));
    }
    if (op.staging != nullptr) {
      state.stage_memories[0].set_data_handle(const_cast<void*>(inputs[0]->raw_data()));
      state.stage_memories[3].set_data_handle(out->mutable_raw_data());
    }
  } catch (const dnnl::error& e) {
    return FromDnnlError(e);
  }
  // The C entry point takes the pre-built argument table; the C++ one would build a vector from
  // an unordered_map on every call.
  dnnl_stream_t stream = run.stream().get();
  ScopedOneOpenMpThread scope(op.single_threaded && threads > 1);
  if (op.staging != nullptr && op.staging->stage_in) {
    const dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, state.stage_memories[0].get()},
                                     {DNNL_ARG_TO, state.stage_memories[1].get()}};
    const dnnl_status_t status =
        dnnl_primitive_execute(op.staging->stage_in.get(), stream, 2, args);
    if (status != dnnl_success) {
      return absl::InternalError(absl::StrCat("oneDNN reorder failed (status ", status, ")"));
    }
  }
  const dnnl_status_t status = dnnl_primitive_execute(
      op.primitive.get(), stream, static_cast<int>(state.args.size()), state.args.data());
  if (status != dnnl_success) {
    return absl::InternalError(absl::StrCat("oneDNN execution failed (status ", status, ")"));
  }
  if (op.staging != nullptr && op.staging->stage_out) {
    const dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, state.stage_memories[2].get()},
                                     {DNNL_ARG_TO, state.stage_memories[3].get()}};
    const dnnl_status_t reorder_status =
        dnnl_primitive_execute(op.staging->stage_out.get(), stream, 2, args);
    if (reorder_status != dnnl_success) {
      return absl::InternalError(
          absl::StrCat("oneDNN reorder failed (status ", reorder_status, ")"));
    }
  }
  RunEpilogue(op, inputs, out);
  return Finish(op, ctx);
}

namespace {

// The calling thread's own oneDNN stream for row parts run on SpinTeam helpers (a stream is not
// shared between threads executing at once). Created on the thread's first part, kept until it
// exits; null if oneDNN could not create it.
dnnl_stream_t ThisThreadStream() {
  struct Holder {
    ~Holder() {
      if (stream != nullptr) dnnl_stream_destroy(stream);
    }
    dnnl_stream_t stream = nullptr;
  };
  thread_local Holder holder;
  if (holder.stream == nullptr) {
    if (dnnl_stream_create(&holder.stream, CpuEngine().get(), dnnl_stream_default_flags) !=
        dnnl_success) {
      holder.stream = nullptr;
    }
  }
  return holder.stream;
}

}  // namespace

void* DnnlKernel::BufferOf(BufferSource source, const PreparedOp& op, Bound& state,
                           const Tensor* const* inputs, Tensor* const* outputs, void* scratchpad) {
  switch (source) {
    case BufferSource::kInput0:
    case BufferSource::kInput1:
    case BufferSource::kInput2:
    case BufferSource::kInput3:
    case BufferSource::kInput4:
      return const_cast<void*>(
          inputs[static_cast<int>(source) - static_cast<int>(BufferSource::kInput0)]->raw_data());
    case BufferSource::kOutput:
      return outputs[0]->mutable_raw_data();
    case BufferSource::kOutput1:
    case BufferSource::kOutput2:
      return outputs[1 + static_cast<int>(source) - static_cast<int>(BufferSource::kOutput1)]
          ->mutable_raw_data();
    case BufferSource::kScratchpad:
      return scratchpad;
    case BufferSource::kAux0:
    case BufferSource::kAux1:
      return state.aux[static_cast<int>(source) - static_cast<int>(BufferSource::kAux0)]
          .mutable_raw_data();
    case BufferSource::kPacked:
      return const_cast<void*>(op.packed->raw_data());  // oneDNN only reads weights
    case BufferSource::kStagedSrc:
    case BufferSource::kStagedDst:
      return state.staged[static_cast<int>(source) - static_cast<int>(BufferSource::kStagedSrc)];
  }
  return nullptr;
}

absl::Status DnnlKernel::RunRowParts(const PreparedOp& op, Bound& state,
                                     const Tensor* const* inputs, Tensor* out, void* scratchpad,
                                     dnnl_stream_t stream) const {
  for (size_t p = 0; p < op.row_parts.size(); ++p) {
    const PreparedOp::RowPart& part = op.row_parts[p];
    for (size_t i = 0; i < part.bindings.size(); ++i) {
      // A part reads its own rows of input 0, writes its own rows of the output and has its own
      // slice of the scratchpad; every other buffer is the whole op's.
      const BufferSource source = part.bindings[i].source;
      if (source != BufferSource::kPacked && source != BufferSource::kScratchpad &&
          source != BufferSource::kOutput &&
          (source < BufferSource::kInput0 || source > BufferSource::kInput4)) {
        return absl::InternalError("a row part binds a buffer it cannot split");
      }
      char* handle = static_cast<char*>(BufferOf(source, op, state, inputs, &out, scratchpad));
      if (source == BufferSource::kInput0) {
        handle += part.first_row * static_cast<int64_t>(op.src_row_bytes);
      } else if (source == BufferSource::kOutput) {
        handle += part.first_row * static_cast<int64_t>(op.dst_row_bytes);
      } else if (source == BufferSource::kScratchpad) {
        handle += part.scratchpad_offset;
      }
      state.part_memories[p][i].set_data_handle(handle);
    }
  }
  SpinTeam* team = SpinTeam::Engaged();
  dnnl_status_t status[PreparedOp::kMaxRowParts];
  const int parts = static_cast<int>(op.row_parts.size());
  auto run_part = [&](int p) {
    dnnl_stream_t s = team != nullptr && SpinTeam::Engaged() == team ? stream : ThisThreadStream();
    status[p] = s == nullptr ? dnnl_out_of_memory
                             : dnnl_primitive_execute(op.row_parts[p].primitive.get(), s,
                                                      static_cast<int>(state.part_args[p].size()),
                                                      state.part_args[p].data());
  };
  if (team != nullptr) {
    team->ParallelFor(parts, run_part);
  } else {
    for (int p = 0; p < parts; ++p) run_part(p);
  }
  for (int p = 0; p < parts; ++p) {
    if (status[p] != dnnl_success) {
      return absl::InternalError(
          absl::StrCat("oneDNN execution of a row part failed (status ", status[p], ")"));
    }
  }
  return absl::OkStatus();
}

void DnnlKernel::CountReferenceStep(KernelContext& ctx, State& state) {
  RunContext& run = ctx.run_context();
  if (state.reference_counted_run == run.id()) return;
  state.reference_counted_run = run.id();
  ++run.stats().reference_steps;
}

absl::Status DnnlKernel::RunFallback(KernelContext& ctx, DataType type, State& state) const {
  if (unfused_ == nullptr) {
    if (IsFloatingPoint(type)) CountReferenceStep(ctx, state);
    return RunReference(ctx);
  }
  if (state.unfused == nullptr) {
    state.unfused = std::make_unique<ExecutionFrame>(*unfused_, ctx.run_context());
  } else {
    state.unfused->Rebind(ctx.run_context());
  }
  ExecutionFrame& frame = *state.unfused;
  const Graph& graph = unfused_->graph();
  for (int i = 0; i < ctx.num_inputs() && i < static_cast<int>(graph.inputs.size()); ++i) {
    Value& slot = frame.slot(graph.inputs[i]);
    if (!ctx.has_input(i)) {
      slot.SetNone();
    } else if (ctx.input_value(i).is_tensor()) {
      slot.mutable_tensor() = Tensor::ViewOf(ctx.input(i));
    } else {
      slot.CopyFrom(ctx.input_value(i));
    }
  }
  LS_RETURN_IF_ERROR(frame.Run());
  Value& result = frame.slot(graph.outputs[0]);
  Value& out = ctx.output_value(0);
  if (result.is_tensor() && result.tensor().is_view()) {
    out.CopyFrom(result);
  } else {
    swap(out, result);  // the inner slot keeps the old buffer for the next run
  }
  return absl::OkStatus();
}

void DnnlKernel::WarmUp(const KernelInit& init) const {
  if (init.num_inputs() < required_inputs_) return;
  Shape shapes[kMaxInputs];
  const Shape* present[kMaxInputs] = {};
  DataType type = DataType::kUndefined;
  for (int i = 0; i < num_inputs_ && i < init.num_inputs(); ++i) {
    if (!init.has_input(i)) {
      // A missing required input fails every run (Run says which); nothing to prepare.
      if (i < required_inputs_) return;
      continue;
    }
    const ValueType& declared = init.input_type(i);
    if (declared.kind != ValueKind::kTensor || !declared.dims.has_value()) return;
    if (type != DataType::kUndefined && declared.dtype != type) return;
    type = declared.dtype;
    for (int64_t d : *declared.dims) {
      if (d < 0) return;
    }
    absl::StatusOr<Shape> shape = ValidateDims(*declared.dims, "declared input");
    if (!shape.ok()) return;
    shapes[i] = *std::move(shape);
    present[i] = &shapes[i];
  }
  if (type == DataType::kUndefined || !UsesDnnl(type)) return;
  try {
    (void)Lookup(type, present, omp_get_max_threads());
  } catch (const dnnl::error&) {
    // As for any other error: the run reports it.
  }
}

}  // namespace loopserve::engine
