#include "engine/kernels/builtin.h"
#include "engine/kernels/openvino/register_openvino.h"

namespace loopserve::engine {

void RegisterOpenVinoKernels(KernelRegistry& registry) {
  openvino::RegisterStridedSliceKernel(registry);
  openvino::RegisterSplitKernel(registry);
  openvino::RegisterGatherKernel(registry);
}

}  // namespace loopserve::engine
