#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/tensor/tensor.h"

namespace loopserve::engine {

// An execution frame's buffers of dead values (Step::releases), free for the outputs of later
// steps, kept in capacity order: the best fit for a step's output (the smallest buffer at least as
// large as wanted) is a binary search over an array of (capacity, index) pairs, not a scan of the
// tensors (a linear scan per step cost ~5% of silero_vad_v4). Taking or adding a buffer moves
// entries of that small array only, never a Tensor; once the frame has seen its largest number of
// free buffers, nothing allocates. Among buffers of equal capacity the one kept longest is taken
// first. Not thread-safe (one frame, one thread).
class RecycledBuffers {
 public:
  bool empty() const { return order_.empty(); }
  size_t size() const { return order_.size(); }

  // Keeps `tensor`'s buffer (its capacity() must be > 0).
  void Put(Tensor&& tensor);

  // Moves the smallest kept buffer of capacity >= `wanted` into *out and returns true, or
  // returns false (and leaves *out alone) when every kept buffer is smaller.
  bool Take(size_t wanted, Tensor* out) {
    return TakeInto(wanted, [out](Tensor&& buffer) { *out = std::move(buffer); });
  }

  // Take's general form: hands the buffer to `sink(Tensor&&)` (one move, straight to where it
  // goes: the frame's slot).
  template <typename Sink>
  bool TakeInto(size_t wanted, Sink&& sink) {
    const auto at =
        std::lower_bound(order_.begin(), order_.end(), wanted,
                         [](const Entry& entry, size_t size) { return entry.capacity < size; });
    if (at == order_.end()) return false;
    sink(std::move(pool_[at->index]));
    free_.push_back(at->index);
    order_.erase(at);
    return true;
  }

 private:
  struct Entry {
    size_t capacity;
    uint32_t index;  // into pool_
  };
  std::vector<Tensor> pool_;    // kept buffers by index; an index in free_ holds none
  std::vector<uint32_t> free_;  // indices of pool_ to fill next
  std::vector<Entry> order_;    // the kept buffers, ascending capacity, oldest first among equals
};

}  // namespace loopserve::engine
