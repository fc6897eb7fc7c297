#pragma once

// How a Loop's iterations use the intra-op threads: with the OpenMP team oneDNN's larger
// primitives fork, on one thread, or (Config::spin_team) on one OpenMP thread with the larger
// products split by rows over the calling thread's SpinTeam (engine/runtime/spin_team.h). Which
// is faster depends on the body and on the machine's load at the time: the OpenMP team's idle
// threads sleep (engine::UsePassiveOpenMpWait), so a body of many small parallel regions pays a
// futex wake-up per region and runs faster on one thread (rnn_b64_h64 on a quiet 2-vCPU EPYC:
// 0.14x ONNX Runtime with the team), while a body of large products gains from the team, more so
// when other processes share the cores (mlp_b16_h512 with two busy neighbours: team 2-4x faster
// than one thread; bench/RESULTS.md). The SpinTeam's helpers spin only while the Loop runs, so on
// quiet cores a split product pays no wake-up; on loaded ones a helper descheduled in the middle
// of its part makes the caller wait for it, and plain one thread (or the OpenMP team) wins.
// ThreadModeChooser decides by timing the Loop's own iterations, block by block, and re-checks
// with backoff because the load changes.

#include <cstdint>

namespace loopserve::engine {

// The decision logic, separate from any clock or thread so that tests can inject timings.
//
// Protocol: the Loop runs `Next()` iterations in mode `mode()`, then calls Next(elapsed) with the
// seconds those iterations took (timed only while the Loop runs: a block may span executions),
// and so on. Internally the chooser cycles through:
//   calibrate: one untimed iteration (the first: its primitives are created), then blocks of
//              2, 4, 8, ... iterations in the current mode until one takes at least
//              block_seconds; its size becomes the block size, and it is the first reference;
//   sweep:     once, right after the calibration: a warm-up iteration and one timed block in
//              each other mode in turn (SpinTeam first), each cut short as soon as it is slower
//              than the fastest so far with the margin; a mode beats the fastest so far when
//              faster by more than `switch_margin`. If one beat the calibrated mode, the Loop
//              switches to the fastest at once (its block counts as the "before" of a probe
//              of the mode left, which follows right away: if that probe wins once, the Loop
//              goes back); then the steady-state rule below. So a Loop runs its best mode
//              after about four blocks instead of after four blocks plus a hold whenever the
//              first probe was not of the best mode or lost by chance (mlp_b16_h512 at 2
//              threads: ~900 iterations a process, and some processes never got there);
//   hold:      untimed iterations in the current mode for about hold_seconds (converted with
//              the current mode's last time per iteration);
//   before:    one timed block in the current mode (reference 1);
//   warm-up:   one untimed iteration in the probed mode (its first primitives, a team's wake-up);
//   probe:     one timed block in the probed mode, cut short as soon as it has taken longer than
//              the reference would have with the margin, so probing a much slower mode costs
//              about one block;
//   warm-back: one untimed iteration in the current mode;
//   after:     one timed block in the current mode (reference 2).
// The probe's time per iteration is compared with the mean of the two references around it, so
// a cost that changes linearly over the iterations (attention over a growing length) cancels.
// Against the sweep's single reference a cost that grows or shrinks over the iterations is not
// cancelled: a growing one keeps the calibrated mode (the steady state finds the faster one
// later), a shrinking one can switch on one win, and the confirming probe undoes that.
// In the steady state, when the probe is faster by more than `switch_margin` in two probes in a row
// (the second right after the first, its "before" reference being the first's "after") the modes
// swap and the hold restarts at min_hold_seconds; otherwise it doubles up to max_hold_seconds. With
// three modes the probed mode is each of the two others in turn (the SpinTeam first), so each is
// probed half as often as with two. A probe costs about one block in the slower mode (plus, if the
// environment makes idle threads spin, their spinning afterwards: libgomp's default 300000 rounds
// are ~7.5 ms of CPU on the EPYC of bench/RESULTS.md), so at the longest hold probing costs about
// 1% and a change of load is noticed within ~2 s.
//
// Not thread-safe; one chooser per Loop, driven by one execution at a time.
class ThreadModeChooser {
 public:
  // kTeam: the intra-op OpenMP team; kOneThread: one thread; kSpinTeam: one OpenMP thread with
  // the larger products split over the calling thread's SpinTeam (engine/runtime/spin_team.h),
  // a candidate only with Config::spin_team.
  enum class Mode : uint8_t { kTeam, kOneThread, kSpinTeam };

