#pragma once

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace loopserve::server {

// A fixed set of worker threads fed from one bounded FIFO queue.
//
// TrySchedule never blocks: when `max_queue_size` tasks are already waiting (tasks being run do not
// count) it fails at once with ResourceExhausted, so a gRPC thread is never held up by a busy
// server. Shutdown stops admission, lets the workers run every task already queued, and joins them.
//
// Thread-safe. Owns its threads; the destructor calls Shutdown, so tasks may still run while it
// executes: anything a task touches must outlive the pool (or its Shutdown call).
class WorkerPool {
 public:
  // `num_workers` >= 1 and `max_queue_size` >= 1 (smaller values are raised to 1).
  WorkerPool(int num_workers, int max_queue_size);
  ~WorkerPool();

  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `task`. ResourceExhausted when the queue is full, Unavailable after Shutdown. On
  // failure `task` is destroyed without running.
  absl::Status TrySchedule(std::function<void()> task);

  // Stops admission, drains the queue and joins the workers. Idempotent; must not be called from a
  // task.
  void Shutdown();

  int queue_size() const;
  int num_workers() const { return num_workers_; }
  int max_queue_size() const { return max_queue_size_; }

 private:
  void WorkerLoop();

  const int num_workers_;
  const int max_queue_size_;
  mutable absl::Mutex mutex_;
  absl::CondVar work_available_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mutex_);
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::vector<std::thread> threads_;  // written only by the constructor and Shutdown
  absl::Mutex shutdown_mutex_;        // serialises Shutdown calls
};

}  // namespace loopserve::server
