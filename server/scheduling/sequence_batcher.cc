#include "server/scheduling/sequence_batcher.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "engine/base/status_macros.h"
#include "server/observability/logging.h"
#include "server/repository/repo_file.h"
#include "server/status_util.h"

namespace loopserve::server {
namespace {

using Kind = SequencePolicy::Kind;
using Failed = std::vector<std::pair<SequenceStep, absl::Status>>;

// Ids remembered as ended, expired or failed, for the message of a later step.
constexpr size_t kRemembered = 4096;
// The largest initial_state data_file read.
constexpr uint64_t kMaxInitialStateBytes = 64 << 20;

// Copies rows [begin, begin + count) of `from` along `axis` to rows [at, at + count) of `to`
// (same dtype, same dims but along `axis`); strings element by element, never as raw bytes.
void CopyRows(const engine::Tensor& from, int axis, int64_t begin, int64_t count,
              engine::Tensor& to, int64_t at) {
  const int64_t outer = from.shape().NumElements(0, axis);
  const int64_t inner = from.shape().NumElements(axis + 1, from.rank());
  const int64_t from_rows = from.dim(axis);
  const int64_t to_rows = to.dim(axis);
  if (count == 0 || inner == 0) return;
  if (from.dtype() == engine::DataType::kString) {
    const std::string* in = from.data<std::string>();
    std::string* out = to.mutable_data<std::string>();
    for (int64_t o = 0; o < outer; ++o) {
      std::copy_n(in + (o * from_rows + begin) * inner, count * inner,
                  out + (o * to_rows + at) * inner);
    }
    return;
  }
  const size_t row = static_cast<size_t>(inner) * engine::DataTypeSize(from.dtype());
  const char* in = static_cast<const char*>(from.raw_data());
  char* out = static_cast<char*>(to.mutable_raw_data());
  for (int64_t o = 0; o < outer; ++o) {
    std::memcpy(out + (o * to_rows + at) * row, in + (o * from_rows + begin) * row, count * row);
  }
}

// The parts concatenated along `axis` (same dtype, same dims elsewhere: the caller checked).
engine::Tensor Concat(const std::vector<const engine::Tensor*>& parts, int axis) {
  engine::Shape shape = parts[0]->shape();
  int64_t rows = 0;
  for (const engine::Tensor* p : parts) rows += p->dim(axis);
  shape[axis] = rows;
  engine::Tensor out(parts[0]->dtype(), shape);
  int64_t at = 0;
  for (const engine::Tensor* p : parts) {
    CopyRows(*p, axis, 0, p->dim(axis), out, at);
    at += p->dim(axis);
  }
  return out;
}

// Rows [begin, begin + count) of `t` along `axis` as a tensor of their own.
engine::Tensor Slice(const engine::Tensor& t, int axis, int64_t begin, int64_t count) {
  engine::Shape shape = t.shape();
  shape[axis] = count;
  engine::Tensor out(t.dtype(), shape);
  CopyRows(t, axis, begin, count, out, 0);
  return out;
}

// Sets element `row` of a START / END / READY control tensor to `value`.
void SetControl(engine::Tensor& t, int64_t row, double value) {
  switch (t.dtype()) {
    case engine::DataType::kFloat32:
      t.mutable_data<float>()[row] = static_cast<float>(value);
      break;
    case engine::DataType::kBool:
      t.mutable_data<bool>()[row] = value != 0;
      break;
    default:
      t.mutable_data<int32_t>()[row] = static_cast<int32_t>(value);
  }
}

// Whether `sequence`'s id fits a CONTROL_SEQUENCE_CORRID of `dtype` (checked at Enqueue, so that
// SetCorrId cannot fail later; nothing allocated).
absl::Status CheckCorrId(engine::DataType dtype, const InferenceRequest::Sequence& sequence) {
  if (dtype == engine::DataType::kString) return absl::OkStatus();
  if (!sequence.string_id.empty()) {
    return absl::InvalidArgumentError(
        "parameter 'sequence_id': the model's CONTROL_SEQUENCE_CORRID is numeric; send a "
        "numeric id");
  }
  if ((dtype == engine::DataType::kInt32 || dtype == engine::DataType::kUint32) &&
      sequence.id > UINT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("parameter 'sequence_id' ", sequence.id,
                                                   " does not fit the model's 32-bit CORRID"));
  }
  return absl::OkStatus();
}

// Sets element `row` of a CORRID control tensor to the id of a step that passed CheckCorrId.
void SetCorrId(engine::Tensor& t, int64_t row, const InferenceRequest::Sequence& sequence) {
  switch (t.dtype()) {
    case engine::DataType::kString:
      t.mutable_data<std::string>()[row] =
          sequence.string_id.empty() ? absl::StrCat(sequence.id) : sequence.string_id;
      break;
    case engine::DataType::kInt32:
    case engine::DataType::kUint32:
      t.mutable_data<uint32_t>()[row] = static_cast<uint32_t>(sequence.id);
      break;
    default:
      t.mutable_data<uint64_t>()[row] = sequence.id;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<SequencePolicy>> SequencePolicy::FromConfig(
    const inference::ModelConfig& config, const engine::Model& model,
    const std::string& model_dir) {
  if (!config.has_sequence_batching()) return std::unique_ptr<SequencePolicy>();
  const inference::ModelSequenceBatching& batching = config.sequence_batching();
  auto policy = std::make_unique<SequencePolicy>();
  policy->batched = config.max_batch_size() > 0;
  policy->max_batch_size = std::max(config.max_batch_size(), 1);
  policy->strategy = batching.has_oldest() ? Strategy::kOldest : Strategy::kDirect;
  if (batching.max_sequence_idle_microseconds() > 0) {
    policy->idle = absl::Microseconds(batching.max_sequence_idle_microseconds());
  }
  policy->instances = std::max(InstanceCount(config), 1);
  // Checked at most 2^20 (CheckSequenceBatching); direct: a slot per batch row of each instance.
  policy->slots = static_cast<int>(SequenceSlots(config));
  if (batching.has_oldest()) {
    policy->max_queue_delay = absl::Microseconds(batching.oldest().max_queue_delay_microseconds());
  }
  LS_ASSIGN_OR_RETURN(const BatchLayout layout, ReadBatchLayout(config));
  for (const engine::TensorSpec& output : model.outputs()) {
    policy->output_axes.push_back(layout.OutputAxis(output.name));
  }
  for (const auto& input : batching.control_input()) {
    const auto& c = input.control(0);
    Control control;
    control.kind = c.kind();
    control.input = model.FindInput(input.name());
    if (c.kind() == Kind::ModelSequenceBatching_Control_Kind_CONTROL_SEQUENCE_CORRID) {
      control.dtype = DataTypeFromConfig(c.data_type());
    } else if (c.fp32_false_true_size() == 2) {
      control.dtype = engine::DataType::kFloat32;
      control.false_value = c.fp32_false_true(0);
      control.true_value = c.fp32_false_true(1);
    } else if (c.bool_false_true_size() == 2) {
      control.dtype = engine::DataType::kBool;
      control.false_value = c.bool_false_true(0);
      control.true_value = c.bool_false_true(1);
    } else {
      control.dtype = engine::DataType::kInt32;
      control.false_value = c.int32_false_true(0);
      control.true_value = c.int32_false_true(1);
    }
    policy->controls.push_back(control);
    policy->server_inputs.push_back(control.input);
  }
  for (const auto& s : batching.state()) {
    State state;
    state.input_name = s.input_name();
    state.output_name = s.output_name();
    state.input = model.FindInput(s.input_name());
    state.output = model.FindOutput(s.output_name());
    state.axis = policy->batched ? layout.OutputAxis(s.output_name()) : -1;
    std::vector<int64_t> dims(s.dims().begin(), s.dims().end());
    if (state.axis >= 0) dims.insert(dims.begin() + std::min<size_t>(state.axis, dims.size()), 1);
    if (state.axis < 0) state.axis = 0;  // unbatched: one sequence per execution anyway
    state.initial =
        engine::Tensor(DataTypeFromConfig(s.data_type()), engine::Shape(absl::MakeConstSpan(dims)));
    if (state.initial.ByteSize() > 0) {
      std::memset(state.initial.mutable_raw_data(), 0, state.initial.ByteSize());
    }
    if (s.initial_state_size() == 1 && s.initial_state(0).has_data_file()) {
      const std::string what = absl::StrCat("sequence_batching.state '", s.input_name(), "'");
      const std::string folder = model_dir + "/initial_state";
      absl::StatusOr<std::string> read =
          ReadRepositoryFile(folder, folder + "/" + s.initial_state(0).data_file(),
                             kMaxInitialStateBytes, what + " initial_state data_file");
      if (!read.ok()) return Annotate(read.status(), "config.pbtxt: ");
      const std::string& bytes = *read;
      if (bytes.size() != state.initial.ByteSize()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "config.pbtxt: ", what, ": initial_state data_file '", s.initial_state(0).data_file(),
            "' holds ", bytes.size(), " bytes, the state needs ", state.initial.ByteSize()));
      }
      if (!bytes.empty()) std::memcpy(state.initial.mutable_raw_data(), bytes.data(), bytes.size());
    }
    policy->server_inputs.push_back(state.input);
    policy->states.push_back(std::move(state));
  }
  return policy;
}

SequenceBatcher::SequenceBatcher(std::unique_ptr<SequencePolicy> policy, SequenceMetrics metrics)
    : policy_(std::move(policy)),
      max_collectors_(std::max(1, policy_->instances)),
      metrics_(metrics) {
  absl::MutexLock lock(&mutex_);
  for (int i = 0; i < policy_->slots; ++i) {
    auto slot = std::make_unique<Slot>();
    for (const SequencePolicy::State& state : policy_->states) {
      slot->state.emplace_back(state.initial.dtype(), state.initial.shape());
    }
    free_.push_back(slot.get());
    slots_.push_back(std::move(slot));
  }
  std::reverse(free_.begin(), free_.end());
  stats_.slots = policy_->slots;
  Publish();
}

void SequenceBatcher::Count(SequenceMetrics::Outcome outcome) {
  int64_t* counters[SequenceMetrics::kNumOutcomes] = {&stats_.started,  &stats_.ended,
                                                      &stats_.expired,  &stats_.failed,
                                                      &stats_.restarts, &stats_.rejected};
  ++*counters[outcome];
  if (metrics_.outcomes[outcome] != nullptr) metrics_.outcomes[outcome]->Increment();
  Publish();
}

void SequenceBatcher::Publish() {
  stats_.live = static_cast<int64_t>(live_.size());
  stats_.backlog = static_cast<int64_t>(backlog_.size());
  if (metrics_.live == nullptr) return;
  metrics_.live->Set(static_cast<double>(stats_.live));
  metrics_.slots->Set(static_cast<double>(stats_.slots));
  metrics_.backlog->Set(static_cast<double>(stats_.backlog));
}

SequenceBatcher::~SequenceBatcher() {
  {
    absl::MutexLock lock(&mutex_);
    stop_ = true;
    wake_.Signal();
  }
  if (!reaper_.joinable()) return;
  if (reaper_.get_id() == std::this_thread::get_id()) {
    reaper_.detach();  // the reaper let go of the last pin (see Reap); it returns at once
  } else {
    reaper_.join();
  }
}

std::string SequenceBatcher::Key(const InferenceRequest::Sequence& sequence) {
  return sequence.string_id.empty() ? absl::StrCat("#", sequence.id)
                                    : absl::StrCat("$", sequence.string_id);
}

std::string SequenceBatcher::Label(const InferenceRequest::Sequence& sequence) {
  return sequence.string_id.empty()
             ? absl::StrCat("sequence ", sequence.id)
             : absl::StrCat("sequence '", absl::CEscape(sequence.string_id.substr(0, 64)), "'");
}

absl::Status SequenceBatcher::Enqueue(SequenceStep step, const SequenceHost& host) {
  const InferenceRequest::Sequence& seq = step.sequence;
  if (!seq.present()) {
    return absl::InvalidArgumentError(
        "the model has sequence_batching: a request needs parameter 'sequence_id' (a non-zero "
        "integer or a non-empty string), with 'sequence_start' on its first request");
  }
  for (const SequencePolicy::Control& control : policy_->controls) {
    if (control.kind == Kind::ModelSequenceBatching_Control_Kind_CONTROL_SEQUENCE_CORRID) {
      LS_RETURN_IF_ERROR(CheckCorrId(control.dtype, seq));
    }
  }
  const std::string key = Key(seq);
  Failed failed;
  bool collector = false;
  absl::Status status;
  {
    absl::MutexLock lock(&mutex_);
    if (!reaper_.joinable()) reaper_ = std::thread([this] { Reap(); });
    host_ = &host;
    const absl::Time now = absl::Now();
    Sweep(now, failed);
    auto it = live_.find(key);
    Slot* slot = it == live_.end() ? nullptr : it->second;
    if (seq.start) {
      if (slot != nullptr) {
        // Triton's behaviour: a start of a live id restarts it in its slot.
        Count(SequenceMetrics::kRestarted);
        LogInfo(absl::StrCat(Label(seq), ": restarted by a new sequence_start while live"));
        const absl::Status why = absl::AbortedError(
            absl::StrCat(Label(seq), " was restarted by a later request with sequence_start"));
        for (SequenceStep& queued : slot->steps) failed.emplace_back(std::move(queued), why);
        slot->steps.clear();
        slot->fresh = true;
        slot->ending = seq.end;
        slot->last_active = now;
        slot->steps.push_back(std::move(step));
        MakeReady(*slot);
      } else if (!free_.empty()) {
        slot = free_.back();
        free_.pop_back();
        Assign(*slot, std::move(step));
      } else if (static_cast<int>(backlog_.size()) < policy_->slots) {
        backlog_.emplace_back(std::move(step), now + policy_->idle);
        Publish();
        wake_.Signal();
      } else {
        Count(SequenceMetrics::kRejected);
        status = absl::ResourceExhaustedError(
            absl::StrCat(Label(seq), ": all ", policy_->slots, " sequence slots are live and ",
                         backlog_.size(), " starts wait for one already"));
      }
    } else if (slot == nullptr || slot->ending) {
      Count(SequenceMetrics::kRejected);
      auto gone = gone_.find(key);
      status = absl::InvalidArgumentError(absl::StrCat(
          Label(seq), " is not live: ",
          slot != nullptr       ? "its request with sequence_end was already sent"
          : gone != gone_.end() ? gone->second
                                : "it was never started (its first request needs "
                                  "sequence_start), or its model version was unloaded"));
    } else {
      slot->ending = seq.end;
      slot->last_active = now;
      slot->steps.push_back(std::move(step));
      MakeReady(*slot);
    }
    collector = status.ok() && TakeCollector();
  }
  Finish(host, failed);
  if (collector) StartCollector(host);
  return status;
}

void SequenceBatcher::Assign(Slot& slot, SequenceStep step) {
  slot.key = Key(step.sequence);
  slot.label = Label(step.sequence);
  slot.live = true;
  slot.fresh = true;
  slot.ending = step.sequence.end;
  slot.last_active = absl::Now();
  slot.steps.push_back(std::move(step));
  live_[slot.key] = &slot;
  gone_.erase(slot.key);
  Count(SequenceMetrics::kStarted);
  MakeReady(slot);
}

void SequenceBatcher::MakeReady(Slot& slot) {
  if (slot.running || slot.ready || slot.steps.empty()) return;
  slot.ready = true;
  ready_.push_back(&slot);
}

void SequenceBatcher::Remember(const std::string& key, std::string reason) {
  if (gone_.insert_or_assign(key, std::move(reason)).second) gone_order_.push_back(key);
  while (gone_order_.size() > kRemembered) {
    gone_.erase(gone_order_.front());
    gone_order_.pop_front();
  }
}

void SequenceBatcher::EndSlot(Slot& slot, const std::string& reason, const absl::Status& why,
                              Failed& failed) {
  for (SequenceStep& queued : slot.steps) failed.emplace_back(std::move(queued), why);
  slot.steps.clear();
  if (slot.ready) {
    ready_.erase(std::find(ready_.begin(), ready_.end(), &slot));
    slot.ready = false;
  }
  live_.erase(slot.key);
  Remember(slot.key, reason);
  slot.live = false;
  slot.ending = false;
  // The oldest start waiting for a slot takes it.
  if (!backlog_.empty()) {
    SequenceStep next = std::move(backlog_.front().first);
    backlog_.pop_front();
    Assign(slot, std::move(next));
  } else {
    free_.push_back(&slot);
  }
  Publish();
}

void SequenceBatcher::Sweep(absl::Time now, Failed& failed) {
  // Idle is counted from a sequence's last request (Triton's rule). Sequences first: a slot that
  // frees goes to the oldest queued start, which arrived after that last request.
  for (const std::unique_ptr<Slot>& slot : slots_) {
    if (!slot->live || slot->running || !slot->steps.empty()) continue;
    if (now - slot->last_active < policy_->idle) continue;
    Count(SequenceMetrics::kExpired);
    const std::string reason =
        absl::StrCat("it expired after ", absl::FormatDuration(now - slot->last_active),
                     " without a request (max_sequence_idle_microseconds ",
                     absl::ToInt64Microseconds(policy_->idle), ")");
    EndSlot(*slot, reason, absl::OkStatus(), failed);
  }
  while (!backlog_.empty() && backlog_.front().second <= now) {
    Count(SequenceMetrics::kRejected);
    failed.emplace_back(
        std::move(backlog_.front().first),
        absl::ResourceExhaustedError(
            absl::StrCat(Label(backlog_.front().first.sequence), ": no sequence slot freed within ",
                         absl::FormatDuration(policy_->idle), " (all ", policy_->slots,
                         " slots are live; max_sequence_idle_microseconds bounds the wait)")));
    backlog_.pop_front();
  }
  Publish();
}

bool SequenceBatcher::TakeCollector() {
  if (ready_.empty() || collectors_ >= max_collectors_) return false;
  // Under `oldest` a second execution starts only for a full batch: fewer ready steps wait for
  // the running collector's next batch, which they make larger (a second collector taking them
  // at once would run more, smaller batches).
  if (collectors_ > 0 && policy_->strategy == SequencePolicy::Strategy::kOldest &&
      static_cast<int64_t>(ready_.size()) < policy_->max_batch_size) {
    return false;
  }
  ++collectors_;
  return true;
}

void SequenceBatcher::StartCollector(const SequenceHost& host) {
  // The task holds the batcher: its last calls' answers may let the version go meanwhile.
  const absl::Status scheduled = CatchExceptions("sequence batcher: ", [&] {
    return host.schedule([self = shared_from_this(), &host] { self->Collect(host); });
  });
  if (scheduled.ok()) return;
  // No worker: the ready steps fail with the pool's error and their sequences end.
  Failed failed;
  {
    absl::MutexLock lock(&mutex_);
    --collectors_;
    if (collectors_ == 0) {
      while (!ready_.empty()) {
        Slot& slot = *ready_.front();
        Count(SequenceMetrics::kFailed);
        EndSlot(slot, absl::StrCat("it ended when a request failed: ", scheduled.message()),
                scheduled, failed);
      }
    }
  }
  Finish(host, failed);
}

void SequenceBatcher::Collect(const SequenceHost& host) {
  std::vector<Taken> batch;
  std::vector<absl::Status> ends;
  while (true) {
    batch.clear();
    {
      absl::MutexLock lock(&mutex_);
      const int64_t limit =
          policy_->strategy == SequencePolicy::Strategy::kOldest ? policy_->max_batch_size : 1;
      // Another collector is running: less than a full batch waits for it (TakeCollector's rule).
      if (limit > 1 && collectors_ > 1 && static_cast<int64_t>(ready_.size()) < limit) {
        --collectors_;
        return;
      }
      if (limit > 1 && static_cast<int64_t>(ready_.size()) < limit &&
          policy_->max_queue_delay > absl::ZeroDuration() && !ready_.empty()) {
        auto full = [this, limit]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
          return static_cast<int64_t>(ready_.size()) >= limit || stop_;
        };
        mutex_.AwaitWithTimeout(absl::Condition(&full), policy_->max_queue_delay);
      }
      while (!ready_.empty() && static_cast<int64_t>(batch.size()) < limit) {
        Slot* slot = ready_.front();
        ready_.pop_front();
        slot->ready = false;
        slot->running = true;
        batch.push_back({slot, std::move(slot->steps.front()), slot->fresh});
        slot->steps.pop_front();
        slot->fresh = false;
      }
      if (batch.empty()) {
        --collectors_;
        return;
      }
    }
    ends.assign(batch.size(), absl::OkStatus());
    Execute(host, batch, ends);
    Failed failed;
    {
      absl::MutexLock lock(&mutex_);
      for (size_t k = 0; k < batch.size(); ++k) {
        Slot& slot = *batch[k].slot;
        slot.running = false;
        if (!ends[k].ok()) {
          Count(SequenceMetrics::kFailed);
          EndSlot(slot, absl::StrCat("it ended when a request of it failed: ", ends[k].message()),
                  absl::AbortedError(absl::StrCat(slot.label,
                                                  " ended when an earlier request of "
                                                  "it failed: ",
                                                  ends[k].message())),
                  failed);
        } else if (slot.ending && slot.steps.empty() && batch[k].step.sequence.end) {
          Count(SequenceMetrics::kEnded);
          EndSlot(slot, "it ended (its request with sequence_end was answered)", absl::OkStatus(),
                  failed);
        } else if (slot.ending && slot.steps.empty()) {  // flushed while this step ran
          Count(SequenceMetrics::kFailed);
          EndSlot(slot, absl::StrCat("it ended: ", flushed_.message()), flushed_, failed);
        } else {
          MakeReady(slot);
        }
      }
    }
    Finish(host, failed);
  }
}

