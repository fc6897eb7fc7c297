#pragma once

// Helpers shared by the sequence and optional kernels. Sequences are Values holding a
// std::vector<Tensor>; an empty optional is a kNone Value and a full optional is just the value it
// holds (engine/tensor/value.h).

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/kernels/registry.h"
#include "engine/runtime/kernel.h"
#include "engine/tensor/value.h"

namespace loopserve::engine::sequence {

// A kernel factory calling `K::Create(const KernelInit&)`.
template <typename K>
KernelFactory FactoryOf() {
  return [](const KernelInit& init) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    return K::Create(init);
  };
}

// Checks the node has between `min_inputs` and `max_inputs` inputs (the first `min_inputs`
// present) and exactly `num_outputs` outputs. Load-time check.
absl::Status CheckArity(const KernelInit& init, int min_inputs, int max_inputs,
                        int num_outputs = 1);

// The sequence held by input `i`; InvalidArgument naming `what` when it is a tensor or empty.
absl::StatusOr<const std::vector<Tensor>*> InputSequence(const KernelContext& ctx, int i,
                                                         absl::string_view what);

// The tensor held by input `i`; InvalidArgument naming `what` when it is a sequence or empty.
absl::StatusOr<const Tensor*> InputTensor(const KernelContext& ctx, int i, absl::string_view what);

// Reads a position (an int32/int64 tensor with one element) and normalises it against a sequence
// of `size` elements: valid positions are [-size, size) or, with `allow_end`, [-size, size].
absl::StatusOr<int64_t> ReadPosition(const Tensor& t, int64_t size, bool allow_end);

}  // namespace loopserve::engine::sequence
