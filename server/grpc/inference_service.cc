#include "server/grpc/inference_service.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/base/status_macros.h"
#include "google/protobuf/arena.h"
#include "grpcpp/support/proto_buffer_writer.h"
#include "server/grpc/tensor_codec.h"
#include "server/observability/logging.h"
#include "server/observability/tracer.h"
#include "server/status_util.h"

namespace loopserve::server {
namespace {

// Copies a StatusOr's value into the response (the gRPC adapter's half of a ServerApi answer).
template <typename T>
absl::Status CopyTo(absl::StatusOr<T> answer, T* response) {
  if (!answer.ok()) return answer.status();
  *response = *std::move(answer);
  return absl::OkStatus();
}

// The call's deadline as absl::Time; InfiniteFuture when the client set none (gRPC reports
// gpr_inf_future as a time_point centuries ahead).
absl::Time CallDeadline(const grpc::CallbackServerContext& context) {
  const std::chrono::system_clock::time_point deadline = context.deadline();
  if (deadline >= std::chrono::system_clock::now() + std::chrono::hours(24 * 365 * 100)) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(deadline);
}

// The kSequenceIdHeader metadata of a call, when the client sent it.
std::optional<absl::string_view> SequenceIdMetadata(const grpc::CallbackServerContext* context) {
  const auto& metadata = context->client_metadata();
  auto it = metadata.find(kSequenceIdHeader);
  if (it == metadata.end()) return std::nullopt;
  return absl::string_view(it->second.data(), it->second.size());
}

template <typename Message>
absl::Status SerializeTo(const Message& message, grpc::ByteBuffer* bytes) {
  bool own_buffer = false;
  const grpc::Status serialized =
      grpc::SerializationTraits<Message>::Serialize(message, bytes, &own_buffer);
  if (!serialized.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot serialize the response: ", serialized.error_message()));
  }
  return absl::OkStatus();
}

// Parses a raw request into `message` and lets go of the bytes. INVALID_ARGUMENT naming the RPC
// and the message type for bytes that are not one (gRPC's typed handlers would answer
// UNIMPLEMENTED with an empty message).
template <typename Message>
absl::Status ParseRequest(const grpc::ByteBuffer* request, absl::string_view rpc,
                          Message* message) {
  auto* bytes = const_cast<grpc::ByteBuffer*>(request);  // ours until the call ends
  const size_t size = bytes->Valid() ? bytes->Length() : 0;
  bool parsed = true;
  if (size > 0) {
    grpc::ProtoBufferReader reader(bytes);
    parsed = reader.status().ok() && message->ParseFromZeroCopyStream(&reader);
  }
  bytes->Clear();
  if (!parsed) {
    return absl::InvalidArgumentError(absl::StrCat(rpc, ": the request (", size,
                                                   " bytes) is not a valid ",
                                                   Message::descriptor()->full_name(), " message"));
  }
  return absl::OkStatus();
}

// A unary RPC: parses the request, runs `body(request, &response)` (absl::Status) and finishes
// the call with its status and, when OK, the serialized response.
template <typename Request, typename Response, typename Body>
grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* context, absl::string_view rpc,
                                const grpc::ByteBuffer* request_bytes,
                                grpc::ByteBuffer* response_bytes, Body&& body) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Status status = CatchExceptions(absl::StrCat(rpc, ": "), [&]() -> absl::Status {
    Request request;
    LS_RETURN_IF_ERROR(ParseRequest(request_bytes, rpc, &request));
    Response response;
    LS_RETURN_IF_ERROR(body(request, &response));
    return SerializeTo(response, response_bytes);
  });
  if (!status.ok()) LogDebug(absl::StrCat(rpc, " failed: ", status.ToString()));
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// A repository change: parses the request and hands it to `schedule` with the callback that
// finishes the call (ServerApi::Load/Unload call it from the loader thread when done).
template <typename Request, typename Response, typename Schedule>
grpc::ServerUnaryReactor* RepositoryChange(grpc::CallbackServerContext* context,
                                           absl::string_view rpc,
                                           const grpc::ByteBuffer* request_bytes,
                                           grpc::ByteBuffer* response_bytes, Schedule&& schedule) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Status scheduled = CatchExceptions(absl::StrCat(rpc, ": "), [&]() -> absl::Status {
    Request request;
    LS_RETURN_IF_ERROR(ParseRequest(request_bytes, rpc, &request));
    // The response has no fields: written now, sent with an OK status.
    LS_RETURN_IF_ERROR(SerializeTo(Response(), response_bytes));
    return schedule(
        request, [reactor](const absl::Status& result) { reactor->Finish(ToGrpcStatus(result)); });
  });
  if (!scheduled.ok()) reactor->Finish(ToGrpcStatus(scheduled));
  return reactor;
}