void SequenceBatcher::Finish(const SequenceHost& host, Failed& failed) {
  for (auto& [step, status] : failed) host.finish(step.call, status, nullptr);
  failed.clear();
}

void SequenceBatcher::Execute(const SequenceHost& host, std::vector<Taken>& batch,
                              std::vector<absl::Status>& ends) {
  // Steps that left while queued are answered without running; their sequences end.
  const absl::Time now = absl::Now();
  for (size_t k = 0; k < batch.size(); ++k) {
    const SequenceStep& step = batch[k].step;
    if (now >= step.deadline) {
      ends[k] = absl::DeadlineExceededError(
          absl::StrCat(batch[k].slot->label, ": deadline exceeded while the request was queued"));
    } else if (step.cancelled != nullptr && step.cancelled->load(std::memory_order_relaxed)) {
      ends[k] = absl::CancelledError(
          absl::StrCat(batch[k].slot->label, ": the request was cancelled while queued"));
    } else {
      continue;
    }
    host.finish(step.call, ends[k], nullptr);
  }
  // Members whose client inputs differ in shape run in separate executions.
  std::vector<std::vector<size_t>> groups;
  for (size_t k = 0; k < batch.size(); ++k) {
    if (!ends[k].ok()) continue;
    bool placed = false;
    for (std::vector<size_t>& group : groups) {
      const auto& a = batch[group[0]].step.inputs;
      const auto& b = batch[k].step.inputs;
      bool same = true;
      for (size_t i = 0; same && i < a.size(); ++i) {
        if (a[i].is_none() != b[i].is_none()) same = false;
        if (!same || a[i].is_none() || !a[i].is_tensor() || !b[i].is_tensor()) continue;
        same = a[i].tensor().shape() == b[i].tensor().shape() &&
               a[i].tensor().dtype() == b[i].tensor().dtype() &&
               a[i].tensor().dtype() != engine::DataType::kString;
      }
      if (same && static_cast<int64_t>(group.size()) < policy_->max_batch_size) {
        group.push_back(k);
        placed = true;
        break;
      }
    }
    if (!placed) groups.push_back({k});
  }
  for (const std::vector<size_t>& group : groups) {
    std::vector<Taken> members;
    for (size_t k : group) members.push_back(std::move(batch[k]));
    absl::StatusOr<std::vector<engine::Value>> outputs = RunMembers(host, members);
    const int64_t n = static_cast<int64_t>(members.size());
    {
      absl::MutexLock lock(&mutex_);
      ++stats_.executions;
      stats_.steps += n;
    }
    for (int64_t m = 0; m < n; ++m) {
      const size_t k = group[m];
      Taken& taken = members[m];
      absl::Status status = outputs.status();
      std::vector<engine::Value> mine;
      if (status.ok()) {
        // The step's state rows go straight from the run's output into its slot (a lone step's
        // output buffer becomes the slot's), and the answer sees the state there: the state
        // outputs are neither sliced nor copied twice. Answers are encoded within host.finish,
        // before the slot's next step can run.
        mine.resize(outputs->size());
        for (size_t s = 0; status.ok() && s < policy_->states.size(); ++s) {
          status = StoreState(s, (*outputs)[policy_->states[s].output], m, n, *taken.slot);
          if (status.ok()) {
            mine[policy_->states[s].output] =
                engine::Value(engine::Tensor::ViewOf(taken.slot->state[s]));
          }
        }
        for (size_t j = 0; status.ok() && j < outputs->size(); ++j) {
          engine::Value& value = (*outputs)[j];
          if (IsStateOutput(j)) continue;
          if (n == 1) {
            mine[j] = std::move(value);
            continue;
          }
          if (!value.is_tensor()) continue;
          const int axis = j < policy_->output_axes.size() ? policy_->output_axes[j] : 0;
          mine[j] = engine::Value(Slice(value.tensor(), axis, m, 1));
        }
      }
      // A gRPC deadline also cancels the call, and the watcher's cancel may reach the run first:
      // a step stopped at or past its deadline failed by its deadline (the client's error says
      // so, and the sequence's next step must too).
      if ((status.ok() || absl::IsCancelled(status)) && absl::Now() >= taken.step.deadline) {
        status = absl::DeadlineExceededError(
            absl::StrCat(taken.slot->label, ": deadline exceeded while the request ran"));
      } else if (status.ok() && taken.step.cancelled != nullptr &&
                 taken.step.cancelled->load(std::memory_order_relaxed) && n > 1) {
        status = absl::CancelledError(
            absl::StrCat(taken.slot->label, ": the request was cancelled while it ran"));
      }
      ends[k] = status;
      host.finish(taken.step.call, status, status.ok() ? &mine : nullptr);
      batch[k] = std::move(taken);
    }
  }
}

