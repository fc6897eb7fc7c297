// Pad: constant, reflect, edge and wrap padding (negative pads crop).

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
    } else {
      if (static_cast<int>(pads.size()) != 2 * rank) {
        return absl::InvalidArgumentError(
            absl::StrCat("pads has ", pads.size(), " values, expected 2 x rank ", rank));
      }
      for (int d = 0; d < rank; ++d) {
        begin[d] = pads[d];
        end[d] = pads[d + rank];
      }
    }
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
    DimVector strides;
    RowMajorStrides(x.shape(), &strides);
    const int64_t n = out_shape.NumElements();
    InterruptPacer pacer(ctx.run_context());
    bool done = true;
    const bool ok = DispatchNumericOrBool(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T value = static_cast<T>(attr_value_);
      if (from_ == ListFrom::kInput && ctx.has_input(2) && ctx.input(2).NumElements() > 0 &&
          ctx.input(2).dtype() == x.dtype()) {  // checked above
        value = ctx.input(2).data<T>()[0];
      }
      Tensor* y = ctx.output(0, x.dtype(), out_shape);
      const T* in = x.data<T>();
      T* out = y->mutable_data<T>();
      DimVector coord(rank, 0);
      for (int64_t o = 0; o < n; ++o) {
        if (!pacer.Produced(sizeof(T))) {
          done = false;
          return;
        }
        int64_t offset = 0;
        bool inside = true;
        for (int d = 0; d < rank; ++d) {
          int64_t i = coord[d] - begin[d];
          const int64_t size = x.dim(d);
          if (i < 0 || i >= size) {
            switch (mode_) {
              case PadMode::kConstant:
                inside = false;
                break;
              case PadMode::kEdge:
                i = i < 0 ? 0 : size - 1;
                break;
              case PadMode::kWrap:
                i = ((i % size) + size) % size;
                break;
              case PadMode::kReflect: {
                if (size == 1) {
                  i = 0;
                  break;
                }
                const int64_t period = 2 * (size - 1);
                i = ((i % period) + period) % period;
                if (i >= size) i = period - i;
                break;
              }
            }
          }
          if (!inside) break;
          offset += i * strides[d];
        }
        out[o] = inside ? in[offset] : value;
        for (int d = rank - 1; d >= 0; --d) {
          if (++coord[d] < out_shape[d]) break;
          coord[d] = 0;
        }
      }
    });
    if (!ok) return UnsupportedType("data", x.dtype());
    return done ? absl::OkStatus() : pacer.status();
  }

 private:
  PadKernel() = default;
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
