// ConcatFromSequence and SplitToSequence: conversions between a sequence and one tensor.

#include <cstring>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/sequence/common.h"
#include "engine/kernels/sequence/register_sequence.h"

namespace loopserve::engine::sequence {
namespace {

// ConcatFromSequence(S; axis, new_axis): the elements joined along `axis`, or stacked along a new
// axis (new_axis=1, where axis may also be rank, i.e. -rank-1 .. rank).
class ConcatFromSequenceKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
    const Node& node = init.node();
    if (node.FindAttribute("axis") == nullptr) {
      return absl::InvalidArgumentError("attribute 'axis' is required");
    }
    LS_ASSIGN_OR_RETURN(int64_t axis, node.GetInt("axis", std::nullopt));
    LS_ASSIGN_OR_RETURN(int64_t new_axis, node.GetInt("new_axis", 0));
    if (new_axis != 0 && new_axis != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute new_axis must be 0 or 1, got ", new_axis));
    }
    return std::unique_ptr<Kernel>(new ConcatFromSequenceKernel(axis, new_axis == 1));
  }
  bool AcceptsNonTensorInputs() const override { return true; }

  absl::Status Run(KernelContext& ctx) const override {
    LS_ASSIGN_OR_RETURN(const std::vector<Tensor>* seq, InputSequence(ctx, 0, "input_sequence"));
    if (seq->empty()) {
      return absl::InvalidArgumentError("cannot concatenate an empty sequence");
    }
    const Tensor& first = (*seq)[0];
    const int rank = first.rank();
    absl::StatusOr<int> axis_or = NormalizeAxis(axis_, new_axis_ ? rank + 1 : rank);
    if (!axis_or.ok()) return Annotate(axis_or.status(), "attribute 'axis': ");
    const int axis = *axis_or;
    // Each element seen as [outer, along, inner] with `along` joined (1 when stacking).
    const int64_t outer = first.shape().NumElements(0, std::min(axis, rank));
    int64_t total_along = 0;
    for (size_t k = 0; k < seq->size(); ++k) {
      const Tensor& t = (*seq)[k];
      if (t.dtype() != first.dtype()) {
        return absl::InvalidArgumentError(
            absl::StrCat("element ", k, " has element type ", DataTypeName(t.dtype()),
                         " but element 0 has ", DataTypeName(first.dtype())));
      }
      bool match = t.rank() == rank;
      for (int d = 0; match && d < rank; ++d) {
        if (d != axis || new_axis_) match = t.dim(d) == first.dim(d);
      }
      if (!match) {
        return absl::InvalidArgumentError(
            absl::StrCat("element ", k, " has shape ", t.shape().ToString(),
                         ", which does not match element 0's ", first.shape().ToString(),
                         new_axis_ ? "" : absl::StrCat(" outside axis ", axis)));
      }
      total_along += new_axis_ ? 1 : t.dim(axis);
    }
    Shape out_shape;
    Shape::Dims& dims = out_shape.mutable_dims();
    dims.assign(first.shape().dims().begin(), first.shape().dims().end());
    if (new_axis_) {
      dims.insert(dims.begin() + axis, total_along);
    } else {
      if (rank == 0)
        return absl::InvalidArgumentError("cannot concatenate scalars without new_axis");
      dims[axis] = total_along;
    }
    LS_RETURN_IF_ERROR(ValidateDims(dims, "output").status());
    Tensor* out = ctx.output(0, first.dtype(), out_shape);
    const size_t elem = DataTypeSize(first.dtype());
    const size_t out_row =
        static_cast<size_t>(out_shape.NumElements(axis, out_shape.rank())) * elem;
    char* dst = static_cast<char*>(out->mutable_raw_data());
    size_t offset = 0;
    for (const Tensor& t : *seq) {
      const size_t chunk = outer == 0 ? 0 : static_cast<size_t>(t.NumElements() / outer) * elem;
      const char* src = static_cast<const char*>(t.raw_data());
      for (int64_t o = 0; o < outer && chunk > 0; ++o) {
        std::memcpy(dst + o * out_row + offset, src + o * chunk, chunk);
      }
      offset += chunk;
    }
    return absl::OkStatus();
  }

