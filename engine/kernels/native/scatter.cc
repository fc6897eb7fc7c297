// ScatterElements (and its opset 9-10 name Scatter) and ScatterND: a copy of data with elements
// or slices replaced by (or combined with, per `reduction`) updates at int32/int64 indices.

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/native/index_util.h"
#include "engine/kernels/native/register_families.h"

namespace loopserve::engine::native {
namespace {

enum class Reduction : uint8_t { kNone, kAdd, kMul, kMax, kMin };

absl::StatusOr<Reduction> ReadReduction(const Node& node) {
  LS_ASSIGN_OR_RETURN(std::string r, node.GetString("reduction", std::string("none")));
  if (r == "none") return Reduction::kNone;
  if (r == "add") return Reduction::kAdd;
  if (r == "mul") return Reduction::kMul;
  if (r == "max") return Reduction::kMax;
  if (r == "min") return Reduction::kMin;
  return absl::InvalidArgumentError(absl::StrCat("unknown reduction '", r, "'"));
}

template <typename T>
void Combine(Reduction r, T& dst, T v) {
  switch (r) {
    case Reduction::kNone:
      dst = v;
      break;
    case Reduction::kAdd:
      dst = static_cast<T>(dst + v);
      break;
    case Reduction::kMul:
      dst = static_cast<T>(dst * v);
      break;
    case Reduction::kMax:
      dst = std::max(dst, v);
      break;
    case Reduction::kMin:
      dst = std::min(dst, v);
      break;
  }
}

// Dispatches on the element type: any type for plain replacement, numeric types for reductions.
template <typename Fn>
bool DispatchForReduction(Reduction r, DataType dtype, Fn&& fn) {
  if (r == Reduction::kNone) {
    return DispatchBySize(dtype, std::forward<Fn>(fn));
  }
  return DispatchNumeric(dtype, std::forward<Fn>(fn));
}

// ScatterElements(data, indices, updates; axis, reduction): out = data, then for every position p
// of indices: out[p with coordinate `axis` replaced by indices[p]] (op)= updates[p].
class ScatterElementsKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 3, 3));
    LS_ASSIGN_OR_RETURN(int64_t axis, init.node().GetInt("axis", 0));
    LS_ASSIGN_OR_RETURN(Reduction r, ReadReduction(init.node()));
    return std::unique_ptr<Kernel>(new ScatterElementsKernel(axis, r));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& data = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    const Tensor& updates = ctx.input(2);
    LS_RETURN_IF_ERROR(CheckIndexType(indices, "indices"));
    if (updates.dtype() != data.dtype()) {
      return TypeMismatch("updates", updates.dtype(), "data", data.dtype());
    }
    const int rank = data.rank();
    if (rank == 0 || indices.rank() != rank || updates.shape() != indices.shape()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "indices ", indices.shape().ToString(), " and updates ", updates.shape().ToString(),
          " must have one shape, of the rank of data ", data.shape().ToString()));
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
    const int64_t n = indices.NumElements();
    const int64_t axis_dim = data.dim(axis);
    // Validate every index before writing anything.
    for (int64_t j = 0; j < n; ++j) {
      LS_RETURN_IF_ERROR(NormalizeIndex(IndexAt(indices, j), axis_dim, "index").status());
    }
    Tensor* y = ctx.output(0, data.dtype(), data.shape());
    CopyBytes(data, y);
    DimVector coord(rank, 0);
    const bool ok = DispatchForReduction(reduction_, data.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* up = updates.data<T>();
      T* out = y->mutable_data<T>();
      int64_t base = 0;
      for (int64_t j = 0; j < n; ++j) {
        int64_t k = IndexAt(indices, j);
        if (k < 0) k += axis_dim;
        Combine(reduction_, out[base + k * strides[axis]], up[j]);
        for (int d = rank - 1; d >= 0; --d) {
          if (++coord[d] < indices.dim(d)) {
            if (d != axis) base += strides[d];
            break;
          }
          if (d != axis) base -= strides[d] * (coord[d] - 1);
          coord[d] = 0;
        }
      }
    });
    if (!ok) return UnsupportedType("data", data.dtype());
    return absl::OkStatus();
  }

 private:
  ScatterElementsKernel(int64_t axis, Reduction r) : axis_(axis), reduction_(r) {}
  int64_t axis_;
  Reduction reduction_;
};

