#include "server/worker_pool.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace loopserve::server {

WorkerPool::WorkerPool(int num_workers, int max_queue_size)
    : num_workers_(std::max(1, num_workers)), max_queue_size_(std::max(1, max_queue_size)) {
  threads_.reserve(num_workers_);
  for (int i = 0; i < num_workers_; ++i) threads_.emplace_back([this] { WorkerLoop(); });
}

WorkerPool::~WorkerPool() { Shutdown(); }

absl::Status WorkerPool::TrySchedule(std::function<void()> task) {
  absl::MutexLock lock(&mutex_);
  if (stopping_) return absl::UnavailableError("the server is shutting down");
  if (static_cast<int>(queue_.size()) >= max_queue_size_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the request queue is full (", max_queue_size_, " requests waiting)"));
  }
  queue_.push_back(std::move(task));
  work_available_.Signal();
  return absl::OkStatus();
}

void WorkerPool::Shutdown() {
  absl::MutexLock shutdown_lock(&shutdown_mutex_);
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
    work_available_.SignalAll();
  }
  for (std::thread& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
}

int WorkerPool::queue_size() const {
  absl::MutexLock lock(&mutex_);
  return static_cast<int>(queue_.size());
}

void WorkerPool::WorkerLoop() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mutex_);
      while (queue_.empty() && !stopping_) work_available_.Wait(&mutex_);
      // Drain before exiting: queued requests are answered, not dropped.
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace loopserve::server
