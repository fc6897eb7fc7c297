// Identity, Cast, CastLike and (inference) Dropout.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/native/half.h"
#include "engine/kernels/native/register_families.h"
#include "engine/kernels/native/saturate.h"
#include "engine/tensor/value.h"

namespace loopserve::engine::native {
namespace {

// Identity: a copy (never an alias: a view would dangle once a Loop swaps the source's buffer).
// From opset 14 the input may be a sequence, from 16 an optional (possibly empty).
class IdentityKernel final : public Kernel {
 public:
  bool AcceptsStringInputs() const override { return true; }
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
    return std::unique_ptr<Kernel>(new IdentityKernel());
  }
  bool AcceptsNonTensorInputs() const override { return true; }
  absl::Status Run(KernelContext& ctx) const override {
    const Value& in = ctx.input_value(0);
    if (!in.is_tensor()) {
      ctx.output_value(0).CopyFrom(in);
      return absl::OkStatus();
    }
    // An input no one else reads moves to the output (Step::takeable_inputs); else a copy.
    if (ctx.TakeInput(0, 0) != nullptr) return absl::OkStatus();
    const Tensor& x = in.tensor();
    CopyBytes(x, ctx.output(0, x.dtype(), x.shape()));
    return absl::OkStatus();
  }
};

// 16-bit float storage types, converted through float.
struct Half {
  uint16_t bits;
};
struct BFloat {
  uint16_t bits;
};

// Reads any storage type as a C++ arithmetic value.
template <typename T>
auto Load(T v) {
  if constexpr (std::is_same_v<T, Half>) {
    return HalfToFloat(v.bits);
  } else if constexpr (std::is_same_v<T, BFloat>) {
    return BFloatToFloat(v.bits);
  } else {
    return v;
  }
}

template <typename To, typename From>
To Convert(From raw) {
  const auto v = Load(raw);
  using V = decltype(v);
  if constexpr (std::is_same_v<To, bool>) {
    return v != 0;
  } else if constexpr (std::is_same_v<To, Half>) {
    return Half{FloatToHalf(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<To, BFloat>) {
    return BFloat{FloatToBFloat(static_cast<float>(v))};
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<V>) {
    return SaturatingCast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

// Every engine dtype, with 16-bit floats as Half/BFloat.
template <typename Fn>
bool DispatchAll(DataType type, Fn&& fn) {
  if (type == DataType::kFloat16) {
    fn(TypeTag<Half>{});
    return true;
  }
  if (type == DataType::kBFloat16) {
    fn(TypeTag<BFloat>{});
    return true;
  }
  return DispatchNumericOrBool(type, std::forward<Fn>(fn));
}

// A number as Cast writes it into a string: integers in decimal, floating-point values in the
// shortest plain form that reads back to the same value ("0.039187793"), and the spec's literals
// "NaN", "INF" and "-INF"; bool as "1" or "0".
template <typename T>
void FormatElement(T raw, std::string& out) {
  const auto v = Load(raw);
  using V = decltype(v);
  if constexpr (std::is_same_v<V, bool>) {
    out = v ? "1" : "0";
  } else if constexpr (std::is_floating_point_v<V>) {
    if (std::isnan(v)) {
      out = "NaN";
    } else if (std::isinf(v)) {
      out = v > 0 ? "INF" : "-INF";
    } else {
      char buffer[64];
      const std::to_chars_result r = std::to_chars(buffer, buffer + sizeof(buffer), v);
      out.assign(buffer, r.ptr);
    }
  } else {
    out = absl::StrCat(v);
  }
}

// A string as Cast reads it into a number: plain or scientific notation, the case-insensitive
// literals "INF", "+INF", "-INF" and "NaN"; an integer type takes an integer literal directly and
// truncates a decimal one. InvalidArgument for anything else.
template <typename T>
absl::StatusOr<T> ParseElement(const std::string& text) {
  const absl::string_view s = absl::StripAsciiWhitespace(text);
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (std::is_signed_v<T>) {
      int64_t i = 0;
      if (absl::SimpleAtoi(s, &i)) return Convert<T>(i);
    } else {
      uint64_t u = 0;
      if (absl::SimpleAtoi(s, &u)) return Convert<T>(u);
    }
  }
  double d = 0;
  const std::string lower = absl::AsciiStrToLower(s);
  if (lower == "inf" || lower == "+inf") {
    d = std::numeric_limits<double>::infinity();
  } else if (lower == "-inf") {
    d = -std::numeric_limits<double>::infinity();
  } else if (lower == "nan" || lower == "+nan" || lower == "-nan") {
    d = std::numeric_limits<double>::quiet_NaN();
  } else if (!absl::SimpleAtod(s, &d)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the string \"", absl::CHexEscape(text.substr(0, 64)), "\" is not a number"));
  }
  if constexpr (std::is_same_v<T, float>) {
    // Rounded once, from the text, so "0.1" gives the float nearest 0.1.
    if (std::isfinite(d)) {
      float f = 0;
      if (absl::SimpleAtof(s, &f)) return f;
    }
    return static_cast<float>(d);
  } else {
    return Convert<T>(d);
  }
}

class CastKernel final : public Kernel {
 public:
  bool AcceptsStringInputs() const override { return true; }
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
    const Attribute* to = init.node().FindAttribute("to");
    if (to == nullptr) return absl::InvalidArgumentError("attribute 'to' is required");
    DataType type;
    if (to->type == Attribute::Type::kString) {
      LS_ASSIGN_OR_RETURN(type, DataTypeFromOnnxName(to->s));
    } else if (to->type == Attribute::Type::kInt) {
      LS_ASSIGN_OR_RETURN(type, DataTypeFromOnnx(to->i));
    } else {
      return absl::InvalidArgumentError("attribute 'to' must be an int (or a string at opset 1)");
    }
    return std::unique_ptr<Kernel>(new CastKernel(type));
  }

  // CastLike(input, target_type): Cast to target_type's element type.
  static absl::StatusOr<std::unique_ptr<Kernel>> CreateLike(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 2, 2));
    return std::unique_ptr<Kernel>(new CastKernel(DataType::kUndefined));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const DataType from = x.dtype();
    const DataType to = to_ == DataType::kUndefined ? ctx.input(1).dtype() : to_;
    if (to == DataType::kUndefined) return UnsupportedType("target_type", to);
    Tensor* y = ctx.output(0, to, x.shape());
    const int64_t n = x.NumElements();
    if (from == to) {
      CopyBytes(x, y);
      return absl::OkStatus();
    }
    if (to == DataType::kString) {
      std::string* out = y->mutable_data<std::string>();
      const bool ok = DispatchAll(from, [&](auto from_tag) {
        using F = typename decltype(from_tag)::type;
        const F* in = static_cast<const F*>(x.raw_data());
        for (int64_t i = 0; i < n; ++i) FormatElement(in[i], out[i]);
      });
      if (!ok) return UnsupportedType("input", from);
      return absl::OkStatus();
    }
    if (from == DataType::kString) {
      const std::string* in = x.data<std::string>();
      absl::Status status;
      const bool ok = DispatchAll(to, [&](auto to_tag) {
        using T = typename decltype(to_tag)::type;
        T* out = static_cast<T*>(y->mutable_raw_data());
        for (int64_t i = 0; i < n && status.ok(); ++i) {
          if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat>) {
            absl::StatusOr<float> v = ParseElement<float>(in[i]);
            if (v.ok()) out[i] = Convert<T>(*v);
            status = v.status();
          } else {
            absl::StatusOr<T> v = ParseElement<T>(in[i]);
            if (v.ok()) out[i] = *v;
            status = v.status();
          }
        }
      });
      if (!ok) return UnsupportedType("target type", to);
      return status;
    }
    const bool ok = DispatchAll(from, [&](auto from_tag) {
      using F = typename decltype(from_tag)::type;
      DispatchAll(to, [&](auto to_tag) {
        using T = typename decltype(to_tag)::type;
        const F* in = static_cast<const F*>(x.raw_data());
        T* out = static_cast<T*>(y->mutable_raw_data());
        for (int64_t i = 0; i < n; ++i) out[i] = Convert<T>(in[i]);
      });
    });
    if (!ok) return UnsupportedType("input", from);
    return absl::OkStatus();
  }

 private:
  explicit CastKernel(DataType to) : to_(to) {}
  DataType to_;  // kUndefined for CastLike: the type of input 1
};

