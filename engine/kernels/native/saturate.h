#pragma once

// SaturatingCast: the one float-to-integer conversion the native kernels use where a value may
// fall outside the integer type (Cast, Pow, Reduce*, Resize). A plain static_cast is undefined
// behaviour there (UBSan's float-cast-overflow). Header-only, stateless, thread-safe.

#include <cmath>
#include <limits>

namespace loopserve::engine::native {

// Truncates toward zero like static_cast, saturating at To's limits (so -inf gives lowest() and
// +inf max()); NaN gives 0.
template <typename To>
To SaturatingCast(double v) {
  if (std::isnan(v)) return 0;
  if (v <= static_cast<double>(std::numeric_limits<To>::lowest())) {
    return std::numeric_limits<To>::lowest();
  }
  if (v >= static_cast<double>(std::numeric_limits<To>::max())) {
    return std::numeric_limits<To>::max();
  }
  return static_cast<To>(v);
}

}  // namespace loopserve::engine::native
