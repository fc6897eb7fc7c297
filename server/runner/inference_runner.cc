#include "server/runner/inference_runner.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "engine/base/status_macros.h"
#include "server/observability/logging.h"
#include "server/scheduling/batching.h"
#include "server/status_util.h"

namespace loopserve::server {
namespace {

// How early a protocol may cancel a call for its deadline, by our clock (see Execute).
constexpr absl::Duration kDeadlineClockSlack = absl::Milliseconds(20);

// Runs `body`; an exception it throws is logged, never passed on (a thread's top, or a point
// past which the caller must not answer the calls involved again).
template <typename Body>
void CatchAndLog(Body&& body) {
  const absl::Status status = CatchExceptions("inference: ", [&] {
    body();
    return absl::OkStatus();
  });
  if (!status.ok()) LogError(std::string(status.message()));
}

}  // namespace

std::string ModelLabel(const LoadedModel& model) {
  return absl::StrCat("model '", model.name, "' v", model.version, ": ");
}

InferenceCall::InferenceCall(Protocol protocol, Polling polling, absl::Time received,
                             absl::Time deadline)
    : ScheduledCall(deadline), protocol_(protocol), polling_(polling), received_(received) {}

absl::Status InferenceCall::RespondIteration(const LoadedModel& model, int64_t iteration,
                                             absl::Span<const engine::ScanSlice> slices) {
  return absl::UnimplementedError("this protocol cannot stream iterations");
}

absl::Status InferenceCall::AwaitClient(absl::FunctionRef<bool(absl::Time until)> room,
                                        absl::string_view what) const {
  // Cancel() sets an atomic that no wait is told about, so the wait wakes up to look.
  while (!room(std::min(deadline_, absl::Now() + InferenceRunner::kCancelPollInterval))) {
    if (cancelled()) return absl::CancelledError("the request was cancelled");
    if (absl::Now() >= deadline_) {
      return absl::DeadlineExceededError(absl::StrCat("deadline exceeded while ", what));
    }
  }
  return absl::OkStatus();
}

absl::Status InferenceCall::OnIteration(int loop_index, int64_t iteration,
                                        absl::Span<const engine::ScanSlice> slices) {
  if (loop_index != stream_loop_) return absl::OkStatus();
  for (size_t k = 0; k < stream_picks_.size(); ++k) stream_slices_[k] = slices[stream_picks_[k]];
  LS_RETURN_IF_ERROR(RespondIteration(*model_, iteration, stream_slices_));
  model_->metrics->RecordStreamSlice(slices_sent_++ == 0, absl::Now() - received_);
  return absl::OkStatus();
}

InferenceRunner::InferenceRunner(ModelRegistry* registry, WorkerPool* pool, Metrics& metrics,
                                 Options options)
    : registry_(registry),
      pool_(pool),
      metrics_(metrics),
      options_(options),
      sequence_host_(MakeSequenceHost()) {
  watcher_ = std::thread([this] { Watch(); });
}

InferenceRunner::~InferenceRunner() {
  {
    absl::MutexLock lock(&mutex_);
    stop_watcher_ = true;
  }
  watcher_.join();
}

void InferenceRunner::Submit(InferenceCall* call) {
  Link(call);
  const absl::Status status = CatchExceptions("inference: ", [&] { return Admit(*call); });
  // OK: answered on this thread already, or queued (a worker may be finishing it right now).
  if (!status.ok()) Complete(*call, status);
}

absl::Status InferenceRunner::Admit(InferenceCall& call) {
  if (draining()) return absl::UnavailableError("the server is shutting down");
  InferenceRequest& request = call.request;
  LS_ASSIGN_OR_RETURN(call.model_, registry_->Get(request.model_name, request.model_version));
  const LoadedModel& model = *call.model_;
  call.trace_ = Tracer::Global().Sample(model.name, model.version);
  if (call.trace_ != nullptr) {
    call.trace_->Mark(RequestTrace::kRequestStart, call.received_);
    call.trace_->set_request_id(request.id);
    call.trace_->set_loop_names(&model.model->loop_names());
  }
  if (!request.error.ok()) return Annotate(request.error, ModelLabel(model));
  if (request.timeout_us > 0) {
    call.deadline_ =
        std::min(call.deadline_, call.received_ + absl::Microseconds(request.timeout_us));
  }
  const absl::Time decode_start = absl::Now();
  // The inputs the scheduler feeds itself (a sequence's controls and states) are not the client's.
  absl::StatusOr<DecodedRequest> decoded =
      BindRequest(request, *model.model, model.scheduler->server_inputs());
  // The config's dims (batch dim, narrower dims) and reshapes.
  const absl::Status adapted =
      decoded.ok() ? model.io.AdaptInputs(decoded->inputs) : decoded.status();
  model.metrics->RecordComputeInput(absl::Now() - decode_start);
  if (!adapted.ok()) return Annotate(adapted, ModelLabel(model));
  call.decoded_ = *std::move(decoded);
  request.inputs.clear();  // the protocol's decoders are done
  if (request.stream_iterations) {
    LS_RETURN_IF_ERROR(Annotate(PlanIterationStream(call), ModelLabel(model)));
  }
  if (model.io.max_batch_size() > 0) call.batch_size_ = BatchSize(model.io, call.decoded_.inputs);
  call.streamed_ = call.stream_loop_ >= 0;
  call.admitted_ = true;
  Mark(call, RequestTrace::kQueueStart);
  return model.scheduler->Enqueue(call, *this);
}

RowRequest InferenceRunner::TakeRow(ScheduledCall& scheduled) {
  InferenceCall& call = Of(scheduled);
  const LoadedModel& model = *call.model_;
  RowRequest row;
  row.call = &call;
  row.inputs = std::move(call.decoded_.inputs);
  row.options.deadline = call.deadline_;
  row.options.cancelled = &call.cancelled_;
  row.options.max_loop_iterations = model.max_loop_iterations;
  row.options.max_output_bytes = model.max_output_bytes;
  row.options.max_memory_bytes = model.max_request_memory_bytes;
  if (call.stream_loop_ >= 0) row.options.iteration_observer = &call;
  ObserveIterations(call, &row.options.iteration_observer);
  Queued(call);
  return row;
}

void InferenceRunner::RowStarted(ScheduledCall& scheduled) {
  InferenceCall& call = Of(scheduled);
  Unqueued(call);
  call.row_started_ = absl::Now();  // from here on: compute
  Mark(call, RequestTrace::kComputeStart, call.row_started_);
  Mark(call, RequestTrace::kComputeInputEnd, call.row_started_);
  call.model_->metrics->RecordQueue(call.row_started_ - call.received_);
}

void InferenceRunner::FinishRow(ScheduledCall& scheduled,
                                absl::StatusOr<std::vector<engine::Value>> outputs) {
  InferenceCall& call = Of(scheduled);
  const LoadedModel& model = *call.model_;
  const bool started = !call.queued_;
  Unqueued(call);
  const absl::Status status = CatchExceptions(ModelLabel(model), [&]() -> absl::Status {
    const absl::Time now = absl::Now();
    if (started) model.metrics->RecordCompute(now - call.row_started_);
    if (started) Mark(call, RequestTrace::kComputeOutputStart, now);
    if (outputs.ok()) {
      model.metrics->RecordExecution(1);
      return Answer(call, *outputs);
    }
    absl::Status failed = outputs.status();
    if (absl::IsCancelled(failed) || absl::IsDeadlineExceeded(failed)) {
      const absl::Status left = Left(call, now, absl::OkStatus(), [started] {
        return std::string(started ? "while its row ran" : "in the queue");
      });
      failed = left.ok() ? Annotate(failed, ModelLabel(model)) : left;
    } else {
      failed = Annotate(failed, ModelLabel(model));
    }
    RecordLimit(model, failed);
    return failed;
  });
  Complete(call, status);
}

absl::StatusOr<SequenceStep> InferenceRunner::TakeStep(ScheduledCall& scheduled,
                                                       const SequencePolicy& policy) {
  InferenceCall& call = Of(scheduled);
  const LoadedModel& model = *call.model_;
  // Admitted: in flight from here on, whatever the answer (Complete counts it out).
  metrics_.inflight_requests().Increment();
  if (call.batch_size_ != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(ModelLabel(model), "a request of a sequence has batch size 1, this one ",
                     call.batch_size_));
  }
  if (call.request.outputs.empty()) {  // the state outputs are the server's
    std::vector<int>& outputs = call.decoded_.outputs;
    for (const SequencePolicy::State& state : policy.states) {
      outputs.erase(std::remove(outputs.begin(), outputs.end(), state.output), outputs.end());
    }
  }
  SequenceStep step;
  step.call = &call;
  step.sequence = call.request.sequence;
  step.inputs = std::move(call.decoded_.inputs);
  step.deadline = call.deadline_;
  step.cancelled = &call.cancelled_;
  return step;
}

