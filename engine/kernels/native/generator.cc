// Range and ConstantOfShape: tensors whose shape comes from data, so every shape is validated.

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/native/register_families.h"
#include "engine/runtime/run_context.h"

namespace loopserve::engine::native {
namespace {

// Element count of Range(start, limit, delta): max(ceil((limit - start) / delta), 0), computed
// without overflow; InvalidArgument when delta is 0 or the count exceeds kMaxElements.
template <typename T>
absl::StatusOr<int64_t> RangeCount(T start, T limit, T delta) {
  if (delta == 0) return absl::InvalidArgumentError("delta must not be 0");
  if constexpr (std::is_floating_point_v<T>) {
    const double n = std::ceil((static_cast<double>(limit) - static_cast<double>(start)) /
                               static_cast<double>(delta));
    if (std::isnan(n)) {
      return absl::InvalidArgumentError("start, limit and delta must be finite");
    }
    if (n <= 0) return int64_t{0};
    if (n > static_cast<double>(kMaxElements)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the range has ", n, " elements, more than the limit 2^40"));
    }
    return static_cast<int64_t>(n);
  } else {
    // int64 differences can overflow int64; use 128-bit arithmetic.
    const __int128 diff = static_cast<__int128>(limit) - static_cast<__int128>(start);
    const __int128 d = delta;
    if ((diff > 0) != (d > 0) || diff == 0) return int64_t{0};
    const __int128 n = (diff + d + (d > 0 ? -1 : 1)) / d;
    if (n > kMaxElements) {
      return absl::InvalidArgumentError(absl::StrCat("the range from ", start, " to ", limit,
                                                     " by ", delta,
                                                     " has more elements than the limit 2^40"));
    }
    return static_cast<int64_t>(n);
  }
}

class RangeKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 3, 3));
    return std::unique_ptr<Kernel>(new RangeKernel());
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& s = ctx.input(0);
    const Tensor& l = ctx.input(1);
    const Tensor& d = ctx.input(2);
    const DataType type = s.dtype();
    if (l.dtype() != type || d.dtype() != type) {
      return absl::InvalidArgumentError(absl::StrCat(
          "start, limit and delta must have one element type, got ", DataTypeName(type), ", ",
          DataTypeName(l.dtype()), ", ", DataTypeName(d.dtype())));
    }
    for (const Tensor* t : {&s, &l, &d}) {
      if (t->NumElements() != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "start, limit and delta must be scalars, got shape ", t->shape().ToString()));
      }
    }
    absl::Status status;
    bool ok = false;
    auto run = [&](auto tag) {
      using T = typename decltype(tag)::type;
      ok = true;
      const T start = s.data<T>()[0];
      const T delta = d.data<T>()[0];
      absl::StatusOr<int64_t> n = RangeCount<T>(start, l.data<T>()[0], delta);
      if (!n.ok()) {
        status = n.status();
        return;
      }
      T* out = ctx.output(0, type, Shape{*n})->mutable_data<T>();
      InterruptPacer pacer(ctx.run_context());
      if (!pacer.ForEachChunk(*n, sizeof(T), [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) {
              out[i] = static_cast<T>(start + static_cast<T>(i) * delta);
            }
          })) {
        status = pacer.status();
      }
    };
    switch (type) {
      case DataType::kFloat32:
        run(TypeTag<float>{});
        break;
      case DataType::kFloat64:
        run(TypeTag<double>{});
        break;
      case DataType::kInt16:
        run(TypeTag<int16_t>{});
        break;
      case DataType::kInt32:
        run(TypeTag<int32_t>{});
        break;
      case DataType::kInt64:
        run(TypeTag<int64_t>{});
        break;
      default:
        break;
    }
    if (!ok) return UnsupportedType("input 'start'", type);
    return status;
  }
};

class ConstantOfShapeKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
    auto kernel = std::unique_ptr<ConstantOfShapeKernel>(new ConstantOfShapeKernel());
    const Attribute* value = init.node().FindAttribute("value");
    if (value == nullptr) {
      kernel->dtype_ = DataType::kFloat32;
      return std::unique_ptr<Kernel>(std::move(kernel));
    }
    if (value->type != Attribute::Type::kTensor || value->tensor == nullptr) {
      return absl::InvalidArgumentError("attribute 'value' must be a tensor");
    }
    const Tensor& t = *value->tensor;
    if (t.NumElements() != 1 || DataTypeSize(t.dtype()) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute 'value' must hold one element, got ", t.shape().ToString()));
    }
    kernel->dtype_ = t.dtype();
    std::memcpy(kernel->value_, t.raw_data(), DataTypeSize(t.dtype()));
    return std::unique_ptr<Kernel>(std::move(kernel));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& s = ctx.input(0);
    if (s.dtype() != DataType::kInt64) {
      return absl::InvalidArgumentError(
          absl::StrCat("input must be int64, got ", DataTypeName(s.dtype())));
    }
    DimVector dims;
    LS_RETURN_IF_ERROR(ReadIndexList(s, "input 'input'", &dims));
    LS_ASSIGN_OR_RETURN(Shape shape, ValidateDims(dims, "input 'input'"));
    Tensor* y = ctx.output(0, dtype_, shape);
    const int64_t n = shape.NumElements();
    InterruptPacer pacer(ctx.run_context());  // a few bytes of input may ask for gigabytes
    bool done = true;
    DispatchBySize(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T v;
      std::memcpy(&v, value_, sizeof(T));
      T* out = y->mutable_data<T>();
      done = pacer.ForEachChunk(n, sizeof(T),
                                [&](int64_t b, int64_t e) { std::fill(out + b, out + e, v); });
    });
    return done ? absl::OkStatus() : pacer.status();
  }

 private:
  ConstantOfShapeKernel() = default;
  DataType dtype_ = DataType::kFloat32;
  alignas(8) unsigned char value_[8] = {};
};

}  // namespace

void RegisterGeneratorKernels(KernelRegistry& registry) {
  registry.Register("Range", FactoryOf<RangeKernel>());
  registry.Register("ConstantOfShape", FactoryOf<ConstantOfShapeKernel>());
}

}  // namespace loopserve::engine::native
