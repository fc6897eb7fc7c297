// ThreadModeChooser's decisions, driven with injected timings (no clock, no threads): it must
// pick the faster mode, not be fooled by iterations whose cost changes over the loop, cut a slow
// probe short, probe less often while its choice holds, and follow a change of load.

#include "engine/runtime/thread_mode.h"

#include <algorithm>
#include <cstdint>
#include <functional>

#include "gtest/gtest.h"

namespace loopserve::engine {
namespace {

using Mode = ThreadModeChooser::Mode;

// Seconds one iteration takes, given its mode and its index over the whole run.
using CostFn = std::function<double(Mode, int64_t)>;

struct Trace {
  int64_t team = 0;  // iterations run in each mode
  int64_t one = 0;
  double seconds = 0;
  int64_t one_after = 0;  // one-thread iterations from `mark` on
};

// Drives `chooser` for `iterations` iterations priced by `cost`.
Trace Drive(ThreadModeChooser& chooser, int64_t iterations, const CostFn& cost, int64_t mark = 0) {
  Trace trace;
  int64_t i = 0;
  while (i < iterations) {
    const Mode mode = chooser.mode();
    const int64_t n = chooser.iterations();
    EXPECT_GE(n, 1);
    double block = 0;
    for (int64_t k = 0; k < n && i < iterations; ++k, ++i) {
      const double c = cost(mode, i);
      block += c;
      trace.seconds += c;
      if (mode == Mode::kTeam) {
        ++trace.team;
      } else {
        ++trace.one;
        if (i >= mark) ++trace.one_after;
      }
    }
    chooser.Next(block);
  }
  return trace;
}

CostFn Fixed(double team, double one) {
  return [=](Mode m, int64_t) { return m == Mode::kTeam ? team : one; };
}

// The block the calibration settles on at `seconds` an iteration: the first of 2, 4, 8, ...
// iterations that takes block_seconds.
int64_t ExpectedBlock(double seconds) {
  int64_t n = 2;
  while (static_cast<double>(n) * seconds < ThreadModeChooser::Config().block_seconds) n *= 2;
  return n;
}

TEST(ThreadModeChooserTest, StartsWithTheTeamAndCalibratesABlock) {
  ThreadModeChooser chooser;
  EXPECT_EQ(chooser.mode(), Mode::kTeam);
  EXPECT_EQ(chooser.iterations(), 1);  // the untimed first iteration
  Drive(chooser, 1000, Fixed(100e-6, 100e-6));
  EXPECT_EQ(chooser.block_iterations(), ExpectedBlock(100e-6));
  EXPECT_GE(chooser.block_iterations(), 4);
}

TEST(ThreadModeChooserTest, PicksOneThreadWhenItIsFaster) {
  // A quiet machine's team loses to one thread on a body of small parallel regions when other
  // processes take the cores: 3x here.
  const int64_t n = 100000;  // 10 s
  ThreadModeChooser chooser;
  const Trace t = Drive(chooser, n, Fixed(300e-6, 100e-6));
  EXPECT_EQ(chooser.current(), Mode::kOneThread);
  EXPECT_EQ(chooser.switches(), 1);
  EXPECT_GT(t.one, n * 97 / 100);
  // Within 3% of always running on one thread, calibration and probes included.
  EXPECT_LT(t.seconds, 1.03 * static_cast<double>(n) * 100e-6);
}

TEST(ThreadModeChooserTest, KeepsTheTeamWhenItIsFaster) {
  const int64_t n = 100000;
  ThreadModeChooser chooser;
  const Trace t = Drive(chooser, n, Fixed(100e-6, 170e-6));
  EXPECT_EQ(chooser.current(), Mode::kTeam);
  EXPECT_EQ(chooser.switches(), 0);
  EXPECT_LT(t.seconds, 1.03 * static_cast<double>(n) * 100e-6);
}

// With Config::spin_team, three candidates: each of the two non-team modes is found when it is
// the fastest, whichever the other one costs, and the cost stays near the best mode's.
TEST(ThreadModeChooserTest, PicksTheFastestOfThreeModes) {
  ThreadModeChooser::Config config;
  config.spin_team = true;
  struct Case {
    double team, one, spin;
    Mode best;
  };
  for (const Case& c : {Case{300e-6, 200e-6, 100e-6, Mode::kSpinTeam},
                        Case{300e-6, 100e-6, 200e-6, Mode::kOneThread},
                        Case{300e-6, 100e-6, 400e-6, Mode::kOneThread},
                        Case{100e-6, 200e-6, 150e-6, Mode::kTeam}}) {
    SCOPED_TRACE(static_cast<int>(c.best));
    ThreadModeChooser chooser(config);
    int64_t per_mode[3] = {};
    double seconds = 0;
    const int64_t n = 100000;
    for (int64_t i = 0; i < n;) {
      const Mode mode = chooser.mode();
      double block = 0;
      for (int64_t k = 0; k < chooser.iterations() && i < n; ++k, ++i) {
        block += mode == Mode::kTeam ? c.team : mode == Mode::kOneThread ? c.one : c.spin;
        ++per_mode[static_cast<int>(mode)];
      }
      seconds += block;
      chooser.Next(block);
    }
    EXPECT_EQ(chooser.current(), c.best);
    EXPECT_GT(per_mode[static_cast<int>(c.best)], n * 95 / 100);
    const double best = std::min({c.team, c.one, c.spin});
    EXPECT_LT(seconds, 1.05 * static_cast<double>(n) * best);
  }
}

// Without it (the default), the SpinTeam mode is never run.
TEST(ThreadModeChooserTest, TwoModesByDefault) {
  ThreadModeChooser chooser;
  for (int64_t i = 0; i < 100000;) {
    EXPECT_NE(chooser.mode(), Mode::kSpinTeam);
    const int64_t n = chooser.iterations();
    i += n;
    chooser.Next(static_cast<double>(n) * (chooser.mode() == Mode::kTeam ? 300e-6 : 100e-6));
  }
  EXPECT_EQ(chooser.current(), Mode::kOneThread);
}

TEST(ThreadModeChooserTest, OneLuckyProbeDoesNotSwitch) {
  // One thread is slower, except during the first probe (the team's thread was descheduled, say):
  // that probe wins, the confirming one loses, and the team stays.
  const int64_t lucky = 1 + ExpectedBlock(100e-6);  // the first probe's warm-up and block
  int64_t one_thread_iterations = 0;
  ThreadModeChooser chooser;
  Drive(chooser, 50000, [&](Mode m, int64_t) {
    if (m == Mode::kTeam) return 100e-6;
    return ++one_thread_iterations <= lucky ? 50e-6 : 150e-6;
  });
  EXPECT_GT(one_thread_iterations, lucky) << "probed again";
  EXPECT_EQ(chooser.switches(), 0);
  EXPECT_EQ(chooser.current(), Mode::kTeam);
}

TEST(ThreadModeChooserTest, CutsASlowProbeShort) {
  // One thread 20x slower: each probe stops after its first part (block / probe_checks
  // iterations) plus the untimed warm-up iteration, instead of a whole block at 20x.
  const int64_t n = 50000;
  ThreadModeChooser chooser;
  const Trace t = Drive(chooser, n, Fixed(100e-6, 2000e-6));
  EXPECT_EQ(chooser.switches(), 0);
  const int64_t part = chooser.block_iterations() / ThreadModeChooser::Config().probe_checks;
  ASSERT_GT(t.one, 0);
  EXPECT_EQ(t.one % (1 + part), 0) << "a probe is 1 warm-up + " << part << " timed iterations";
  EXPECT_LT(t.seconds, 1.10 * static_cast<double>(n) * 100e-6);
}

TEST(ThreadModeChooserTest, ACostThatGrowsOrShrinksDoesNotFoolIt) {
  // Both modes equally fast, each iteration costlier than the last (attention over a growing
  // length: 100 us to ~3 ms over the loop) or cheaper: a probe compared with the block before it
  // alone would look slower (growing) or faster (shrinking) and switch.
  for (const double slope : {+1.0, -1.0}) {
    SCOPED_TRACE(slope > 0 ? "growing" : "shrinking");
    const int64_t n = 3000;
    auto cost = [=](Mode, int64_t i) {
      const double x = slope > 0 ? static_cast<double>(i) : static_cast<double>(n - i);
      return 100e-6 * (1 + x / 100);
    };
    ThreadModeChooser chooser;
    Drive(chooser, n, cost);
    EXPECT_EQ(chooser.switches(), 0);
    EXPECT_EQ(chooser.current(), Mode::kTeam);
  }
}

TEST(ThreadModeChooserTest, AFasterModeIsFoundUnderAGrowingCost) {
  const int64_t n = 5000;
  ThreadModeChooser chooser;
  Drive(chooser, n, [](Mode m, int64_t i) {
    return (m == Mode::kTeam ? 1.0 : 0.7) * 100e-6 * (1 + static_cast<double>(i) / 100);
  });
  EXPECT_EQ(chooser.current(), Mode::kOneThread);
  EXPECT_EQ(chooser.switches(), 1);
}

TEST(ThreadModeChooserTest, ProbesLessOftenWhileItsChoiceHolds) {
  ThreadModeChooser::Config config;
  ThreadModeChooser chooser(config);
  Drive(chooser, 20000, Fixed(100e-6, 150e-6));
  const double early = chooser.hold_seconds();
  EXPECT_GT(early, config.min_hold_seconds);
  Drive(chooser, 200000, Fixed(100e-6, 150e-6));
  EXPECT_EQ(chooser.hold_seconds(), config.max_hold_seconds);
  // At the longest hold, probes cost under 1%: 2 s between probes, a probe's extra ~10 ms.
  ThreadModeChooser steady(config);
  Drive(steady, 200000, Fixed(100e-6, 150e-6));
  const Trace t = Drive(steady, 100000, Fixed(100e-6, 150e-6));
  EXPECT_LT(t.seconds, 1.01 * 100000 * 100e-6);
}

TEST(ThreadModeChooserTest, FollowsAChangeOfLoad) {
  // Quiet for 30 s of iterations (the team 2x faster), then loaded (the team 4x slower than one
  // thread), then quiet again: each change is followed within about max_hold_seconds plus a few
  // blocks.
  ThreadModeChooser::Config config;
  ThreadModeChooser chooser(config);
  const int64_t phase = 300000;  // iterations of 100 us in the team's best case
  auto quiet = Fixed(100e-6, 200e-6);
  auto loaded = Fixed(400e-6, 100e-6);
  Drive(chooser, phase, quiet);
  EXPECT_EQ(chooser.current(), Mode::kTeam);
  EXPECT_EQ(chooser.hold_seconds(), config.max_hold_seconds);
  // Loaded: at most max_hold_seconds at the team's 400 us an iteration before the probe, so
  // 10000 iterations (4 s) are enough.
  Trace t = Drive(chooser, phase, loaded, /*mark=*/10000);
  EXPECT_EQ(chooser.current(), Mode::kOneThread);
  // Switched in time and stayed: after it, only the team's probes (cut short) remain.
  EXPECT_GT(t.one_after, (phase - 10000) * 99 / 100);
  EXPECT_EQ(chooser.switches(), 1);
  t = Drive(chooser, phase, quiet, /*mark=*/30000);
  EXPECT_EQ(chooser.current(), Mode::kTeam);
  EXPECT_EQ(chooser.switches(), 2);
  EXPECT_LT(t.one_after, phase / 100) << "only probes after the switch back";
}

}  // namespace
}  // namespace loopserve::engine