void SetBoolParameter(inference::ModelInferResponse* response, const char* name, bool value) {
  (*response->mutable_parameters())[name].set_bool_param(value);
}

}  // namespace

// One ModelInfer call: the InferenceCall the runner takes through the request path, and for a
// queued request the call's reactor too. Created by ModelInfer on the gRPC thread; answered
// inside the handler (Finish inside Start: through the default reactor, and Start deletes it) or
// later (through this reactor; deleted in OnDone, which gRPC calls after Finish and never before
// ModelInfer has returned it) by a worker or by another call's handler on any gRPC thread -- this
// one's own included, since a handler may run a batch of calls queued before (so "inside Start" is
// which call the thread is starting, not which thread it is).
class InferenceService::InferCall final : public InferenceCall, public grpc::ServerUnaryReactor {
 public:
  InferCall(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request_bytes,
            grpc::ByteBuffer* response_bytes)
      : InferenceCall(Protocol::kGrpc, Polling::kWhileInline, absl::Now(), CallDeadline(*context)),
        context_(context),
        request_bytes_(request_bytes),
        response_bytes_(response_bytes),
        arena_(ArenaOn(arena_block_, sizeof(arena_block_))),
        request_(*google::protobuf::Arena::CreateMessage<inference::ModelInferRequest>(&arena_)) {}
  ~InferCall() override {
    if (request_size_ >= kTrimAfterRequestBytes) {
      // Give the pages of the request's buffers back (glibc keeps freed small blocks of a large
      // message in its arenas otherwise). `request_` is gone after the Reset.
      request.inputs.clear();
      arena_.Reset();
      malloc_trim(0);
    }
  }

  // On the gRPC thread. Returns the reactor for gRPC: `this` when a worker will answer,
  // otherwise the default reactor (and `this` is deleted).
  grpc::ServerUnaryReactor* Start(InferenceRunner* runner, const SharedMemoryManager* shm) {
    const absl::Status parsed = CatchExceptions("ModelInfer: ", [this] { return Parse(); });
    starting_ = this;
    if (!parsed.ok()) {
      Finish(parsed);  // no model named yet: nothing for the runner to record
    } else {
      request.error = ToInferenceRequest(request_, &request, shm, &shm_);
      if (request.error.ok()) {
        request.error = ApplySequenceIdHeader(SequenceIdMetadata(context_), &request);
      }
      runner->Submit(this);
    }
    starting_ = nullptr;
    if (!answered_here_) return this;
    grpc::ServerUnaryReactor* reactor = default_reactor_;
    delete this;
    return reactor;
  }

  void OnCancel() override { Cancel(); }
  void OnDone() override { delete this; }

 protected:
  absl::Status Respond(const LoadedModel& model, const std::vector<int>& outputs,
                       std::vector<engine::Value>& values) override {
    absl::Status serialized;
    if (shm_.outputs.empty()) {
      // Straight from the output tensors into the response's bytes (no message in between).
      serialized = SerializeInferResponse(model.name, model.version_string, request_.id(),
                                          *model.model, outputs, values, response_bytes_);
    } else {
      // Some outputs go to shared memory regions: the message path writes them there.
      inference::ModelInferResponse response;
      serialized = EncodeInferOutputs(*model.model, outputs, values, &response, &shm_);
      if (serialized.ok()) {
        response.set_model_name(model.name);
        response.set_model_version(model.version_string);
        response.set_id(request_.id());
        serialized = SerializeTo(response, response_bytes_);
      }
    }
    values.clear();
    return serialized;
  }

