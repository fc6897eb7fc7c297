#include "engine/kernels/sequence/common.h"

#include "absl/strings/str_cat.h"
#include "engine/tensor/dtype.h"

namespace loopserve::engine::sequence {

absl::Status CheckArity(const KernelInit& init, int min_inputs, int max_inputs, int num_outputs) {
  const int n = init.num_inputs();
  if (n < min_inputs || n > max_inputs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expects ", min_inputs == max_inputs ? "" : "between ", min_inputs,
        min_inputs == max_inputs ? "" : absl::StrCat(" and ", max_inputs), " inputs, got ", n));
  }
  for (int i = 0; i < min_inputs; ++i) {
    if (!init.has_input(i)) {
      return absl::InvalidArgumentError(absl::StrCat("required input ", i, " is missing"));
    }
  }
  const int outputs = static_cast<int>(init.node().outputs.size());
  if (outputs != num_outputs) {
    return absl::InvalidArgumentError(
        absl::StrCat("expects ", num_outputs, " outputs, got ", outputs));
  }
  return absl::OkStatus();
}

absl::StatusOr<const std::vector<Tensor>*> InputSequence(const KernelContext& ctx, int i,
                                                         absl::string_view what) {
  const Value& v = ctx.input_value(i);
  if (!v.is_sequence()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " must be a sequence, got ", v.is_tensor() ? "a tensor" : "an empty optional"));
  }
  return &v.sequence();
}

absl::StatusOr<const Tensor*> InputTensor(const KernelContext& ctx, int i, absl::string_view what) {
  const Value& v = ctx.input_value(i);
  if (!v.is_tensor()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " must be a tensor, got ", v.is_sequence() ? "a sequence" : "an empty optional"));
  }
  return &v.tensor();
}

absl::StatusOr<int64_t> ReadPosition(const Tensor& t, int64_t size, bool allow_end) {
  if (t.NumElements() != 1 || (t.dtype() != DataType::kInt32 && t.dtype() != DataType::kInt64)) {
    return absl::InvalidArgumentError(
        absl::StrCat("position must be an int32 or int64 scalar, got ", DataTypeName(t.dtype()),
                     t.shape().ToString()));
  }
  const int64_t p = t.ScalarAsInt64();
  const int64_t hi = allow_end ? size : size - 1;
  if (p < -size || p > hi) {
    return absl::InvalidArgumentError(absl::StrCat("position ", p,
                                                   " is out of range for a sequence of ", size,
                                                   " tensors (valid: ", -size, " to ", hi, ")"));
  }
  return p < 0 ? p + size : p;
}

}  // namespace loopserve::engine::sequence
