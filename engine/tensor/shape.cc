#include "engine/tensor/shape.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace loopserve::engine {

int64_t Shape::NumElements() const { return NumElements(0, rank()); }

int64_t Shape::NumElements(int begin, int end) const {
  int64_t n = 1;
  for (int i = begin; i < end; ++i) n *= dims_[i];
  return n;
}

std::string DimsToString(absl::Span<const int64_t> dims) {
  auto dim = [](std::string* out, int64_t d) {
    absl::StrAppend(out, d < 0 ? "?" : absl::StrCat(d));
  };
  if (dims.size() <= static_cast<size_t>(kMaxPrintedDims)) {
    return absl::StrCat("[", absl::StrJoin(dims, ",", dim), "]");
  }
  constexpr int kTail = 2;
  return absl::StrCat("[", absl::StrJoin(dims.subspan(0, kMaxPrintedDims - kTail), ",", dim),
                      ",...,", absl::StrJoin(dims.subspan(dims.size() - kTail), ",", dim),
                      "] (rank ", dims.size(), ")");
}

std::string Shape::ToString() const { return DimsToString(dims_); }

absl::StatusOr<Shape> ValidateDims(absl::Span<const int64_t> dims, absl::string_view what) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": negative dimension in shape ", DimsToString(dims)));
    }
    if (d == 0) {
      continue;
    }
    if (n > kMaxElements / d) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": shape ", DimsToString(dims), " has more than 2^40 elements"));
    }
    n *= d;
  }
  return Shape(dims);
}

absl::StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b) {
  const int rank = std::max(a.rank(), b.rank());
  Shape::Dims out(rank);
  for (int i = 0; i < rank; ++i) {
    const int ia = a.rank() - rank + i;
    const int ib = b.rank() - rank + i;
    const int64_t da = ia >= 0 ? a[ia] : 1;
    const int64_t db = ib >= 0 ? b[ib] : 1;
    if (da == db || db == 1) {
      out[i] = da;
    } else if (da == 1) {
      out[i] = db;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("shapes ", a.ToString(), " and ", b.ToString(), " cannot be broadcast"));
    }
  }
  return Shape(std::move(out));
}

absl::StatusOr<int> NormalizeAxis(int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("axis ", axis, " is out of range for rank ", rank));
  }
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

}  // namespace loopserve::engine
