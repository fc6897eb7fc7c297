#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/engine.h"
#include "server/observability/metrics.h"
#include "server/observability/tracer.h"
#include "server/repository/model_repository.h"
#include "server/runner/infer_request.h"
#include "server/scheduling/iteration_batcher.h"
#include "server/scheduling/scheduler.h"
#include "server/scheduling/sequence_batcher.h"
#include "server/scheduling/worker_pool.h"

namespace loopserve::server {

class InferenceRunner;

// One inference request in flight, as a protocol adapter sees it. The adapter derives from it
// (the gRPC ModelInfer call, the REST /infer call), fills `request`, and hands it to
// InferenceRunner::Submit; the runner calls Respond with the outputs and Finish with the outcome.
//
// Threads: Submit's caller (a gRPC callback thread, an HTTP event thread) until the request is
// queued, then one worker; Respond and Finish run on whichever thread ran the request, Finish on
// Submit's caller too when the request is answered inside Submit. Cancel may be called from any
// thread at any time until Finish. Ownership stays with the adapter: the runner borrows the
// call from Submit until it calls Finish and never touches it afterwards, so Finish may delete it.
//
// Streaming (`stream_iterations`): an adapter that can send several responses per request
// (ModelStreamInfer, REST server-sent events) overrides CanStreamIterations and RespondIteration;
// the runner then checks the request against the model (a top-level Loop with scan outputs among
// the requested outputs), runs it on a worker (never on the adapter's thread, which the client's
// reading paces), hands the engine the call as its IterationObserver, and calls RespondIteration
// once per iteration before Respond and Finish.
class InferenceCall : public ScheduledCall, private engine::IterationObserver {
 public:
  // How the runner learns that the client went away. kWhileInline: the protocol reports it
  // (gRPC's OnCancel -> Cancel) except while the request runs on the adapter's own thread, when
  // the runner's watcher polls ClientGone. kAlways: only ClientGone tells (a TCP connection), so
  // the watcher polls it from Submit to Finish.
  enum class Polling { kWhileInline, kAlways };

  // `received`: when the request arrived (its durations start there). `deadline`: the protocol's
  // own deadline (gRPC's), InfiniteFuture when none; the `timeout` parameter may shorten it.
  InferenceCall(Protocol protocol, Polling polling, absl::Time received, absl::Time deadline);
  virtual ~InferenceCall() = default;

  // Iteration responses of one `stream_iterations` request handed to the protocol and not yet
  // written to the client before its Loop waits (RespondIteration's bound, every protocol).
  static constexpr int kStreamWindow = 8;

  InferenceCall(const InferenceCall&) = delete;
  InferenceCall& operator=(const InferenceCall&) = delete;

  Protocol protocol() const { return protocol_; }
  absl::Time received() const { return received_; }

  // What the client asked for; the adapter fills it before Submit. Typed decoders run inside
  // Submit; raw views must stay valid until Finish.
  InferenceRequest request;

 protected:
  // Encodes the outputs into the protocol's response, on the thread that ran the request.
  // `outputs` indexes `values` (Model::outputs() order) in response order. An error fails the
  // request with that status.
  virtual absl::Status Respond(const LoadedModel& model, const std::vector<int>& outputs,
                               std::vector<engine::Value>& values) = 0;
  // Answers the client: `status`, and when it is OK the response Respond built. Called exactly
  // once per Submit; the runner never touches the call afterwards.
  virtual void Finish(const absl::Status& status) = 0;
  // Whether the client is gone (cancelled its call, closed its connection); polled by the
  // runner's watcher every InferenceRunner::kCancelPollInterval (see Polling), under the
  // runner's mutex, while the call is in flight. Must be cheap and must not block.
  virtual bool ClientGone() { return false; }

  // Whether the adapter implements RespondIteration; a request asking for `stream_iterations`
  // otherwise gets INVALID_ARGUMENT.
  virtual bool CanStreamIterations() const { return false; }
  // Sends one iteration's slices of the requested scan outputs (`slices[k].output` indexes
  // Model::outputs(); response order), on the thread running the request, while the Loop waits.
  // May wait for the client to read earlier responses (a bounded window), up to deadline() and
  // while !cancelled(); an error (DEADLINE_EXCEEDED, CANCELLED) stops the run with it.
  virtual absl::Status RespondIteration(const LoadedModel& model, int64_t iteration,
                                        absl::Span<const engine::ScanSlice> slices);

