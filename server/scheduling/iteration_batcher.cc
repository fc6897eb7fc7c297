#include "server/scheduling/iteration_batcher.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"

namespace loopserve::server {
namespace {

engine::LoopStepperOptions StepperOptions(const IterationBatcher::Options& options) {
  engine::LoopStepperOptions stepper;
  stepper.unbatched_inputs = options.unbatched_inputs;
  stepper.max_rows = options.max_rows;
  return stepper;
}

std::vector<engine::Value> CopyOf(const std::vector<engine::Value>& values) {
  std::vector<engine::Value> copy(values.size());
  for (size_t i = 0; i < values.size(); ++i) copy[i].CopyFrom(values[i]);
  return copy;
}

// Why a request waiting for room leaves by `now` (the runner restates it by where it was), or OK.
absl::Status WaitEnded(const ScheduledCall& call, absl::Time now) {
  if (call.cancelled()) {
    return absl::CancelledError("cancelled while waiting for room in a running batch");
  }
  if (now >= call.deadline()) {
    return absl::DeadlineExceededError(
        "deadline exceeded while waiting for room in a running batch");
  }
  return absl::OkStatus();
}

}  // namespace

// One driver's running batch and the requests it holds. Every call it holds is answered exactly
// once: in `rows_` (running), `waiting_` (for a batch with its unbatched inputs), `left_` (waited
// past its deadline or cancel) or `incoming_` until Admit hands it on (its `call` is then cleared
// there).
class IterationBatcher::Driver {
 public:
  Driver(IterationBatcher& batcher, std::unique_ptr<engine::LoopStepper>& stepper,
         Executor& executor)
      : batcher_(batcher), stepper_(stepper), executor_(executor) {}

  // Answers the waiting requests that left, then takes queued requests into `incoming_` (the
  // requests waiting for this batch first, once it is empty). False when there is nothing left to
  // do: the driver is then gone and its stepper idle.
  bool Take();
  // Admits `incoming_` as rows; the requests the running batch refuses for their unbatched
  // inputs wait for it to empty. Returns how many joined.
  int64_t Admit();
  // Runs one iteration, records it, and answers the rows that ended.
  void Step(int64_t admitted);
  // Answers every call the driver holds with `status` (an exception stopped it).
  void AnswerAll(const absl::Status& status);
  // The rows this driver counts in the batcher's running_rows_.
  int64_t counted() const { return counted_; }

 private:
  void AnswerLeft();

  IterationBatcher& batcher_;
  std::unique_ptr<engine::LoopStepper>& stepper_;
  Executor& executor_;
  std::vector<std::pair<int64_t, ScheduledCall*>> rows_;  // row id -> its call
  std::deque<RowRequest> waiting_;
  std::vector<RowRequest> incoming_;
  std::vector<std::pair<RowRequest, absl::Status>> left_;
  std::vector<engine::FinishedRow> finished_;
  absl::Time next_check_ = absl::InfinitePast();
  int64_t counted_ = 0;
};

bool IterationBatcher::Driver::Take() {
  incoming_.clear();
  if (stepper_->rows() == 0) {
    for (RowRequest& row : waiting_) incoming_.push_back(std::move(row));
    waiting_.clear();
  }
  AnswerLeft();
  absl::MutexLock lock(&batcher_.mutex_);
  int room = stepper_->max_rows() - stepper_->rows() - static_cast<int>(incoming_.size());
  for (; room > 0 && !batcher_.queue_.empty(); --room) {
    incoming_.push_back(std::move(batcher_.queue_.front()));
    batcher_.queue_.pop_front();
  }
  if (!incoming_.empty() || stepper_->rows() > 0 || !waiting_.empty()) return true;
  --batcher_.drivers_;
  batcher_.running_rows_ -= counted_;
  batcher_.idle_.push_back(std::move(stepper_));
  return false;
}

void IterationBatcher::Driver::AnswerLeft() {
  const absl::Time now = batcher_.options_.clock->Now();
  if (now < next_check_) return;
  next_check_ = now + kWaitCheckInterval;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    absl::Status why = WaitEnded(*it->call, now);
    if (why.ok()) {
      ++it;
      continue;
    }
    left_.emplace_back(std::move(*it), std::move(why));
    it = waiting_.erase(it);
  }
  {
    absl::MutexLock lock(&batcher_.mutex_);
    batcher_.TakeLeftLocked(now, left_);
  }
  while (!left_.empty()) {
    std::pair<RowRequest, absl::Status> left = std::move(left_.back());
    left_.pop_back();
    executor_.FinishRow(*left.first.call, std::move(left.second));
  }
}

