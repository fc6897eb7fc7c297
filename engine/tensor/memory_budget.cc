#include "engine/tensor/memory_budget.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace loopserve::engine {
namespace {

thread_local MemoryBudget* current_budget = nullptr;

}  // namespace

void MemoryBudget::Charge(size_t bytes) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const int64_t wanted = bytes > static_cast<uint64_t>(kMax) ? kMax : static_cast<int64_t>(bytes);
  if (limit_ > 0 && wanted > limit_ - used_) throw MemoryBudgetExceeded(wanted, used_, limit_);
  used_ += wanted;
  if (used_ > peak_) peak_ = used_;
}

MemoryBudgetExceeded::MemoryBudgetExceeded(int64_t requested, int64_t used, int64_t limit)
    : limit_(limit),
      message_(absl::StrCat("allocating ", requested, " bytes would exceed the memory budget of ",
                            limit, " bytes (", used, " bytes held)")) {}

MemoryBudget* CurrentMemoryBudget() { return current_budget; }

ScopedMemoryBudget::ScopedMemoryBudget(MemoryBudget* budget) : previous_(current_budget) {
  current_budget = budget;
}

ScopedMemoryBudget::~ScopedMemoryBudget() { current_budget = previous_; }

}  // namespace loopserve::engine