 private:
  ConcatFromSequenceKernel(int64_t axis, bool new_axis) : axis_(axis), new_axis_(new_axis) {}
  int64_t axis_;
  bool new_axis_;
};

// SplitToSequence(input, split?; axis, keepdims): pieces of `input` along `axis`. `split` is a
// scalar piece length (the last piece may be shorter) or a 1-D list of lengths; without it the
// pieces have length 1 and keepdims=0 drops the axis.
class SplitToSequenceKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 2));
    LS_ASSIGN_OR_RETURN(int64_t axis, init.node().GetInt("axis", 0));
    LS_ASSIGN_OR_RETURN(int64_t keepdims, init.node().GetInt("keepdims", 1));
    return std::unique_ptr<Kernel>(new SplitToSequenceKernel(axis, keepdims != 0));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    if (x.rank() == 0) return absl::InvalidArgumentError("cannot split a scalar");
    LS_ASSIGN_OR_RETURN(const int axis, NormalizeAxis(axis_, x.rank()));
    const int64_t dim = x.dim(axis);
    absl::InlinedVector<int64_t, 8> lengths;
    bool drop_axis = false;
    if (!ctx.has_input(1)) {
      lengths.assign(dim, 1);
      drop_axis = !keepdims_;
    } else {
      const Tensor& s = ctx.input(1);
      if (s.dtype() != DataType::kInt32 && s.dtype() != DataType::kInt64) {
        return absl::InvalidArgumentError(
            absl::StrCat("split must be int32 or int64, got ", DataTypeName(s.dtype())));
      }
      auto read = [&](int64_t i) {
        return s.dtype() == DataType::kInt64 ? s.data<int64_t>()[i]
                                             : static_cast<int64_t>(s.data<int32_t>()[i]);
      };
      if (s.rank() == 0) {
        const int64_t len = read(0);
        if (len <= 0) {
          return absl::InvalidArgumentError(absl::StrCat("split must be positive, got ", len));
        }
        for (int64_t done = 0; done < dim; done += len)
          lengths.push_back(std::min(len, dim - done));
      } else if (s.rank() == 1) {
        int64_t sum = 0;
        for (int64_t i = 0; i < s.NumElements(); ++i) {
          const int64_t len = read(i);
          if (len < 0) {
            return absl::InvalidArgumentError(absl::StrCat("split length ", len, " is negative"));
          }
          sum += len;
          lengths.push_back(len);
        }
        if (sum != dim) {
          return absl::InvalidArgumentError(
              absl::StrCat("split lengths sum to ", sum, " but axis ", axis, " has size ", dim));
        }
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("split must be a scalar or 1-D, got shape ", s.shape().ToString()));
      }
    }
    const size_t elem = DataTypeSize(x.dtype());
    const int64_t outer = x.shape().NumElements(0, axis);
    const size_t inner = static_cast<size_t>(x.shape().NumElements(axis + 1, x.rank())) * elem;
    std::vector<Tensor>& out = ctx.output_value(0).mutable_sequence();
    out.resize(lengths.size());
    const char* src = static_cast<const char*>(x.raw_data());
    int64_t start = 0;
    for (size_t k = 0; k < lengths.size(); ++k) {
      Shape shape = x.shape();
      shape[axis] = lengths[k];
      if (drop_axis) shape.mutable_dims().erase(shape.mutable_dims().begin() + axis);
      out[k].Resize(x.dtype(), shape);
      char* dst = static_cast<char*>(out[k].mutable_raw_data());
      const size_t piece = static_cast<size_t>(lengths[k]) * inner;
      for (int64_t o = 0; o < outer && piece > 0; ++o) {
        std::memcpy(dst + o * piece, src + (o * dim + start) * inner, piece);
      }
      start += lengths[k];
    }
    return absl::OkStatus();
  }

 private:
  SplitToSequenceKernel(int64_t axis, bool keepdims) : axis_(axis), keepdims_(keepdims) {}
  int64_t axis_;
  bool keepdims_;
};

}  // namespace

void RegisterConcatSplitKernels(KernelRegistry& registry) {
  registry.Register("ConcatFromSequence", FactoryOf<ConcatFromSequenceKernel>(), 11);
  registry.Register("SplitToSequence", FactoryOf<SplitToSequenceKernel>(), 11);
}

}  // namespace loopserve::engine::sequence