SequenceHost InferenceRunner::MakeSequenceHost() {
  SequenceHost host;
  host.schedule = [this](std::function<void()> task) {
    return pool_->TrySchedule(std::move(task));
  };
  host.run = [this](InferenceCall* lead, std::vector<engine::Value> inputs, absl::Time deadline,
                    const std::atomic<bool>* cancelled,
                    int64_t members) -> absl::StatusOr<std::vector<engine::Value>> {
    const LoadedModel& model = *lead->model_;
    const absl::Time started = absl::Now();
    model.metrics->RecordQueue(started - lead->received_);
    Mark(*lead, RequestTrace::kComputeStart, started);
    Mark(*lead, RequestTrace::kComputeInputEnd, started);
    engine::RunOptions options = RunOptionsFor(model, deadline, cancelled, members);
    ObserveIterations(*lead, &options.iteration_observer);
    absl::StatusOr<std::vector<engine::Value>> outputs =
        model.model->Run(std::move(inputs), options);
    const absl::Time ended = absl::Now();
    Mark(*lead, RequestTrace::kComputeOutputStart, ended);
    model.metrics->RecordCompute(ended - started);
    if (!outputs.ok()) {
      RecordLimit(model, outputs.status());
      return Annotate(outputs.status(), ModelLabel(model));
    }
    model.metrics->RecordExecution(members);
    return outputs;
  };
  host.finish = [this](InferenceCall* call, const absl::Status& status,
                       std::vector<engine::Value>* outputs) {
    absl::Status answered = status;
    if (answered.ok() && outputs != nullptr) {
      answered =
          CatchExceptions(ModelLabel(*call->model_), [&] { return Answer(*call, *outputs); });
    }
    Complete(*call, answered);
  };
  return host;
}