  // The back-pressure wait of RespondIteration, for every protocol: calls `room(until)` (which
  // waits until the adapter has room for another response — true — or `until` passes — false)
  // with `until` at most InferenceRunner::kCancelPollInterval ahead, until it answers true.
  // CANCELLED once the call is cancelled, DEADLINE_EXCEEDED once its deadline passed; `what`
  // names the wait in the latter's message.
  absl::Status AwaitClient(absl::FunctionRef<bool(absl::Time until)> room,
                           absl::string_view what) const;

 private:
  friend class InferenceRunner;

  // engine::IterationObserver: the requested slices of the streamed Loop -> RespondIteration.
  absl::Status OnIteration(int loop_index, int64_t iteration,
                           absl::Span<const engine::ScanSlice> slices) override;

  const Protocol protocol_;
  const Polling polling_;
  const absl::Time received_;
  // Owned by the runner from Submit to Finish.
  std::shared_ptr<const LoadedModel> model_;  // pinned until Finish
  DecodedRequest decoded_;
  bool admitted_ = false;   // counted in loopserve_inflight_requests
  bool queued_ = false;     // counted in loopserve_queue_depth until a worker takes it
  absl::Time row_started_;  // an iteration-batching row: when it joined its running batch
  // The runner's list of calls in flight (guarded by its mutex).
  InferenceCall* prev_ = nullptr;
  InferenceCall* next_ = nullptr;
  bool polled_ = false;  // the watcher polls ClientGone
  // `stream_iterations`: the top-level Loop streamed (-1: none), which of its slices (positions
  // in OnIteration's span) go out in response order, and a buffer for them (no allocation per
  // iteration).
  int stream_loop_ = -1;
  std::vector<int> stream_picks_;
  std::vector<engine::ScanSlice> stream_slices_;
  int64_t slices_sent_ = 0;
  // The request's trace when Tracer::Sample picked it (null otherwise: one pointer test per
  // trace point); handed to the tracer by Complete.
  std::unique_ptr<RequestTrace> trace_;
};

// The request path every protocol shares: takes a request in whatever protocol it came, and
//   admits it      the server is not draining; the version is pinned (ModelRegistry::Get); the
//                  `timeout` parameter shortens the deadline; the request is bound to the
//                  model's signature (BindRequest) and to its config (ModelIo::AdaptInputs);
//   schedules it   by the version's Scheduler (LoadedModel::scheduler, server/scheduling/):
//                  the DirectScheduler runs it on this thread or the WorkerPool, the
//                  DynamicBatcher merges it with other clients' calls; the runner is their
//                  Executor (it runs what they schedule and answers what they refuse);
//   runs it        engine::Model::Run with the deadline, the call's cancellation flag, the
//                  version's caps (iterations, output bytes, memory) and its LoopObserver; a
//                  request whose deadline passed or that was cancelled while queued is answered
//                  without running; the final outputs are held to max_output_bytes and the
//                  config's output reshapes;
//   answers it     InferenceCall::Respond encodes, InferenceCall::Finish sends;
//   records it     loopserve_requests_total{protocol,outcome}, the request/queue/compute
//                  histograms, inflight and queue depth, Triton's statistics, and
//                  loopserve_loop_limit_hits_total{reason} from the engine's LimitReason (or the
//                  DEADLINE_EXCEEDED / CANCELLED code of a stopped run).
// Exceptions stop here (INTERNAL). A `stream_iterations` request runs with its call as the
// engine's IterationObserver beside the version's LoopObserver (see InferenceCall).
//
// A merged batch (Executor::RunMerged) runs as one Model::Run on the merged inputs (the latest
// deadline of its members; caps on output bytes and memory multiplied by the member count, the
// iteration cap unchanged since every member shares each iteration), and its outputs are split
// per request. A member cancelled or past its deadline while its batch runs is answered
// CANCELLED / DEADLINE_EXCEEDED when the batch ends while the others get their outputs; the
// watcher stops the run when every member is cancelled. Every run's time goes to the version's
// scheduler (Scheduler::RecordRun), whose timing rules read it.
//
// Sequence batching (a version with `sequence_batching`, whose scheduler is a SequenceScheduler):
// an admitted call is a step of the sequence its `sequence_id` names (Executor::TakeStep) and goes
// to the version's SequenceBatcher, which runs it on the pool through sequence_host_
// (server/scheduling/sequence_batcher.h). The client sends neither control nor state inputs (the
// scheduler's server_inputs); the state outputs are left out of the response unless asked for by
// name.
//
// Cancellation: InferenceCall::Cancel from the adapter (gRPC's OnCancel), and a watcher thread
// that polls InferenceCall::ClientGone of the calls that need it (see InferenceCall::Polling)
// every kCancelPollInterval: a client's cancel or a closed connection stops a run within one
// poll plus one Loop iteration. CancelAll cancels every call in flight and every later one, and
// makes the served versions' batch collectors send at once (their cancelled calls are answered
// then, not when a long max_queue_delay ends).
//
// Iteration batching (parameter `iteration_batching`, whose scheduler is an IterationBatcher): an
// admitted call becomes one row of a running batch (Executor::TakeRow: deadline, cancel flag, the
// version's caps per row, the call as its streaming observer); RowStarted ends the call's queue
// time, FinishRow answers it as Execute would.
//
// Thread-safe. Borrows the registry, pool and metrics, which must outlive it; every call
// submitted must have been finished before it is destroyed (the servers' shutdown waits for it).
class InferenceRunner : private Executor {
 public:
  struct Options {
    // Runs of versions whose recent runs took less on average may run on the caller's thread;
    // zero: never.
    absl::Duration inline_run_limit = absl::ZeroDuration();
  };
  InferenceRunner(ModelRegistry* registry, WorkerPool* pool, Metrics& metrics, Options options);
  ~InferenceRunner();

