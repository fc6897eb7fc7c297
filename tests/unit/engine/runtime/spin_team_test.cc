// SpinTeam's logic: every chunk runs exactly once, the caller finishes without a helper that never
// comes (held, as if descheduled or asleep), engage/disengage, nesting, destruction. No timings.

#include "engine/runtime/spin_team.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace loopserve::engine {
namespace {

TEST(SpinTeamTest, RunsEveryChunkExactlyOnce) {
  SpinTeam team(/*helpers=*/1);
  EXPECT_EQ(team.size(), 2);
  team.Engage();
  for (int chunks : {1, 2, 3, 7, 64, 1000}) {
    for (int round = 0; round < 50; ++round) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(chunks));
      team.ParallelFor(chunks, [&](int c) { runs[static_cast<size_t>(c)].fetch_add(1); });
      for (int c = 0; c < chunks; ++c) ASSERT_EQ(runs[static_cast<size_t>(c)].load(), 1) << c;
    }
  }
  team.Disengage();
}

TEST(SpinTeamTest, HelpersTakeChunksWhileEngaged) {
  SpinTeam team(/*helpers=*/1);
  team.Engage();
  // Each chunk waits (bounded) until the other has started, which only a second thread can do:
  // so a dispatch that finishes with both chunks run by the caller is possible (the helper came
  // late), but over many dispatches the helper must have taken some.
  for (int round = 0; round < 2000 && team.helper_chunks() == 0; ++round) {
    std::atomic<int> started{0};
    team.ParallelFor(2, [&](int) {
      started.fetch_add(1);
      for (int spin = 0; spin < 100000 && started.load() < 2; ++spin) std::this_thread::yield();
    });
  }
  EXPECT_GT(team.helper_chunks(), 0);
  team.Disengage();
}

TEST(SpinTeamTest, ACallerNeverWaitsForAHelperThatDoesNotCome) {
  SpinTeam team(/*helpers=*/2);
  team.Engage();
  team.HoldHelpersForTesting(true);
  const int64_t before = team.helper_chunks();
  std::vector<int> runs(100, 0);
  team.ParallelFor(100, [&](int c) { ++runs[static_cast<size_t>(c)]; });
  for (int c = 0; c < 100; ++c) EXPECT_EQ(runs[static_cast<size_t>(c)], 1);
  EXPECT_EQ(team.helper_chunks(), before);  // all on the caller
  team.HoldHelpersForTesting(false);
  team.Disengage();
  // Disengaged (helpers asleep): a dispatch still finishes, waking them or not.
  std::atomic<int> total{0};
  team.ParallelFor(10, [&](int c) { total.fetch_add(c); });
  EXPECT_EQ(total.load(), 45);
}

TEST(SpinTeamTest, EngagedIsPerThreadAndScoped) {
  SpinTeam team(/*helpers=*/1);
  EXPECT_EQ(SpinTeam::Engaged(), nullptr);
  {
    ScopedSpinTeam scope(&team);
    EXPECT_EQ(SpinTeam::Engaged(), &team);
    EXPECT_TRUE(team.engaged());
    {
      ScopedSpinTeam nested(&team);  // already engaged: a no-op, and leaves it engaged
      EXPECT_EQ(SpinTeam::Engaged(), &team);
    }
    EXPECT_EQ(SpinTeam::Engaged(), &team);
    // A chunk on a helper sees no engaged team (it has none of its own).
    const std::thread::id owner = std::this_thread::get_id();
    std::atomic<int> wrong{0};
    for (int round = 0; round < 100; ++round) {
      team.ParallelFor(2, [&](int) {
        const bool on_owner = std::this_thread::get_id() == owner;
        if ((SpinTeam::Engaged() == &team) != on_owner) wrong.fetch_add(1);
      });
    }
    EXPECT_EQ(wrong.load(), 0);
    std::thread other([&] { EXPECT_EQ(SpinTeam::Engaged(), nullptr); });
    other.join();
  }
  EXPECT_EQ(SpinTeam::Engaged(), nullptr);
  EXPECT_FALSE(team.engaged());
}

TEST(SpinTeamTest, ANestedParallelForRunsOnTheCaller) {
  SpinTeam team(/*helpers=*/1);
  ScopedSpinTeam scope(&team);
  std::vector<std::atomic<int>> runs(16);
  team.ParallelFor(4, [&](int outer) {
    // From the owner this is a nested dispatch (runs inline); from a helper it is a call on a
    // team it does not own, which also must not wait for itself: only the owner ever calls, so
    // the nested call is made on the owner only.
    if (SpinTeam::Engaged() == &team) {
      team.ParallelFor(4, [&](int inner) { runs[static_cast<size_t>(outer * 4 + inner)]++; });
    } else {
      for (int inner = 0; inner < 4; ++inner) runs[static_cast<size_t>(outer * 4 + inner)]++;
    }
  });
  for (int i = 0; i < 16; ++i) EXPECT_EQ(runs[static_cast<size_t>(i)].load(), 1) << i;
}

TEST(SpinTeamTest, OfThisThreadIsOnePerThreadAndCount) {
  EXPECT_EQ(SpinTeam::OfThisThread(1), nullptr);
  SpinTeam* two = SpinTeam::OfThisThread(2);
  ASSERT_NE(two, nullptr);
  EXPECT_EQ(two->size(), 2);
  EXPECT_EQ(SpinTeam::OfThisThread(2), two);
  SpinTeam* other = nullptr;
  std::thread thread([&] {
    other = SpinTeam::OfThisThread(2);
    std::atomic<int> total{0};
    ScopedSpinTeam scope(other);
    other->ParallelFor(8, [&](int c) { total.fetch_add(c); });
    EXPECT_EQ(total.load(), 28);
  });  // the thread's team and its helper go with it
  thread.join();
  EXPECT_NE(other, nullptr);
  EXPECT_NE(other, two);
  EXPECT_EQ(SpinTeam::OfThisThread(3)->size(), 3);
}

TEST(SpinTeamTest, DestroysCleanlyInEveryState) {
  { SpinTeam idle(/*helpers=*/2); }
  {
    SpinTeam engaged(/*helpers=*/2);
    engaged.Engage();
  }
  {
    SpinTeam used(/*helpers=*/1);
    used.Engage();
    std::atomic<int> n{0};
    used.ParallelFor(32, [&](int) { n.fetch_add(1); });
    EXPECT_EQ(n.load(), 32);
    used.Disengage();
  }
  {
    SpinTeam none(/*helpers=*/0);
    EXPECT_EQ(none.size(), 1);
    int n = 0;
    none.ParallelFor(3, [&](int) { ++n; });
    EXPECT_EQ(n, 3);
  }
}

}  // namespace
}  // namespace loopserve::engine