absl::Status InferenceRunner::PlanIterationStream(InferenceCall& call) {
  if (!call.CanStreamIterations()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameter 'stream_iterations' needs a streaming call (gRPC ModelStreamInfer, or REST "
        "generate_stream / server-sent events); ",
        ProtocolName(call.protocol_), " answers once per request"));
  }
  const engine::Model& model = *call.model_->model;
  if (model.loop_names().empty()) {
    return absl::InvalidArgumentError(
        "parameter 'stream_iterations': the model has no Loop to stream");
  }
  const std::vector<int>& loops = model.scan_output_loops();
  std::string scan_outputs;  // for the messages
  for (size_t j = 0; j < loops.size(); ++j) {
    if (loops[j] < 0) continue;
    absl::StrAppend(&scan_outputs, scan_outputs.empty() ? "" : ", ", "'", model.outputs()[j].name,
                    "'");
  }
  if (scan_outputs.empty()) {
    return absl::InvalidArgumentError(
        "parameter 'stream_iterations': no output of the model is a scan output of a top-level "
        "Loop, so there is nothing to stream per iteration");
  }
  int loop = -1;
  for (int output : call.decoded_.outputs) {
    const int l = loops[output];
    if (l < 0) continue;
    if (loop >= 0 && l != loop) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter 'stream_iterations': the requested scan outputs come from two Loops ('",
          model.loop_names()[loop], "' and '", model.loop_names()[l],
          "'); request the scan outputs of one"));
    }
    loop = l;
  }
  if (loop < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter 'stream_iterations': none of the requested outputs is a scan "
                     "output of a top-level Loop (the model's are ",
                     scan_outputs, ")"));
  }
  call.stream_loop_ = loop;
  call.stream_picks_.clear();
  for (int output : call.decoded_.outputs) {
    if (loops[output] != loop) continue;
    int position = 0;  // among the Loop's slices, which come in Model::outputs() order
    for (int j = 0; j < output; ++j) position += loops[j] == loop ? 1 : 0;
    call.stream_picks_.push_back(position);
  }
  call.stream_slices_.resize(call.stream_picks_.size());
  return absl::OkStatus();
}

