// Pad: constant, reflect, edge and wrap padding (negative pads crop).

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/native/register_families.h"
#include "engine/runtime/run_context.h"

namespace loopserve::engine::native {
namespace {

enum class PadMode : uint8_t { kConstant, kReflect, kEdge, kWrap };

// Pad(data, pads?, constant_value?, axes?; mode, pads, value): pads/value are attributes before
// opset 11 and inputs from 11; axes (opset 18) limits the pads to some axes.
class PadKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init, ListFrom from) {
    const Node& node = init.node();
    auto kernel = std::unique_ptr<PadKernel>(new PadKernel());
    kernel->from_ = from;
    LS_ASSIGN_OR_RETURN(std::string mode, node.GetString("mode", std::string("constant")));
    if (mode == "constant") {
      kernel->mode_ = PadMode::kConstant;
    } else if (mode == "reflect") {
      kernel->mode_ = PadMode::kReflect;
    } else if (mode == "edge") {
      kernel->mode_ = PadMode::kEdge;
    } else if (mode == "wrap" && node.opset >= 19) {
      kernel->mode_ = PadMode::kWrap;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unsupported mode '", mode, "'"));
    }
    if (from == ListFrom::kAttribute) {
      LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
      const char* name = node.opset < 2 ? "paddings" : "pads";
      LS_ASSIGN_OR_RETURN(std::vector<int64_t> pads, node.GetInts(name, std::nullopt));
      kernel->attr_pads_.assign(pads.begin(), pads.end());
      LS_ASSIGN_OR_RETURN(kernel->attr_value_, node.GetFloat("value", 0.0f));
    } else {
      LS_RETURN_IF_ERROR(CheckArity(init, 2, node.opset >= 18 ? 4 : 3));
    }
    return std::unique_ptr<Kernel>(std::move(kernel));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const int rank = x.rank();
    DimVector pads;
    if (from_ == ListFrom::kAttribute) {
      pads = attr_pads_;
    } else {
      LS_RETURN_IF_ERROR(ReadIndexList(ctx.input(1), "input 'pads'", &pads));
    }
    DimVector begin(rank, 0);
    DimVector end(rank, 0);
    LS_RETURN_IF_ERROR(SplitPads(ctx, pads, begin, end));
    Shape::Dims dims(rank);
    for (int d = 0; d < rank; ++d) {
      dims[d] = x.dim(d) + begin[d] + end[d];
      if (dims[d] < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("pads ", ListToString(pads), " crop axis ", d, " below zero"));
      }
      if (mode_ != PadMode::kConstant && x.dim(d) == 0 && dims[d] > 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("cannot pad the empty axis ", d, " in this mode"));
      }
    }
    LS_ASSIGN_OR_RETURN(Shape out_shape, ValidateDims(dims, "output"));
    if (from_ == ListFrom::kInput && ctx.has_input(2) && ctx.input(2).dtype() != x.dtype()) {
      return TypeMismatch("constant_value", ctx.input(2).dtype(), "data", x.dtype());
    }
    InterruptPacer pacer(ctx.run_context());
    bool done = true;
    const bool ok = DispatchNumericOrBool(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      done = PadRows<T>(ctx, begin, out_shape, pacer);
    });
    if (!ok) return UnsupportedType("data", x.dtype());
    return done ? absl::OkStatus() : pacer.status();
  }

 private:
  PadKernel() = default;

  // `pads` ([begins..., ends...] over all axes, or over `axes` when that input is given) as the
  // per-axis `begin` and `end` (zero-filled, of the input's rank).
  absl::Status SplitPads(KernelContext& ctx, const DimVector& pads, DimVector& begin,
                         DimVector& end) const {
    const int rank = ctx.input(0).rank();
    if (from_ == ListFrom::kInput && ctx.has_input(3)) {
      DimVector axes;
      LS_RETURN_IF_ERROR(ReadIndexList(ctx.input(3), "input 'axes'", &axes));
      LS_RETURN_IF_ERROR(NormalizeAxes(axes, rank, "axes"));
      if (pads.size() != 2 * axes.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("pads has ", pads.size(), " values, expected 2 x ", axes.size()));
      }
      for (size_t i = 0; i < axes.size(); ++i) {
        begin[axes[i]] = pads[i];
        end[axes[i]] = pads[i + axes.size()];
      }
      return absl::OkStatus();
    }
    if (static_cast<int>(pads.size()) != 2 * rank) {
      return absl::InvalidArgumentError(
          absl::StrCat("pads has ", pads.size(), " values, expected 2 x rank ", rank));
    }
    for (int d = 0; d < rank; ++d) {
      begin[d] = pads[d];
      end[d] = pads[d + rank];
    }
    return absl::OkStatus();
  }

  // Writes the padded output row by row along the last axis: the outer axes give the source row
  // (or none: the constant fills it), the last axis copies its inside run in one block and maps
  // the pads around it. False when the pacer stopped it (interrupted).
  template <typename T>
  bool PadRows(KernelContext& ctx, const DimVector& begin, const Shape& out_shape,
               InterruptPacer& pacer) const {
    const Tensor& x = ctx.input(0);
    const int rank = x.rank();
    T value = static_cast<T>(attr_value_);
    if (from_ == ListFrom::kInput && ctx.has_input(2) && ctx.input(2).NumElements() > 0 &&
        ctx.input(2).dtype() == x.dtype()) {  // checked in Run
      value = ctx.input(2).data<T>()[0];
    }
    Tensor* y = ctx.output(0, x.dtype(), out_shape);
    const T* in = x.data<T>();
    T* out = y->mutable_data<T>();
    const int64_t n = out_shape.NumElements();
    if (n == 0) return true;
    if (rank == 0) {
      out[0] = in[0];
      return true;
    }
    DimVector strides;
    RowMajorStrides(x.shape(), &strides);
    const int last = rank - 1;
    const int64_t width = out_shape[last];
    const int64_t size = x.dim(last);
    const int64_t lo = std::clamp<int64_t>(begin[last], 0, width);
    const int64_t hi = std::clamp<int64_t>(size + begin[last], lo, width);
    DimVector coord(rank, 0);
    for (int64_t row = 0; row < n; row += width) {
      T* dst = out + row;
      if (!pacer.Produced(sizeof(T) * static_cast<size_t>(width))) return false;
      int64_t offset = 0;
      bool inside = true;
      for (int d = 0; d < last && inside; ++d) {
        const int64_t i = MapIndex(coord[d] - begin[d], x.dim(d));
        if (i < 0) {
          inside = false;
        } else {
          offset += i * strides[d];
        }
      }
      if (!inside) {
        std::fill(dst, dst + width, value);
      } else {
        const T* src = in + offset;
        for (int64_t j = 0; j < lo; ++j) {
          const int64_t i = MapIndex(j - begin[last], size);
          dst[j] = i < 0 ? value : src[i];
        }
        if (hi > lo) std::copy(src + (lo - begin[last]), src + (hi - begin[last]), dst + lo);
        for (int64_t j = hi; j < width; ++j) {
          const int64_t i = MapIndex(j - begin[last], size);
          dst[j] = i < 0 ? value : src[i];
        }
      }
      for (int d = last - 1; d >= 0; --d) {
        if (++coord[d] < out_shape[d]) break;
        coord[d] = 0;
      }
    }
    return true;
  }

  // The source index of padded position i on an axis of `size` elements, or -1 where the constant
  // goes (constant mode outside the data).
  int64_t MapIndex(int64_t i, int64_t size) const {
    if (i >= 0 && i < size) return i;
    switch (mode_) {
      case PadMode::kConstant:
        return -1;
      case PadMode::kEdge:
        return i < 0 ? 0 : size - 1;
      case PadMode::kWrap:
        return ((i % size) + size) % size;
      case PadMode::kReflect: {
        if (size == 1) return 0;
        const int64_t period = 2 * (size - 1);
        i = ((i % period) + period) % period;
        return i >= size ? period - i : i;
      }
    }
    return -1;
  }

  ListFrom from_ = ListFrom::kInput;
  PadMode mode_ = PadMode::kConstant;
  DimVector attr_pads_;
  float attr_value_ = 0;
};

}  // namespace

void RegisterPadKernels(KernelRegistry& registry) {
  registry.Register("Pad", FactoryOf<PadKernel>(ListFrom::kAttribute), 1, 10);
  registry.Register("Pad", FactoryOf<PadKernel>(ListFrom::kInput), 11);
}

}  // namespace loopserve::engine::native
