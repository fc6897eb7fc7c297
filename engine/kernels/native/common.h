#pragma once

// Helpers shared by the native kernels: factories, argument checks and index-list reading.
// Everything here is allocation-free on success so kernels can call it on every run.

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/kernels/registry.h"
#include "engine/runtime/kernel.h"
#include "engine/tensor/dtype.h"
#include "engine/tensor/shape.h"
#include "engine/tensor/tensor.h"

namespace loopserve::engine::native {

// Index math buffers: inline for the ranks real models use, so runs do not allocate.
using DimVector = absl::InlinedVector<int64_t, 8>;

// A factory calling `K::Create(const KernelInit&, args...)`; the bound args carry what the
// registered opset range implies (e.g. whether axes come from an attribute or an input).
template <typename K, typename... Args>
KernelFactory FactoryOf(Args... args) {
  return [args...](const KernelInit& init) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    return K::Create(init, args...);
  };
}

// Where an op reads a list operand from: an attribute (older opsets) or an input (newer ones).
enum class ListFrom : uint8_t { kAttribute, kInput };

// Checks the node's input count is in [min, max] and that the first `min` inputs are present,
// and that it has at least one output. Load-time check.
absl::Status CheckArity(const KernelInit& init, int min_inputs, int max_inputs,
                        int max_outputs = 1);

// InvalidArgument (or Unimplemented for the 16-bit float storage types, which are valid ONNX but
// not computed on here): "<what> has element type X, which <op> does not support".
absl::Status UnsupportedType(absl::string_view what, DataType type);

// InvalidArgument "<what_a> has element type X but <what_b> has Y".
absl::Status TypeMismatch(absl::string_view what_a, DataType a, absl::string_view what_b,
                          DataType b);

// Reads an int32/int64 tensor of rank 0 or 1 into `out` (cleared first). `what` names it in
// messages ("input 'shape'").
absl::Status ReadIndexList(const Tensor& t, absl::string_view what, DimVector* out);

// Normalises each axis of `axes` against `rank` in place; rejects out-of-range and (when
// `allow_duplicates` is false) repeated axes.
absl::Status NormalizeAxes(DimVector& axes, int rank, absl::string_view what,
                           bool allow_duplicates = false);

// Row-major strides of `shape` (in elements).
void RowMajorStrides(const Shape& shape, DimVector* strides);

// "[1,2,3]" for messages.
std::string ListToString(absl::Span<const int64_t> values);

// Copies `in` into the output tensor `out` (already resized to as many elements of its type):
// the bytes, or the strings of a kString tensor.
inline void CopyBytes(const Tensor& in, Tensor* out) {
  if (in.dtype() == DataType::kString) {
    CopyElements(in.dtype(), in.raw_data(), 0, out->mutable_raw_data(), 0, in.NumElements());
    return;
  }
  const size_t bytes = in.ByteSize();
  if (bytes > 0) std::memcpy(out->mutable_raw_data(), in.raw_data(), bytes);
}

// The value of the "axes"-like ints attribute, or nullopt when absent.
absl::StatusOr<std::optional<DimVector>> OptionalIntsAttribute(const Node& node,
                                                               const std::string& name);

}  // namespace loopserve::engine::native
