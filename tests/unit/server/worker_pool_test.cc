#include "server/worker_pool.h"

#include <atomic>
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

}  // namespace
}  // namespace loopserve::server
