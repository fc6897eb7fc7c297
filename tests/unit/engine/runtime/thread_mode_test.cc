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
  // One thread is slower, except during the sweep's probe (the team's thread was descheduled,
  // say): the sweep switches on that one win, the confirming probe of the team wins at once and
  // takes it back, and the team stays. One thread ran only the lucky probe, one reference block
  // and the later probes (each cut short at its first part).
  const int64_t block = ExpectedBlock(100e-6);
  const int64_t lucky = 1 + block;  // the sweep's warm-up and block
  int64_t one_thread_iterations = 0;
  ThreadModeChooser chooser;
  const int64_t n = 50000;
  double seconds = 0;
  Drive(chooser, n, [&](Mode m, int64_t) {
    const double c = m == Mode::kTeam ? 100e-6 : ++one_thread_iterations <= lucky ? 50e-6 : 150e-6;
    seconds += c;
    return c;
  });
  EXPECT_GT(one_thread_iterations, lucky) << "probed again";
  EXPECT_EQ(chooser.switches(), 2) << "there and back";
  EXPECT_EQ(chooser.current(), Mode::kTeam);
  EXPECT_LT(seconds, 1.03 * static_cast<double>(n) * 100e-6);
}

// From each order of three distinct costs, the fastest mode is the current one after the
// calibration, a block in each other mode and the confirming probe's reference, and it stays.
TEST(ThreadModeChooserTest, ReachesTheBestOfThreeModesWithinFourBlocks) {
  ThreadModeChooser::Config config;
  config.spin_team = true;
  const double costs[6][3] = {{100e-6, 200e-6, 300e-6}, {100e-6, 300e-6, 200e-6},
                              {200e-6, 100e-6, 300e-6}, {300e-6, 100e-6, 200e-6},
                              {200e-6, 300e-6, 100e-6}, {300e-6, 200e-6, 100e-6}};
  for (const auto& c : costs) {
    const Mode best = static_cast<Mode>(std::min_element(c, c + 3) - c);
    SCOPED_TRACE(static_cast<int>(best));
    ThreadModeChooser chooser(config);
    const int64_t n = 50000;
    int64_t reached = -1;  // the iteration from which the current mode is the best for good
    for (int64_t i = 0; i < n;) {
      const Mode mode = chooser.mode();
      const int64_t k = chooser.iterations();
      i += k;
      chooser.Next(static_cast<double>(k) * c[static_cast<int>(mode)]);
      if (chooser.current() != best) {
        reached = -1;
      } else if (reached < 0) {
        reached = i;
      }
    }
    ASSERT_GE(reached, 0);
    // The calibration ends at block b after 2b - 1 iterations (of the team, at 100 to 300 us);
    // then up to two probes of b, each after a warm-up iteration.
    const int64_t b = chooser.block_iterations();
    EXPECT_LE(reached, 4 * b + 2);
    EXPECT_EQ(chooser.switches(), best == Mode::kTeam ? 0 : 1);
  }
  // The same with two modes, from both orders.
  for (const bool team_best : {true, false}) {
    ThreadModeChooser chooser;
    int64_t reached = -1;
    const Mode best = team_best ? Mode::kTeam : Mode::kOneThread;
    for (int64_t i = 0; i < 50000;) {
      const int64_t k = chooser.iterations();
      i += k;
      const bool fast = (chooser.mode() == Mode::kTeam) == team_best;
      chooser.Next(static_cast<double>(k) * (fast ? 100e-6 : 200e-6));
      if (chooser.current() != best) {
        reached = -1;
      } else if (reached < 0) {
        reached = i;
      }
    }
    ASSERT_GE(reached, 0);
    EXPECT_LE(reached, 3 * chooser.block_iterations() + 1);
  }
}

// Three modes within the margin of each other (3% apart), each block also off by up to +-1.5%
// (a deterministic pseudo-random factor per 32 iterations): no switch, in the sweep or after.
TEST(ThreadModeChooserTest, NoSwitchOnNoiseWithinTheMargin) {
  ThreadModeChooser::Config config;
  config.spin_team = true;
  const double base[3] = {100e-6, 103e-6, 97e-6};
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(seed);
    ThreadModeChooser chooser(config);
    Drive(chooser, 200000, [&](Mode m, int64_t i) {
      uint32_t x = seed * 2654435761u ^ static_cast<uint32_t>(i / 32) * 2246822519u;
      x ^= x >> 15;
      x *= 2654435761u;
      x ^= x >> 13;
      const double noise = (static_cast<double>(x % 1001) / 1000.0 - 0.5) * 0.03;
      return base[static_cast<int>(m)] * (1 + noise);
    });
    EXPECT_EQ(chooser.switches(), 0);
    EXPECT_EQ(chooser.current(), Mode::kTeam);
  }
}

// With three modes the load moves the best from the SpinTeam (quiet) to one thread (a helper
// descheduled) to the team (busy neighbours) and back to the SpinTeam: each is followed.
TEST(ThreadModeChooserTest, FollowsAChangeOfLoadAmongThreeModes) {
  ThreadModeChooser::Config config;
  config.spin_team = true;
  ThreadModeChooser chooser(config);
  auto costs = [](double team, double one, double spin) {
    return [=](Mode m, int64_t) {
      return m == Mode::kTeam ? team : m == Mode::kOneThread ? one : spin;
    };
  };
  const int64_t phase = 200000;
  Drive(chooser, phase, costs(300e-6, 350e-6, 200e-6));
  EXPECT_EQ(chooser.current(), Mode::kSpinTeam);
  EXPECT_EQ(chooser.switches(), 1);
  Drive(chooser, phase, costs(300e-6, 150e-6, 400e-6));
  EXPECT_EQ(chooser.current(), Mode::kOneThread);
  Drive(chooser, phase, costs(100e-6, 300e-6, 400e-6));
  EXPECT_EQ(chooser.current(), Mode::kTeam);
  Drive(chooser, phase, costs(300e-6, 350e-6, 200e-6));
  EXPECT_EQ(chooser.current(), Mode::kSpinTeam);
  EXPECT_LE(chooser.switches(), 5) << "no flapping";
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
