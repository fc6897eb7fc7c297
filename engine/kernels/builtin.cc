#include "engine/kernels/builtin.h"

namespace loopserve::engine {

void RegisterBuiltinKernels(KernelRegistry& registry) {
  RegisterDnnlKernels(registry);
  RegisterNativeKernels(registry);
  RegisterControlFlowKernels(registry);
}

}  // namespace loopserve::engine