  struct Config {
    // Long enough to span several scheduler time slices: with other processes on the cores a
    // 1 ms block of one thread often runs unpreempted while a team's block waits for a
    // descheduled thread, so short blocks favoured one thread (mlp_b16_h512 with two busy
    // neighbours: chosen at 1 ms blocks, 4x slower than the team).
    double block_seconds = 0.015;
    double min_hold_seconds = 0.1;
    double max_hold_seconds = 2.0;
    double switch_margin = 0.05;
    // A probe block is checked this many times (in equal parts) so a slow one stops early.
    int probe_checks = 16;
    // Three candidate modes instead of two: the probes take the modes other than the current one
    // in turn (a confirming probe repeats the mode that won).
    bool spin_team = false;
  };

  ThreadModeChooser() : ThreadModeChooser(Config()) {}
  explicit ThreadModeChooser(const Config& config);

  // The mode the next iterations run in.
  Mode mode() const { return mode_; }
  // How many iterations to run before the next call of Next(seconds).
  int64_t iterations() const { return iterations_; }
  // Reports that the last iterations() iterations took `seconds`; picks the next mode and count.
  void Next(double seconds);

  // For tests and logs.
  Mode current() const { return current_; }
  int64_t block_iterations() const { return block_; }
  double hold_seconds() const { return hold_; }
  int64_t switches() const { return switches_; }

 private:
  enum class Phase : uint8_t { kCalibrate, kHold, kBefore, kWarmUp, kProbe, kWarmBack, kAfter };
  // The next candidate after `m` other than current_.
  Mode NextProbe(Mode m) const;
  void Enter(Phase phase);
  // Ends a probe of the initial sweep: the next mode's probe, or the sweep's decision.
  void EndSweepProbe();

  Config config_;
  Mode current_ = Mode::kTeam;     // the chosen mode
  Mode mode_ = Mode::kTeam;        // the mode of the iterations being run
  Mode probe_ = Mode::kOneThread;  // the mode the next probe runs
  Phase phase_ = Phase::kCalibrate;
  int64_t iterations_ = 1;
  int64_t block_ = 0;         // iterations per timed block, once calibrated
  double hold_ = 0;           // seconds
  bool warmed_up_ = false;    // the calibration's untimed first iteration has run
  bool confirming_ = false;   // the last probe won; the next decides
  bool sweeping_ = false;     // in the initial sweep
  bool provisional_ = false;  // the sweep switched on one win; the next probe decides
  Mode best_ = Mode::kTeam;   // the sweep's fastest so far and its time per iteration
  double best_seconds_ = 0;
  double before_ = 0;  // seconds per iteration of the references
  double after_ = 0;
  double probe_seconds_ = 0;  // of the probe so far
  int64_t probe_done_ = 0;    // iterations of the probe so far
  int64_t switches_ = 0;
};

// The calling thread's OpenMP thread count (its intra-op threads), and setting it.
int ThreadsOfThisThread();
void SetThreadsOfThisThread(int threads);

// The least work (multiply-adds; elements for element-wise ops) for which an op is split over the
// OpenMP intra-op team. Below it the op runs on one thread: the team sleeps between parallel
// regions (OMP_WAIT_POLICY=PASSIVE, UsePassiveOpenMpWait), so each fork wakes its threads through
// the kernel, tens of microseconds on a busy machine, which an op of 2M multiply-adds (~50 us on
// one AVX-512 core) barely wins back on two threads. At 1 << 18 (and with a Conv's work counted
// without its strides) Silero VAD ran slower on 2 threads than on 1 (issue 27). Splits over a
// Loop's spinning SpinTeam cost far less and have their own threshold
// (DnnlKernel::kParallelWork).
inline constexpr int64_t kOpenMpParallelWork = int64_t{1} << 21;

// Runs the enclosing scope on one OpenMP thread of the calling thread when `one_thread` (and it
// has more), restoring its count afterwards: a oneDNN primitive created in the scope plans for
// one thread, and one executed in it (or a dnnl_sgemm call) forks no team. A per-thread setting,
// one store each way.
class ScopedOneOpenMpThread {
 public:
  explicit ScopedOneOpenMpThread(bool one_thread) : saved_(one_thread ? ThreadsOfThisThread() : 1) {
    if (saved_ > 1) SetThreadsOfThisThread(1);
  }
  ~ScopedOneOpenMpThread() {
    if (saved_ > 1) SetThreadsOfThisThread(saved_);
  }
  ScopedOneOpenMpThread(const ScopedOneOpenMpThread&) = delete;
  ScopedOneOpenMpThread& operator=(const ScopedOneOpenMpThread&) = delete;

 private:
  const int saved_;
};

}  // namespace loopserve::engine
