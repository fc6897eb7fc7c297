#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace loopserve::server {

// A cap on how many tasks of one group (one model version: Triton's instance_group count) may run
// at once. Shared by the tasks of the group; its counter is only touched under the pool's mutex.
class TaskGroup {
 public:
  explicit TaskGroup(int max_running) : max_running_(max_running < 1 ? 1 : max_running) {}
  int max_running() const { return max_running_; }

 private:
  friend class WorkerPool;
  const int max_running_;
  int running_ = 0;  // guarded by the mutex of the WorkerPool running the group's tasks
};

// A fixed set of worker threads fed from one bounded FIFO queue.
//
// TrySchedule never blocks: when `max_queue_size` tasks are already waiting (tasks being run do not
// count) it fails at once with ResourceExhausted, so a gRPC thread is never held up by a busy
// server. A task may belong to a TaskGroup: a worker then skips it (taking the next eligible task,
// so other models keep running) while the group already runs its maximum. Shutdown stops
// admission, lets the workers run every task already queued, and joins them.
//
// Thread-safe. Owns its threads; the destructor calls Shutdown, so tasks may still run while it
// executes: anything a task touches must outlive the pool (or its Shutdown call).
class WorkerPool {
 public:
  // `num_workers` >= 1 and `max_queue_size` >= 1 (smaller values are raised to 1). Each worker
  // thread calls `on_thread_start` (if set) once before taking tasks.
  WorkerPool(int num_workers, int max_queue_size, std::function<void()> on_thread_start = nullptr);
  ~WorkerPool();

  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `task`. ResourceExhausted when the queue is full, Unavailable after Shutdown. On
  // failure `task` is destroyed without running. `group` (optional) limits how many of its tasks
  // run at once; it is kept alive by the queue until the task has run.
  absl::Status TrySchedule(std::function<void()> task, std::shared_ptr<TaskGroup> group = nullptr);

  // Stops admission, drains the queue and joins the workers. Idempotent; must not be called from a
  // task.
  void Shutdown();

  int queue_size() const;
  int num_workers() const { return num_workers_; }
  int max_queue_size() const { return max_queue_size_; }

 private:
  struct Task {
    std::function<void()> run;
    std::shared_ptr<TaskGroup> group;  // null: no per-group limit
  };
  void WorkerLoop();
  // The first queued task whose group may run one more, or queue_.end().
  std::deque<Task>::iterator NextRunnable() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const int num_workers_;
  const int max_queue_size_;
  mutable absl::Mutex mutex_;
  absl::CondVar work_available_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mutex_);
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::vector<std::thread> threads_;  // written only by the constructor and Shutdown
  absl::Mutex shutdown_mutex_;        // serialises Shutdown calls
};

}  // namespace loopserve::server
