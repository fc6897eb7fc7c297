#include "server/scheduling/iteration_batcher.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"

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

}  // namespace

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

absl::Status IterationBatcher::Enqueue(RowRequest row, RowHost& host) {
  std::unique_ptr<engine::LoopStepper> stepper;
  {
    absl::MutexLock lock(&mutex_);
    if (static_cast<int>(queue_.size()) >= options_.max_queue) {
      return absl::ResourceExhaustedError(absl::StrCat("the iteration batcher's queue holds ",
                                                       queue_.size(),
                                                       " requests already (--max_queue_size)"));
    }
    queue_.push_back(std::move(row));
    if (drivers_ >= options_.instances) return absl::OkStatus();  // a driver takes it
    ++drivers_;
    if (!idle_.empty()) {
      stepper = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  absl::Status started;
  if (stepper == nullptr) {
    absl::StatusOr<std::unique_ptr<engine::LoopStepper>> made =
        engine::LoopStepper::Create(model_, StepperOptions(options_));
    if (made.ok()) {
      stepper = *std::move(made);
    } else {
      started = made.status();
    }
  }
  if (started.ok()) {
    // std::function must be copyable: the stepper travels in a shared holder.
    auto holder = std::make_shared<std::unique_ptr<engine::LoopStepper>>(std::move(stepper));
    std::shared_ptr<IterationBatcher> self = shared_from_this();
    RowHost* host_ptr = &host;
    started =
        host.StartDriver([self, holder, host_ptr] { self->Drive(std::move(*holder), host_ptr); });
    if (!started.ok()) stepper = std::move(*holder);
  }
  if (started.ok()) return absl::OkStatus();
  // No driver: when none is left at all, nobody would take the queued requests.
  std::deque<RowRequest> orphans;
  {
    absl::MutexLock lock(&mutex_);
    --drivers_;
    if (stepper != nullptr) idle_.push_back(std::move(stepper));
    if (drivers_ == 0) orphans.swap(queue_);
  }
  for (RowRequest& orphan : orphans) host.FinishRow(*orphan.call, started);
  return absl::OkStatus();
}

void IterationBatcher::Flush(RowHost& host, const absl::Status& status) {
  std::deque<RowRequest> flushed;
  {
    absl::MutexLock lock(&mutex_);
    flushed.swap(queue_);
  }
  for (RowRequest& row : flushed) host.FinishRow(*row.call, status);
}

void IterationBatcher::SetMetrics(std::shared_ptr<ModelVersionMetrics> metrics) {
  absl::MutexLock lock(&mutex_);
  metrics_ = std::move(metrics);
}

IterationBatchingStats IterationBatcher::stats() const {
  absl::MutexLock lock(&mutex_);
  return stats_;
}

void IterationBatcher::Drive(std::unique_ptr<engine::LoopStepper> stepper, RowHost* host) {
  std::vector<std::pair<int64_t, InferenceCall*>> rows;  // row id -> its call
  // Requests whose unbatched inputs differ from this batch's: they start the next one.
  std::deque<RowRequest> waiting;
  std::vector<RowRequest> incoming;
  std::vector<engine::FinishedRow> finished;
  // Every call this driver holds is answered exactly once: in `rows` (running), `waiting`, or
  // `incoming` until the admit loop hands it on (then its `call` is cleared there).
  auto answer = [&](const absl::Status& status) {
    for (auto& [id, call] : rows) host->FinishRow(*call, status);
    rows.clear();
    for (RowRequest& row : incoming) {
      if (row.call != nullptr) host->FinishRow(*row.call, status);
    }
    incoming.clear();
    for (RowRequest& row : waiting) host->FinishRow(*row.call, status);
    waiting.clear();
  };
  try {
    while (true) {
      incoming.clear();
      if (stepper->rows() == 0) {
        for (RowRequest& row : waiting) incoming.push_back(std::move(row));
        waiting.clear();
      }
      {
        absl::MutexLock lock(&mutex_);
        int room = stepper->max_rows() - stepper->rows() - static_cast<int>(incoming.size());
        for (; room > 0 && !queue_.empty(); --room) {
          incoming.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
        if (incoming.empty() && stepper->rows() == 0 && waiting.empty()) {
          --drivers_;
          idle_.push_back(std::move(stepper));
          return;
        }
      }
      int64_t admitted = 0;
      for (RowRequest& row : incoming) {
        std::vector<engine::Value> kept;
        if (has_unbatched_) kept = CopyOf(row.inputs);
        absl::StatusOr<int64_t> id = stepper->Admit(std::move(row.inputs), row.options);
        InferenceCall* const call = std::exchange(row.call, nullptr);  // handed on below
        if (id.ok()) {
          rows.emplace_back(*id, call);
          host->RowStarted(*call);
          ++admitted;
        } else if (has_unbatched_ && (absl::IsFailedPrecondition(id.status()) ||
                                      absl::IsResourceExhausted(id.status()))) {
          row.inputs = std::move(kept);
          waiting.push_back(std::move(row));
          waiting.back().call = call;
        } else {
          host->FinishRow(*call, id.status());
        }
      }
      const int64_t running = stepper->rows();
      finished.clear();
      if (running > 0) stepper->Step(&finished);
      ModelVersionMetrics* metrics = nullptr;
      {
        absl::MutexLock lock(&mutex_);
        metrics = metrics_.get();  // lives as long as the batcher's version (set once)
        stats_.rows_admitted += admitted;
        stats_.rows_retired += static_cast<int64_t>(finished.size());
        if (running > 0) {
          ++stats_.steps;
          stats_.row_iterations += running;
          stats_.peak_rows = std::max(stats_.peak_rows, running);
        }
      }
      if (metrics != nullptr) {
        metrics->RecordIterationStep(running, admitted, static_cast<int64_t>(finished.size()));
      }
      for (engine::FinishedRow& row : finished) {
        if (metrics != nullptr) metrics->RecordRowIterations(row.iterations);
        for (size_t k = 0; k < rows.size(); ++k) {
          if (rows[k].first != row.id) continue;
          InferenceCall* call = rows[k].second;
          rows[k] = rows.back();
          rows.pop_back();
          host->FinishRow(*call, std::move(row.outputs));
          break;
        }
      }
    }
  } catch (const std::exception& e) {
    answer(absl::InternalError(absl::StrCat("iteration batching: ", e.what())));
  } catch (...) {
    answer(absl::InternalError("iteration batching: an unknown exception"));
  }
  // The driver is gone: another takes the queue if requests wait.
  std::deque<RowRequest> orphans;
  {
    absl::MutexLock lock(&mutex_);
    --drivers_;
    if (drivers_ == 0) orphans.swap(queue_);
  }
  for (RowRequest& row : orphans) {
    host->FinishRow(*row.call, absl::InternalError("iteration batching: the driver stopped"));
  }
}

}  // namespace loopserve::server
