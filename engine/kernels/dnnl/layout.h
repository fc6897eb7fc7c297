#pragma once

// oneDNN's blocked activation layout as the engine holds it (engine/transform/blocked_layout.h):
// a float32 [N, C, H, W] value in nChw<b>c is the explicit 5-D tensor [N, C / b, H, W, b], with C
// a multiple of b. The kernels that write one choose b (BlockedLayoutBlock); those that read one
// take b from its last dim.

#include <cstdint>
#include <dnnl.hpp>

#include "absl/status/statusor.h"
#include "engine/tensor/shape.h"

namespace loopserve::engine {

// The block of the layout oneDNN's fastest float32 convolutions use on this CPU: 16 (nChw16c)
// where oneDNN runs AVX-512, 8 (nChw8c) below.
int64_t BlockedLayoutBlock();

// [N, C / block, H, W, block] for the plain [N, C, H, W] (C a multiple of block).
Shape BlockedShape(const Shape& plain, int64_t block);

// The plain [N, C, H, W] a blocked 5-D tensor stands for; InvalidArgument for any other shape
// (the block must be 8 or 16).
absl::StatusOr<Shape> PlainOfBlocked(const Shape& blocked);

// oneDNN's descriptor of a float32 blocked tensor whose plain shape is `plain`.
dnnl::memory::desc BlockedDesc(const Shape& plain, int64_t block);

}  // namespace loopserve::engine
