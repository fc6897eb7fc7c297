#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <string>

namespace loopserve::engine {

// A cap on the tensor bytes that one model run (or one model load) holds at once.
//
// Every owned Tensor buffer is charged, when it is allocated, to the budget current on the
// allocating thread (ScopedMemoryBudget), and credited back when it is freed there; so the
// budget sees carried values, intermediates, scan outputs and constants alike, in the one place
// where tensors get memory. An allocation that would take the charged bytes past the limit
// throws MemoryBudgetExceeded before any memory is requested, and the executor turns that into
// ResourceExhausted (LimitReason::kMemory). Buffers allocated on threads without a budget (oneDNN
// worker threads, the caller after the run) are neither charged nor credited; heap memory that
// is not a tensor buffer (kernel scratch vectors, oneDNN scratchpads) is not counted.
//
// Not thread-safe: a budget belongs to the thread running one request or one load.
class MemoryBudget {
 public:
  // `limit_bytes` <= 0: no limit (the budget still counts).
  explicit MemoryBudget(int64_t limit_bytes) : limit_(limit_bytes) {}
  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  int64_t limit() const { return limit_; }
  int64_t used() const { return used_; }  // bytes charged now
  int64_t peak() const { return peak_; }  // most bytes charged at once

  // Charges `bytes`; throws MemoryBudgetExceeded (charging nothing) when that would exceed the
  // limit.
  void Charge(size_t bytes);
  // Gives back `bytes` charged earlier (never below zero).
  void Credit(size_t bytes) {
    used_ = bytes >= static_cast<uint64_t>(used_) ? 0 : used_ - static_cast<int64_t>(bytes);
  }

 private:
  const int64_t limit_;
  int64_t used_ = 0;
  int64_t peak_ = 0;
};

// Thrown by MemoryBudget::Charge. A std::bad_alloc, so code that treats allocation failure
// generically still does the right thing; the executor catches it first to report the limit.
class MemoryBudgetExceeded : public std::bad_alloc {
 public:
  MemoryBudgetExceeded(int64_t requested, int64_t used, int64_t limit);
  const char* what() const noexcept override { return message_.c_str(); }
  int64_t limit() const { return limit_; }

 private:
  int64_t limit_;
  std::string message_;
};

// The calling thread's current budget, or null.
MemoryBudget* CurrentMemoryBudget();

// Makes `budget` the calling thread's current budget for the lifetime of this object and restores
// the previous one afterwards (scopes nest). `budget` may be null (no budget inside the scope).
class ScopedMemoryBudget {
 public:
  explicit ScopedMemoryBudget(MemoryBudget* budget);
  ~ScopedMemoryBudget();
  ScopedMemoryBudget(const ScopedMemoryBudget&) = delete;
  ScopedMemoryBudget& operator=(const ScopedMemoryBudget&) = delete;

 private:
  MemoryBudget* previous_;
};

}  // namespace loopserve::engine