  void Finish(const absl::Status& status) override {
    if (starting_ == this) {
      answered_here_ = true;
      default_reactor_ = context_->DefaultReactor();
      default_reactor_->Finish(ToGrpcStatus(status));
    } else {
      grpc::ServerUnaryReactor::Finish(ToGrpcStatus(status));  // `this` may be deleted now
    }
  }

  bool ClientGone() override { return context_->IsCancelled(); }

 private:
  // Parses the raw request body and lets go of it. INVALID_ARGUMENT for bytes that are not a
  // ModelInferRequest.
  absl::Status Parse() {
    auto* bytes = const_cast<grpc::ByteBuffer*>(request_bytes_);  // ours until the call ends
    request_size_ = bytes->Valid() ? bytes->Length() : 0;
    return ParseInferRequest(*bytes, "ModelInfer", &request_);
  }

  grpc::CallbackServerContext* const context_;
  const grpc::ByteBuffer* const request_bytes_;  // emptied by Parse
  grpc::ByteBuffer* const response_bytes_;
  // The call this thread's ModelInfer handler is starting (Start): Finish of that call answers
  // through the default reactor. A thread's earlier calls, queued and returned to gRPC with their
  // own reactor, may be finished here too (a batch this handler runs): by their reactor.
  static thread_local InferCall* starting_;
  size_t request_size_ = 0;  // serialized bytes
  // The parsed request lives on an arena whose first block is part of the call: parsing a small
  // request allocates only the buffers of its raw contents (a message on the heap allocates each
  // of its strings, inputs and shapes). Raw inputs are views of it until Finish.
  static google::protobuf::ArenaOptions ArenaOn(char* block, size_t size) {
    google::protobuf::ArenaOptions options;
    options.initial_block = block;
    options.initial_block_size = size;
    return options;
  }
  alignas(16) char arena_block_[2048];
  google::protobuf::Arena arena_;
  inference::ModelInferRequest& request_;
  SharedMemoryBindings shm_;    // raw inputs may view these regions until Finish
  bool answered_here_ = false;  // written only on the handler's thread
  grpc::ServerUnaryReactor* default_reactor_ = nullptr;
};

thread_local InferenceService::InferCall* InferenceService::InferCall::starting_ = nullptr;

grpc::ServerUnaryReactor* InferenceService::ModelInfer(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request,
                                                       grpc::ByteBuffer* response) {
  return (new InferCall(context, request, response))->Start(runner_, api_->shared_memory());
}

// One ModelStreamInfer stream: reads requests one after another, hands each to the runner as a
// StreamCall, and writes the responses in one queue (gRPC allows one write at a time). Created by
// ModelStreamInfer; deleted in OnDone, which gRPC calls after Finish. Finish comes once the reads
// are done (client half-close, cancel or a broken stream), no request is in flight and nothing is
// left to write; whoever calls Finish (or StartWrite) does so last, without the mutex, because
// OnDone may delete the stream at once. A write in flight (writing_) or a read not yet done keeps
// the stream alive for the thread that started it. The next request is read only while fewer than
// kStreamMaxPending requests are in flight or answers wait to be written; past that, reading
// resumes when the client has read half of them.
class InferenceService::Stream final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  Stream(grpc::CallbackServerContext* context, InferenceRunner* runner,
         const SharedMemoryManager* shm)
      : context_(context), runner_(runner), shm_(shm) {
    StartRead(&read_bytes_);
  }

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override { delete this; }

 private:
  friend class StreamCall;

  struct Outgoing {
    grpc::ByteBuffer bytes;
    StreamCall* call;  // whose queued count it is in
  };

  // Queues `bytes` of `call` (its queued_ count goes up) and starts writing when idle. With
  // `wait`, first waits until fewer than kStreamWindow of the call's responses are queued.
  absl::Status Send(StreamCall* call, grpc::ByteBuffer bytes, bool wait);
  // The call finished (its final response queued); it is deleted once written.
  void Done(StreamCall* call, grpc::ByteBuffer bytes);
  // Under the mutex: whether the stream may finish now (and marks it finished).
  bool ShouldFinish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Under the mutex: a write was taken off the queue; `call` may be deleted after the unlock.
  void Written(StreamCall* call, std::vector<StreamCall*>* dead)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Under the mutex: the client is gone; cancels the calls in flight and drops the queue.
  void Break(std::vector<StreamCall*>* dead) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  grpc::CallbackServerContext* const context_;
  InferenceRunner* const runner_;
  const SharedMemoryManager* const shm_;
  grpc::ByteBuffer read_bytes_;  // the read in progress (one at a time)
  absl::Mutex mutex_;
  std::deque<Outgoing> queue_ ABSL_GUARDED_BY(mutex_);  // front: being written when writing_
  bool writing_ ABSL_GUARDED_BY(mutex_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mutex_) = false;
  bool read_paused_ ABSL_GUARDED_BY(mutex_) = false;  // no read started: too much pending
  bool broken_ ABSL_GUARDED_BY(mutex_) = false;       // cancelled, or a write failed
  bool finished_ ABSL_GUARDED_BY(mutex_) = false;
  std::vector<StreamCall*> live_ ABSL_GUARDED_BY(mutex_);  // submitted, not yet finished
};

