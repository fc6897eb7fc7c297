#include "engine/kernels/builtin.h"
#include "engine/kernels/control/register_control.h"

namespace loopserve::engine {

void RegisterControlFlowKernels(KernelRegistry& registry) {
  RegisterLoopKernel(registry);
  RegisterIfKernel(registry);
}

}  // namespace loopserve::engine
