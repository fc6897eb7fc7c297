#pragma once

#include <cstdint>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"
#include "engine/tensor/shape.h"

namespace loopserve::engine::reference {

// The iteration space of a numpy-style broadcast of up to kMaxBroadcastInputs row-major inputs
// onto an output shape, collapsed to as few dims as possible: output dims of size 1 are dropped
// and adjacent dims are merged where every input either spans both or is broadcast along both. A
// [2,3,4] + [4] add becomes dims {6,4} with input strides {4,1} and {0,1}.
//
// Shared by the reference kernels and the oneDNN kernels (which hand the collapsed dims to
// oneDNN, so equivalent shapes reuse one primitive). A value type; thread-compatible.
inline constexpr int kMaxBroadcastInputs = 8;

struct BroadcastLayout {
  using Dims = absl::InlinedVector<int64_t, 6>;
  // Collapsed output dims, innermost last; never empty ({1} for a one-element output).
  Dims dims;
  // Per input, whether it is broadcast along each collapsed dim, and its element stride there
  // (0 when broadcast).
  absl::InlinedVector<bool, 6> broadcast[kMaxBroadcastInputs];
  Dims strides[kMaxBroadcastInputs];
  int num_inputs = 0;

  int rank() const { return static_cast<int>(dims.size()); }
  // True when input `i` is broadcast along some dim (so it is smaller than the output).
  bool IsBroadcast(int i) const;
  // The collapsed dims of input `i`: dims with 1 where it is broadcast.
  Dims InputDims(int i) const;
};

// Builds the layout of `inputs` (at most kMaxBroadcastInputs) broadcast onto `out`. Every input
// must be broadcastable onto `out` (checked by BroadcastShapes beforehand).
BroadcastLayout MakeBroadcastLayout(const Shape& out, absl::Span<const Shape* const> inputs);

// Calls `fn(out_offset, in_offsets)` for every block of the innermost `inner_rank` dims of
// `layout` (1 <= inner_rank <= rank), where the offsets are element offsets of the block's first
// element and `in_offsets` has one entry per input; within the block input i advances by its own
// layout.strides[i]. Walks the outer dims with an odometer (no divisions). The output must have at
// least one element.
template <typename Fn>
void ForEachInner(const BroadcastLayout& layout, int inner_rank, Fn&& fn) {
  const int outer_rank = layout.rank() - inner_rank;
  int64_t block = 1;
  for (int d = outer_rank; d < layout.rank(); ++d) block *= layout.dims[d];
  absl::InlinedVector<int64_t, 6> index(outer_rank, 0);
  int64_t in_offsets[kMaxBroadcastInputs] = {};
  int64_t out_offset = 0;
  while (true) {
    fn(out_offset, static_cast<const int64_t*>(in_offsets));
    out_offset += block;
    int d = outer_rank - 1;
    for (; d >= 0; --d) {
      for (int i = 0; i < layout.num_inputs; ++i) in_offsets[i] += layout.strides[i][d];
      if (++index[d] < layout.dims[d]) break;
      for (int i = 0; i < layout.num_inputs; ++i) {
        in_offsets[i] -= layout.strides[i][d] * layout.dims[d];
      }
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

// ForEachInner over rows: a row has layout.dims.back() elements; within it input i advances by
// layout.strides[i].back().
template <typename Fn>
void ForEachRow(const BroadcastLayout& layout, Fn&& fn) {
  ForEachInner(layout, 1, std::forward<Fn>(fn));
}

// Copies `in` (row-major, of a shape broadcastable onto `out`) into `out_data` broadcast to `out`,
// element by element of `element_size` bytes (1, 2, 4 or 8). Any element type.
void BroadcastCopy(const void* in, const Shape& in_shape, void* out_data, const Shape& out,
                   size_t element_size);

}  // namespace loopserve::engine::reference
