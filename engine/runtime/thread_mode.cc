#include "engine/runtime/thread_mode.h"

#include <omp.h>

#include <algorithm>

namespace loopserve::engine {

ThreadModeChooser::ThreadModeChooser(const Config& config) : config_(config) {
  config_.min_hold_seconds = std::max(config_.min_hold_seconds, 0.0);
  config_.max_hold_seconds = std::max(config_.max_hold_seconds, config_.min_hold_seconds);
  config_.probe_checks = std::max(config_.probe_checks, 1);
  // With the SpinTeam the first probe tries it: on a quiet machine it is the likelier winner.
  probe_ = config_.spin_team ? Mode::kSpinTeam : Mode::kOneThread;
  Enter(Phase::kCalibrate);
}

ThreadModeChooser::Mode ThreadModeChooser::NextProbe(Mode m) const {
  const int modes = config_.spin_team ? 3 : 2;
  int next = static_cast<int>(m);
  do {
    next = (next + 1) % modes;
  } while (next == static_cast<int>(current_));
  return static_cast<Mode>(next);
}

void ThreadModeChooser::Enter(Phase phase) {
  phase_ = phase;
  switch (phase) {
    case Phase::kCalibrate:
      mode_ = current_;
      iterations_ = 1;
      return;
    case Phase::kHold: {
      // At least one block, at most what a clock that never advanced would give.
      const double iterations = before_ > 0 ? hold_ / before_ : 0;
      if (!(iterations >= 1)) return Enter(Phase::kBefore);
      mode_ = current_;
      iterations_ = static_cast<int64_t>(std::min(iterations, 1e12));
      return;
    }
    case Phase::kBefore:
    case Phase::kAfter:
      mode_ = current_;
      iterations_ = block_;
      return;
    case Phase::kWarmUp:
      mode_ = probe_;
      iterations_ = 1;
      return;
    case Phase::kProbe:
      mode_ = probe_;
      probe_seconds_ = 0;
      probe_done_ = 0;
      iterations_ = std::max<int64_t>(1, block_ / config_.probe_checks);
      return;
    case Phase::kWarmBack:
      mode_ = current_;
      iterations_ = 1;
      return;
  }
}

void ThreadModeChooser::Next(double seconds) {
  // Past the maximum block a calibration stops growing (a body of a few nanoseconds).
  constexpr int64_t kMaxBlock = int64_t{1} << 20;
  switch (phase_) {
    case Phase::kCalibrate:
      if (!warmed_up_ || (seconds < config_.block_seconds && iterations_ < kMaxBlock)) {
        warmed_up_ = true;
        iterations_ *= 2;
        return;
      }
      block_ = iterations_;
      before_ = seconds / static_cast<double>(block_);
      // The sweep: one probe of each other mode, each against the fastest so far.
      sweeping_ = true;
      best_ = current_;
      best_seconds_ = before_;
      return Enter(Phase::kWarmUp);
    case Phase::kHold:
      return Enter(Phase::kBefore);
    case Phase::kBefore:
      before_ = seconds / static_cast<double>(block_);
      return Enter(Phase::kWarmUp);
    case Phase::kWarmUp:
      return Enter(Phase::kProbe);
    case Phase::kProbe: {
      probe_seconds_ += seconds;
      probe_done_ += iterations_;
      if (probe_done_ >= block_) return sweeping_ ? EndSweepProbe() : Enter(Phase::kWarmBack);
      // Already slower than a whole reference block (with the margin): no need to finish.
      const double reference = sweeping_ ? best_seconds_ : before_;
      if (probe_seconds_ > reference * static_cast<double>(block_) * (1 + config_.switch_margin)) {
        probe_done_ = 0;  // marks the probe as lost
        return sweeping_ ? EndSweepProbe() : Enter(Phase::kWarmBack);
      }
      iterations_ = std::min(iterations_, block_ - probe_done_);
      return;
    }
    case Phase::kWarmBack:
      if (probe_done_ == 0) break;  // lost: stay, holding by the reference before it
      return Enter(Phase::kAfter);
    case Phase::kAfter: {
      after_ = seconds / static_cast<double>(block_);
      const double probe = probe_seconds_ / static_cast<double>(probe_done_);
      if (probe < 0.5 * (before_ + after_) * (1 - config_.switch_margin)) {
        if (!confirming_ && !provisional_) {
          // Won once: probe again at once, and switch only if it wins again (on a loaded
          // machine one probe can win by the luck of the scheduler).
          confirming_ = true;
          before_ = after_;
          return Enter(Phase::kWarmUp);
        }
        // A second win, or one against a mode the sweep chose on one win: switch.
        confirming_ = false;
        provisional_ = false;
        const Mode previous = current_;
        current_ = probe_;
        // Next the mode not measured lately: with three modes the third (a machine that got
        // loaded may now want plain one thread), with two the one just left.
        probe_ = NextProbe(previous);
        before_ = probe;  // the new current mode's time per iteration, for the hold
        hold_ = config_.min_hold_seconds;
        ++switches_;
        return Enter(Phase::kHold);
      }
      break;
    }
  }
  // The current mode stays: wait twice as long before probing again, then probe the next one.
  if (phase_ == Phase::kAfter) before_ = after_;
  confirming_ = false;
  provisional_ = false;
  probe_ = NextProbe(probe_);
  hold_ = std::clamp(hold_ * 2, config_.min_hold_seconds, config_.max_hold_seconds);
  Enter(Phase::kHold);
}

void ThreadModeChooser::EndSweepProbe() {
  const bool won = probe_done_ > 0 && probe_seconds_ / static_cast<double>(probe_done_) <
                                          best_seconds_ * (1 - config_.switch_margin);
  if (won) {
    best_ = probe_;
    best_seconds_ = probe_seconds_ / static_cast<double>(probe_done_);
  }
  const Mode next = NextProbe(probe_);
  if (next != (config_.spin_team ? Mode::kSpinTeam : Mode::kOneThread)) {
    probe_ = next;  // another mode to sweep
    return Enter(Phase::kWarmUp);
  }
  sweeping_ = false;
  if (best_ == current_) {
    // Nothing beat the calibrated mode: hold it as after a lost probe.
    probe_ = next;
    hold_ = config_.min_hold_seconds;
    return Enter(Phase::kHold);
  }
  // Start from the fastest at once; its confirmation is the steady-state probe of the mode left,
  // right away, which takes it back if it wins once.
  probe_ = current_;
  current_ = best_;
  provisional_ = true;
  ++switches_;
  Enter(Phase::kBefore);
}

int ThreadsOfThisThread() { return omp_get_max_threads(); }

void SetThreadsOfThisThread(int threads) { omp_set_num_threads(std::max(threads, 1)); }

}  // namespace loopserve::engine