int64_t IterationBatcher::Driver::Admit() {
  int64_t admitted = 0;
  for (RowRequest& row : incoming_) {
    std::vector<engine::Value> kept;
    if (batcher_.has_unbatched_) kept = CopyOf(row.inputs);
    absl::StatusOr<int64_t> id = stepper_->Admit(std::move(row.inputs), row.options);
    ScheduledCall* const call = std::exchange(row.call, nullptr);  // handed on below
    if (id.ok()) {
      rows_.emplace_back(*id, call);
      executor_.RowStarted(*call);
      ++admitted;
    } else if (batcher_.has_unbatched_ && (absl::IsFailedPrecondition(id.status()) ||
                                           absl::IsResourceExhausted(id.status()))) {
      row.inputs = std::move(kept);
      waiting_.push_back(std::move(row));
      waiting_.back().call = call;
    } else {
      executor_.FinishRow(*call, id.status());
    }
  }
  return admitted;
}

void IterationBatcher::Driver::Step(int64_t admitted) {
  const int64_t running = stepper_->rows();
  finished_.clear();
  if (running > 0) stepper_->Step(&finished_);
  const int64_t retired = static_cast<int64_t>(finished_.size());
  ModelVersionMetrics* metrics = nullptr;
  {
    absl::MutexLock lock(&batcher_.mutex_);
    metrics = batcher_.metrics_.get();  // lives as long as the batcher's version (set once)
    IterationBatchingStats& stats = batcher_.stats_;
    stats.rows_admitted += admitted;
    stats.rows_retired += retired;
    if (running > 0) {
      ++stats.steps;
      stats.row_iterations += running;
      stats.peak_rows = std::max(stats.peak_rows, running);
    }
    batcher_.running_rows_ += stepper_->rows() - counted_;
    counted_ = stepper_->rows();
  }
  if (metrics != nullptr) metrics->RecordIterationStep(running, admitted, retired);
  for (engine::FinishedRow& row : finished_) {
    if (metrics != nullptr) metrics->RecordRowIterations(row.iterations);
    for (size_t k = 0; k < rows_.size(); ++k) {
      if (rows_[k].first != row.id) continue;
      ScheduledCall* call = rows_[k].second;
      rows_[k] = rows_.back();
      rows_.pop_back();
      executor_.FinishRow(*call, std::move(row.outputs));
      break;
    }
  }
}

void IterationBatcher::Driver::AnswerAll(const absl::Status& status) {
  for (auto& [id, call] : rows_) executor_.FinishRow(*call, status);
  rows_.clear();
  for (RowRequest& row : incoming_) {
    if (row.call != nullptr) executor_.FinishRow(*row.call, status);
  }
  incoming_.clear();
  for (RowRequest& row : waiting_) executor_.FinishRow(*row.call, status);
  waiting_.clear();
  for (auto& [row, why] : left_) executor_.FinishRow(*row.call, status);
  left_.clear();
}

absl::StatusOr<std::shared_ptr<IterationBatcher>> IterationBatcher::Create(
    std::shared_ptr<const engine::Model> model, const Options& options) {
  absl::StatusOr<std::unique_ptr<engine::LoopStepper>> first =
      engine::LoopStepper::Create(model, StepperOptions(options));
  if (!first.ok()) return first.status();
  return std::shared_ptr<IterationBatcher>(
      new IterationBatcher(std::move(model), options, *std::move(first)));
}

IterationBatcher::IterationBatcher(std::shared_ptr<const engine::Model> model, Options options,
                                   std::unique_ptr<engine::LoopStepper> first)
    : model_(std::move(model)), options_(std::move(options)) {
  has_unbatched_ = !options_.unbatched_inputs.empty();
  absl::MutexLock lock(&mutex_);
  idle_.push_back(std::move(first));
}

