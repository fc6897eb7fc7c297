#include "engine/kernels/builtin.h"
#include "engine/kernels/native/register_families.h"

namespace loopserve::engine {

void RegisterNativeKernels(KernelRegistry& registry) {
  native::RegisterCastKernels(registry);
  native::RegisterShapeKernels(registry);
  native::RegisterConcatKernels(registry);
  native::RegisterSliceKernels(registry);
  native::RegisterGatherKernels(registry);
  native::RegisterLayoutKernels(registry);
  native::RegisterCompareKernels(registry);
  native::RegisterElementwiseKernels(registry);
  native::RegisterReduceKernels(registry);
  native::RegisterGeneratorKernels(registry);
}

}  // namespace loopserve::engine