// One request of a ModelStreamInfer stream, as the runner sees it. Created on the stream's read;
// deleted by the stream once the runner finished it and its last response was written (or
// dropped).
class InferenceService::StreamCall final : public InferenceCall {
 public:
  StreamCall(Stream* stream, absl::Time deadline)
      : InferenceCall(Protocol::kGrpc, Polling::kWhileInline, absl::Now(), deadline),
        stream_(stream) {}

  // Parses the stream's read and submits it. On the stream's reading thread.
  void Start(grpc::ByteBuffer* bytes, InferenceRunner* runner, const SharedMemoryManager* shm) {
    const absl::Status parsed = CatchExceptions("ModelStreamInfer: ", [&] {
      return ParseInferRequest(*bytes, "ModelStreamInfer", &request_);
    });
    if (!parsed.ok()) {
      Finish(parsed);  // no model named yet: nothing for the runner to record
      return;
    }
    request.error = ToInferenceRequest(request_, &request, shm, &shm_);
    if (request.error.ok()) {
      request.error = ApplySequenceIdHeader(SequenceIdMetadata(stream_->context_), &request);
    }
    runner->Submit(this);
  }

 protected:
  absl::Status Respond(const LoadedModel& model, const std::vector<int>& outputs,
                       std::vector<engine::Value>& values) override {
    LS_RETURN_IF_ERROR(EncodeInferOutputs(*model.model, outputs, values, &response_, &shm_));
    values.clear();
    Label(model, &response_);
    return absl::OkStatus();
  }

  bool CanStreamIterations() const override { return true; }

  absl::Status RespondIteration(const LoadedModel& model, int64_t iteration,
                                absl::Span<const engine::ScanSlice> slices) override {
    inference::ModelStreamInferResponse message;
    inference::ModelInferResponse* response = message.mutable_infer_response();
    for (const engine::ScanSlice& slice : slices) {
      LS_RETURN_IF_ERROR(
          EncodeOutputTensor(model.model->outputs()[slice.output].name, *slice.tensor, response));
    }
    Label(model, response);
    (*response->mutable_parameters())["iteration"].set_int64_param(iteration);
    SetBoolParameter(response, "triton_final_response", false);
    grpc::ByteBuffer bytes;
    LS_RETURN_IF_ERROR(SerializeTo(message, &bytes));
    return stream_->Send(this, std::move(bytes), /*wait=*/true);
  }

  void Finish(const absl::Status& status) override {
    inference::ModelStreamInferResponse message;
    if (status.ok()) {
      message.mutable_infer_response()->Swap(&response_);
      SetBoolParameter(message.mutable_infer_response(), "triton_final_response", true);
    } else {
      // Triton's way: the stream stays open; the error names the request it belongs to.
      message.set_error_message(std::string(status.message()));
      inference::ModelInferResponse* response = message.mutable_infer_response();
      response->set_model_name(request_.model_name());
      response->set_model_version(request_.model_version());
      response->set_id(request_.id());
      SetBoolParameter(response, "triton_final_response", true);
    }
    grpc::ByteBuffer bytes;
    if (!SerializeTo(message, &bytes).ok()) {
      // An error message always serializes; this keeps the request's answer in the stream.
      inference::ModelStreamInferResponse failed;
      failed.set_error_message("cannot serialize the response");
      (void)SerializeTo(failed, &bytes);
    }
    stream_->Done(this, std::move(bytes));  // `this` may be deleted from here on
  }