absl::Status IterationBatcher::Enqueue(ScheduledCall& call, Executor& executor) {
  RowRequest row = executor.TakeRow(call);
  std::unique_ptr<engine::LoopStepper> stepper;
  int64_t full = -1;  // the queue's length when it is full
  {
    absl::MutexLock lock(&mutex_);
    executor_ = &executor;
    if (static_cast<int>(queue_.size()) >= options_.max_queue) {
      full = static_cast<int64_t>(queue_.size());
    } else {
      queue_.push_back(std::move(row));
      if (drivers_ >= options_.instances) return absl::OkStatus();  // a driver takes it
      ++drivers_;
      if (!idle_.empty()) {
        stepper = std::move(idle_.back());
        idle_.pop_back();
      }
    }
  }
  if (full >= 0) {
    executor.Unqueued(call);
    return absl::ResourceExhaustedError(absl::StrCat(
        options_.label, "the iteration batcher's queue holds ", full, " requests already"));
  }
  const absl::Status started = StartDriver(std::move(stepper), executor);
  // No driver: when none is left at all, nobody would take the queued requests.
  if (!started.ok()) DriverGone(started, executor, 0);
  return absl::OkStatus();
}

absl::Status IterationBatcher::StartDriver(std::unique_ptr<engine::LoopStepper> stepper,
                                           Executor& executor) {
  if (stepper == nullptr) {
    LS_ASSIGN_OR_RETURN(stepper, engine::LoopStepper::Create(model_, StepperOptions(options_)));
  }
  // std::function must be copyable: the stepper travels in a shared holder.
  auto holder = std::make_shared<std::unique_ptr<engine::LoopStepper>>(std::move(stepper));
  std::shared_ptr<IterationBatcher> self = shared_from_this();
  Executor* const executor_ptr = &executor;
  const absl::Status started = executor.pool().TrySchedule(
      [self, holder, executor_ptr] { self->Drive(std::move(*holder), executor_ptr); });
  if (!started.ok() && *holder != nullptr) {
    absl::MutexLock lock(&mutex_);
    idle_.push_back(std::move(*holder));
  }
  return started;
}

void IterationBatcher::DriverGone(const absl::Status& why, Executor& executor, int64_t counted) {
  std::deque<RowRequest> orphans;
  {
    absl::MutexLock lock(&mutex_);
    --drivers_;
    running_rows_ -= counted;
    if (drivers_ == 0) orphans.swap(queue_);
  }
  for (RowRequest& row : orphans) executor.FinishRow(*row.call, why);
}

void IterationBatcher::TakeLeftLocked(absl::Time now,
                                      std::vector<std::pair<RowRequest, absl::Status>>& left) {
  for (auto it = queue_.begin(); it != queue_.end();) {
    absl::Status why = WaitEnded(*it->call, now);
    if (why.ok()) {
      ++it;
      continue;
    }
    left.emplace_back(std::move(*it), std::move(why));
    it = queue_.erase(it);
  }
}

void IterationBatcher::Flush() {
  std::deque<RowRequest> flushed;
  Executor* executor = nullptr;
  {
    absl::MutexLock lock(&mutex_);
    flushed.swap(queue_);
    executor = executor_;  // set by the Enqueue of every call queued
  }
  for (RowRequest& row : flushed) {
    executor->FinishRow(*row.call, absl::CancelledError("the server is shutting down"));
  }
}

void IterationBatcher::SetMetrics(std::shared_ptr<ModelVersionMetrics> metrics) {
  absl::MutexLock lock(&mutex_);
  metrics_ = std::move(metrics);
}

Scheduler::Stats IterationBatcher::stats() const {
  absl::MutexLock lock(&mutex_);
  Stats stats;
  stats.queued = static_cast<int64_t>(queue_.size());
  stats.running_rows = running_rows_;
  stats.collectors = drivers_;
  return stats;
}

IterationBatchingStats IterationBatcher::iteration_stats() const {
  absl::MutexLock lock(&mutex_);
  return stats_;
}

void IterationBatcher::Drive(std::unique_ptr<engine::LoopStepper> stepper, Executor* executor) {
  Driver driver(*this, stepper, *executor);
  try {
    while (driver.Take()) driver.Step(driver.Admit());
    return;  // Take gave the stepper back
  } catch (const std::exception& e) {
    driver.AnswerAll(absl::InternalError(absl::StrCat("iteration batching: ", e.what())));
  } catch (...) {
    driver.AnswerAll(absl::InternalError("iteration batching: an unknown exception"));
  }
  // The driver is gone: another takes the queue if requests wait.
  DriverGone(absl::InternalError("iteration batching: the driver stopped"), *executor,
             driver.counted());
}

}  // namespace loopserve::server
