#include "engine/kernels/builtin.h"
#include "engine/kernels/sequence/register_sequence.h"

namespace loopserve::engine {

void RegisterSequenceKernels(KernelRegistry& registry) {
  sequence::RegisterSequenceOpKernels(registry);
  sequence::RegisterConcatSplitKernels(registry);
  sequence::RegisterOptionalKernels(registry);
  sequence::RegisterSequenceMapKernel(registry);
}

}  // namespace loopserve::engine
