#include "server/inference_runner.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "engine/base/status_macros.h"
#include "server/logging.h"
#include "server/status_util.h"

namespace loopserve::server {
namespace {

// How early a protocol may cancel a call for its deadline, by our clock (see Execute).
constexpr absl::Duration kDeadlineClockSlack = absl::Milliseconds(20);

}  // namespace

std::string ModelLabel(const LoadedModel& model) {
  return absl::StrCat("model '", model.name, "' v", model.version, ": ");
}

InferenceCall::InferenceCall(Protocol protocol, Polling polling, absl::Time received,
                             absl::Time deadline)
    : protocol_(protocol), polling_(polling), received_(received), deadline_(deadline) {}

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
    : registry_(registry), pool_(pool), metrics_(metrics), options_(options) {
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
  if (!request.error.ok()) return Annotate(request.error, ModelLabel(model));
  if (request.timeout_us > 0) {
    call.deadline_ =
        std::min(call.deadline_, call.received_ + absl::Microseconds(request.timeout_us));
  }
  const absl::Time decode_start = absl::Now();
  absl::StatusOr<DecodedRequest> decoded = BindRequest(request, *model.model);
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
  call.admitted_ = true;
  return Dispatch(call);
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

absl::Status InferenceRunner::Dispatch(InferenceCall& call) {
  const LoadedModel& model = *call.model_;
  // A streamed run waits for its client's reads: never on the protocol's thread.
  if (call.stream_loop_ < 0 && model.metrics->RecentCompute() < options_.inline_run_limit &&
      pool_->TryRunHere(
          [&] {
            metrics_.inflight_requests().Increment();
            if (call.polling_ == InferenceCall::Polling::kWhileInline) SetPolled(&call, true);
            Run(call);  // `call` may be gone after this
          },
          model.instances)) {
    return absl::OkStatus();
  }
  // Queued before in flight: a request seen in flight and not queued is running.
  call.queued_ = true;
  metrics_.queue_depth().Increment();
  metrics_.inflight_requests().Increment();
  absl::Status scheduled = pool_->TrySchedule([this, &call] { Run(call); }, model.instances);
  if (!scheduled.ok()) {
    call.queued_ = false;
    metrics_.queue_depth().Decrement();
  }
  return scheduled;
}

void InferenceRunner::Run(InferenceCall& call) {
  const absl::Status status =
      CatchExceptions(ModelLabel(*call.model_), [&] { return Execute(call); });
  Complete(call, status);
}

absl::Status InferenceRunner::Execute(InferenceCall& call) {
  const LoadedModel& model = *call.model_;
  const std::string label = ModelLabel(model);
  if (call.queued_) metrics_.queue_depth().Decrement();
  const absl::Time started = absl::Now();
  model.metrics->RecordQueue(started - call.received_);
  // A protocol may also cancel a call whose deadline passed, so the deadline is checked first.
  if (started >= call.deadline_) {
    return absl::DeadlineExceededError(absl::StrCat(label, "deadline passed after ",
                                                    absl::FormatDuration(started - call.received_),
                                                    " in the queue"));
  }
  if (call.cancelled_.load(std::memory_order_relaxed)) {
    return absl::CancelledError(absl::StrCat(label, "cancelled while queued"));
  }

  engine::RunOptions options;
  options.deadline = call.deadline_;
  options.cancelled = &call.cancelled_;
  options.max_loop_iterations = model.max_loop_iterations;
  options.max_output_bytes = model.max_output_bytes;
  options.max_memory_bytes = model.max_request_memory_bytes;
  if (!model.model->loop_names().empty()) options.loop_observer = model.metrics.get();
  if (call.stream_loop_ >= 0) options.iteration_observer = &call;
  absl::StatusOr<std::vector<engine::Value>> outputs =
      model.model->Run(std::move(call.decoded_.inputs), options);
  model.metrics->RecordCompute(absl::Now() - started);
  if (!outputs.ok()) {
    absl::Status status = outputs.status();
    // An expired deadline reaches the engine as the protocol's cancellation (gRPC's OnCancel) as
    // often as through its own clock check; report what really happened. gRPC times the
    // deadline on its own millisecond clock, which its cancellation showed up to ~10 ms ahead of
    // absl::Now().
    if (absl::IsCancelled(status) && absl::Now() + kDeadlineClockSlack >= call.deadline_) {
      status =
          absl::DeadlineExceededError(absl::StrCat("deadline exceeded (", status.message(), ")"));
    }
    RecordLimit(model, status);
    return Annotate(status, label);
  }
  LS_RETURN_IF_ERROR(CheckOutputBytes(call, *outputs));
  LS_RETURN_IF_ERROR(Annotate(model.io.AdaptOutputs(*outputs), label));
  const absl::Time encode_start = absl::Now();
  const absl::Status encoded = call.Respond(model, call.decoded_.outputs, *outputs);
  outputs->clear();
  model.metrics->RecordComputeOutput(absl::Now() - encode_start);
  return Annotate(encoded, label);
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
  absl::MutexLock lock(&mutex_);
  cancel_all_ = true;
  for (InferenceCall* call = calls_; call != nullptr; call = call->next_) call->Cancel();
}

void InferenceRunner::Watch() {
  absl::MutexLock lock(&mutex_);
  auto busy_or_stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return polled_ > 0 || stop_watcher_;
  };
  auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return stop_watcher_; };
  while (true) {
    mutex_.Await(absl::Condition(&busy_or_stopping));
    if (stop_watcher_) return;
    for (InferenceCall* call = calls_; call != nullptr; call = call->next_) {
      if (call->polled_ && call->ClientGone()) call->Cancel();
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
