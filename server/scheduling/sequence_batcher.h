#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "engine/tensor/tensor.h"
#include "engine/tensor/value.h"
#include "proto/model_config.pb.h"
#include "server/observability/metrics.h"
#include "server/repository/model_config.h"
#include "server/runner/infer_request.h"

namespace loopserve::server {

class InferenceCall;

// A version's `sequence_batching` (config.pbtxt) as the sequence batcher applies it: built at load
// from the complete config (CheckSequenceBatching and CheckSequenceAgainstModel have run).
struct SequencePolicy {
  enum class Strategy { kDirect, kOldest };
  using Kind = inference::ModelSequenceBatching::Control::Kind;

  struct Control {
    Kind kind;
    int input = -1;  // Model::inputs() index
    engine::DataType dtype = engine::DataType::kUndefined;
    double false_value = 0, true_value = 1;  // START / READY / END
  };
  struct State {
    std::string input_name, output_name;
    int input = -1, output = -1;  // Model::inputs() / outputs() indices
    int axis = 0;                 // the batch axis (output_batch_axes; 0 by default)
    engine::Tensor initial;       // one sequence's value: dims with a 1 at `axis` when batched
  };

  Strategy strategy = Strategy::kDirect;
  bool batched = false;        // max_batch_size > 0: tensors carry a batch dim
  int64_t max_batch_size = 1;  // steps per execution (oldest); 1 without batching
  int slots = 1;               // sequences live at once; more starts queue (up to `slots`)
  int instances = 1;           // executions at once (instance_group count): one collector each
  absl::Duration idle = absl::Seconds(1);  // max_sequence_idle_microseconds (Triton's default)
  absl::Duration max_queue_delay;          // oldest: how long a batch waits to fill
  std::vector<Control> controls;
  std::vector<State> states;
  std::vector<int> server_inputs;  // control and state inputs (Model::inputs() indices)
  // Per model output: its batch axis (output_batch_axes; 0 by default), where a merged
  // execution's outputs are split.
  std::vector<int> output_axes;

  // The policy of a complete config against its model (its slots: SequenceSlots); null without
  // sequence_batching. `model_dir` holds initial_state/ (read through repo_file.h: inside the
  // model folder, a regular file, exactly the state's bytes). InvalidArgument naming the state.
  static absl::StatusOr<std::unique_ptr<SequencePolicy>> FromConfig(
      const inference::ModelConfig& config, const engine::Model& model,
      const std::string& model_dir);
};

// One request of a sequence, as the runner hands it to the batcher.
struct SequenceStep {
  InferenceCall* call = nullptr;  // borrowed until SequenceHost::finish
  InferenceRequest::Sequence sequence;
  // The request's inputs in Model::inputs() order (config-checked; the server's inputs kNone).
  std::vector<engine::Value> inputs;
  absl::Time deadline = absl::InfiniteFuture();
  const std::atomic<bool>* cancelled = nullptr;
};

// What the batcher needs of the runner; the runner's functions outlive every call.
struct SequenceHost {
  // Runs `task` on the worker pool; an error when the pool refuses it.
  std::function<absl::Status(std::function<void()> task)> schedule;
  // Runs the model once over `inputs` for `members` steps led by `lead` (its version's caps).
  std::function<absl::StatusOr<std::vector<engine::Value>>(
      InferenceCall* lead, std::vector<engine::Value> inputs, absl::Time deadline,
      const std::atomic<bool>* cancelled, int64_t members)>
      run;
  // Answers a step: with `outputs` (Model::outputs() order) when `status` is OK. The call may be
  // gone afterwards.
  std::function<void(InferenceCall* call, const absl::Status& status,
                     std::vector<engine::Value>* outputs)>
      finish;
};

// Triton's sequence batcher for one model version: a slot per live sequence holding its state
// tensors (allocated once at construction, reused by the sequences that take the slot), the
// sequence's steps queued in arrival order, and executions on the worker pool. `direct` runs one
// step per execution (the sequence's slot is its batch row); `oldest` gathers the ready steps of
// up to max_batch_size sequences into one execution (inputs and states concatenated along their
// batch axes) and scatters outputs and states back. Steps of one sequence run one at a time and
// are answered in order; a sequence's state is read and written only by its own steps.
//
// Every way a sequence can go wrong answers with an error and frees its slot: a step of an id
// that is not live (never started, ended, expired after max_sequence_idle, lost with a reloaded
// version), a failed step (failed run, deadline, cancel: the sequence ends with it, its later
// steps are told why); a second start of a live id restarts it (its queued steps get ABORTED
// saying so); starts beyond the slots queue (up to `slots` of them, for at most the idle time),
// then RESOURCE_EXHAUSTED.
//
// Owned by LoadedModel through a shared_ptr (required: collector tasks hold it); thread-safe. A
// reaper thread, started with the first step, expires idle sequences and queued starts; the
// destructor stops it and answers nothing (every call pins the version, so none is left by then).
class SequenceBatcher : public std::enable_shared_from_this<SequenceBatcher> {
 public:
  struct Stats {
    int64_t live = 0;        // sequences holding a slot
    int64_t slots = 0;       // the version's slots
    int64_t backlog = 0;     // starts waiting for a slot
    int64_t started = 0;     // sequences started (restarts are counted in `restarts`)
    int64_t ended = 0;       // sequences ended (by their END step)
    int64_t failed = 0;      // sequences ended by an error
    int64_t expired = 0;     // sequences that went idle past max_sequence_idle
    int64_t restarts = 0;    // starts of a live id
    int64_t rejected = 0;    // steps refused (not live, no slot)
    int64_t steps = 0;       // steps executed
    int64_t executions = 0;  // model runs
  };

