#include "server/scheduling/worker_pool.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/observability/logging.h"

namespace loopserve::server {
namespace {

// Identifies pools for TryRunHere's once-per-thread `on_thread_start` (an address could be reused
// by a later pool).
std::atomic<uint64_t> next_pool_id{1};
thread_local uint64_t thread_started_for_pool = 0;

void RunCatching(const std::function<void()>& task) {
  try {
    task();
  } catch (const std::exception& e) {
    LogError(
        absl::StrCat("a worker task failed with an exception (the worker goes on): ", e.what()));
  } catch (...) {
    LogError("a worker task failed with an unknown exception (the worker goes on)");
  }
}

}  // namespace

WorkerPool::WorkerPool(int num_workers, int max_queue_size, std::function<void()> on_thread_start,
                       int max_running_here)
    : num_workers_(std::max(1, num_workers)),
      max_queue_size_(std::max(1, max_queue_size)),
      max_running_here_(max_running_here > 0 ? std::min(max_running_here, num_workers_)
                                             : num_workers_),
      on_thread_start_(std::move(on_thread_start)),
      id_(next_pool_id.fetch_add(1, std::memory_order_relaxed)) {
  threads_.reserve(num_workers_);
  for (int i = 0; i < num_workers_; ++i) {
    threads_.emplace_back([this] {
      thread_started_for_pool = id_;
      if (on_thread_start_) on_thread_start_();
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

bool WorkerPool::TryRunHere(absl::FunctionRef<void()> task, std::shared_ptr<TaskGroup> group) {
  {
    absl::MutexLock lock(&mutex_);
    if (stopping_ || running_ >= num_workers_ || running_here_ >= max_running_here_) return false;
    if (group != nullptr && group->running_ >= group->max_running_) return false;
    // A task a worker could start now was queued first: it goes first.
    if (NextRunnable() != queue_.end()) return false;
    ++running_;
    ++running_here_;
    ++ran_here_;
    if (group != nullptr) ++group->running_;
  }
  // The slots are given back even if `task` throws.
  struct SlotRelease {
    WorkerPool* pool;
    TaskGroup* group;
    ~SlotRelease() { pool->Release(group, /*on_worker=*/false); }
  } release{this, group.get()};
  if (thread_started_for_pool != id_) {
    thread_started_for_pool = id_;
    if (on_thread_start_) on_thread_start_();
  }
  task();
  return true;
}

void WorkerPool::Release(TaskGroup* group, bool on_worker) {
  absl::MutexLock lock(&mutex_);
  --running_;
  if (!on_worker) --running_here_;
  if (group != nullptr) --group->running_;
  // A worker may be waiting for the slot (a worker that releases its own takes the next task
  // itself) or for the group's.
  if (!queue_.empty() && (group != nullptr || !on_worker)) work_available_.SignalAll();
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

int WorkerPool::running() const {
  absl::MutexLock lock(&mutex_);
  return running_;
}

int64_t WorkerPool::ran_here() const {
  absl::MutexLock lock(&mutex_);
  return ran_here_;
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
      // Queued tasks whose groups are all busy wait for a running task of theirs to finish (which
      // signals), and every task waits while tasks run on callers' threads take the bound; drain
      // before exiting: queued requests are answered, not dropped.
      auto next = running_ < num_workers_ ? NextRunnable() : queue_.end();
      while (next == queue_.end()) {
        if (queue_.empty() && stopping_) return;
        work_available_.Wait(&mutex_);
        next = running_ < num_workers_ ? NextRunnable() : queue_.end();
      }
      task = std::move(*next);
      queue_.erase(next);
      ++running_;
      if (task.group != nullptr) ++task.group->running_;
    }
    // An exception (std::bad_alloc) stops at the thread's top: logged, the worker goes on. The
    // server's tasks answer their own calls' errors; this only keeps the process alive.
    RunCatching(task.run);
    task.run = nullptr;  // destroy what the task captured before the slots are released
    Release(task.group.get(), /*on_worker=*/true);
  }
}

}  // namespace loopserve::server
