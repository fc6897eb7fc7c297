#include "server/scheduling/worker_pool.h"

#include <atomic>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace loopserve::server {
namespace {

TEST(WorkerPoolTest, RunsEveryTask) {
  std::atomic<int> ran{0};
  absl::Notification all_done;
  {
    WorkerPool pool(2, 100);
    for (int i = 0; i < 50; ++i) {
      ASSERT_TRUE(pool.TrySchedule([&] {
                        if (++ran == 50) all_done.Notify();
                      })
                      .ok());
    }
    all_done.WaitForNotification();
  }
  EXPECT_EQ(ran.load(), 50);
}

TEST(WorkerPoolTest, FullQueueRejectsImmediately) {
  WorkerPool pool(1, 2);
  absl::Notification started, release;
  ASSERT_TRUE(pool.TrySchedule([&] {
                    started.Notify();
                    release.WaitForNotification();
                  })
                  .ok());
  started.WaitForNotification();  // the only worker is busy; the queue is empty
  std::atomic<int> ran{0};
  EXPECT_TRUE(pool.TrySchedule([&] { ++ran; }).ok());
  EXPECT_TRUE(pool.TrySchedule([&] { ++ran; }).ok());
  EXPECT_EQ(pool.queue_size(), 2);
  const absl::Status full = pool.TrySchedule([&] { ++ran; });
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  release.Notify();
  pool.Shutdown();
  EXPECT_EQ(ran.load(), 2);  // queued tasks ran; the rejected one never did
}

TEST(WorkerPoolTest, ShutdownDrainsQueueThenRejects) {
  WorkerPool pool(1, 10);
  absl::Notification started, release;
  std::atomic<int> ran{0};
  ASSERT_TRUE(pool.TrySchedule([&] {
                    started.Notify();
                    release.WaitForNotification();
                  })
                  .ok());
  started.WaitForNotification();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(pool.TrySchedule([&] { ++ran; }).ok());
  release.Notify();
  pool.Shutdown();
  EXPECT_EQ(ran.load(), 5);
  EXPECT_EQ(pool.TrySchedule([] {}).code(), absl::StatusCode::kUnavailable);
  pool.Shutdown();  // idempotent
}

TEST(WorkerPoolTest, RunsTasksConcurrentlyOnEveryWorker) {
  // Declared before the pool, so they outlive its workers (ThreadSanitizer saw a worker still in
  // WaitForNotification when `release` went out of scope before the pool's destructor joined).
  absl::Notification release;
  std::vector<absl::Notification> started(3);
  WorkerPool pool(3, 10);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(pool.TrySchedule([&, i] {
                      started[i].Notify();
                      release.WaitForNotification();
                    })
                    .ok());
  }
  for (auto& n : started) n.WaitForNotification();  // all three block at once
  release.Notify();
}

TEST(WorkerPoolTest, TaskGroupCapsConcurrencyWithoutBlockingOtherTasks) {
  WorkerPool pool(3, 10);
  auto group = std::make_shared<TaskGroup>(1);
  absl::Notification first_started, release_first, second_started, other_ran;
  std::atomic<int> running{0}, max_running{0};
  auto grouped = [&](absl::Notification* started, absl::Notification* release) {
    return [&, started, release] {
      const int now = ++running;
      int seen = max_running.load();
      while (now > seen && !max_running.compare_exchange_weak(seen, now)) {
      }
      started->Notify();
      if (release != nullptr) release->WaitForNotification();
      --running;
    };
  };
  ASSERT_TRUE(pool.TrySchedule(grouped(&first_started, &release_first), group).ok());
  first_started.WaitForNotification();
  ASSERT_TRUE(pool.TrySchedule(grouped(&second_started, nullptr), group).ok());
  // A free worker skips the capped group's task and runs the next one.
  ASSERT_TRUE(pool.TrySchedule([&] { other_ran.Notify(); }).ok());
  other_ran.WaitForNotification();
  EXPECT_FALSE(second_started.HasBeenNotified());
  EXPECT_EQ(pool.queue_size(), 1);
  release_first.Notify();
  second_started.WaitForNotification();
  pool.Shutdown();
  EXPECT_EQ(max_running.load(), 1);
}

TEST(WorkerPoolTest, TryRunHereRunsOnTheCallerWhenASlotIsFree) {
  std::atomic<int> thread_starts{0};
  WorkerPool pool(1, 4, [&] { ++thread_starts; });
  std::thread::id ran_on;
  EXPECT_TRUE(pool.TryRunHere([&] {
    ran_on = std::this_thread::get_id();
    EXPECT_EQ(pool.running(), 1);
  }));
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_TRUE(pool.TryRunHere([] {}));
  EXPECT_EQ(pool.running(), 0);
  // A task that throws gives its slot back.
  EXPECT_THROW(pool.TryRunHere([] { throw std::runtime_error("task failed"); }),
               std::runtime_error);
  EXPECT_EQ(pool.running(), 0);
  pool.Shutdown();
  // The worker and this thread, each once.
  EXPECT_EQ(thread_starts.load(), 2);
  EXPECT_FALSE(pool.TryRunHere([] { ADD_FAILURE() << "ran after Shutdown"; }));
}

