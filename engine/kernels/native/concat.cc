// Concat: joins tensors of any element type along an axis.

#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/native/register_families.h"
#include "engine/runtime/run_context.h"

namespace loopserve::engine::native {
namespace {

class ConcatKernel final : public Kernel {
 public:
  bool AcceptsStringInputs() const override { return true; }
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1 << 20));
    for (int i = 0; i < init.num_inputs(); ++i) {
      if (!init.has_input(i)) {
        return absl::InvalidArgumentError(absl::StrCat("input ", i, " is missing"));
      }
    }
    const Node& node = init.node();
    // Opsets 1-3 default the axis to 1; from opset 4 it is required.
    if (node.opset >= 4 && node.FindAttribute("axis") == nullptr) {
      return absl::InvalidArgumentError("attribute 'axis' is required");
    }
    LS_ASSIGN_OR_RETURN(int64_t axis, node.GetInt("axis", 1));
    return std::unique_ptr<Kernel>(new ConcatKernel(axis));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const int n = ctx.num_inputs();
    const Tensor& first = ctx.input(0);
    const int rank = first.rank();
    if (rank == 0) return absl::InvalidArgumentError("cannot concatenate scalars");
    LS_ASSIGN_OR_RETURN(const int axis, NormalizeAxis(axis_, rank));
    Shape out_shape = first.shape();
    int64_t axis_total = 0;
    for (int i = 0; i < n; ++i) {
      const Tensor& t = ctx.input(i);
      if (t.dtype() != first.dtype()) {
        return TypeMismatch(absl::StrCat("input ", i), t.dtype(), "input 0", first.dtype());
      }
      bool match = t.rank() == rank;
      for (int d = 0; match && d < rank; ++d) {
        if (d != axis && t.dim(d) != first.dim(d)) match = false;
      }
      if (!match) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input ", i, " has shape ", t.shape().ToString(), ", which does not match input 0's ",
            first.shape().ToString(), " outside axis ", axis));
      }
      axis_total += t.dim(axis);
    }
    out_shape[axis] = axis_total;
    LS_RETURN_IF_ERROR(ValidateDims(out_shape.dims(), "output").status());
    if (first.dtype() != DataType::kString && n > 1) {
      LS_ASSIGN_OR_RETURN(const bool appended, AppendInPlace(ctx, axis, out_shape));
      if (appended) return absl::OkStatus();
    }
    Tensor* y = ctx.output(0, first.dtype(), out_shape);
    if (first.dtype() == DataType::kString) {
      // Strings are objects: copied by element, the same walk as the bytes below.
      const int64_t outer = out_shape.NumElements(0, axis);
      const int64_t inner = out_shape.NumElements(axis + 1, rank);
      int64_t offset = 0;
      for (int i = 0; i < n; ++i) {
        const Tensor& t = ctx.input(i);
        const int64_t row = t.dim(axis) * inner;
        for (int64_t o = 0; o < outer; ++o) {
          CopyElements(DataType::kString, t.raw_data(), o * row, y->mutable_raw_data(),
                       o * axis_total * inner + offset, row);
        }
        offset += row;
      }
      return absl::OkStatus();
    }
    const size_t elem = DataTypeSize(first.dtype());
    const int64_t outer = out_shape.NumElements(0, axis);
    const size_t inner_bytes = static_cast<size_t>(out_shape.NumElements(axis + 1, rank)) * elem;
    const size_t out_row = static_cast<size_t>(axis_total) * inner_bytes;
    InterruptPacer pacer(ctx.run_context());  // outputs may be hundreds of megabytes
    if (!CopyParts(ctx, /*first_input=*/0, axis, outer, inner_bytes,
                   static_cast<char*>(y->mutable_raw_data()), out_row, /*offset=*/0, pacer)) {
      return pacer.status();
    }
    return absl::OkStatus();
  }

 private:
  explicit ConcatKernel(int64_t axis) : axis_(axis) {}

  // Copies inputs first_input.. into `out` (outer rows of out_row bytes), each input's part of a
  // row after the previous ones, starting at byte `offset` of the row. False when the run was
  // interrupted (pacer.status() says why).
  static bool CopyParts(KernelContext& ctx, int first_input, int axis, int64_t outer,
                        size_t inner_bytes, char* out, size_t out_row, size_t offset,
                        InterruptPacer& pacer) {
    for (int i = first_input; i < ctx.num_inputs(); ++i) {
      const Tensor& t = ctx.input(i);
      const size_t row = static_cast<size_t>(t.dim(axis)) * inner_bytes;
      if (row == 0) continue;
      const char* in = static_cast<const char*>(t.raw_data());
      for (int64_t o = 0; o < outer; ++o) {
        if (!pacer.Copy(out + o * out_row + offset, in + o * row, row)) return false;
      }
      offset += row;
    }
    return true;
  }

  // Concat(state, new...) where `state` has no other reader (a Loop's carried array that grows by
  // a slice per iteration: a KV cache, a list of masks): takes input 0's buffer as the output
  // (grown 1.5x geometrically) instead of copying it into another one. When every axis before
  // `axis` has size 1, input 0 is a prefix of the output and only the new parts are written;
  // otherwise input 0's rows move apart inside the buffer, last first, and the new parts go into
  // the gaps: the same bytes moved as a copy, but one buffer per carried value in cache instead of
  // two. False when the input cannot be taken (the caller copies as usual).
  static absl::StatusOr<bool> AppendInPlace(KernelContext& ctx, int axis, const Shape& out_shape) {
    const Tensor& first = ctx.input(0);
    const int64_t outer = out_shape.NumElements(0, axis);
    const size_t elem = DataTypeSize(first.dtype());
    const size_t inner_bytes =
        static_cast<size_t>(out_shape.NumElements(axis + 1, out_shape.rank())) * elem;
    const size_t old_row = static_cast<size_t>(first.dim(axis)) * inner_bytes;
    const size_t out_row = static_cast<size_t>(out_shape[axis]) * inner_bytes;
    const size_t need = static_cast<size_t>(outer) * out_row;
    Tensor* y = ctx.TakeInput(0, 0);
    if (y == nullptr) return false;
    // `first` is the output's old value from here on; input 0's bytes lead *y's buffer.
    y->ResizeKeepingData(out_shape, need > y->capacity() ? need + need / 2 : 0);
    char* out = static_cast<char*>(y->mutable_raw_data());
    InterruptPacer pacer(ctx.run_context());
    for (int64_t o = outer - 1; o > 0 && old_row > 0; --o) {
      std::memmove(out + o * out_row, out + o * old_row, old_row);
      if (!pacer.Produced(old_row)) return pacer.status();
    }
    if (!CopyParts(ctx, /*first_input=*/1, axis, outer, inner_bytes, out, out_row, old_row,
                   pacer)) {
      return pacer.status();
    }
    return true;
  }

  int64_t axis_;
};

}  // namespace

void RegisterConcatKernels(KernelRegistry& registry) {
  registry.Register("Concat", FactoryOf<ConcatKernel>());
}

}  // namespace loopserve::engine::native