  bool ClientGone() override { return stream_->context_->IsCancelled(); }

 private:
  friend class Stream;

  void Label(const LoadedModel& model, inference::ModelInferResponse* response) const {
    response->set_model_name(model.name);
    response->set_model_version(model.version_string);
    response->set_id(request_.id());
  }

  Stream* const stream_;
  inference::ModelInferRequest request_;  // raw inputs are views of it until Finish
  SharedMemoryBindings shm_;              // raw inputs may view these regions until Finish
  inference::ModelInferResponse response_;
  // Guarded by the stream's mutex.
  int queued_ = 0;         // responses queued, not yet written
  bool finished_ = false;  // Finish ran: deleted when queued_ reaches 0
};

void InferenceService::Stream::OnReadDone(bool ok) {
  if (ok) {
    auto* call = new StreamCall(this, CallDeadline(*context_));
    {
      absl::MutexLock lock(&mutex_);
      live_.push_back(call);
      if (broken_) call->Cancel();
    }
    call->Start(&read_bytes_, runner_, shm_);  // may finish it (an error, an inline run)
    {
      // A client that sends requests but does not read the answers: stop reading until it does,
      // so the answers waiting here stay bounded.
      absl::MutexLock lock(&mutex_);
      if (!broken_ && live_.size() + queue_.size() >= kStreamMaxPending) {
        read_paused_ = true;
        return;
      }
    }
    StartRead(&read_bytes_);
    return;
  }
  bool finish;
  bool broken;
  {
    absl::MutexLock lock(&mutex_);
    reads_done_ = true;
    finish = ShouldFinish();
    broken = broken_;
  }
  if (finish) Finish(broken ? grpc::Status::CANCELLED : grpc::Status::OK);
}

void InferenceService::Stream::OnWriteDone(bool ok) {
  std::vector<StreamCall*> dead;
  grpc::ByteBuffer* next = nullptr;
  bool more = false;  // another response waits behind `next`
  bool finish = false;
  bool resume_reading = false;
  bool broken;
  {
    absl::MutexLock lock(&mutex_);
    StreamCall* call = queue_.front().call;
    queue_.pop_front();
    Written(call, &dead);
    if (!ok) Break(&dead);
    if (read_paused_ && live_.size() + queue_.size() < kStreamMaxPending / 2) {
      read_paused_ = false;
      resume_reading = true;  // the stream cannot finish before the read ends
    }
    if (!queue_.empty()) {
      next = &queue_.front().bytes;
      more = queue_.size() > 1;
    } else {
      writing_ = false;
      finish = ShouldFinish();
    }
    broken = broken_;
  }
  for (StreamCall* call : dead) delete call;
  if (resume_reading) StartRead(&read_bytes_);
  if (next != nullptr) {
    // With more queued, gRPC may hold this one back to send it with the next (fewer frames and
    // syscalls per slice: the whole of a 200-step toy decode in 3.4 ms instead of 5.6-6.4,
    // measured); the last one queued goes out at once.
    StartWrite(next, more ? grpc::WriteOptions().set_buffer_hint() : grpc::WriteOptions());
  } else if (finish) {
    Finish(broken ? grpc::Status::CANCELLED : grpc::Status::OK);
  }
}

void InferenceService::Stream::OnCancel() {
  std::vector<StreamCall*> dead;
  bool finish;
  {
    absl::MutexLock lock(&mutex_);
    Break(&dead);
    finish = ShouldFinish();
  }
  for (StreamCall* call : dead) delete call;
  // Otherwise the read in progress ends (OnReadDone(false)), or Finish follows once the calls in
  // flight have stopped.
  if (finish) Finish(grpc::Status::CANCELLED);
}

