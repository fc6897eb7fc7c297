#include "engine/tools/compare.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace loopserve::tools {
namespace {

using engine::DataType;
using engine::Tensor;
using engine::Value;

float BitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1f;
  const uint32_t mantissa = h & 0x3ff;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent == 31) return BitsToFloat(sign | 0x7f800000u | (mantissa << 13));
  return BitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

float BFloat16ToFloat(uint16_t b) { return BitsToFloat(static_cast<uint32_t>(b) << 16); }

bool IsFloatType(DataType type) {
  return type == DataType::kFloat32 || type == DataType::kFloat64 || type == DataType::kFloat16 ||
         type == DataType::kBFloat16;
}

// Element `i` of a floating-point tensor as a double.
double FloatElement(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DataType::kFloat32:
      return t.data<float>()[i];
    case DataType::kFloat64:
      return t.data<double>()[i];
    case DataType::kFloat16:
      return HalfToFloat(t.data<uint16_t>()[i]);
    case DataType::kBFloat16:
      return BFloat16ToFloat(t.data<uint16_t>()[i]);
    default:
      return 0;
  }
}

// "[1,2]" for flat index 5 of shape [2,3].
std::string IndexString(const engine::Shape& shape, int64_t flat) {
  std::vector<int64_t> index(static_cast<size_t>(shape.rank()));
  for (int d = shape.rank() - 1; d >= 0; --d) {
    const int64_t extent = shape[d];
    index[static_cast<size_t>(d)] = extent > 0 ? flat % extent : 0;
    if (extent > 0) flat /= extent;
  }
  return absl::StrCat("[", absl::StrJoin(index, ","), "]");
}

std::string Describe(int64_t mismatches, int64_t total, const std::string& first) {
  return absl::StrCat(mismatches, " of ", total, " elements differ; first at ", first);
}

std::optional<std::string> CompareFloats(const Tensor& expected, const Tensor& actual,
                                         const Tolerance& tolerance) {
  const int64_t n = expected.NumElements();
  int64_t mismatches = 0;
  std::string first;
  for (int64_t i = 0; i < n; ++i) {
    const double e = FloatElement(expected, i);
    const double a = FloatElement(actual, i);
    bool ok;
    if (std::isnan(e) || std::isnan(a)) {
      ok = std::isnan(e) && std::isnan(a);
    } else if (std::isinf(e) || std::isinf(a)) {
      ok = e == a;
    } else {
      ok = std::fabs(a - e) <= tolerance.atol + tolerance.rtol * std::fabs(e);
    }
    if (ok) continue;
    if (mismatches++ == 0) {
      first =
          absl::StrFormat("%s: got %.9g, expected %.9g", IndexString(expected.shape(), i), a, e);
    }
  }
  if (mismatches == 0) return std::nullopt;
  return Describe(mismatches, n, first);
}

std::optional<std::string> CompareExact(const Tensor& expected, const Tensor& actual) {
  const int64_t n = expected.NumElements();
  int64_t mismatches = 0;
  std::string first;
  if (expected.dtype() == DataType::kString) {
    const std::string* e = expected.data<std::string>();
    const std::string* a = actual.data<std::string>();
    for (int64_t i = 0; i < n; ++i) {
      if (e[i] == a[i]) continue;
      if (mismatches++ == 0) {
        first = absl::StrCat(IndexString(expected.shape(), i), ": got \"", absl::CEscape(a[i]),
                             "\", expected \"", absl::CEscape(e[i]), "\"");
      }
    }
    if (mismatches == 0) return std::nullopt;
    return Describe(mismatches, n, first);
  }
  engine::DispatchNumericOrBool(expected.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* e = expected.data<T>();
    const T* a = actual.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      if (e[i] == a[i]) continue;
      if (mismatches++ == 0) {
        // Unary + promotes (u)int8 and bool so they print as numbers.
        first =
            absl::StrCat(IndexString(expected.shape(), i), ": got ", +a[i], ", expected ", +e[i]);
      }
    }
  });
  if (mismatches == 0) return std::nullopt;
  return Describe(mismatches, n, first);
}

}  // namespace

std::optional<std::string> CompareTensors(const Tensor& expected, const Tensor& actual,
                                          const Tolerance& tolerance) {
  DataType expected_type = expected.dtype();
  if (actual.dtype() == DataType::kBFloat16 && expected_type == DataType::kUint16) {
    expected_type = DataType::kBFloat16;
  }
  if (actual.dtype() != expected_type) {
    return absl::StrCat("element type ", engine::DataTypeName(actual.dtype()), ", expected ",
                        engine::DataTypeName(expected_type));
  }
  if (actual.shape() != expected.shape()) {
    return absl::StrCat("shape ", actual.shape().ToString(), ", expected ",
                        expected.shape().ToString());
  }
  if (IsFloatType(expected_type)) {
    const Tensor relabelled = Tensor::View(expected_type, expected.shape(), expected.raw_data());
    return CompareFloats(relabelled, actual, tolerance);
  }
  return CompareExact(expected, actual);
}

std::optional<std::string> CompareValues(const Value& expected, const Value& actual,
                                         const Tolerance& tolerance) {
  auto kind_name = [](const Value& v) {
    return v.is_tensor() ? "a tensor" : v.is_sequence() ? "a sequence" : "empty (no value)";
  };
  if (expected.kind() != actual.kind()) {
    return absl::StrCat("got ", kind_name(actual), ", expected ", kind_name(expected));
  }
  if (expected.is_tensor()) return CompareTensors(expected.tensor(), actual.tensor(), tolerance);
  if (expected.is_sequence()) {
    const std::vector<Tensor>& e = expected.sequence();
    const std::vector<Tensor>& a = actual.sequence();
    if (e.size() != a.size()) {
      return absl::StrCat("sequence of ", a.size(), " tensors, expected ", e.size());
    }
    for (size_t i = 0; i < e.size(); ++i) {
      if (std::optional<std::string> diff = CompareTensors(e[i], a[i], tolerance)) {
        return absl::StrCat("sequence element ", i, ": ", *diff);
      }
    }
  }
  return std::nullopt;
}

}  // namespace loopserve::tools
