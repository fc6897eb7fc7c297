#include "server/worker_pool.h"

#include <atomic>
#include <memory>
#include <vector>

#include "absl/synchronization/notification.h"
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
  WorkerPool pool(3, 10);
  absl::Notification release;
  std::vector<absl::Notification> started(3);
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

}  // namespace
}  // namespace loopserve::server