  // `metrics`: the version's sequence series (Metrics::ForSequences); default: none.
  explicit SequenceBatcher(std::unique_ptr<SequencePolicy> policy,
                           SequenceMetrics metrics = SequenceMetrics());
  ~SequenceBatcher();

  SequenceBatcher(const SequenceBatcher&) = delete;
  SequenceBatcher& operator=(const SequenceBatcher&) = delete;

  const SequencePolicy& policy() const { return *policy_; }

  // Takes a step: OK when it is queued (host.finish answers it later); otherwise the error, and
  // the caller answers it (the call stays the caller's). `host` must outlive the step.
  absl::Status Enqueue(SequenceStep step, const SequenceHost& host);

  // Ends every live sequence: queued steps and starts are answered `why` (UNAVAILABLE for a
  // drain, or the reload's reason); running steps finish and their sequences end.
  void Flush(const absl::Status& why);

  Stats stats() const;

 private:
  struct Slot {
    std::string key;                    // "#<id>" or "$<string id>"
    std::string label;                  // "sequence 1000", "sequence 'abc'" for messages
    std::vector<engine::Tensor> state;  // one per policy state, one sequence's rows
    std::deque<SequenceStep> steps;     // arrived, not yet taken
    bool live = false;
    bool fresh = false;    // the next step taken starts the sequence (states to initial)
    bool ending = false;   // an END step is queued or running
    bool running = false;  // a step of it runs
    bool ready = false;    // in ready_
    absl::Time last_active;
  };
  struct Taken {
    Slot* slot;
    SequenceStep step;
    bool start;
  };

  static std::string Key(const InferenceRequest::Sequence& sequence);
  static std::string Label(const InferenceRequest::Sequence& sequence);

  // Gives `slot` to the start `step` (under mutex_).
  void Assign(Slot& slot, SequenceStep step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void MakeReady(Slot& slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Ends the slot's sequence: its queued steps go to `failed` with `why`, the slot to the free
  // list (or to the oldest queued start); `reason` is remembered for later steps of the id.
  void EndSlot(Slot& slot, const std::string& reason, const absl::Status& why,
               std::vector<std::pair<SequenceStep, absl::Status>>& failed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void Remember(const std::string& key, std::string reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Expires idle sequences and overdue starts by `now`.
  void Sweep(absl::Time now, std::vector<std::pair<SequenceStep, absl::Status>>& failed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Starts a collector when steps are ready and a collector slot is free (under mutex_; the
  // caller schedules when true).
  bool TakeCollector() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void StartCollector(const SequenceHost& host);
  void Collect(const SequenceHost& host);
  // Runs `batch` and answers its steps; the slots stay `running` until the caller releases them.
  // Returns per member whether its sequence must end (with the reason).
  void Execute(const SequenceHost& host, std::vector<Taken>& batch,
               std::vector<absl::Status>& ends);
  absl::StatusOr<std::vector<engine::Value>> RunMembers(const SequenceHost& host,
                                                        std::vector<Taken>& batch);
  // Stores member `member` of `members`' rows of state `s` from the run's output `out` into
  // `slot` (a lone member's owned output buffer is swapped in); Internal when `out` does not fit.
  absl::Status StoreState(size_t s, engine::Value& out, int64_t member, int64_t members,
                          Slot& slot) const;
  bool IsStateOutput(size_t output) const;
  static void Finish(const SequenceHost& host,
                     std::vector<std::pair<SequenceStep, absl::Status>>& failed);
  void Reap();
  // Counts an outcome in stats_ and Prometheus; Publish sets the gauges from stats_.
  void Count(SequenceMetrics::Outcome outcome) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void Publish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const std::unique_ptr<SequencePolicy> policy_;
  const int max_collectors_;
  const SequenceMetrics metrics_;
  mutable absl::Mutex mutex_;
  absl::CondVar wake_;  // the reaper: a new deadline, or stop
  std::vector<std::unique_ptr<Slot>> slots_ ABSL_GUARDED_BY(mutex_);
  std::vector<Slot*> free_ ABSL_GUARDED_BY(mutex_);
  absl::flat_hash_map<std::string, Slot*> live_ ABSL_GUARDED_BY(mutex_);
  std::deque<Slot*> ready_ ABSL_GUARDED_BY(mutex_);
  std::deque<std::pair<SequenceStep, absl::Time>> backlog_ ABSL_GUARDED_BY(mutex_);
  // Why recent ids are not live (bounded, oldest forgotten first).
  absl::flat_hash_map<std::string, std::string> gone_ ABSL_GUARDED_BY(mutex_);
  std::deque<std::string> gone_order_ ABSL_GUARDED_BY(mutex_);
  const SequenceHost* host_ ABSL_GUARDED_BY(mutex_) = nullptr;  // the reaper's
  // The last Flush's reason: ends the sequences whose step ran meanwhile.
  absl::Status flushed_ ABSL_GUARDED_BY(mutex_);
  int collectors_ ABSL_GUARDED_BY(mutex_) = 0;
  bool stop_ ABSL_GUARDED_BY(mutex_) = false;
  Stats stats_ ABSL_GUARDED_BY(mutex_);
  std::thread reaper_;  // started by the first Enqueue; joined by the destructor
};

}  // namespace loopserve::server