absl::Status InferenceService::Stream::Send(StreamCall* call, grpc::ByteBuffer bytes, bool wait) {
  grpc::ByteBuffer* start = nullptr;
  {
    absl::MutexLock lock(&mutex_);
    if (wait) {
      auto room = [this, call]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
        return call->queued_ < kStreamWindow || broken_;
      };
      LS_RETURN_IF_ERROR(call->AwaitClient(
          [&](absl::Time until) ABSL_NO_THREAD_SAFETY_ANALYSIS {  // under mutex_
            return mutex_.AwaitWithDeadline(absl::Condition(&room), until);
          },
          "the client was not reading the stream's responses"));
    }
    if (broken_) return absl::CancelledError("the stream was cancelled or closed by the client");
    queue_.push_back(Outgoing{std::move(bytes), call});
    ++call->queued_;
    if (!writing_) {
      writing_ = true;
      start = &queue_.front().bytes;
    }
  }
  if (start != nullptr) StartWrite(start);
  return absl::OkStatus();
}

void InferenceService::Stream::Done(StreamCall* call, grpc::ByteBuffer bytes) {
  grpc::ByteBuffer* start = nullptr;
  bool finish = false;
  bool broken;
  {
    absl::MutexLock lock(&mutex_);
    call->finished_ = true;
    live_.erase(std::find(live_.begin(), live_.end(), call));
    if (!broken_) {
      queue_.push_back(Outgoing{std::move(bytes), call});
      ++call->queued_;
      if (!writing_) {
        writing_ = true;
        start = &queue_.front().bytes;
      }
    }
    // Nothing of it left to write (a broken stream): gone now (its destructor takes no lock).
    if (call->queued_ == 0) delete call;
    if (start == nullptr) finish = ShouldFinish();
    broken = broken_;
  }
  if (start != nullptr) {
    StartWrite(start);
  } else if (finish) {
    Finish(broken ? grpc::Status::CANCELLED : grpc::Status::OK);
  }
}

bool InferenceService::Stream::ShouldFinish() {
  if (finished_ || !reads_done_ || !live_.empty() || writing_) return false;
  finished_ = true;
  return true;
}

void InferenceService::Stream::Written(StreamCall* call, std::vector<StreamCall*>* dead) {
  if (--call->queued_ == 0 && call->finished_) dead->push_back(call);
}

