#pragma once

// The native kernel families; RegisterNativeKernels (register.cc) calls each. One function per
// source file so the table of ops stays next to the kernels.

#include "engine/runtime/kernel_registry.h"

namespace loopserve::engine::native {

void RegisterCastKernels(KernelRegistry& registry);         // cast.cc: Identity, Cast
void RegisterShapeKernels(KernelRegistry& registry);        // shape_ops.cc
void RegisterConcatKernels(KernelRegistry& registry);       // concat.cc
void RegisterSliceKernels(KernelRegistry& registry);        // slice.cc
void RegisterGatherKernels(KernelRegistry& registry);       // gather.cc
void RegisterLayoutKernels(KernelRegistry& registry);       // layout.cc: Transpose, Expand, Tile
void RegisterCompareKernels(KernelRegistry& registry);      // compare.cc, incl. logical ops
void RegisterElementwiseKernels(KernelRegistry& registry);  // elementwise.cc
void RegisterReduceKernels(KernelRegistry& registry);       // reduce.cc, incl. ArgMax/ArgMin
void RegisterGeneratorKernels(KernelRegistry& registry);    // generator.cc: Range, ConstantOfShape

}  // namespace loopserve::engine::native
