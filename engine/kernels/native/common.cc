#include "engine/kernels/native/common.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/status_macros.h"

namespace loopserve::engine::native {

absl::Status CheckArity(const KernelInit& init, int min_inputs, int max_inputs, int max_outputs) {
  const int n = init.num_inputs();
  if (n < min_inputs || n > max_inputs) {
    std::string expected =
        min_inputs == max_inputs
            ? absl::StrCat(min_inputs)
            : (max_inputs >= (1 << 20) ? absl::StrCat("at least ", min_inputs)
                                       : absl::StrCat(min_inputs, " to ", max_inputs));
    return absl::InvalidArgumentError(absl::StrCat("expects ", expected, " inputs, got ", n));
  }
  for (int i = 0; i < min_inputs; ++i) {
    if (!init.has_input(i)) {
      return absl::InvalidArgumentError(absl::StrCat("required input ", i, " is missing"));
    }
  }
  const int outputs = static_cast<int>(init.node().outputs.size());
  if (outputs < 1 || outputs > max_outputs) {
    return absl::InvalidArgumentError(
        absl::StrCat("expects ", max_outputs == 1 ? "1" : "1 to ",
                     max_outputs == 1 ? "" : absl::StrCat(max_outputs), " outputs, got ", outputs));
  }
  return absl::OkStatus();
}

absl::Status UnsupportedType(absl::string_view what, DataType type) {
  const std::string message =
      absl::StrCat(what, " has element type ", DataTypeName(type), ", which is not supported");
  if (type == DataType::kFloat16 || type == DataType::kBFloat16) {
    return absl::UnimplementedError(message);
  }
  return absl::InvalidArgumentError(message);
}

absl::Status TypeMismatch(absl::string_view what_a, DataType a, absl::string_view what_b,
                          DataType b) {
  return absl::InvalidArgumentError(absl::StrCat(what_a, " has element type ", DataTypeName(a),
                                                 " but ", what_b, " has ", DataTypeName(b)));
}

absl::Status ReadIndexList(const Tensor& t, absl::string_view what, DimVector* out) {
  if (t.rank() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be 1-D, got shape ", t.shape().ToString()));
  }
  const int64_t n = t.NumElements();
  out->clear();
  if (t.dtype() == DataType::kInt64) {
    const int64_t* p = t.data<int64_t>();
    out->assign(p, p + n);
  } else if (t.dtype() == DataType::kInt32) {
    const int32_t* p = t.data<int32_t>();
    out->assign(p, p + n);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be int32 or int64, got ", DataTypeName(t.dtype())));
  }
  return absl::OkStatus();
}

absl::Status NormalizeAxes(DimVector& axes, int rank, absl::string_view what,
                           bool allow_duplicates) {
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t a = axes[i];
    if (a < -rank || a >= rank) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": axis ", a, " is out of range for rank ", rank));
    }
    axes[i] = a < 0 ? a + rank : a;
    if (allow_duplicates) continue;
    for (size_t j = 0; j < i; ++j) {
      if (axes[j] == axes[i]) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": axis ", a, " is repeated"));
      }
    }
  }
  return absl::OkStatus();
}

void RowMajorStrides(const Shape& shape, DimVector* strides) {
  const int rank = shape.rank();
  strides->resize(rank);
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; --d) {
    (*strides)[d] = s;
    s *= shape[d];
  }
}

std::string ListToString(absl::Span<const int64_t> values) {
  return absl::StrCat("[", absl::StrJoin(values, ","), "]");
}

absl::StatusOr<std::optional<DimVector>> OptionalIntsAttribute(const Node& node,
                                                               const std::string& name) {
  if (node.FindAttribute(name) == nullptr) return std::optional<DimVector>();
  LS_ASSIGN_OR_RETURN(std::vector<int64_t> v, node.GetInts(name, std::nullopt));
  return std::optional<DimVector>(DimVector(v.begin(), v.end()));
}

}  // namespace loopserve::engine::native
