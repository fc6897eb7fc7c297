#include "engine/kernels/builtin.h"

namespace loopserve::engine {

void RegisterDnnlKernels(KernelRegistry& registry) {}

}  // namespace loopserve::engine
