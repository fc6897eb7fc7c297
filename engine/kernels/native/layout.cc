// Transpose, Expand, Tile: data movement expressed as one strided copy each.

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/broadcast.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/native/register_families.h"

namespace loopserve::engine::native {
namespace {

class TransposeKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
    LS_ASSIGN_OR_RETURN(auto perm, OptionalIntsAttribute(init.node(), "perm"));
    return std::unique_ptr<Kernel>(new TransposeKernel(std::move(perm)));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const int rank = x.rank();
    DimVector perm;
    if (perm_.has_value()) {
      perm = *perm_;
      if (static_cast<int>(perm.size()) != rank) {
        return absl::InvalidArgumentError(
            absl::StrCat("perm ", ListToString(perm), " does not match the input's rank ", rank));
      }
      LS_RETURN_IF_ERROR(NormalizeAxes(perm, rank, "perm"));
    } else {
      perm.resize(rank);
      for (int d = 0; d < rank; ++d) perm[d] = rank - 1 - d;
    }
    DimVector in_strides;
    RowMajorStrides(x.shape(), &in_strides);
    Shape out_shape;
    Shape::Dims& dims = out_shape.mutable_dims();
    DimVector strides(rank);
    dims.resize(rank);
    for (int d = 0; d < rank; ++d) {
      dims[d] = x.dim(static_cast<int>(perm[d]));
      strides[d] = in_strides[perm[d]];
    }
    Tensor* y = ctx.output(0, x.dtype(), out_shape);
    InterruptPacer pacer(ctx.run_context());
    if (!StridedCopyElements(x.dtype(), x.raw_data(), y->mutable_raw_data(), dims, strides,
                             &pacer)) {
      return pacer.status();
    }
    return absl::OkStatus();
  }

 private:
  explicit TransposeKernel(std::optional<DimVector> perm) : perm_(std::move(perm)) {}
  std::optional<DimVector> perm_;
};

class ExpandKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 2, 2));
    return std::unique_ptr<Kernel>(new ExpandKernel());
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const Tensor& s = ctx.input(1);
    if (s.dtype() != DataType::kInt64) {
      return absl::InvalidArgumentError(
          absl::StrCat("input 'shape' must be int64, got ", DataTypeName(s.dtype())));
    }
    DimVector dims;
    LS_RETURN_IF_ERROR(ReadIndexList(s, "input 'shape'", &dims));
    LS_ASSIGN_OR_RETURN(Shape target, ValidateDims(dims, "input 'shape'"));
    // Broadcast the input against the target: Expand is bidirectional.
    Broadcast<2> both;
    LS_RETURN_IF_ERROR(PrepareBroadcast<2>({&x.shape(), &target}, &both));
    Tensor* y = ctx.output(0, x.dtype(), both.out_shape);
    if (both.num_elements == 0) return absl::OkStatus();
    InterruptPacer pacer(ctx.run_context());
    if (!StridedCopyElements(x.dtype(), x.raw_data(), y->mutable_raw_data(), both.dims,
                             both.strides[0], &pacer)) {
      return pacer.status();
    }
    return absl::OkStatus();
  }
};

// Tile: opset 1 takes (input, tiles, axis) scalars; opset 6+ a repeats vector.
class TileKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init, bool legacy) {
    LS_RETURN_IF_ERROR(CheckArity(init, legacy ? 3 : 2, legacy ? 3 : 2));
    return std::unique_ptr<Kernel>(new TileKernel(legacy));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const int rank = x.rank();
    DimVector repeats;
    if (legacy_) {
      const Tensor& tiles = ctx.input(1);
      const Tensor& axis_t = ctx.input(2);
      if (tiles.NumElements() != 1 || axis_t.NumElements() != 1) {
        return absl::InvalidArgumentError("inputs 'tiles' and 'axis' must hold one value each");
      }
      LS_ASSIGN_OR_RETURN(const int axis, NormalizeAxis(axis_t.ScalarAsInt64(), rank));
      repeats.assign(rank, 1);
      repeats[axis] = tiles.ScalarAsInt64();
    } else {
      if (ctx.input(1).dtype() != DataType::kInt64) {
        return absl::InvalidArgumentError(absl::StrCat("input 'repeats' must be int64, got ",
                                                       DataTypeName(ctx.input(1).dtype())));
      }
      LS_RETURN_IF_ERROR(ReadIndexList(ctx.input(1), "input 'repeats'", &repeats));
      if (static_cast<int>(repeats.size()) != rank) {
        return absl::InvalidArgumentError(absl::StrCat("repeats ", ListToString(repeats), " has ",
                                                       repeats.size(),
                                                       " values for an input of rank ", rank));
      }
    }
    // The output is the input viewed as [1, d0, 1, d1, ...] expanded to [r0, d0, r1, d1, ...].
    absl::InlinedVector<int64_t, 12> dims(2 * rank);
    absl::InlinedVector<int64_t, 12> strides(2 * rank);
    DimVector in_strides;
    RowMajorStrides(x.shape(), &in_strides);
    DimVector out_dims(rank);
    for (int d = 0; d < rank; ++d) {
      if (repeats[d] < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("repeats ", ListToString(repeats), " has a negative value"));
      }
      dims[2 * d] = repeats[d];
      strides[2 * d] = 0;
      dims[2 * d + 1] = x.dim(d);
      strides[2 * d + 1] = in_strides[d];
      // Saturate so ValidateDims reports the overflow instead of wrapping.
      out_dims[d] = (x.dim(d) != 0 && repeats[d] > kMaxElements / x.dim(d)) ? kMaxElements + 1
                                                                            : repeats[d] * x.dim(d);
    }
    LS_ASSIGN_OR_RETURN(Shape out_shape, ValidateDims(out_dims, "output"));
    Tensor* y = ctx.output(0, x.dtype(), out_shape);
    if (out_shape.NumElements() == 0) return absl::OkStatus();
    InterruptPacer pacer(ctx.run_context());
    if (!StridedCopyElements(x.dtype(), x.raw_data(), y->mutable_raw_data(), dims, strides,
                             &pacer)) {
      return pacer.status();
    }
    return absl::OkStatus();
  }

 private:
  explicit TileKernel(bool legacy) : legacy_(legacy) {}
  bool legacy_;
};

}  // namespace

void RegisterLayoutKernels(KernelRegistry& registry) {
  registry.Register("Transpose", FactoryOf<TransposeKernel>());
  registry.Register("Expand", FactoryOf<ExpandKernel>());
  registry.Register("Tile", FactoryOf<TileKernel>(true), 1, 5);
  registry.Register("Tile", FactoryOf<TileKernel>(false), 6);
}

}  // namespace loopserve::engine::native
