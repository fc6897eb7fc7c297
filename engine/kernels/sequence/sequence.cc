// SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceAt, SequenceErase, SequenceLength.
//
// Outputs are written into the output Value's vector, whose element tensors keep their buffers
// between runs, so a sequence rebuilt with the same sizes (a Loop body appending one tensor per
// iteration) does not allocate once the buffers have grown.

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/sequence/common.h"
#include "engine/kernels/sequence/register_sequence.h"

namespace loopserve::engine::sequence {
namespace {

// Checks that `t` has the element type of the (non-empty) sequence `seq`.
absl::Status CheckElementType(const std::vector<Tensor>& seq, const Tensor& t,
                              absl::string_view what) {
  if (seq.empty() || seq[0].dtype() == t.dtype()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " has element type ", DataTypeName(t.dtype()), " but the sequence holds ",
                   DataTypeName(seq[0].dtype()), " tensors"));
}

// SequenceEmpty: an empty sequence. The dtype attribute only types the (absent) elements.
class SequenceEmptyKernel final : public Kernel {
 public:
  bool AcceptsStringInputs() const override { return true; }
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 0, 0));
    return std::unique_ptr<Kernel>(new SequenceEmptyKernel());
  }
  absl::Status Run(KernelContext& ctx) const override {
    ctx.output_value(0).mutable_sequence().clear();
    return absl::OkStatus();
  }
};

// SequenceConstruct: a sequence of its (one or more) tensor inputs, all of one element type.
class SequenceConstructKernel final : public Kernel {
 public:
  bool AcceptsStringInputs() const override { return true; }
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1 << 20));
    for (int i = 0; i < init.num_inputs(); ++i) {
      if (!init.has_input(i))
        return absl::InvalidArgumentError(absl::StrCat("input ", i, " is missing"));
    }
    return std::unique_ptr<Kernel>(new SequenceConstructKernel());
  }
  absl::Status Run(KernelContext& ctx) const override {
    const int n = ctx.num_inputs();
    for (int i = 1; i < n; ++i) {
      if (ctx.input(i).dtype() != ctx.input(0).dtype()) {
        return absl::InvalidArgumentError(
            absl::StrCat("input ", i, " has element type ", DataTypeName(ctx.input(i).dtype()),
                         " but input 0 has ", DataTypeName(ctx.input(0).dtype())));
      }
    }
    std::vector<Tensor>& out = ctx.output_value(0).mutable_sequence();
    out.resize(n);
    for (int i = 0; i < n; ++i) out[i].CopyFrom(ctx.input(i));
    return absl::OkStatus();
  }
};

// SequenceInsert(S, T, position?): S with T inserted at position (default: appended).
class SequenceInsertKernel final : public Kernel {
 public:
  bool AcceptsStringInputs() const override { return true; }
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 2, 3));
    return std::unique_ptr<Kernel>(new SequenceInsertKernel());
  }
  bool AcceptsNonTensorInputs() const override { return true; }
  absl::Status Run(KernelContext& ctx) const override {
    LS_ASSIGN_OR_RETURN(const std::vector<Tensor>* in, InputSequence(ctx, 0, "input_sequence"));
    LS_ASSIGN_OR_RETURN(const Tensor* t, InputTensor(ctx, 1, "tensor"));
    LS_RETURN_IF_ERROR(CheckElementType(*in, *t, "tensor"));
    const int64_t n = static_cast<int64_t>(in->size());
    int64_t pos = n;
    if (ctx.has_input(2)) {
      LS_ASSIGN_OR_RETURN(const Tensor* p, InputTensor(ctx, 2, "position"));
      LS_ASSIGN_OR_RETURN(pos, ReadPosition(*p, n, /*allow_end=*/true));
    }
    // A list a Loop carries and appends to (a scripted PyTorch loop's list.append) has no other
    // reader: insert into it instead of copying every element every iteration.
    if (Value* taken = ctx.TakeInputValue(0, 0); taken != nullptr) {
      std::vector<Tensor>& seq = taken->mutable_sequence();  // `in` is stale from here on
      Tensor element;
      element.CopyFrom(*t);
      seq.insert(seq.begin() + pos, std::move(element));
      return absl::OkStatus();
    }
    std::vector<Tensor>& out = ctx.output_value(0).mutable_sequence();
    out.resize(n + 1);
    for (int64_t i = 0; i < pos; ++i) out[i].CopyFrom((*in)[i]);
    out[pos].CopyFrom(*t);
    for (int64_t i = pos; i < n; ++i) out[i + 1].CopyFrom((*in)[i]);
    return absl::OkStatus();
  }
};