// ScatterND(data, indices, updates; reduction): each index tuple (indices' last dim, k long)
// addresses a slice data[i_0, ..., i_k-1, ...] that the matching slice of updates replaces (or is
// combined into). updates has shape indices.shape[:-1] + data.shape[k:].
class ScatterNDKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 3, 3));
    LS_ASSIGN_OR_RETURN(Reduction r, ReadReduction(init.node()));
    return std::unique_ptr<Kernel>(new ScatterNDKernel(r));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& data = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    const Tensor& updates = ctx.input(2);
    LS_RETURN_IF_ERROR(CheckIndexType(indices, "indices"));
    if (updates.dtype() != data.dtype()) {
      return TypeMismatch("updates", updates.dtype(), "data", data.dtype());
    }
    const int r = data.rank();
    const int q = indices.rank();
    const int64_t k = q == 0 ? 0 : indices.dim(q - 1);
    if (q < 1 || k > r) {
      return absl::InvalidArgumentError(absl::StrCat("indices ", indices.shape().ToString(),
                                                     " do not fit data ", data.shape().ToString()));
    }
    bool shape_ok = updates.rank() == q - 1 + r - static_cast<int>(k);
    for (int d = 0; shape_ok && d < q - 1; ++d) shape_ok = updates.dim(d) == indices.dim(d);
    for (int d = static_cast<int>(k); shape_ok && d < r; ++d) {
      shape_ok = updates.dim(q - 1 + d - static_cast<int>(k)) == data.dim(d);
    }
    if (!shape_ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("updates ", updates.shape().ToString(), " must have shape indices[:-1] + ",
                       "data[k:] for indices ", indices.shape().ToString(), " and data ",
                       data.shape().ToString()));
    }
    DimVector strides;
    RowMajorStrides(data.shape(), &strides);
    const int64_t tuples = indices.shape().NumElements(0, q - 1);
    const int64_t slice = data.shape().NumElements(static_cast<int>(k), r);
    for (int64_t t = 0; t < tuples; ++t) {
      for (int64_t c = 0; c < k; ++c) {
        LS_RETURN_IF_ERROR(
            NormalizeIndex(IndexAt(indices, t * k + c), data.dim(static_cast<int>(c)), "index")
                .status());
      }
    }
    const DataType dtype = data.dtype();
    // A tensor array a Loop carries (tf2onnx's TensorArray write) has no other reader: update it
    // in place, which turns a copy of the whole array per iteration into a copy of one row.
    Tensor* y = ctx.TakeInput(0, 0);
    if (y == nullptr) {
      y = ctx.output(0, dtype, data.shape());
      CopyBytes(data, y);
    }
    // `data` may now be the output's old value: only y's shape is read from here on.
    const Shape& shape = y->shape();
    const bool ok = DispatchForReduction(reduction_, dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* up = updates.data<T>();
      T* out = y->mutable_data<T>();
      for (int64_t t = 0; t < tuples; ++t) {
        int64_t offset = 0;
        for (int64_t c = 0; c < k; ++c) {
          const int64_t dim = shape[static_cast<int>(c)];
          int64_t i = IndexAt(indices, t * k + c);
          offset += (i < 0 ? i + dim : i) * strides[c];
        }
        if (reduction_ == Reduction::kNone) {
          std::memcpy(out + offset, up + t * slice, static_cast<size_t>(slice) * sizeof(T));
        } else {
          for (int64_t e = 0; e < slice; ++e) {
            Combine(reduction_, out[offset + e], up[t * slice + e]);
          }
        }
      }
    });
    if (!ok) return UnsupportedType("data", dtype);
    return absl::OkStatus();
  }

 private:
  explicit ScatterNDKernel(Reduction r) : reduction_(r) {}
  Reduction reduction_;
};

}  // namespace

void RegisterScatterKernels(KernelRegistry& registry) {
  registry.Register("Scatter", FactoryOf<ScatterElementsKernel>(), 9, 10);
  registry.Register("ScatterElements", FactoryOf<ScatterElementsKernel>(), 11);
  registry.Register("ScatterND", FactoryOf<ScatterNDKernel>(), 11);
}

}  // namespace loopserve::engine::native
