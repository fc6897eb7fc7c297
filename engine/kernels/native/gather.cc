// Gather, GatherElements, GatherND: pick elements or slices by int32/int64 indices (negative ones
// count from the end).

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/native/index_util.h"
#include "engine/kernels/native/register_families.h"

namespace loopserve::engine::native {
namespace {

class GatherKernel final : public Kernel {
 public:
  bool AcceptsStringInputs() const override { return true; }
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 2, 2));
    LS_ASSIGN_OR_RETURN(int64_t axis, init.node().GetInt("axis", 0));
    return std::unique_ptr<Kernel>(new GatherKernel(axis));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& data = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    if (indices.dtype() == DataType::kInt64) return Gather<int64_t>(ctx, data, indices);
    if (indices.dtype() == DataType::kInt32) return Gather<int32_t>(ctx, data, indices);
    return absl::InvalidArgumentError(
        absl::StrCat("indices must be int32 or int64, got ", DataTypeName(indices.dtype())));
  }

 private:
  explicit GatherKernel(int64_t axis) : axis_(axis) {}

  template <typename I>
  absl::Status Gather(KernelContext& ctx, const Tensor& data, const Tensor& indices) const {
    const int rank = data.rank();
    if (rank == 0) return absl::InvalidArgumentError("cannot gather from a scalar");
    LS_ASSIGN_OR_RETURN(const int axis, NormalizeAxis(axis_, rank));
    const int64_t axis_dim = data.dim(axis);
    const int64_t n = indices.NumElements();
    const I* idx = indices.data<I>();
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = idx[j];
      if (k < -axis_dim || k >= axis_dim) {
        return absl::InvalidArgumentError(
            absl::StrCat("index ", k, " is out of range for axis ", axis, " of size ", axis_dim));
      }
    }
    Shape out_shape;
    Shape::Dims& dims = out_shape.mutable_dims();
    for (int d = 0; d < axis; ++d) dims.push_back(data.dim(d));
    for (int64_t d : indices.shape().dims()) dims.push_back(d);
    for (int d = axis + 1; d < rank; ++d) dims.push_back(data.dim(d));
    Tensor* y = ctx.output(0, data.dtype(), out_shape);
    const int64_t outer = data.shape().NumElements(0, axis);
    const int64_t inner = data.shape().NumElements(axis + 1, rank);
    if (data.dtype() == DataType::kString) {
      int64_t at = 0;
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t j = 0; j < n; ++j, at += inner) {
          const int64_t k = idx[j] < 0 ? idx[j] + axis_dim : idx[j];
          CopyElements(DataType::kString, data.raw_data(), (o * axis_dim + k) * inner,
                       y->mutable_raw_data(), at, inner);
        }
      }
      return absl::OkStatus();
    }
    DispatchBySize(data.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* in = data.data<T>();
      T* out = y->mutable_data<T>();
      // Rows of a large table (an embedding's, a beam's states) are scattered: while one row is
      // copied, the next one's lines are requested, so the cache misses overlap instead of
      // queueing one row after the other (beam_k16_h512: the gathers' share 2.7% -> 2.1%;
      // requesting every row up front did worse, 2.9%).
      const size_t row_bytes = static_cast<size_t>(inner) * sizeof(T);
      const bool prefetch = row_bytes >= 256 && n > 1;
      const size_t prefetch_bytes = std::min<size_t>(row_bytes, 4096);
      for (int64_t o = 0; o < outer; ++o) {
        const T* src_row = in + o * axis_dim * inner;
        for (int64_t j = 0; j < n; ++j) {
          const int64_t k = idx[j] < 0 ? idx[j] + axis_dim : idx[j];
          const T* src = src_row + k * inner;
          if (prefetch && j + 1 < n) {
            const int64_t next = idx[j + 1] < 0 ? idx[j + 1] + axis_dim : idx[j + 1];
            const char* p = reinterpret_cast<const char*>(src_row + next * inner);
            for (size_t b = 0; b < prefetch_bytes; b += 64) __builtin_prefetch(p + b, 0, 3);
          }
          if (inner == 1) {
            *out++ = *src;
          } else {
            std::memcpy(out, src, static_cast<size_t>(inner) * sizeof(T));
            out += inner;
          }
        }
      }
    });
    return absl::OkStatus();
  }

  int64_t axis_;
};