bool SequenceBatcher::IsStateOutput(size_t output) const {
  for (const SequencePolicy::State& state : policy_->states) {
    if (state.output == static_cast<int>(output)) return true;
  }
  return false;
}

absl::Status SequenceBatcher::StoreState(size_t s, engine::Value& out, int64_t member,
                                         int64_t members, Slot& slot) const {
  const SequencePolicy::State& state = policy_->states[s];
  engine::Tensor& slot_state = slot.state[s];
  if (!out.is_tensor() || out.tensor().dtype() != slot_state.dtype() ||
      out.tensor().NumElements() != members * slot_state.NumElements() ||
      (members > 1 && out.tensor().dim(state.axis) != members)) {
    return absl::InternalError(
        absl::StrCat("state '", state.input_name, "': the model's output '", state.output_name,
                     "' is ", out.is_tensor() ? out.tensor().DebugString(0) : "no tensor", " for ",
                     members, " sequence(s), one sequence's state ", slot_state.DebugString(0)));
  }
  if (slot_state.ByteSize() == 0) return absl::OkStatus();
  if (members > 1) {
    CopyRows(out.tensor(), state.axis, member, 1, slot_state, 0);
  } else if (!out.tensor().is_view() && out.tensor().shape() == slot_state.shape() &&
             slot_state.dtype() != engine::DataType::kString) {
    // The run's own buffer becomes the state; the slot's previous one goes with the output.
    swap(slot_state, out.mutable_tensor());
  } else {
    std::memmove(slot_state.mutable_raw_data(), out.tensor().raw_data(), slot_state.ByteSize());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<engine::Value>> SequenceBatcher::RunMembers(
    const SequenceHost& host, std::vector<Taken>& members) {
  const SequencePolicy& p = *policy_;
  const int64_t n = static_cast<int64_t>(members.size());
  absl::Time deadline = absl::InfinitePast();
  for (const Taken& taken : members) deadline = std::max(deadline, taken.step.deadline);
  // The client's inputs: the lone step's own, or concatenated along the batch axis.
  std::vector<engine::Value> inputs;
  if (n == 1) {
    inputs = std::move(members[0].step.inputs);
  } else {
    inputs.resize(members[0].step.inputs.size());
    std::vector<const engine::Tensor*> parts(n);
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!members[0].step.inputs[i].is_tensor()) continue;  // a server input
      for (int64_t m = 0; m < n; ++m) parts[m] = &members[m].step.inputs[i].tensor();
      inputs[i] = engine::Value(Concat(parts, 0));
    }
    for (Taken& taken : members) taken.step.inputs.clear();
  }
  // The controls, built at the execution's size ([n, 1]; [1] without batching).
  for (const SequencePolicy::Control& control : p.controls) {
    engine::Tensor& t = inputs[control.input].mutable_tensor();
    t = engine::Tensor(control.dtype, p.batched ? engine::Shape{n, 1} : engine::Shape{1});
    for (int64_t m = 0; m < n; ++m) {
      const Taken& taken = members[m];
      switch (control.kind) {
        case Kind::ModelSequenceBatching_Control_Kind_CONTROL_SEQUENCE_START:
          SetControl(t, m, taken.start ? control.true_value : control.false_value);
          break;
        case Kind::ModelSequenceBatching_Control_Kind_CONTROL_SEQUENCE_END:
          SetControl(t, m, taken.step.sequence.end ? control.true_value : control.false_value);
          break;
        case Kind::ModelSequenceBatching_Control_Kind_CONTROL_SEQUENCE_READY:
          SetControl(t, m, control.true_value);
          break;
        default:
          SetCorrId(t, m, taken.step.sequence);
      }
    }
  }
  // The states: a lone step reads its slot (or the initial state) in place; a merged execution
  // concatenates them along each state's batch axis.
  for (size_t s = 0; s < p.states.size(); ++s) {
    auto source = [&](const Taken& taken) -> const engine::Tensor& {
      return taken.start ? p.states[s].initial : taken.slot->state[s];
    };
    if (n == 1) {
      inputs[p.states[s].input] = engine::Value(engine::Tensor::ViewOf(source(members[0])));
      continue;
    }
    std::vector<const engine::Tensor*> parts(n);
    for (int64_t m = 0; m < n; ++m) parts[m] = &source(members[m]);
    inputs[p.states[s].input] = engine::Value(Concat(parts, p.states[s].axis));
  }
  return host.run(members[0].step.call, std::move(inputs), deadline,
                  n == 1 ? members[0].step.cancelled : nullptr, n);
}