// SequenceAt(S, position): a copy of the element at position.
class SequenceAtKernel final : public Kernel {
 public:
  bool AcceptsStringInputs() const override { return true; }
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 2, 2));
    return std::unique_ptr<Kernel>(new SequenceAtKernel());
  }
  bool AcceptsNonTensorInputs() const override { return true; }
  absl::Status Run(KernelContext& ctx) const override {
    LS_ASSIGN_OR_RETURN(const std::vector<Tensor>* in, InputSequence(ctx, 0, "input_sequence"));
    LS_ASSIGN_OR_RETURN(const Tensor* p, InputTensor(ctx, 1, "position"));
    LS_ASSIGN_OR_RETURN(const int64_t pos,
                        ReadPosition(*p, static_cast<int64_t>(in->size()), /*allow_end=*/false));
    ctx.output_value(0).mutable_tensor().CopyFrom((*in)[pos]);
    return absl::OkStatus();
  }
};

// SequenceErase(S, position?): S without the element at position (default: the last).
class SequenceEraseKernel final : public Kernel {
 public:
  bool AcceptsStringInputs() const override { return true; }
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 2));
    return std::unique_ptr<Kernel>(new SequenceEraseKernel());
  }
  bool AcceptsNonTensorInputs() const override { return true; }
  absl::Status Run(KernelContext& ctx) const override {
    LS_ASSIGN_OR_RETURN(const std::vector<Tensor>* in, InputSequence(ctx, 0, "input_sequence"));
    const int64_t n = static_cast<int64_t>(in->size());
    if (n == 0) return absl::InvalidArgumentError("cannot erase from an empty sequence");
    int64_t pos = n - 1;
    if (ctx.has_input(1)) {
      LS_ASSIGN_OR_RETURN(const Tensor* p, InputTensor(ctx, 1, "position"));
      LS_ASSIGN_OR_RETURN(pos, ReadPosition(*p, n, /*allow_end=*/false));
    }
    std::vector<Tensor>& out = ctx.output_value(0).mutable_sequence();
    out.resize(n - 1);
    for (int64_t i = 0, j = 0; i < n; ++i) {
      if (i != pos) out[j++].CopyFrom((*in)[i]);
    }
    return absl::OkStatus();
  }
};

// SequenceLength(S): the number of elements as an int64 scalar.
class SequenceLengthKernel final : public Kernel {
 public:
  bool AcceptsStringInputs() const override { return true; }
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
    return std::unique_ptr<Kernel>(new SequenceLengthKernel());
  }
  bool AcceptsNonTensorInputs() const override { return true; }
  absl::Status Run(KernelContext& ctx) const override {
    LS_ASSIGN_OR_RETURN(const std::vector<Tensor>* in, InputSequence(ctx, 0, "input_sequence"));
    Tensor* out = ctx.output(0, DataType::kInt64, Shape{});
    out->mutable_data<int64_t>()[0] = static_cast<int64_t>(in->size());
    return absl::OkStatus();
  }
};

}  // namespace

void RegisterSequenceOpKernels(KernelRegistry& registry) {
  registry.Register("SequenceEmpty", FactoryOf<SequenceEmptyKernel>(), 11);
  registry.Register("SequenceConstruct", FactoryOf<SequenceConstructKernel>(), 11);
  registry.Register("SequenceInsert", FactoryOf<SequenceInsertKernel>(), 11);
  registry.Register("SequenceAt", FactoryOf<SequenceAtKernel>(), 11);
  registry.Register("SequenceErase", FactoryOf<SequenceEraseKernel>(), 11);
  registry.Register("SequenceLength", FactoryOf<SequenceLengthKernel>(), 11);
}

}  // namespace loopserve::engine::sequence