void InferenceRunner::RunAlone(ScheduledCall& call) { Run(Of(call)); }

void InferenceRunner::RunHere(ScheduledCall& call) {
  metrics_.inflight_requests().Increment();
  CatchAndLog([&] { Run(Of(call)); });  // `call` may be gone after this
}

void InferenceRunner::RunMerged(absl::Span<ScheduledCall* const> calls) {
  std::vector<InferenceCall*> batch;
  batch.reserve(calls.size());
  for (ScheduledCall* call : calls) batch.push_back(&Of(*call));
  RunBatch(*batch.front()->model_, batch);
}

void InferenceRunner::Reject(ScheduledCall& scheduled, const absl::Status& status) {
  InferenceCall& call = Of(scheduled);
  Unqueued(call);
  Complete(call, Annotate(status, ModelLabel(*call.model_)));
}

void InferenceRunner::WatchWhileHere(ScheduledCall& call) {
  if (Of(call).polling_ == InferenceCall::Polling::kWhileInline) SetPolled(&Of(call), true);
}

void InferenceRunner::Queued(ScheduledCall& scheduled) {
  InferenceCall& call = Of(scheduled);
  // Queued before in flight: a request seen in flight and not queued is running.
  call.queued_ = true;
  metrics_.queue_depth().Increment();
  metrics_.inflight_requests().Increment();
}

void InferenceRunner::Unqueued(ScheduledCall& scheduled) {
  InferenceCall& call = Of(scheduled);
  if (!call.queued_) return;
  call.queued_ = false;
  metrics_.queue_depth().Decrement();
}

bool InferenceRunner::Mergeable(const ScheduledCall& call) const {
  const InferenceCall& c = Of(call);
  return server::Mergeable(c.model_->io, c.decoded_.inputs);
}

bool InferenceRunner::CanMerge(const ScheduledCall& head, const ScheduledCall& other) const {
  const InferenceCall& h = Of(head);
  return server::CanMerge(h.model_->io, h.decoded_.inputs, Of(other).decoded_.inputs);
}

void InferenceRunner::RunBatch(const LoadedModel& model, const std::vector<InferenceCall*>& calls) {
  if (calls.size() == 1) {
    Run(*calls[0]);
    return;
  }
  std::vector<absl::Status> statuses(calls.size());
  const absl::Status status =
      CatchExceptions(ModelLabel(model), [&] { return ExecuteBatch(model, calls, statuses); });
  for (size_t k = 0; k < calls.size(); ++k) {
    Complete(*calls[k], status.ok() ? statuses[k] : status);  // calls[k] may be gone after this
  }
}

