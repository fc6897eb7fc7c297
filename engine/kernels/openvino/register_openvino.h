#pragma once

// The OpenVINO-only kernels: ops whose semantics no ONNX op shares. The OpenVINO importer emits
// them with op types prefixed "ov:"; everything else it lowers to ONNX-named ops.

#include "engine/kernels/registry.h"

namespace loopserve::engine::openvino {

// strided_slice.cc: "ov:StridedSlice" (StridedSlice-1: begin/end/stride with the five masks).
void RegisterStridedSliceKernel(KernelRegistry& registry);
// split.cc: "ov:Split" (Split-1: axis input, num_splits equal parts; with a third input the part
// lengths as in VariadicSplit-1, one of which may be -1).
void RegisterSplitKernel(KernelRegistry& registry);
// gather.cc: "ov:Gather" (Gather-7/8: axis input, batch_dims, negative indices count from the end).
void RegisterGatherKernel(KernelRegistry& registry);

}  // namespace loopserve::engine::openvino
