#include "engine/runtime/spin_team.h"

#include <emmintrin.h>
#include <linux/futex.h>
#include <omp.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <memory>

namespace loopserve::engine {
namespace {

constexpr uint64_t Pack(uint32_t generation, int chunks, int next) {
  return (uint64_t{generation} << 32) | (static_cast<uint64_t>(chunks) << 16) |
         static_cast<uint64_t>(next);
}
constexpr int Chunks(uint64_t word) { return static_cast<int>((word >> 16) & 0xffff); }
constexpr int Next(uint64_t word) { return static_cast<int>(word & 0xffff); }

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
          nullptr, 0);
}

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

thread_local SpinTeam* t_engaged = nullptr;

}  // namespace

SpinTeam* SpinTeam::OfThisThread(int threads) {
  thread_local std::unique_ptr<SpinTeam> team;
  if (threads <= 1) return nullptr;
  if (team == nullptr || team->size() != threads) {
    if (team != nullptr && team->engaged()) return team.get();  // replaced once disengaged
    team = std::make_unique<SpinTeam>(threads - 1);
  }
  return team.get();
}

SpinTeam* SpinTeam::Engaged() { return t_engaged; }

SpinTeam::SpinTeam(int helpers) {
  helpers_.reserve(static_cast<size_t>(helpers > 0 ? helpers : 0));
  for (int i = 0; i < helpers; ++i) helpers_.emplace_back([this] { HelperLoop(); });
}

SpinTeam::~SpinTeam() {
  if (t_engaged == this) t_engaged = nullptr;
  stop_.store(true, std::memory_order_seq_cst);
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  FutexWakeAll(&epoch_);
  for (std::thread& helper : helpers_) helper.join();
}

void SpinTeam::Engage() {
  t_engaged = this;
  engaged_.store(true, std::memory_order_seq_cst);
  // Sleeping helpers start spinning now, ahead of the first dispatch.
  Wake();
}

void SpinTeam::Disengage() {
  engaged_.store(false, std::memory_order_relaxed);
  if (t_engaged == this) t_engaged = nullptr;
}

void SpinTeam::HoldHelpersForTesting(bool hold) { hold_.store(hold, std::memory_order_seq_cst); }

void SpinTeam::Wake() {
  if (sleeping_.load(std::memory_order_seq_cst) == 0) return;
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  FutexWakeAll(&epoch_);
}

void SpinTeam::Run(int chunks, Call call, const void* fn) {
  if (chunks <= 0) return;
  if (chunks == 1 || running_ || helpers_.empty() || chunks > kMaxChunks) {
    for (int c = 0; c < chunks; ++c) call(fn, c);
    return;
  }
  running_ = true;
  // The previous generation is over (every chunk claimed and finished), so no helper touches
  // these until it has read the new word.
  call_.store(call, std::memory_order_relaxed);
  fn_.store(fn, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  ++generation_;
  word_.store(Pack(generation_, chunks, 0), std::memory_order_seq_cst);
  Wake();
  int mine = 0;
  uint64_t word = word_.load(std::memory_order_relaxed);
  while (Next(word) < chunks) {
    if (word_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel,
                                    std::memory_order_relaxed)) {
      call(fn, Next(word));
      ++mine;
      word = word_.load(std::memory_order_relaxed);
    }
  }
  // Every chunk is claimed; wait for those a helper claimed and is still running.
  int spins = 0;
  while (done_.load(std::memory_order_acquire) + mine < chunks) {
    if (++spins < 4096) {
      _mm_pause();
    } else {
      sched_yield();  // the helper was descheduled mid-chunk: let it run
    }
  }
  running_ = false;
}

void SpinTeam::HelperLoop() {
  // oneDNN primitives run here must not fork an OpenMP team of their own.
  omp_set_num_threads(1);
  int64_t idle_since = NowNanos();
  int polls = 0;
  for (;;) {
    if (stop_.load(std::memory_order_relaxed)) return;
    uint64_t word = word_.load(std::memory_order_acquire);
    if (Next(word) < Chunks(word) && !hold_.load(std::memory_order_relaxed)) {
      const Call call = call_.load(std::memory_order_relaxed);
      const void* fn = fn_.load(std::memory_order_relaxed);
      // Succeeds only while this generation still has the chunk unclaimed, so the caller is
      // still inside Run and `call` / `fn` (written before the word) are this generation's.
      if (word_.compare_exchange_strong(word, word + 1, std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
        call(fn, Next(word));
        helper_chunks_.fetch_add(1, std::memory_order_relaxed);
        done_.fetch_add(1, std::memory_order_release);
        idle_since = NowNanos();
        polls = 0;
      }
      continue;
    }
    if (engaged_.load(std::memory_order_relaxed)) {
      _mm_pause();
      // The clock is read every 64 polls (a pause is tens of cycles).
      if ((++polls & 63) != 0 || NowNanos() - idle_since < kSpinNanos) continue;
    }
    // Sleep until a dispatch, an Engage or the destructor bumps the epoch. Announced before the
    // last look at the word, which the dispatcher stores before it looks at sleeping_ (both
    // sequentially consistent): either this helper sees the work or the dispatcher sees it
    // sleeping and wakes it.
    const uint32_t epoch = epoch_.load(std::memory_order_seq_cst);
    sleeping_.fetch_add(1, std::memory_order_seq_cst);
    word = word_.load(std::memory_order_seq_cst);
    const bool work = Next(word) < Chunks(word) && !hold_.load(std::memory_order_seq_cst);
    if (!work && !stop_.load(std::memory_order_seq_cst)) FutexWait(&epoch_, epoch);
    sleeping_.fetch_sub(1, std::memory_order_seq_cst);
    idle_since = NowNanos();
    polls = 0;
  }
}

}  // namespace loopserve::engine