void InferenceService::Stream::Break(std::vector<StreamCall*>* dead) {
  broken_ = true;
  if (read_paused_) {  // no read in progress to end the reads
    read_paused_ = false;
    reads_done_ = true;
  }
  for (StreamCall* call : live_) call->Cancel();
  // The front is gRPC's until its OnWriteDone; the rest is never written.
  const size_t keep = writing_ ? 1 : 0;
  while (queue_.size() > keep) {
    Written(queue_.back().call, dead);
    queue_.pop_back();
  }
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* InferenceService::ModelStreamInfer(
    grpc::CallbackServerContext* context) {
  return new Stream(context, runner_, api_->shared_memory());
}

grpc::ServerUnaryReactor* InferenceService::ServerLive(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request,
                                                       grpc::ByteBuffer* response) {
  return Unary<inference::ServerLiveRequest, inference::ServerLiveResponse>(
      context, "ServerLive", request, response, [](const auto&, auto* out) {
        out->set_live(true);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* InferenceService::ServerReady(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* request,
                                                        grpc::ByteBuffer* response) {
  return Unary<inference::ServerReadyRequest, inference::ServerReadyResponse>(
      context, "ServerReady", request, response, [&](const auto&, auto* out) {
        out->set_ready(api_->ServerReady());
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* InferenceService::ModelReady(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request,
                                                       grpc::ByteBuffer* response) {
  return Unary<inference::ModelReadyRequest, inference::ModelReadyResponse>(
      context, "ModelReady", request, response, [&](const auto& in, auto* out) -> absl::Status {
        // Triton answers ready = false for a model it does not know (readiness polling must
        // not raise); other errors (a bad version string) stay errors.
        absl::StatusOr<bool> ready = api_->ModelReady(in.name(), in.version());
        if (!ready.ok() && !absl::IsNotFound(ready.status())) return ready.status();
        out->set_ready(ready.ok() && *ready);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(grpc::CallbackServerContext* context,
                                                           const grpc::ByteBuffer* request,
                                                           grpc::ByteBuffer* response) {
  return Unary<inference::ServerMetadataRequest, inference::ServerMetadataResponse>(
      context, "ServerMetadata", request, response, [&](const auto&, auto* out) {
        *out = api_->ServerMetadata();
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(grpc::CallbackServerContext* context,
                                                          const grpc::ByteBuffer* request,
                                                          grpc::ByteBuffer* response) {
  return Unary<inference::ModelMetadataRequest, inference::ModelMetadataResponse>(
      context, "ModelMetadata", request, response, [&](const auto& in, auto* out) {
        return CopyTo(api_->ModelMetadata(in.name(), in.version()), out);
      });
}

grpc::ServerUnaryReactor* InferenceService::ModelConfig(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* request,
                                                        grpc::ByteBuffer* response) {
  return Unary<inference::ModelConfigRequest, inference::ModelConfigResponse>(
      context, "ModelConfig", request, response, [&](const auto& in, auto* out) {
        return CopyTo(api_->ModelConfig(in.name(), in.version()), out->mutable_config());
      });
}

grpc::ServerUnaryReactor* InferenceService::RepositoryIndex(grpc::CallbackServerContext* context,
                                                            const grpc::ByteBuffer* request,
                                                            grpc::ByteBuffer* response) {
  return Unary<inference::RepositoryIndexRequest, inference::RepositoryIndexResponse>(
      context, "RepositoryIndex", request, response, [&](const auto& in, auto* out) {
        *out = api_->RepositoryIndex(in.ready());
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* InferenceService::ModelStatistics(grpc::CallbackServerContext* context,
                                                            const grpc::ByteBuffer* request,
                                                            grpc::ByteBuffer* response) {
  return Unary<inference::ModelStatisticsRequest, inference::ModelStatisticsResponse>(
      context, "ModelStatistics", request, response, [&](const auto& in, auto* out) {
        return CopyTo(api_->ModelStatistics(in.name(), in.version()), out);
      });
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelLoad(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return RepositoryChange<inference::RepositoryModelLoadRequest,
                          inference::RepositoryModelLoadResponse>(
      context, "RepositoryModelLoad", request, response, [&](const auto& in, ServerApi::Done done) {
        LoadParameters parameters;
        for (const auto& [key, value] : in.parameters()) {
          if (key == "config" &&
              value.parameter_choice_case() == inference::ModelRepositoryParameter::kStringParam) {
            parameters.config_json = value.string_param();
          } else if (absl::StartsWith(key, "file:") &&
                     value.parameter_choice_case() ==
                         inference::ModelRepositoryParameter::kBytesParam) {
            parameters.files.emplace_back(key.substr(5), value.bytes_param());
          } else {
            return absl::InvalidArgumentError(
                absl::StrCat("RepositoryModelLoad: parameter ", QuoteUntrusted(key),
                             " is neither 'config' (a string) nor 'file:<path>' (bytes)"));
          }
        }
        return api_->Load("RepositoryModelLoad", in.repository_name(), in.model_name(),
                          std::move(parameters), std::move(done));
      });
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelUnload(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return RepositoryChange<inference::RepositoryModelUnloadRequest,
                          inference::RepositoryModelUnloadResponse>(
      context, "RepositoryModelUnload", request, response,
      [&](const auto& in, ServerApi::Done done) {
        return api_->Unload("RepositoryModelUnload", in.repository_name(), in.model_name(),
                            std::move(done));
      });
}

}  // namespace loopserve::server

namespace loopserve::server {

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryStatus(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary<inference::SystemSharedMemoryStatusRequest,
               inference::SystemSharedMemoryStatusResponse>(
      context, "SystemSharedMemoryStatus", request, response,
      [&](const auto& in, auto* out) -> absl::Status {
        LS_ASSIGN_OR_RETURN(std::vector<SharedMemoryManager::Status> regions,
                            api_->shared_memory()->List(in.name()));
        for (const SharedMemoryManager::Status& region : regions) {
          auto& status = (*out->mutable_regions())[region.name];
          status.set_name(region.name);
          status.set_key(region.key);
          status.set_offset(region.offset);
          status.set_byte_size(region.byte_size);
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryRegister(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary<inference::SystemSharedMemoryRegisterRequest,
               inference::SystemSharedMemoryRegisterResponse>(
      context, "SystemSharedMemoryRegister", request, response, [&](const auto& in, auto*) {
        return api_->shared_memory()->Register(in.name(), in.key(), in.offset(), in.byte_size());
      });
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryUnregister(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary<inference::SystemSharedMemoryUnregisterRequest,
               inference::SystemSharedMemoryUnregisterResponse>(
      context, "SystemSharedMemoryUnregister", request, response,
      [&](const auto& in, auto*) { return api_->shared_memory()->Unregister(in.name()); });
}

grpc::ServerUnaryReactor* InferenceService::LogSettings(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* request,
                                                        grpc::ByteBuffer* response) {
  return Unary<inference::LogSettingsRequest, inference::LogSettingsResponse>(
      context, "LogSettings", request, response, [](const auto& in, auto* out) -> absl::Status {
        LogSettingList changes;
        for (const auto& [name, value] : in.settings()) {
          switch (value.parameter_choice_case()) {
            case inference::LogSettingsRequest::SettingValue::kBoolParam:
              changes.emplace_back(name, value.bool_param());
              break;
            case inference::LogSettingsRequest::SettingValue::kUint32Param:
              changes.emplace_back(name, value.uint32_param());
              break;
            case inference::LogSettingsRequest::SettingValue::kStringParam:
              changes.emplace_back(name, value.string_param());
              break;
            default:  // no value (tritonclient sends one for None): left as it is
              break;
          }
        }
        LS_RETURN_IF_ERROR(UpdateLogSettings(changes));
        for (const auto& [name, value] : CurrentLogSettings()) {
          auto& setting = (*out->mutable_settings())[name];
          if (const bool* b = std::get_if<bool>(&value)) setting.set_bool_param(*b);
          if (const uint32_t* u = std::get_if<uint32_t>(&value)) setting.set_uint32_param(*u);
          if (const std::string* s = std::get_if<std::string>(&value)) {
            setting.set_string_param(*s);
          }
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* InferenceService::TraceSetting(grpc::CallbackServerContext* context,
                                                         const grpc::ByteBuffer* request,
                                                         grpc::ByteBuffer* response) {
  return Unary<inference::TraceSettingRequest, inference::TraceSettingResponse>(
      context, "TraceSetting", request, response, [](const auto& in, auto* out) -> absl::Status {
        TraceSettingList changes;
        for (const auto& [name, value] : in.settings()) {
          changes.emplace_back(
              name, std::vector<std::string>(value.value().begin(), value.value().end()));
        }
        LS_ASSIGN_OR_RETURN(TraceSettingList settings,
                            Tracer::Global().Update(in.model_name(), changes));
        for (const auto& [name, values] : settings) {
          auto* setting = (*out->mutable_settings())[name].mutable_value();
          for (const std::string& v : values) setting->Add(std::string(v));
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* InferenceService::CudaSharedMemoryStatus(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  // No region can exist: the status of none is an empty list, as Triton's without GPUs.
  return Unary<inference::CudaSharedMemoryStatusRequest, inference::CudaSharedMemoryStatusResponse>(
      context, "CudaSharedMemoryStatus", request, response,
      [&](const auto& in, auto*) -> absl::Status {
        if (in.name().empty()) return absl::OkStatus();
        return ServerApi::CudaSharedMemoryUnsupported();
      });
}

grpc::ServerUnaryReactor* InferenceService::CudaSharedMemoryRegister(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary<inference::CudaSharedMemoryRegisterRequest,
               inference::CudaSharedMemoryRegisterResponse>(
      context, "CudaSharedMemoryRegister", request, response,
      [](const auto&, auto*) { return ServerApi::CudaSharedMemoryUnsupported(); });
}

grpc::ServerUnaryReactor* InferenceService::CudaSharedMemoryUnregister(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  // Unregistering everything (what clients do first, as Triton's examples) has nothing to do.
  return Unary<inference::CudaSharedMemoryUnregisterRequest,
               inference::CudaSharedMemoryUnregisterResponse>(
      context, "CudaSharedMemoryUnregister", request, response,
      [](const auto& in, auto*) -> absl::Status {
        if (in.name().empty()) return absl::OkStatus();
        return ServerApi::CudaSharedMemoryUnsupported();
      });
}

}  // namespace loopserve::server