// GatherElements(data, indices; axis): out[i] = data[i with coordinate `axis` replaced by
// indices[i]]; indices has data's rank and gives the output shape.
class GatherElementsKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 2, 2));
    LS_ASSIGN_OR_RETURN(int64_t axis, init.node().GetInt("axis", 0));
    return std::unique_ptr<Kernel>(new GatherElementsKernel(axis));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& data = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    LS_RETURN_IF_ERROR(CheckIndexType(indices, "indices"));
    const int rank = data.rank();
    if (rank == 0 || indices.rank() != rank) {
      return absl::InvalidArgumentError(absl::StrCat("indices ", indices.shape().ToString(),
                                                     " must have the rank of data ",
                                                     data.shape().ToString(), " (at least 1)"));
    }
    LS_ASSIGN_OR_RETURN(const int axis, NormalizeAxis(axis_, rank));
    for (int d = 0; d < rank; ++d) {
      if (d != axis && indices.dim(d) > data.dim(d)) {
        return absl::InvalidArgumentError(absl::StrCat("indices ", indices.shape().ToString(),
                                                       " exceed data ", data.shape().ToString(),
                                                       " along axis ", d));
      }
    }
    DimVector strides;
    RowMajorStrides(data.shape(), &strides);
    Tensor* y = ctx.output(0, data.dtype(), indices.shape());
    if (y->NumElements() == 0) return absl::OkStatus();
    absl::Status status;
    DispatchBySize(data.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (indices.dtype() == DataType::kInt64) {
        status = GatherRows(data.data<T>(), indices.data<int64_t>(), indices.shape(), strides, axis,
                            data.dim(axis), y->mutable_data<T>());
      } else {
        status = GatherRows(data.data<T>(), indices.data<int32_t>(), indices.shape(), strides, axis,
                            data.dim(axis), y->mutable_data<T>());
      }
    });
    return status;
  }

 private:
  explicit GatherElementsKernel(int64_t axis) : axis_(axis) {}

  // Row by row over the indices' last dim (a tight loop; the data offset of the other dims moves
  // once per row): out[j] = in[offset of j with coordinate `axis` replaced by indices[j]].
  template <typename T, typename I>
  static absl::Status GatherRows(const T* in, const I* indices, const Shape& shape,
                                 const DimVector& strides, int axis, int64_t axis_dim, T* out) {
    const int rank = shape.rank();
    const int64_t last = shape[rank - 1];
    const int64_t rows = shape.NumElements() / last;
    const bool along_last = axis == rank - 1;
    const int64_t axis_stride = strides[axis];
    DimVector coord(rank - 1, 0);
    int64_t base = 0;  // data offset of the row's coordinates, without the axis term
    for (int64_t row = 0; row < rows; ++row) {
      const I* index = indices + row * last;
      T* dst = out + row * last;
      const T* src = in + base;
      for (int64_t j = 0; j < last; ++j) {
        int64_t k = index[j];
        if (k < 0) k += axis_dim;
        if (static_cast<uint64_t>(k) >= static_cast<uint64_t>(axis_dim)) {
          return NormalizeIndex(index[j], axis_dim, "index").status();
        }
        dst[j] = along_last ? src[k] : src[j + k * axis_stride];
      }
      for (int d = rank - 2; d >= 0; --d) {
        if (++coord[d] < shape[d]) {
          if (d != axis) base += strides[d];
          break;
        }
        if (d != axis) base -= strides[d] * (coord[d] - 1);
        coord[d] = 0;
      }
    }
    return absl::OkStatus();
  }
  int64_t axis_;
};

