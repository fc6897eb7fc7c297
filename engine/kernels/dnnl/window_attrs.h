#pragma once

// Parsing of the window attributes shared by Conv and the pooling ops, and their translation into
// oneDNN's dims (oneDNN counts dilation from 0, ONNX from 1).

#include <dnnl.hpp>

#include "absl/status/statusor.h"
#include "engine/ir/graph.h"
#include "engine/kernels/reference/reference.h"

namespace loopserve::engine {

// Reads auto_pad, kernel_shape, strides, dilations, pads and ceil_mode from `node` and checks them
// (reference::ValidateWindowAttrs). `require_kernel_shape` for the pools.
absl::StatusOr<reference::WindowAttrs> ParseWindowAttrs(const Node& node,
                                                        bool require_kernel_shape);

// The window's dims as oneDNN takes them.
struct DnnlWindow {
  dnnl::memory::dims strides, kernel, dilations, padding_l, padding_r;
};
DnnlWindow ToDnnlWindow(const reference::Window& window);

}  // namespace loopserve::engine
