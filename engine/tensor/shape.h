#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace loopserve::engine {

// The dimensions of a tensor. Rank 0 is a scalar with one element. Dims are >= 0 once validated
// (ValidateDims); a Shape is a value type, cheap to copy for ranks up to 6.
class Shape {
 public:
  using Dims = absl::InlinedVector<int64_t, 6>;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(absl::Span<const int64_t> dims) : dims_(dims.begin(), dims.end()) {}
  explicit Shape(Dims dims) : dims_(std::move(dims)) {}

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t dim(int i) const { return dims_[i]; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  absl::Span<const int64_t> dims() const { return dims_; }
  Dims& mutable_dims() { return dims_; }

  // Product of the dims (1 for a scalar). Only meaningful for validated shapes.
  int64_t NumElements() const;

  // Product of dims [begin, end).
  int64_t NumElements(int begin, int end) const;

  std::string ToString() const;  // DimsToString: "[2,3]", "[]" for a scalar

  bool operator==(const Shape& other) const { return dims_ == other.dims_; }
  bool operator!=(const Shape& other) const { return dims_ != other.dims_; }

  friend void swap(Shape& a, Shape& b) noexcept { a.dims_.swap(b.dims_); }

 private:
  Dims dims_;
};

// Dims as "[2,3]" ("?" for a negative, i.e. unknown, dim). Beyond kMaxPrintedDims dims the middle
// is left out: "[1,1,1,1,1,1,1,1,1,1,1,1,1,1,...,1,1] (rank 200001)", so an absurd rank never
// makes an absurd error message.
inline constexpr int kMaxPrintedDims = 16;
std::string DimsToString(absl::Span<const int64_t> dims);

// Largest element count any tensor may have (2^40: 4 TiB of float32). Shapes above it are
// rejected so element-count arithmetic never overflows.
inline constexpr int64_t kMaxElements = int64_t{1} << 40;

// Checks that every dim is >= 0 and that the element count is at most kMaxElements (no overflow),
// and returns the shape. `what` names the tensor in the message ("input 'x'").
absl::StatusOr<Shape> ValidateDims(absl::Span<const int64_t> dims, absl::string_view what);

// Numpy-style broadcast of two shapes; InvalidArgument naming both shapes when incompatible.
absl::StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b);

// Normalises `axis` in [-rank, rank) to [0, rank); InvalidArgument otherwise.
absl::StatusOr<int> NormalizeAxis(int64_t axis, int rank);

}  // namespace loopserve::engine