void SequenceBatcher::Flush(const absl::Status& why) {
  Failed failed;
  {
    absl::MutexLock lock(&mutex_);
    flushed_ = why;
    for (auto& [step, until] : backlog_) failed.emplace_back(std::move(step), why);
    backlog_.clear();
    Publish();
    for (const std::unique_ptr<Slot>& slot : slots_) {
      if (!slot->live) continue;
      if (slot->running) {
        // Its running step finishes; the sequence ends after it (Collect, with flushed_).
        for (SequenceStep& queued : slot->steps) failed.emplace_back(std::move(queued), why);
        slot->steps.clear();
        slot->ending = true;
        continue;
      }
      Count(SequenceMetrics::kFailed);
      EndSlot(*slot, absl::StrCat("it ended: ", why.message()), why, failed);
    }
  }
  if (host_ != nullptr) Finish(*host_, failed);
}

SequenceBatcher::Stats SequenceBatcher::stats() const {
  absl::MutexLock lock(&mutex_);
  return stats_;
}

void SequenceBatcher::Reap() {
  mutex_.Lock();
  while (!stop_) {
    // A slot that goes idle later expires later than now + idle: waking by then finds it.
    absl::Time next = absl::Now() + policy_->idle;
    for (const auto& [step, until] : backlog_) next = std::min(next, until);
    for (const std::unique_ptr<Slot>& slot : slots_) {
      if (slot->live && !slot->running && slot->steps.empty()) {
        next = std::min(next, slot->last_active + policy_->idle);
      }
    }
    wake_.WaitWithDeadline(&mutex_, next);
    if (stop_) break;
    Failed failed;
    Sweep(absl::Now(), failed);
    // An expired sequence's slot may have gone to a queued start: it needs a collector.
    const bool collector = TakeCollector();
    if (failed.empty() && !collector) continue;
    // Answering lets go of the calls' pins: held meanwhile, and when this thread let go of the
    // last one the batcher is gone (its destructor detached this thread).
    std::shared_ptr<SequenceBatcher> self = weak_from_this().lock();
    if (self == nullptr) {  // being destroyed: the destructor waits for this thread
      if (collector) --collectors_;
      break;
    }
    const SequenceHost* host = host_;
    mutex_.Unlock();
    Finish(*host, failed);
    if (collector) StartCollector(*host);
    std::weak_ptr<SequenceBatcher> weak = self;
    self.reset();
    if (weak.expired()) return;
    mutex_.Lock();
  }
  mutex_.Unlock();
}

}  // namespace loopserve::server