absl::Status InferenceRunner::ExecuteBatch(const LoadedModel& model,
                                           const std::vector<InferenceCall*>& calls,
                                           std::vector<absl::Status>& statuses) {
  const absl::Time started = absl::Now();
  absl::Time deadline = absl::InfinitePast();
  std::vector<int64_t> sizes;
  std::vector<std::vector<engine::Value>*> inputs;
  sizes.reserve(calls.size());
  inputs.reserve(calls.size());
  int64_t total = 0;
  for (InferenceCall* call : calls) {
    if (call->queued_) metrics_.queue_depth().Decrement();
    call->queued_ = false;
    model.metrics->RecordQueue(started - call->received_);
    Mark(*call, RequestTrace::kComputeStart, started);
    deadline = std::max(deadline, call->deadline_);
    sizes.push_back(call->batch_size_);
    total += call->batch_size_;
    inputs.push_back(&call->decoded_.inputs);
  }
  std::vector<engine::Value> merged = MergeInputs(model.io, inputs);
  for (InferenceCall* call : calls) call->decoded_.inputs.clear();

  const int64_t members = static_cast<int64_t>(calls.size());
  RunningBatch running;
  running.calls = &calls;
  engine::RunOptions options = RunOptionsFor(model, deadline, &running.cancelled, members);
  for (InferenceCall* call : calls) {
    Mark(*call, RequestTrace::kComputeInputEnd);
    ObserveIterations(*call, &options.iteration_observer);  // every traced member sees them
  }
  {
    absl::MutexLock lock(&mutex_);
    batches_.push_back(&running);
  }
  absl::StatusOr<std::vector<engine::Value>> outputs = model.model->Run(std::move(merged), options);
  {
    absl::MutexLock lock(&mutex_);
    batches_.erase(std::find(batches_.begin(), batches_.end(), &running));
  }
  const absl::Time ended = absl::Now();
  const absl::Duration computed = ended - started;
  for (size_t k = 0; k < calls.size(); ++k) {
    Mark(*calls[k], RequestTrace::kComputeOutputStart, ended);
    model.metrics->RecordCompute(computed);
    model.scheduler->RecordRun(computed);
  }

  // What a member that left while the batch ran is answered.
  auto where = [members] { return absl::StrCat("while its batch of ", members, " requests ran"); };
  if (!outputs.ok()) {
    RecordLimit(model, outputs.status());
    for (size_t k = 0; k < calls.size(); ++k) {
      const absl::Status gone = Left(*calls[k], absl::Now(), absl::OkStatus(), where);
      statuses[k] =
          gone.ok() ? Annotate(outputs.status(),
                               absl::StrCat(ModelLabel(model), "batch of ", members, " requests: "))
                    : gone;
    }
    return absl::OkStatus();
  }
  model.metrics->RecordExecution(total);
  absl::StatusOr<std::vector<std::vector<engine::Value>>> split_or =
      SplitOutputs(model.io, *outputs, sizes);
  if (!split_or.ok()) return Annotate(split_or.status(), ModelLabel(model));
  std::vector<std::vector<engine::Value>>& split = *split_or;  // may view *outputs
  for (size_t k = 0; k < calls.size(); ++k) {
    InferenceCall& call = *calls[k];
    statuses[k] = Left(call, absl::Now(), absl::OkStatus(), where);
    if (statuses[k].ok()) statuses[k] = Answer(call, split[k]);
    split[k].clear();
  }
  return absl::OkStatus();
}

void InferenceRunner::Run(InferenceCall& call) {
  absl::Status status;
  try {
    status = Execute(call);
  } catch (...) {
    // The model's label only for an exception's message: no string built per request. `throw;`
    // hands the exception being handled to CatchExceptions' handlers.
    status = CatchExceptions(ModelLabel(*call.model_), []() -> absl::Status { throw; });
  }
  Complete(call, status);
}

absl::Status InferenceRunner::Execute(InferenceCall& call) {
  const LoadedModel& model = *call.model_;
  if (call.queued_) metrics_.queue_depth().Decrement();
  const absl::Time started = absl::Now();
  model.metrics->RecordQueue(started - call.received_);
  LS_RETURN_IF_ERROR(Left(call, started, absl::OkStatus(), [&] {
    return absl::StrCat("after ", absl::FormatDuration(started - call.received_), " in the queue");
  }));
  Mark(call, RequestTrace::kComputeStart, started);
  engine::RunOptions options = RunOptionsFor(model, call.deadline_, &call.cancelled_, 1);
  if (call.stream_loop_ >= 0) options.iteration_observer = &call;
  ObserveIterations(call, &options.iteration_observer);
  Mark(call, RequestTrace::kComputeInputEnd);
  absl::StatusOr<std::vector<engine::Value>> outputs =
      model.model->Run(std::move(call.decoded_.inputs), options);
  const absl::Time ended = absl::Now();
  Mark(call, RequestTrace::kComputeOutputStart, ended);
  const absl::Duration computed = ended - started;
  model.metrics->RecordCompute(computed);
  model.scheduler->RecordRun(computed);
  if (!outputs.ok()) {
    // The engine stops on the call's cancellation, which a protocol also sets at the deadline.
    absl::Status status = outputs.status();
    if (absl::IsCancelled(status)) {
      status = Left(call, absl::Now(), status, [] { return std::string("while it ran"); });
      if (status.ok()) status = Annotate(outputs.status(), ModelLabel(model));
    } else {
      status = Annotate(status, ModelLabel(model));
    }
    RecordLimit(model, status);
    return status;
  }
  model.metrics->RecordExecution(call.batch_size_);
  const absl::Status answered = Answer(call, *outputs);
  outputs->clear();
  return answered;
}

