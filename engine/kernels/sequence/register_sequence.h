#pragma once

// The sequence and optional kernel families; RegisterSequenceKernels (register.cc) calls each.

#include "engine/kernels/registry.h"

namespace loopserve::engine::sequence {

// sequence.cc: SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceAt, SequenceErase,
// SequenceLength.
void RegisterSequenceOpKernels(KernelRegistry& registry);
// concat_split.cc: ConcatFromSequence, SplitToSequence.
void RegisterConcatSplitKernels(KernelRegistry& registry);
// optional.cc: Optional, OptionalHasElement, OptionalGetElement.
void RegisterOptionalKernels(KernelRegistry& registry);
// sequence_map.cc: SequenceMap.
void RegisterSequenceMapKernel(KernelRegistry& registry);

}  // namespace loopserve::engine::sequence
