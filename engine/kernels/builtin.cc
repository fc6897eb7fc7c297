#include "engine/kernels/builtin.h"

namespace loopserve::engine {

void RegisterBuiltinKernels(KernelRegistry& registry) {
  RegisterDnnlKernels(registry);
  RegisterNativeKernels(registry);
  RegisterControlFlowKernels(registry);
  RegisterOpenVinoKernels(registry);
  RegisterSequenceKernels(registry);
}

}  // namespace loopserve::engine