engine::RunOptions InferenceRunner::RunOptionsFor(const LoadedModel& model, absl::Time deadline,
                                                  const std::atomic<bool>* cancelled,
                                                  int64_t members) {
  auto scaled = [members](int64_t cap) {  // 0 = unlimited stays so; saturates
    if (cap <= 0) return cap;
    return cap > std::numeric_limits<int64_t>::max() / members ? std::numeric_limits<int64_t>::max()
                                                               : cap * members;
  };
  engine::RunOptions options;
  options.deadline = deadline;
  options.cancelled = cancelled;
  options.max_loop_iterations = model.max_loop_iterations;  // every member shares each iteration
  options.max_output_bytes = scaled(model.max_output_bytes);
  options.max_memory_bytes = scaled(model.max_request_memory_bytes);
  options.loop_threads = model.loop_threads;
  if (!model.model->loop_names().empty()) options.loop_observer = model.metrics.get();
  return options;
}

absl::Status InferenceRunner::Left(const InferenceCall& call, absl::Time now,
                                   const absl::Status& cause,
                                   absl::FunctionRef<std::string()> where) {
  const bool cancelled = call.cancelled();
  // A protocol may also cancel a call whose deadline passed, by its own clock: gRPC times the
  // deadline on its own millisecond clock, and its cancellation showed up to ~10 ms ahead of
  // absl::Now(). Such a cancel is reported as the deadline it is.
  if (now >= call.deadline_ || (cancelled && now + kDeadlineClockSlack >= call.deadline_)) {
    return absl::DeadlineExceededError(
        absl::StrCat(ModelLabel(*call.model_), "deadline exceeded ", where(),
                     cause.ok() ? "" : absl::StrCat(" (", cause.message(), ")")));
  }
  if (cancelled) {
    return absl::CancelledError(
        absl::StrCat(ModelLabel(*call.model_), "cancelled ", where(),
                     cause.ok() ? "" : absl::StrCat(" (", cause.message(), ")")));
  }
  return absl::OkStatus();
}

absl::Status InferenceRunner::Answer(InferenceCall& call, std::vector<engine::Value>& outputs) {
  const LoadedModel& model = *call.model_;
  LS_RETURN_IF_ERROR(CheckOutputBytes(call, outputs));
  absl::Status status = model.io.AdaptOutputs(outputs);
  if (!status.ok()) return Annotate(status, ModelLabel(model));
  const absl::Time encode_start = absl::Now();
  status = call.Respond(model, call.decoded_.outputs, outputs);
  const absl::Time encoded = absl::Now();
  Mark(call, RequestTrace::kComputeEnd, encoded);
  model.metrics->RecordComputeOutput(encoded - encode_start);
  return status.ok() ? status : Annotate(status, ModelLabel(model));
}

void InferenceRunner::RecordLimit(const LoadedModel& model, const absl::Status& status) {
  const engine::LimitReason reason = engine::GetLimitReason(status);
  if (reason == engine::LimitReason::kMemory) {
    metrics_.RecordLimitHit(reason);  // any model may run out of its budget
  } else if (!model.model->loop_names().empty()) {
    // The engine tags the limit it enforced; deadline and cancellation are their own codes.
    if (reason != engine::LimitReason::kNone) {
      metrics_.RecordLimitHit(reason);
    } else {
      metrics_.RecordLoopLimitHit(status.code());
    }
  }
}

absl::Status InferenceRunner::CheckOutputBytes(const InferenceCall& call,
                                               const std::vector<engine::Value>& outputs) {
  const int64_t cap = call.model_->max_output_bytes;
  if (cap <= 0) return absl::OkStatus();
  uint64_t total = 0;
  for (const engine::Value& value : outputs) {
    if (value.is_tensor()) total += value.tensor().ByteSize();
  }
  if (total <= static_cast<uint64_t>(cap)) return absl::OkStatus();
  metrics_.RecordLimitHit(engine::LimitReason::kOutputBytes);
  return absl::ResourceExhaustedError(absl::StrCat(ModelLabel(*call.model_), "the outputs hold ",
                                                   total, " bytes, more than the cap of ", cap,
                                                   " bytes (max_output_bytes)"));
}

