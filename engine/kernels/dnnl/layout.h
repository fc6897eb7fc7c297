#pragma once

// The activation layout of a blocked chain (engine/transform/blocked_layout.h): the layout
// oneDNN's float32 convolutions choose on this CPU, found once per process. A plain float32
// [N, C, H, W] value held in it is an explicit tensor of its own shape:
//   nChw16c / nChw8c (jit kernels on AVX-512 / AVX2): [N, C / b, H, W, b], C a multiple of b
//     (ChainChannelMultiple);
//   nhwc (brgemm kernels, e.g. Sapphire Rapids' AMX builds of oneDNN 2.6): [N, H, W, C].
// The kernels that read or write chain values (Conv, the global pools, `_BlockedToPlain`) take the
// layout from here; elementwise ops need not know it.

#include <cstdint>
#include <dnnl.hpp>

#include "absl/status/statusor.h"
#include "engine/tensor/shape.h"

namespace loopserve::engine {

enum class ChainLayout : uint8_t {
  kPlain,  // oneDNN keeps plain NCHW: no chains (the pass does nothing)
  kNChw16c,
  kNChw8c,
  kNhwc,
};

// What oneDNN chose for a 64 -> 64 channel 3x3 convolution on 28x28 with every layout left to it
// (computed on the first call; thread-safe).
ChainLayout ActivationLayout();
const char* ChainLayoutName(ChainLayout layout);

// The shape of the chain tensor that holds the plain [N, C, H, W] `plain`.
Shape ChainShape(const Shape& plain);

// The plain [N, C, H, W] a chain tensor stands for; InvalidArgument for a shape that is not one.
absl::StatusOr<Shape> PlainOfChain(const Shape& held);

// oneDNN's descriptor of a float32 chain tensor whose plain shape is `plain`.
dnnl::memory::desc ChainDesc(const Shape& plain);

// The axis of a chain tensor along which channels concatenate (1: the blocks; nhwc: 3).
int64_t ChainConcatAxis();

// What a chain value's channel count must be a multiple of: the block (so none pads), 1 for nhwc.
int64_t ChainChannelMultiple();

}  // namespace loopserve::engine