  InferenceRunner(const InferenceRunner&) = delete;
  InferenceRunner& operator=(const InferenceRunner&) = delete;

  // How often the watcher polls InferenceCall::ClientGone.
  static constexpr absl::Duration kCancelPollInterval = absl::Milliseconds(5);

  // Takes `call` through the request path. Returns when the call has been answered (Finish ran
  // on this thread: a rejected request, or a run on this thread) or handed to a worker (which
  // will call Finish). `call` must stay alive until Finish.
  void Submit(InferenceCall* call);

  // After this, new requests get UNAVAILABLE and ready() answers false.
  void StartDraining() { draining_.store(true); }
  bool draining() const { return draining_.load(); }

  // Waits until no call is in flight or `deadline` passes; true when idle.
  bool WaitForIdle(absl::Time deadline);

  // Cancels every call in flight (queued, running on a worker or on a protocol thread) and every
  // later one. For shutdown after the exit timeout.
  void CancelAll();

 private:
  // Admission: OK when the call was run here (and answered) or queued; otherwise the error.
  absl::Status Admit(InferenceCall& call);
  SequenceHost MakeSequenceHost();
  // `stream_iterations`: checks the call can stream and the requested outputs include scan
  // outputs of one top-level Loop; fills the call's stream_* fields.
  absl::Status PlanIterationStream(InferenceCall& call);
  // Executor: what the version's scheduler runs, answers and counts.
  WorkerPool& pool() override { return *pool_; }
  absl::Duration inline_run_limit() const override { return options_.inline_run_limit; }
  void RunAlone(ScheduledCall& call) override;
  void RunHere(ScheduledCall& call) override;
  void RunMerged(absl::Span<ScheduledCall* const> calls) override;
  void Reject(ScheduledCall& call, const absl::Status& status) override;
  void WatchWhileHere(ScheduledCall& call) override;
  void Queued(ScheduledCall& call) override;
  void Unqueued(ScheduledCall& call) override;
  bool Mergeable(const ScheduledCall& call) const override;
  bool CanMerge(const ScheduledCall& head, const ScheduledCall& other) const override;
  RowRequest TakeRow(ScheduledCall& call) override;
  void RowStarted(ScheduledCall& call) override;
  void FinishRow(ScheduledCall& call, absl::StatusOr<std::vector<engine::Value>> outputs) override;
  absl::StatusOr<SequenceStep> TakeStep(ScheduledCall& call, const SequencePolicy& policy) override;
  const SequenceHost& sequence_host() const override { return sequence_host_; }
  // Every ScheduledCall a scheduler hands back is an InferenceCall the runner submitted.
  static InferenceCall& Of(ScheduledCall& call) { return static_cast<InferenceCall&>(call); }
  static const InferenceCall& Of(const ScheduledCall& call) {
    return static_cast<const InferenceCall&>(call);
  }

