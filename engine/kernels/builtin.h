#pragma once

#include "engine/kernels/registry.h"

namespace loopserve::engine {

// Each kernel family registers its ops; RegisterBuiltinKernels (kernels/registry.h) calls them
// all. An op type is registered by one family per opset range (overlaps are an error).
// kernels/reference holds the naive reference implementations: oneDNN kernels fall back to them for
// element types oneDNN lacks (int64, f64, ...), and the differential tests compare against them.
void RegisterDnnlKernels(KernelRegistry& registry);         // kernels/dnnl
void RegisterNativeKernels(KernelRegistry& registry);       // kernels/native
void RegisterControlFlowKernels(KernelRegistry& registry);  // kernels/control: Loop, If
void RegisterOpenVinoKernels(KernelRegistry& registry);     // kernels/openvino: "ov:" ops
void RegisterSequenceKernels(KernelRegistry& registry);  // kernels/sequence: sequences, optionals

}  // namespace loopserve::engine
