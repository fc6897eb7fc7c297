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
  native::RegisterMathKernels(registry);
  native::RegisterScatterKernels(registry);
  native::RegisterSplitKernels(registry);
  native::RegisterAxisKernels(registry);
  native::RegisterMatrixKernels(registry);
  native::RegisterIndexKernels(registry);
  native::RegisterPadKernels(registry);
  native::RegisterEinsumKernels(registry);
  native::RegisterNmsKernels(registry);
  native::RegisterLossKernels(registry);
  native::RegisterRearrangeKernels(registry);
  native::RegisterWindowKernels(registry);
  native::RegisterResizeKernels(registry);
  native::RegisterQuantizeKernels(registry);
  native::RegisterUniqueKernels(registry);
  native::RegisterIntMatMulKernels(registry);
  native::RegisterBf16MatMulKernels(registry);
  native::RegisterStringKernels(registry);
  native::RegisterGridSampleKernels(registry);
  native::RegisterSpectralKernels(registry);
  native::RegisterPoolingExtraKernels(registry);
}

}  // namespace loopserve::engine
