#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
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

// A fixed set of worker threads fed from one bounded FIFO queue, and a bound of `num_workers`
// tasks running at once.
//
// TrySchedule never blocks: when `max_queue_size` tasks are already waiting (tasks being run do not
// count) it fails at once with ResourceExhausted, so a gRPC thread is never held up by a busy
// server. A task may belong to a TaskGroup: a worker then skips it (taking the next eligible task,
// so other models keep running) while the group already runs its maximum. Shutdown stops
// admission, lets the workers run every task already queued, and joins them.
//
// TryRunHere runs a task on the caller's thread instead, when a worker would have started it at
// once anyway (fewer than `num_workers` tasks running, none queued that could run, room in its
// group) and fewer than `max_running_here` callers run one; the task then takes a worker's share
// of the bound, so a worker stays idle meanwhile. This saves the thread wake-up of a hand-off for
// short tasks (the server's small requests).
//
// A task's exception stops at the worker's top (logged; the worker goes on): a task must answer
// whatever it owns itself. TryRunHere lets it reach the caller.
//
// Thread-safe. Owns its threads; the destructor calls Shutdown, so tasks may still run while it
// executes: anything a task touches must outlive the pool (or its Shutdown call).
class WorkerPool {
 public:
  // `num_workers` >= 1 and `max_queue_size` >= 1 (smaller values are raised to 1). Each worker
  // thread calls `on_thread_start` (if set) once before taking tasks. At most `max_running_here`
  // TryRunHere tasks run at once (0 or more than `num_workers`: `num_workers`).
  WorkerPool(int num_workers, int max_queue_size, std::function<void()> on_thread_start = nullptr,
             int max_running_here = 0);
  ~WorkerPool();

  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `task`. ResourceExhausted when the queue is full, Unavailable after Shutdown. On
  // failure `task` is destroyed without running. `group` (optional) limits how many of its tasks
  // run at once; it is kept alive by the queue until the task has run.
  absl::Status TrySchedule(std::function<void()> task, std::shared_ptr<TaskGroup> group = nullptr);

  // Runs `task` on the calling thread and returns true if the pool could start it now without
  // overtaking a queued task or exceeding its bounds or `group`'s cap; otherwise returns false at
  // once without running it (the caller then schedules it). The calling thread gets
  // `on_thread_start` once before its first task. `group` is held until the slot is released, so
  // the task may drop the caller's last other reference to it.
  bool TryRunHere(absl::FunctionRef<void()> task, std::shared_ptr<TaskGroup> group = nullptr);

  // Stops admission, drains the queue and joins the workers. Idempotent; must not be called from a
  // task.
  void Shutdown();

  int queue_size() const;
  int running() const;       // tasks running now, on workers or callers' threads
  int64_t ran_here() const;  // tasks TryRunHere has run so far (tests, diagnostics)
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
  // Gives back a running slot (and the group's) after a task ran on a worker or a caller.
  void Release(TaskGroup* group, bool on_worker);

  const int num_workers_;
  const int max_queue_size_;
  const int max_running_here_;
  const std::function<void()> on_thread_start_;
  const uint64_t id_;  // unique among pools, for TryRunHere
  mutable absl::Mutex mutex_;
  absl::CondVar work_available_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mutex_);
  int running_ ABSL_GUARDED_BY(mutex_) = 0;       // <= num_workers_
  int running_here_ ABSL_GUARDED_BY(mutex_) = 0;  // of those, on callers' threads
  int64_t ran_here_ ABSL_GUARDED_BY(mutex_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::vector<std::thread> threads_;  // written only by the constructor and Shutdown
  absl::Mutex shutdown_mutex_;        // serialises Shutdown calls
};

}  // namespace loopserve::server
