#pragma once

// Numpy-style broadcasting for elementwise kernels with N inputs, and strided copies for the
// data-movement kernels (Slice, Transpose, Expand, Tile). Both collapse adjacent dimensions that
// can be walked as one, so same-shape and scalar cases become a single flat loop. Nothing here
// allocates for ranks up to 8.

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/common.h"
#include "engine/runtime/run_context.h"
#include "engine/tensor/shape.h"

namespace loopserve::engine::native {

// The walk over an output shape that N inputs broadcast to. Value type; build with Prepare.
template <int N>
struct Broadcast {
  Shape out_shape;                   // the broadcast shape (uncollapsed)
  DimVector dims;                    // collapsed output dims (no dim of size 1 unless empty)
  std::array<DimVector, N> strides;  // per input, element stride per collapsed dim (0: broadcast)
  int64_t num_elements = 0;
};

// Broadcasts the N shapes together (numpy rules) and prepares the walk. InvalidArgument naming
// the shapes when they are incompatible.
template <int N>
absl::Status PrepareBroadcast(const std::array<const Shape*, N>& shapes, Broadcast<N>* b) {
  // Fast path, the common case in loop bodies: every shape equal (scalars included).
  bool same = true;
  for (int k = 1; k < N; ++k) same = same && *shapes[k] == *shapes[0];
  if (same) {
    b->out_shape = *shapes[0];
    b->num_elements = b->out_shape.NumElements();
    b->dims.assign(1, b->num_elements);
    for (int k = 0; k < N; ++k) b->strides[k].assign(1, 1);
    return absl::OkStatus();
  }
  int rank = 0;
  for (const Shape* s : shapes) rank = std::max(rank, s->rank());
  Shape::Dims& out = b->out_shape.mutable_dims();
  out.assign(rank, 1);
  for (int k = 0; k < N; ++k) {
    const Shape& s = *shapes[k];
    const int offset = rank - s.rank();
    for (int d = 0; d < s.rank(); ++d) {
      const int64_t dim = s[d];
      int64_t& o = out[offset + d];
      if (dim == o || dim == 1) continue;
      if (o == 1) {
        o = dim;
        continue;
      }
      std::string all;
      for (int j = 0; j < N; ++j) absl::StrAppend(&all, j == 0 ? "" : ", ", shapes[j]->ToString());
      return absl::InvalidArgumentError(
          absl::StrCat("shapes ", all, " cannot be broadcast together"));
    }
  }
  // Inputs are valid, but dims taken from different inputs may multiply past the limit.
  LS_RETURN_IF_ERROR(ValidateDims(out, "broadcast output").status());
  b->num_elements = b->out_shape.NumElements();
  // Element strides of each input over the output's dims (0 where the input is broadcast), with
  // dims of size 1 dropped and mergeable neighbours merged.
  b->dims.clear();
  for (int k = 0; k < N; ++k) b->strides[k].clear();
  std::array<int64_t, N> running;
  running.fill(1);
  // Walk from the innermost dim outwards, building reversed lists.
  for (int d = rank - 1; d >= 0; --d) {
    const int64_t dim = out[d];
    std::array<int64_t, N> st;
    for (int k = 0; k < N; ++k) {
      const Shape& s = *shapes[k];
      const int sd = d - (rank - s.rank());
      const int64_t in_dim = sd >= 0 ? s[sd] : 1;
      st[k] = in_dim == 1 ? 0 : running[k];
      running[k] *= in_dim;
    }
    if (dim == 1) continue;
    if (!b->dims.empty()) {
      bool merge = true;
      const int64_t inner = b->dims.back();
      for (int k = 0; k < N; ++k) {
        if (st[k] != b->strides[k].back() * inner) merge = false;
      }
      if (merge) {
        b->dims.back() *= dim;
        continue;
      }
    }
    b->dims.push_back(dim);
    for (int k = 0; k < N; ++k) b->strides[k].push_back(st[k]);
  }
  std::reverse(b->dims.begin(), b->dims.end());
  for (int k = 0; k < N; ++k) std::reverse(b->strides[k].begin(), b->strides[k].end());
  return absl::OkStatus();
}

// Calls fn(out_index, in_offsets) for every output element in row-major order, where
// in_offsets[k] is the element index of input k that broadcasts to it.
template <int N, typename Fn>
void ForEachBroadcast(const Broadcast<N>& b, Fn&& fn) {
  if (b.num_elements == 0) return;
  const int rank = static_cast<int>(b.dims.size());
  std::array<int64_t, N> base{};
  if (rank == 0) {
    fn(int64_t{0}, base);
    return;
  }
  const int64_t inner = b.dims[rank - 1];
  std::array<int64_t, N> inner_stride;
  for (int k = 0; k < N; ++k) inner_stride[k] = b.strides[k][rank - 1];
  DimVector index(rank, 0);
  int64_t out = 0;
  for (;;) {
    std::array<int64_t, N> off = base;
    for (int64_t i = 0; i < inner; ++i) {
      fn(out + i, off);
      for (int k = 0; k < N; ++k) off[k] += inner_stride[k];
    }
    out += inner;
    int d = rank - 2;
    for (; d >= 0; --d) {
      for (int k = 0; k < N; ++k) base[k] += b.strides[k][d];
      if (++index[d] < b.dims[d]) break;
      for (int k = 0; k < N; ++k) base[k] -= b.strides[k][d] * b.dims[d];
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

// Fills `out` (contiguous, row-major over `dims`) from `in`, where the input element for output
// index (i_0, ..., i_r-1) is in[sum(i_d * strides[d])] (strides may be 0 or negative; `in` points
// at the element for index 0). T is an element-sized unsigned type. With a `pacer`, the copy
// reports its progress to it (rows, and long rows in pieces) and stops early, returning false,
// when the run must stop.
template <typename T>
bool StridedCopy(const T* in, T* out, absl::Span<const int64_t> dims,
                 absl::Span<const int64_t> strides, InterruptPacer* pacer = nullptr) {
  DimVector cd;
  DimVector cs;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 0) return true;
    if (dims[d] == 1) continue;
    if (!cd.empty() && cs.back() == strides[d] * dims[d]) {
      cd.back() *= dims[d];
      cs.back() = strides[d];
      continue;
    }
    cd.push_back(dims[d]);
    cs.push_back(strides[d]);
  }
  const int rank = static_cast<int>(cd.size());
  if (rank == 0) {
    out[0] = in[0];
    return true;
  }
  const int64_t inner = cd[rank - 1];
  const int64_t step = cs[rank - 1];
  DimVector index(rank, 0);
  int64_t base = 0;
  // One row [begin, end) of the innermost dim.
  auto row = [&](const T* src, T* dst, int64_t begin, int64_t end) {
    if (step == 1) {
      std::memcpy(dst + begin, src + begin, static_cast<size_t>(end - begin) * sizeof(T));
    } else if (step == 0) {
      std::fill(dst + begin, dst + end, *src);
    } else {
      for (int64_t i = begin; i < end; ++i) dst[i] = src[i * step];
    }
  };
  for (;;) {
    const T* src = in + base;
    if (pacer == nullptr) {
      row(src, out, 0, inner);
    } else if (!pacer->ForEachChunk(inner, sizeof(T),
                                    [&](int64_t b, int64_t e) { row(src, out, b, e); })) {
      return false;
    }
    out += inner;
    int d = rank - 2;
    for (; d >= 0; --d) {
      base += cs[d];
      if (++index[d] < cd[d]) break;
      base -= cs[d] * cd[d];
      index[d] = 0;
    }
    if (d < 0) return true;
  }
}

// StridedCopy for any element type, by element size. `in` points at the element for index 0.
// False when `pacer` (optional) reported an interruption.
inline bool StridedCopyElements(DataType dtype, const void* in, void* out,
                                absl::Span<const int64_t> dims, absl::Span<const int64_t> strides,
                                InterruptPacer* pacer = nullptr) {
  bool done = true;
  DispatchBySize(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    done = StridedCopy<T>(static_cast<const T*>(in), static_cast<T*>(out), dims, strides, pacer);
  });
  return done;
}

// Numpy broadcasting, plus the opset < 7 form: with `legacy_broadcast` the second shape is
// aligned to the first starting at `legacy_axis` (or at the end when the axis is -1) by padding
// it with trailing 1s; without it the shapes must be equal.
struct LegacyBroadcast {
  bool enabled = false;    // opset < 7
  bool broadcast = false;  // the "broadcast" attribute
  int64_t axis = -1;       // the "axis" attribute; -1 when absent
};

// Adjusts the second operand's shape for the legacy rules (a no-op when !legacy.enabled).
inline absl::Status ApplyLegacyBroadcast(const LegacyBroadcast& legacy, const Shape& a, Shape* b) {
  if (!legacy.enabled) return absl::OkStatus();
  if (!legacy.broadcast) {
    if (a != *b) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shapes ", a.ToString(), " and ", b->ToString(), " differ and broadcast is not enabled"));
    }
    return absl::OkStatus();
  }
  if (legacy.axis < 0) return absl::OkStatus();
  const int64_t want = a.rank() - legacy.axis;
  if (legacy.axis > a.rank() || b->rank() > want) {
    return absl::InvalidArgumentError(absl::StrCat("cannot broadcast ", b->ToString(), " to ",
                                                   a.ToString(), " at axis ", legacy.axis));
  }
  while (b->rank() < want) b->mutable_dims().push_back(1);
  return absl::OkStatus();
}

}  // namespace loopserve::engine::native
