// DepthToSpace, SpaceToDepth, Compress, ReverseSequence: data movement with computed layouts.

#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/broadcast.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/native/index_util.h"
#include "engine/kernels/native/register_families.h"

namespace loopserve::engine::native {
namespace {

// DepthToSpace (DCR / CRD modes) and SpaceToDepth on [N, C, H, W]: a 6-D reshape, transpose and
// reshape, done as one strided copy.
class SpaceDepthKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init, bool to_space) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
    LS_ASSIGN_OR_RETURN(int64_t b, init.node().GetInt("blocksize", std::nullopt));
    if (b <= 0)
      return absl::InvalidArgumentError(absl::StrCat("blocksize must be positive, got ", b));
    LS_ASSIGN_OR_RETURN(std::string mode, init.node().GetString("mode", std::string("DCR")));
    if (mode != "DCR" && mode != "CRD") {
      return absl::InvalidArgumentError(absl::StrCat("mode must be DCR or CRD, got '", mode, "'"));
    }
    return std::unique_ptr<Kernel>(new SpaceDepthKernel(to_space, b, mode == "CRD"));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    if (x.rank() != 4) {
      return absl::InvalidArgumentError(
          absl::StrCat("input must be [N, C, H, W], got ", x.shape().ToString()));
    }
    const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3), b = block_;
    int64_t in6[6];
    int perm[6];
    Shape out_shape;
    if (to_space_) {
      if (c % (b * b) != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("channels ", c, " are not a multiple of blocksize^2 = ", b * b));
      }
      const int64_t cc = c / (b * b);
      if (crd_) {
        const int64_t d[6] = {n, cc, b, b, h, w};
        const int p[6] = {0, 1, 4, 2, 5, 3};
        std::copy(d, d + 6, in6);
        std::copy(p, p + 6, perm);
      } else {
        const int64_t d[6] = {n, b, b, cc, h, w};
        const int p[6] = {0, 3, 4, 1, 5, 2};
        std::copy(d, d + 6, in6);
        std::copy(p, p + 6, perm);
      }
      out_shape = Shape{n, cc, h * b, w * b};
    } else {
      if (h % b != 0 || w % b != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("height ", h, " and width ", w, " must be multiples of blocksize ", b));
      }
      const int64_t d[6] = {n, c, h / b, b, w / b, b};
      const int p[6] = {0, 3, 5, 1, 2, 4};
      std::copy(d, d + 6, in6);
      std::copy(p, p + 6, perm);
      out_shape = Shape{n, c * b * b, h / b, w / b};
    }
    int64_t in_strides[6];
    int64_t s = 1;
    for (int i = 5; i >= 0; --i) {
      in_strides[i] = s;
      s *= in6[i];
    }
    DimVector dims(6);
    DimVector strides(6);
    for (int i = 0; i < 6; ++i) {
      dims[i] = in6[perm[i]];
      strides[i] = in_strides[perm[i]];
    }
    Tensor* y = ctx.output(0, x.dtype(), out_shape);
    if (x.NumElements() == 0) return absl::OkStatus();
    StridedCopyElements(x.dtype(), x.raw_data(), y->mutable_raw_data(), dims, strides);
    return absl::OkStatus();
  }

 private:
  SpaceDepthKernel(bool to_space, int64_t block, bool crd)
      : to_space_(to_space), block_(block), crd_(crd) {}
  bool to_space_;
  int64_t block_;
  bool crd_;
};

