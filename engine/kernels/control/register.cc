#include "engine/kernels/builtin.h"

namespace loopserve::engine {

void RegisterControlFlowKernels(KernelRegistry& registry) {}

}  // namespace loopserve::engine