TEST(WorkerPoolTest, TryRunHereNeverExceedsTheBoundOrOvertakesTheQueue) {
  WorkerPool pool(1, 4);
  absl::Notification started, release;
  ASSERT_TRUE(pool.TrySchedule([&] {
                    started.Notify();
                    release.WaitForNotification();
                  })
                  .ok());
  started.WaitForNotification();
  // The only slot is taken by the worker.
  EXPECT_FALSE(pool.TryRunHere([] { ADD_FAILURE() << "ran beyond the bound"; }));
  // A queued task goes first, even once the slot is free again.
  absl::Notification queued_ran;
  absl::Notification hold_queued;
  ASSERT_TRUE(pool.TrySchedule([&] {
                    queued_ran.Notify();
                    hold_queued.WaitForNotification();
                  })
                  .ok());
  EXPECT_FALSE(pool.TryRunHere([] { ADD_FAILURE() << "overtook a queued task"; }));
  release.Notify();
  queued_ran.WaitForNotification();
  EXPECT_FALSE(pool.TryRunHere([] { ADD_FAILURE() << "ran beyond the bound"; }));
  hold_queued.Notify();
  pool.Shutdown();
}

TEST(WorkerPoolTest, WorkersWaitWhileACallerHoldsTheSlot) {
  WorkerPool pool(1, 4);
  absl::Notification inline_started, release_inline;
  std::atomic<bool> inline_running{false};
  std::thread caller([&] {
    EXPECT_TRUE(pool.TryRunHere([&] {
      inline_running = true;
      inline_started.Notify();
      release_inline.WaitForNotification();
      inline_running = false;
    }));
  });
  inline_started.WaitForNotification();
  absl::Notification queued_ran;
  bool overlapped = true;
  ASSERT_TRUE(pool.TrySchedule([&] {
                    overlapped = inline_running.load();
                    queued_ran.Notify();
                  })
                  .ok());
  // The idle worker must leave the task queued while the caller's task holds the only slot.
  EXPECT_FALSE(queued_ran.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  EXPECT_EQ(pool.queue_size(), 1);
  release_inline.Notify();
  caller.join();
  queued_ran.WaitForNotification();  // released: the worker is woken for it
  EXPECT_FALSE(overlapped);
  pool.Shutdown();
}

TEST(WorkerPoolTest, TryRunHereKeepsTheGroupCap) {
  WorkerPool pool(2, 4);
  auto group = std::make_shared<TaskGroup>(1);
  absl::Notification first_started, release_first;
  ASSERT_TRUE(pool.TrySchedule(
                      [&] {
                        first_started.Notify();
                        release_first.WaitForNotification();
                      },
                      group)
                  .ok());
  first_started.WaitForNotification();
  // A pool slot is free, but the group runs its one instance.
  EXPECT_FALSE(pool.TryRunHere([] { ADD_FAILURE() << "ran beyond the group cap"; }, group));
  // Another group's (or an ungrouped) task may use the free slot.
  EXPECT_TRUE(pool.TryRunHere([] {}));
  release_first.Notify();
  pool.Shutdown();
  WorkerPool idle(1, 4);
  // The group's slot is released when the caller's task ends, and the group is kept alive by
  // the call even if the task drops the last other reference.
  auto owned = std::make_shared<TaskGroup>(1);
  std::weak_ptr<TaskGroup> weak = owned;
  EXPECT_TRUE(idle.TryRunHere([&] { owned.reset(); }, owned));
  EXPECT_TRUE(weak.expired());
}

TEST(WorkerPoolTest, TryRunHereKeepsItsOwnCap) {
  WorkerPool pool(3, 4, nullptr, /*max_running_here=*/1);
  absl::Notification started, release;
  std::thread caller([&] {
    EXPECT_TRUE(pool.TryRunHere([&] {
      started.Notify();
      release.WaitForNotification();
    }));
  });
  started.WaitForNotification();
  // Two worker slots are free, but callers may hold only one; workers may still take them.
  EXPECT_FALSE(pool.TryRunHere([] { ADD_FAILURE() << "ran beyond max_running_here"; }));
  absl::Notification worker_ran;
  ASSERT_TRUE(pool.TrySchedule([&] { worker_ran.Notify(); }).ok());
  worker_ran.WaitForNotification();
  release.Notify();
  caller.join();
  EXPECT_TRUE(pool.TryRunHere([] {}));
  EXPECT_EQ(pool.ran_here(), 2);
}

}  // namespace
}  // namespace loopserve::server