// GatherND(data, indices; batch_dims): each index tuple (indices' last dim, k long) picks a slice
// data[b..., i_0, ..., i_k-1, ...]; output shape indices.shape[:-1] + data.shape[b+k:].
class GatherNDKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 2, 2));
    LS_ASSIGN_OR_RETURN(int64_t batch_dims, init.node().GetInt("batch_dims", 0));
    if (batch_dims < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch_dims must be non-negative, got ", batch_dims));
    }
    return std::unique_ptr<Kernel>(new GatherNDKernel(batch_dims));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& data = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    LS_RETURN_IF_ERROR(CheckIndexType(indices, "indices"));
    const int r = data.rank();
    const int q = indices.rank();
    const int b = static_cast<int>(batch_dims_);
    if (q < 1 || r < 1 || b >= std::min(q, r)) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch_dims ", b, " must be less than the ranks of data ",
                       data.shape().ToString(), " and indices ", indices.shape().ToString()));
    }
    const int64_t k = indices.dim(q - 1);
    if (k < 1 || k > r - b) {
      return absl::InvalidArgumentError(
          absl::StrCat("the last dim of indices ", indices.shape().ToString(), " must be in [1, ",
                       r - b, "] for data ", data.shape().ToString(), " and batch_dims ", b));
    }
    for (int d = 0; d < b; ++d) {
      if (data.dim(d) != indices.dim(d)) {
        return absl::InvalidArgumentError(absl::StrCat("batch dim ", d, " differs: data ",
                                                       data.shape().ToString(), ", indices ",
                                                       indices.shape().ToString()));
      }
    }
    Shape out_shape;
    Shape::Dims& dims = out_shape.mutable_dims();
    for (int d = 0; d < q - 1; ++d) dims.push_back(indices.dim(d));
    for (int d = b + static_cast<int>(k); d < r; ++d) dims.push_back(data.dim(d));
    DimVector strides;
    RowMajorStrides(data.shape(), &strides);
    const int64_t batches = data.shape().NumElements(0, b);
    const int64_t batch_stride = b == 0 ? data.NumElements() : strides[b - 1];
    const int64_t tuples_per_batch = indices.shape().NumElements(b, q - 1);
    const int64_t slice = data.shape().NumElements(b + static_cast<int>(k), r);
    const size_t elem = DataTypeSize(data.dtype());
    Tensor* y = ctx.output(0, data.dtype(), out_shape);
    const char* in = static_cast<const char*>(data.raw_data());
    char* out = static_cast<char*>(y->mutable_raw_data());
    int64_t t = 0;
    for (int64_t batch = 0; batch < batches; ++batch) {
      for (int64_t j = 0; j < tuples_per_batch; ++j, ++t) {
        int64_t offset = batch * batch_stride;
        for (int64_t c = 0; c < k; ++c) {
          const int d = b + static_cast<int>(c);
          LS_ASSIGN_OR_RETURN(int64_t i,
                              NormalizeIndex(IndexAt(indices, t * k + c), data.dim(d), "index"));
          offset += i * strides[d];
        }
        if (slice > 0) {
          std::memcpy(out + static_cast<size_t>(t * slice) * elem,
                      in + static_cast<size_t>(offset) * elem, static_cast<size_t>(slice) * elem);
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  explicit GatherNDKernel(int64_t batch_dims) : batch_dims_(batch_dims) {}
  int64_t batch_dims_;
};

}  // namespace

void RegisterGatherKernels(KernelRegistry& registry) {
  registry.Register("Gather", FactoryOf<GatherKernel>());
  registry.Register("GatherElements", FactoryOf<GatherElementsKernel>());
  registry.Register("GatherND", FactoryOf<GatherNDKernel>());
}

}  // namespace loopserve::engine::native
