#include "engine/runtime/recycled_buffers.h"

#include <algorithm>
#include <utility>

namespace loopserve::engine {

void RecycledBuffers::Put(Tensor&& tensor) {
  const size_t capacity = tensor.capacity();
  uint32_t index;
  if (free_.empty()) {
    index = static_cast<uint32_t>(pool_.size());
    pool_.push_back(std::move(tensor));
  } else {
    index = free_.back();
    free_.pop_back();
    pool_[index] = std::move(tensor);
  }
  // After every entry of the same capacity: the oldest of equals is taken first.
  const auto at =
      std::upper_bound(order_.begin(), order_.end(), capacity,
                       [](size_t wanted, const Entry& entry) { return wanted < entry.capacity; });
  order_.insert(at, Entry{capacity, index});
}

}  // namespace loopserve::engine