void InferenceRunner::Complete(InferenceCall& call, const absl::Status& status) {
  if (call.model_ != nullptr) {  // null when the model lookup failed
    if (status.ok()) call.model_->metrics->RecordInferences(call.batch_size_);
    call.model_->metrics->RecordRequest(call.protocol_, status.code(),
                                        absl::Now() - call.received_);
  }
  if (call.admitted_) metrics_.inflight_requests().Decrement();
  if (!status.ok() && LogEnabled(LogLevel::kDebug)) {
    LogDebug(absl::StrCat("inference ", QuoteUntrusted(call.request.model_name), " id ",
                          QuoteUntrusted(call.request.id), " (", ProtocolName(call.protocol_),
                          "): ", status.ToString()));
  }
  call.decoded_ = DecodedRequest();  // inputs may view the adapter's buffers: let go first
  if (call.trace_ != nullptr) {
    call.trace_->Mark(RequestTrace::kRequestEnd, absl::Now());
    Tracer::Global().Finish(std::move(call.trace_));
  }
  Unlink(&call);
  call.Finish(status);  // `call` may be deleted from here on
}

void InferenceRunner::Link(InferenceCall* call) {
  absl::MutexLock lock(&mutex_);
  ++in_flight_;
  call->next_ = calls_;
  if (calls_ != nullptr) calls_->prev_ = call;
  calls_ = call;
  if (cancel_all_) call->Cancel();
  if (call->polling_ == InferenceCall::Polling::kAlways) {
    call->polled_ = true;
    ++polled_;
  }
}

void InferenceRunner::Unlink(InferenceCall* call) {
  absl::MutexLock lock(&mutex_);
  --in_flight_;
  if (call->polled_) --polled_;
  call->polled_ = false;
  if (call->prev_ != nullptr) {
    call->prev_->next_ = call->next_;
  } else {
    calls_ = call->next_;
  }
  if (call->next_ != nullptr) call->next_->prev_ = call->prev_;
}

void InferenceRunner::SetPolled(InferenceCall* call, bool polled) {
  absl::MutexLock lock(&mutex_);
  if (call->polled_ == polled) return;
  call->polled_ = polled;
  polled_ += polled ? 1 : -1;
}

void InferenceRunner::CancelAll() {
  {
    absl::MutexLock lock(&mutex_);
    cancel_all_ = true;
    for (InferenceCall* call = calls_; call != nullptr; call = call->next_) call->Cancel();
  }
  // A collector waiting out a long max_queue_delay sends what it holds now: its calls, found
  // cancelled, are answered at once instead of when the delay ends. (The served versions: a
  // call's own pin is its submitting thread's until Finish.)
  for (const std::shared_ptr<const LoadedModel>& model : registry_->ReadyModels()) {
    model->scheduler->Flush();
  }
}

void InferenceRunner::Watch() {
  absl::MutexLock lock(&mutex_);
  auto busy_or_stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return polled_ > 0 || !batches_.empty() || stop_watcher_;
  };
  auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return stop_watcher_; };
  while (true) {
    mutex_.Await(absl::Condition(&busy_or_stopping));
    if (stop_watcher_) return;
    for (InferenceCall* call = calls_; call != nullptr; call = call->next_) {
      // An adapter's exception stops here: the call counts as gone (it is answered CANCELLED).
      bool gone = true;
      try {
        gone = call->polled_ && call->ClientGone();
      } catch (...) {
      }
      if (gone) call->Cancel();
    }
    for (RunningBatch* batch : batches_) {
      bool all = true;
      for (const InferenceCall* call : *batch->calls) all = all && call->cancelled();
      if (all) batch->cancelled.store(true, std::memory_order_relaxed);
    }
    if (mutex_.AwaitWithTimeout(absl::Condition(&stopping), kCancelPollInterval)) return;
  }
}

bool InferenceRunner::WaitForIdle(absl::Time deadline) {
  absl::MutexLock lock(&mutex_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return in_flight_ == 0; };
  return mutex_.AwaitWithDeadline(absl::Condition(&idle), deadline);
}

}  // namespace loopserve::server