// Dropout at inference: output = data; the optional mask output is all true. A training_mode input
// that is true is rejected (training is not supported).
class DropoutKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 3, 2));
    LS_ASSIGN_OR_RETURN(int64_t is_test, init.node().GetInt("is_test", 0));
    // Opsets before 7 have is_test; without it they train (scale the kept values).
    if (init.node().opset < 7 && is_test == 0) {
      return absl::UnimplementedError("training mode (is_test=0) is not supported");
    }
    return std::unique_ptr<Kernel>(new DropoutKernel(init.node().opset < 10));
  }

  absl::Status Run(KernelContext& ctx) const override {
    if (ctx.has_input(2)) {
      const Tensor& training = ctx.input(2);
      if (training.NumElements() != 1) {
        return absl::InvalidArgumentError("training_mode must be a scalar");
      }
      // Training with ratio 0 keeps everything, which is the inference result; other ratios
      // would need random masks.
      const bool zero_ratio =
          ctx.has_input(1) && ctx.input(1).NumElements() == 1 &&
          IsFloatingPoint(ctx.input(1).dtype()) &&
          (ctx.input(1).dtype() == DataType::kFloat32 ? ctx.input(1).data<float>()[0] == 0
                                                      : ctx.input(1).data<double>()[0] == 0);
      if (training.ScalarAsBool() && !zero_ratio) {
        return absl::UnimplementedError("training mode is not supported");
      }
    }
    const Tensor& x = ctx.input(0);
    CopyBytes(x, ctx.output(0, x.dtype(), x.shape()));
    if (ctx.num_outputs() > 1) {
      // The mask is bool from opset 10; before, it has the data's type.
      if (mask_like_data_) {
        Tensor* mask = ctx.output(1, x.dtype(), x.shape());
        const bool ok = DispatchNumeric(x.dtype(), [&](auto tag) {
          using T = typename decltype(tag)::type;
          std::fill_n(mask->mutable_data<T>(), mask->NumElements(), T{1});
        });
        if (!ok) return UnsupportedType("data", x.dtype());
      } else {
        Tensor* mask = ctx.output(1, DataType::kBool, x.shape());
        if (mask->ByteSize() > 0) std::memset(mask->mutable_raw_data(), 1, mask->ByteSize());
      }
    }
    return absl::OkStatus();
  }

 private:
  explicit DropoutKernel(bool mask_like_data) : mask_like_data_(mask_like_data) {}
  bool mask_like_data_;
};

}  // namespace

void RegisterCastKernels(KernelRegistry& registry) {
  registry.Register("Identity", FactoryOf<IdentityKernel>());
  registry.Register("Cast", FactoryOf<CastKernel>());
  registry.Register(
      "CastLike", [](const KernelInit& init) { return CastKernel::CreateLike(init); }, 15);
  registry.Register("Dropout", FactoryOf<DropoutKernel>());
}

}  // namespace loopserve::engine::native