  // Runs a batch taken from the queue and answers each of its calls.
  void RunBatch(const LoadedModel& model, const std::vector<InferenceCall*>& calls);
  absl::Status ExecuteBatch(const LoadedModel& model, const std::vector<InferenceCall*>& calls,
                            std::vector<absl::Status>& statuses);
  // On the thread that runs the call: Execute, then Complete.
  void Run(InferenceCall& call);
  absl::Status Execute(InferenceCall& call);
  // Records the outcome and calls Finish.
  void Complete(InferenceCall& call, const absl::Status& status);
  // The RunOptions of a run of `model` that `members` calls share: the version's caps (output
  // bytes and memory multiplied by `members`, the iteration cap unchanged since every member
  // shares each iteration) and its LoopObserver.
  static engine::RunOptions RunOptionsFor(const LoadedModel& model, absl::Time deadline,
                                          const std::atomic<bool>* cancelled, int64_t members);
  // Whether `call` left before its answer, by `now`: DEADLINE_EXCEEDED once its deadline passed
  // (or it was cancelled within kDeadlineClockSlack of it: a protocol cancels a call at its
  // deadline by its own clock), CANCELLED once cancelled, else OK. `where` ("in the queue",
  // "while its batch of 3 requests ran") is built for the message only; `cause`, when not OK,
  // is quoted in it.
  static absl::Status Left(const InferenceCall& call, absl::Time now, const absl::Status& cause,
                           absl::FunctionRef<std::string()> where);
  // Hands a call's outputs to its protocol: the output-bytes cap, the config's output reshapes,
  // then InferenceCall::Respond (timed as compute output).
  absl::Status Answer(InferenceCall& call, std::vector<engine::Value>& outputs);
  // The final-outputs cap (the engine caps Loop scan outputs as they grow).
  absl::Status CheckOutputBytes(const InferenceCall& call,
                                const std::vector<engine::Value>& outputs);
  // A stopped run's limit hit: the engine's LimitReason, or its deadline/cancel code.
  void RecordLimit(const LoadedModel& model, const absl::Status& status);
  // Tracing (Tracer): records `activity` of a traced call at `time` (now when omitted); a call
  // without a trace costs the pointer test.
  static void Mark(InferenceCall& call, RequestTrace::Activity activity, absl::Time time) {
    if (call.trace_ != nullptr) call.trace_->Mark(activity, time);
  }
  static void Mark(InferenceCall& call, RequestTrace::Activity activity) {
    if (call.trace_ != nullptr) call.trace_->Mark(activity, absl::Now());
  }
  // At LOOP_ITERATIONS: puts a traced call's trace in front of `*observer` (the run's
  // IterationObserver chain) so that it records every iteration.
  static void ObserveIterations(InferenceCall& call, engine::IterationObserver** observer) {
    if (call.trace_ == nullptr || !call.trace_->wants_iterations()) return;
    call.trace_->set_next(*observer);
    *observer = call.trace_.get();
  }

  // A merged batch in Model::Run: the watcher sets `cancelled` once every member is cancelled.
  struct RunningBatch {
    const std::vector<InferenceCall*>* calls;
    std::atomic<bool> cancelled{false};
  };

  void Link(InferenceCall* call);
  void Unlink(InferenceCall* call);
  void SetPolled(InferenceCall* call, bool polled);
  void Watch();

  ModelRegistry* const registry_;
  WorkerPool* const pool_;
  Metrics& metrics_;
  const Options options_;
  std::atomic<bool> draining_{false};
  absl::Mutex mutex_;
  int in_flight_ ABSL_GUARDED_BY(mutex_) = 0;
  InferenceCall* calls_ ABSL_GUARDED_BY(mutex_) = nullptr;      // intrusive list of calls in flight
  int polled_ ABSL_GUARDED_BY(mutex_) = 0;                      // calls whose ClientGone is polled
  std::vector<RunningBatch*> batches_ ABSL_GUARDED_BY(mutex_);  // merged batches running
  bool cancel_all_ ABSL_GUARDED_BY(mutex_) = false;
  bool stop_watcher_ ABSL_GUARDED_BY(mutex_) = false;
  std::thread watcher_;               // Watch; joined by the destructor
  const SequenceHost sequence_host_;  // the sequence batchers' view of this runner
};

// "model 'rnn' v2: " for messages about a pinned version.
std::string ModelLabel(const LoadedModel& model);

}  // namespace loopserve::server
