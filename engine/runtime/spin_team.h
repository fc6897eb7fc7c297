#pragma once

// A small team of threads of our own for splitting a Loop body's larger kernels (a product's rows)
// while the Loop runs on one OpenMP thread (engine/runtime/thread_mode.h).
//
// Why not the OpenMP team: the process runs libgomp with OMP_WAIT_POLICY=PASSIVE (a spinning
// libgomp team loses 3-10x whenever the cores are shared; engine::UsePassiveOpenMpWait), so every
// OpenMP parallel region in a Loop body pays a futex wake-up, and a fork/join waits for every
// thread of the team even when one of them is descheduled. This team instead
//   - spins only while engaged (around a Loop's iterations that use it), for a bounded time after
//     its last work (kSpinNanos), then sleeps on a futex until the next dispatch wakes it;
//   - shares work: the caller and the helpers claim chunks from one atomic counter, and the caller
//     waits only for chunks a helper has already claimed. A helper that is asleep or descheduled
//     costs the caller nothing but the wake-up call (only made when the helper sleeps): the caller
//     runs the chunks itself, so on loaded cores the team degrades to one thread, never worse.
//   - allocates nothing, takes no lock and looks nothing up per dispatch.
//
// Ownership: one team per calling thread (OfThisThread: thread_local, created on first use with
// the thread's intra-op thread count, destroyed with its helpers when the thread exits). Its
// helpers run with one OpenMP thread each, so a oneDNN primitive they execute forks no team.
//
// Thread-safety: Engage/Disengage/ParallelFor only on the owning thread. A chunk that calls
// ParallelFor again (on the owner) runs its sub-chunks itself; helpers have no team of their own
// (Engaged() is null there), so nothing nests or deadlocks.

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace loopserve::engine {

class SpinTeam {
 public:
  // How long an engaged helper spins after its last chunk before it sleeps. A dispatch to a
  // spinning helper costs well under a microsecond; one to a sleeping one a futex wake-up (a few
  // microseconds until it runs, meanwhile the caller works on).
  static constexpr int64_t kSpinNanos = 100'000;
  // At most this many chunks per dispatch (the counter's field width).
  static constexpr int kMaxChunks = 4096;

  // The calling thread's team of `threads` threads (itself and threads - 1 helpers), created on
  // first use and replaced when `threads` changes; null for threads <= 1.
  static SpinTeam* OfThisThread(int threads);
  // The team engaged on the calling thread, or null.
  static SpinTeam* Engaged();

  explicit SpinTeam(int helpers);
  ~SpinTeam();
  SpinTeam(const SpinTeam&) = delete;
  SpinTeam& operator=(const SpinTeam&) = delete;

  // Threads that may run chunks: the caller and the helpers.
  int size() const { return static_cast<int>(helpers_.size()) + 1; }

  // Marks the team engaged on the calling thread (Engaged() returns it) and lets its helpers spin
  // between dispatches; Disengage undoes both (the helpers go to sleep after their current spin).
  // Engaging an engaged team is a no-op.
  void Engage();
  void Disengage();
  bool engaged() const { return engaged_.load(std::memory_order_relaxed); }

  // Runs fn(0), ..., fn(chunks - 1), each exactly once, on the caller and any helper that comes
  // by in time; returns when all have run. fn must not throw.
  template <typename Fn>
  void ParallelFor(int chunks, const Fn& fn) {
    Run(
        chunks, [](const void* f, int chunk) { (*static_cast<const Fn*>(f))(chunk); }, &fn);
  }

  // Chunks each helper has run so far (for tests).
  int64_t helper_chunks() const { return helper_chunks_.load(std::memory_order_relaxed); }

  // For tests: while held, helpers do not claim chunks (as if descheduled); ParallelFor still
  // finishes on the caller.
  void HoldHelpersForTesting(bool hold);

 private:
  using Call = void (*)(const void*, int);
  void Run(int chunks, Call call, const void* fn);
  void HelperLoop();
  void Wake();

  // word_: generation (32 bits) | chunks (16 bits) | next unclaimed chunk (16 bits). A claim is a
  // compare-exchange that checks the generation, so a helper that read an older job's call
  // cannot run it against a newer job.
  std::atomic<uint64_t> word_{0};
  std::atomic<Call> call_{nullptr};
  std::atomic<const void*> fn_{nullptr};
  std::atomic<int> done_{0};        // chunks of the current generation the helpers have finished
  std::atomic<uint32_t> epoch_{0};  // futex word: bumped to wake sleeping helpers
  std::atomic<int> sleeping_{0};    // helpers asleep (or about to be) on epoch_
  std::atomic<bool> engaged_{false};
  std::atomic<bool> stop_{false};
  std::atomic<bool> hold_{false};
  std::atomic<int64_t> helper_chunks_{0};
  uint32_t generation_ = 0;  // owner only
  bool running_ = false;     // owner only: inside Run
  std::vector<std::thread> helpers_;
};

// Engages `team` (if non-null and not engaged yet) for the enclosing scope.
class ScopedSpinTeam {
 public:
  explicit ScopedSpinTeam(SpinTeam* team)
      : team_(team != nullptr && !team->engaged() ? team : nullptr) {
    if (team_ != nullptr) team_->Engage();
  }
  ~ScopedSpinTeam() {
    if (team_ != nullptr) team_->Disengage();
  }
  ScopedSpinTeam(const ScopedSpinTeam&) = delete;
  ScopedSpinTeam& operator=(const ScopedSpinTeam&) = delete;

 private:
  SpinTeam* const team_;
};

}  // namespace loopserve::engine
