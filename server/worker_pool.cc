#include "server/worker_pool.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace loopserve::server {

WorkerPool::WorkerPool(int num_workers, int max_queue_size, std::function<void()> on_thread_start)
    : num_workers_(std::max(1, num_workers)), max_queue_size_(std::max(1, max_queue_size)) {
  threads_.reserve(num_workers_);
  for (int i = 0; i < num_workers_; ++i) {
    threads_.emplace_back([this, on_thread_start] {
      if (on_thread_start) on_thread_start();
      WorkerLoop();
    });
  }
}

WorkerPool::~WorkerPool() { Shutdown(); }

absl::Status WorkerPool::TrySchedule(std::function<void()> task, std::shared_ptr<TaskGroup> group) {
  absl::MutexLock lock(&mutex_);
  if (stopping_) return absl::UnavailableError("the server is shutting down");
  if (static_cast<int>(queue_.size()) >= max_queue_size_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the request queue is full (", max_queue_size_, " requests waiting)"));
  }
  queue_.push_back(Task{std::move(task), std::move(group)});
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

std::deque<WorkerPool::Task>::iterator WorkerPool::NextRunnable() {
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if (it->group == nullptr || it->group->running_ < it->group->max_running_) return it;
  }
  return queue_.end();
}

void WorkerPool::WorkerLoop() {
  while (true) {
    Task task;
    {
      absl::MutexLock lock(&mutex_);
      auto next = NextRunnable();
      // Queued tasks whose groups are all busy wait for a running task of theirs to finish (which
      // signals); drain before exiting: queued requests are answered, not dropped.
      while (next == queue_.end()) {
        if (queue_.empty() && stopping_) return;
        work_available_.Wait(&mutex_);
        next = NextRunnable();
      }
      task = std::move(*next);
      queue_.erase(next);
      if (task.group != nullptr) ++task.group->running_;
    }
    task.run();
    task.run = nullptr;  // destroy what the task captured before the group slot is released
    if (task.group != nullptr) {
      absl::MutexLock lock(&mutex_);
      --task.group->running_;
      // Another worker may be waiting for this group's slot.
      if (!queue_.empty()) work_available_.SignalAll();
    }
  }
}

}  // namespace loopserve::server
