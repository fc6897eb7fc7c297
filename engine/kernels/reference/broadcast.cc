#include "engine/kernels/reference/broadcast.h"

#include <cstring>

namespace loopserve::engine::reference {

bool BroadcastLayout::IsBroadcast(int i) const {
  for (bool b : broadcast[i]) {
    if (b) return true;
  }
  return false;
}

BroadcastLayout::Dims BroadcastLayout::InputDims(int i) const {
  Dims dims_i = dims;
  for (int d = 0; d < rank(); ++d) {
    if (broadcast[i][d]) dims_i[d] = 1;
  }
  return dims_i;
}

BroadcastLayout MakeBroadcastLayout(const Shape& out, absl::Span<const Shape* const> inputs) {
  BroadcastLayout layout;
  layout.num_inputs = static_cast<int>(inputs.size());
  bool flags[kMaxBroadcastInputs] = {};
  for (int d = 0; d < out.rank(); ++d) {
    if (out[d] == 1) continue;  // contributes nothing to the iteration
    for (int i = 0; i < layout.num_inputs; ++i) {
      const Shape& in = *inputs[i];
      const int id = in.rank() - out.rank() + d;
      flags[i] = id < 0 || in[id] == 1;
    }
    bool same_as_previous = !layout.dims.empty();
    for (int i = 0; same_as_previous && i < layout.num_inputs; ++i) {
      same_as_previous = layout.broadcast[i].back() == flags[i];
    }
    if (same_as_previous) {
      layout.dims.back() *= out[d];
    } else {
      layout.dims.push_back(out[d]);
      for (int i = 0; i < layout.num_inputs; ++i) layout.broadcast[i].push_back(flags[i]);
    }
  }
  if (layout.dims.empty()) {
    layout.dims.push_back(1);
    for (int i = 0; i < layout.num_inputs; ++i) layout.broadcast[i].push_back(false);
  }
  // An input spans exactly the collapsed dims it is not broadcast along, contiguously.
  for (int i = 0; i < layout.num_inputs; ++i) {
    layout.strides[i].resize(layout.rank());
    int64_t stride = 1;
    for (int d = layout.rank() - 1; d >= 0; --d) {
      if (layout.broadcast[i][d]) {
        layout.strides[i][d] = 0;
      } else {
        layout.strides[i][d] = stride;
        stride *= layout.dims[d];
      }
    }
  }
  return layout;
}

namespace {

template <typename T>
void BroadcastCopyTyped(const T* in, T* out, const BroadcastLayout& layout) {
  const int64_t row = layout.dims.back();
  const int64_t stride = layout.strides[0].back();
  ForEachRow(layout, [&](int64_t out_offset, const int64_t* in_offsets) {
    const T* src = in + in_offsets[0];
    T* dst = out + out_offset;
    if (stride == 1) {
      std::memcpy(dst, src, row * sizeof(T));
    } else {
      for (int64_t j = 0; j < row; ++j) dst[j] = src[j * stride];
    }
  });
}

}  // namespace

void BroadcastCopy(const void* in, const Shape& in_shape, void* out_data, const Shape& out,
                   size_t element_size) {
  if (out.NumElements() == 0) return;
  const Shape* inputs[] = {&in_shape};
  const BroadcastLayout layout = MakeBroadcastLayout(out, inputs);
  switch (element_size) {
    case 1:
      BroadcastCopyTyped(static_cast<const uint8_t*>(in), static_cast<uint8_t*>(out_data), layout);
      break;
    case 2:
      BroadcastCopyTyped(static_cast<const uint16_t*>(in), static_cast<uint16_t*>(out_data),
                         layout);
      break;
    case 4:
      BroadcastCopyTyped(static_cast<const uint32_t*>(in), static_cast<uint32_t*>(out_data),
                         layout);
      break;
    case 8:
      BroadcastCopyTyped(static_cast<const uint64_t*>(in), static_cast<uint64_t*>(out_data),
                         layout);
      break;
    default:
      break;
  }
}

}  // namespace loopserve::engine::reference