// Compress(input, condition; axis): the slices along `axis` (or the elements of the flattened
// input when axis is absent) whose condition entry is true; condition may be shorter.
class CompressKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 2, 2));
    std::optional<int64_t> axis;
    if (init.node().FindAttribute("axis") != nullptr) {
      LS_ASSIGN_OR_RETURN(int64_t a, init.node().GetInt("axis", std::nullopt));
      axis = a;
    }
    return std::unique_ptr<Kernel>(new CompressKernel(axis));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const Tensor& cond = ctx.input(1);
    if (cond.dtype() != DataType::kBool || cond.rank() != 1) {
      return absl::InvalidArgumentError("condition must be a 1-D bool tensor");
    }
    int axis = 0;
    int64_t outer = 1, dim = x.NumElements(), inner = 1;
    if (axis_.has_value()) {
      if (x.rank() == 0)
        return absl::InvalidArgumentError("cannot compress a scalar along an axis");
      LS_ASSIGN_OR_RETURN(axis, NormalizeAxis(*axis_, x.rank()));
      outer = x.shape().NumElements(0, axis);
      dim = x.dim(axis);
      inner = x.shape().NumElements(axis + 1, x.rank());
    }
    if (cond.dim(0) > dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("condition has ", cond.dim(0), " entries, the axis only ", dim));
    }
    const bool* c = cond.data<bool>();
    int64_t kept = 0;
    for (int64_t i = 0; i < cond.dim(0); ++i) kept += c[i] ? 1 : 0;
    Shape out_shape{kept};
    if (axis_.has_value()) {
      out_shape = x.shape();
      out_shape[axis] = kept;
    }
    Tensor* y = ctx.output(0, x.dtype(), out_shape);
    const size_t row = static_cast<size_t>(inner) * DataTypeSize(x.dtype());
    const char* src = static_cast<const char*>(x.raw_data());
    char* dst = static_cast<char*>(y->mutable_raw_data());
    for (int64_t o = 0; o < outer && row > 0; ++o) {
      for (int64_t i = 0; i < cond.dim(0); ++i) {
        if (!c[i]) continue;
        std::memcpy(dst, src + (o * dim + i) * row, row);
        dst += row;
      }
    }
    return absl::OkStatus();
  }

 private:
  explicit CompressKernel(std::optional<int64_t> axis) : axis_(axis) {}
  std::optional<int64_t> axis_;
};

// ReverseSequence(input, sequence_lens; batch_axis, time_axis): reverses the first
// sequence_lens[b] steps along time_axis of each batch entry b.
class ReverseSequenceKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 2, 2));
    LS_ASSIGN_OR_RETURN(int64_t batch_axis, init.node().GetInt("batch_axis", 1));
    LS_ASSIGN_OR_RETURN(int64_t time_axis, init.node().GetInt("time_axis", 0));
    if (!((batch_axis == 0 && time_axis == 1) || (batch_axis == 1 && time_axis == 0))) {
      return absl::InvalidArgumentError("batch_axis and time_axis must be 0 and 1 in some order");
    }
    return std::unique_ptr<Kernel>(new ReverseSequenceKernel(batch_axis == 0));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const Tensor& lens = ctx.input(1);
    LS_RETURN_IF_ERROR(CheckIndexType(lens, "sequence_lens"));
    if (x.rank() < 2) return absl::InvalidArgumentError("input must have rank >= 2");
    const int64_t batch = x.dim(batch_first_ ? 0 : 1);
    const int64_t time = x.dim(batch_first_ ? 1 : 0);
    if (lens.rank() != 1 || lens.dim(0) != batch) {
      return absl::InvalidArgumentError(absl::StrCat("sequence_lens must have shape [", batch,
                                                     "], got ", lens.shape().ToString()));
    }
    const size_t row =
        static_cast<size_t>(x.shape().NumElements(2, x.rank())) * DataTypeSize(x.dtype());
    Tensor* y = ctx.output(0, x.dtype(), x.shape());
    const char* src = static_cast<const char*>(x.raw_data());
    char* dst = static_cast<char*>(y->mutable_raw_data());
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t len = IndexAt(lens, b);
      if (len < 0 || len > time) {
        return absl::InvalidArgumentError(
            absl::StrCat("sequence length ", len, " is out of range [0, ", time, "]"));
      }
      for (int64_t t = 0; t < time; ++t) {
        const int64_t from = t < len ? len - 1 - t : t;
        auto at = [&](int64_t tt) { return batch_first_ ? b * time + tt : tt * batch + b; };
        if (row > 0) std::memcpy(dst + at(t) * row, src + at(from) * row, row);
      }
    }
    return absl::OkStatus();
  }

 private:
  explicit ReverseSequenceKernel(bool batch_first) : batch_first_(batch_first) {}
  bool batch_first_;
};

}  // namespace

void RegisterRearrangeKernels(KernelRegistry& registry) {
  registry.Register("DepthToSpace", FactoryOf<SpaceDepthKernel>(true));
  registry.Register("SpaceToDepth", FactoryOf<SpaceDepthKernel>(false));
  registry.Register("Compress", FactoryOf<CompressKernel>(), 9);
  registry.Register("ReverseSequence", FactoryOf<ReverseSequenceKernel>(), 10);
}

}  // namespace loopserve::engine::native
