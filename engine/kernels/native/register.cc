#include "engine/kernels/builtin.h"

namespace loopserve::engine {

void RegisterNativeKernels(KernelRegistry& registry) {}

}  // namespace loopserve::engine
