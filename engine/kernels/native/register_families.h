#pragma once

// The native kernel families; RegisterNativeKernels (register.cc) calls each. One function per
// source file so the table of ops stays next to the kernels.

#include "engine/kernels/registry.h"

namespace loopserve::engine::native {

void RegisterCastKernels(KernelRegistry& registry);    // cast.cc: Identity, Cast, CastLike, Dropout
void RegisterShapeKernels(KernelRegistry& registry);   // shape_ops.cc
void RegisterConcatKernels(KernelRegistry& registry);  // concat.cc
void RegisterSliceKernels(KernelRegistry& registry);   // slice.cc
void RegisterGatherKernels(
    KernelRegistry& registry);  // gather.cc: Gather, GatherElements, GatherND
void RegisterLayoutKernels(KernelRegistry& registry);        // layout.cc: Transpose, Expand, Tile
void RegisterCompareKernels(KernelRegistry& registry);       // compare.cc, incl. logical ops
void RegisterElementwiseKernels(KernelRegistry& registry);   // elementwise.cc
void RegisterReduceKernels(KernelRegistry& registry);        // reduce.cc, incl. ArgMax/ArgMin
void RegisterGeneratorKernels(KernelRegistry& registry);     // generator.cc: Range, ConstantOfShape
void RegisterMathKernels(KernelRegistry& registry);          // math.cc: trig, Erf, Clip, Sum, ...
void RegisterScatterKernels(KernelRegistry& registry);       // scatter.cc
void RegisterSplitKernels(KernelRegistry& registry);         // split.cc
void RegisterAxisKernels(KernelRegistry& registry);          // axis_ops.cc: CumSum, Hardmax, TopK
void RegisterMatrixKernels(KernelRegistry& registry);        // matrix.cc: Trilu, Det
void RegisterIndexKernels(KernelRegistry& registry);         // indices.cc: OneHot, NonZero
void RegisterPadKernels(KernelRegistry& registry);           // pad.cc
void RegisterEinsumKernels(KernelRegistry& registry);        // einsum.cc
void RegisterNmsKernels(KernelRegistry& registry);           // nms.cc: NonMaxSuppression
void RegisterLossKernels(KernelRegistry& registry);          // loss.cc: NLL, SoftmaxCrossEntropy
void RegisterRearrangeKernels(KernelRegistry& registry);     // rearrange.cc: DepthToSpace, ...
void RegisterWindowKernels(KernelRegistry& registry);        // window.cc: EyeLike, *Window
void RegisterResizeKernels(KernelRegistry& registry);        // resize.cc: Resize, Upsample
void RegisterQuantizeKernels(KernelRegistry& registry);      // quantize.cc: (De)QuantizeLinear
void RegisterUniqueKernels(KernelRegistry& registry);        // unique.cc
void RegisterBf16MatMulKernels(KernelRegistry& registry);    // bf16_matmul.cc: _MatMulBf16
void RegisterIntMatMulKernels(KernelRegistry& registry);     // int_matmul.cc: MatMulInteger, ...
void RegisterStringKernels(KernelRegistry& registry);        // strings.cc: StringNormalizer, TfIdf
void RegisterGridSampleKernels(KernelRegistry& registry);    // grid_sample.cc
void RegisterSpectralKernels(KernelRegistry& registry);      // spectral.cc: DFT, STFT, MelWeight
void RegisterPoolingExtraKernels(KernelRegistry& registry);  // pooling_extra.cc: MVN, MaxUnpool..

}  // namespace loopserve::engine::native
