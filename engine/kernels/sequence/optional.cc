// Optional, OptionalHasElement, OptionalGetElement. An optional holding a value is that value; an
// empty one is a kNone Value.

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/sequence/common.h"
#include "engine/kernels/sequence/register_sequence.h"

namespace loopserve::engine::sequence {
namespace {

// Optional(input?): an optional holding a copy of input, or an empty one (typed by the `type`
// attribute, which only matters statically) when input is omitted.
class OptionalKernel final : public Kernel {
 public:
  bool AcceptsStringInputs() const override { return true; }
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 0, 1));
    return std::unique_ptr<Kernel>(new OptionalKernel());
  }
  bool AcceptsNonTensorInputs() const override { return true; }
  absl::Status Run(KernelContext& ctx) const override {
    if (ctx.has_input(0)) {
      ctx.output_value(0).CopyFrom(ctx.input_value(0));
    } else {
      ctx.output_value(0).SetNone();
    }
    return absl::OkStatus();
  }
};

// OptionalHasElement(input?): whether input holds a value. From opset 18 the input may be omitted
// (false) or be a plain tensor or sequence (true).
class OptionalHasElementKernel final : public Kernel {
 public:
  bool AcceptsStringInputs() const override { return true; }
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, init.node().opset >= 18 ? 0 : 1, 1));
    return std::unique_ptr<Kernel>(new OptionalHasElementKernel());
  }
  bool AcceptsNonTensorInputs() const override { return true; }
  absl::Status Run(KernelContext& ctx) const override {
    const bool has = ctx.has_input(0) && !ctx.input_value(0).is_none();
    ctx.output(0, DataType::kBool, Shape{})->mutable_data<bool>()[0] = has;
    return absl::OkStatus();
  }
};

// OptionalGetElement(input): the value an optional holds (a copy); an error when it is empty.
class OptionalGetElementKernel final : public Kernel {
 public:
  bool AcceptsStringInputs() const override { return true; }
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
    return std::unique_ptr<Kernel>(new OptionalGetElementKernel());
  }
  bool AcceptsNonTensorInputs() const override { return true; }
  absl::Status Run(KernelContext& ctx) const override {
    const Value& in = ctx.input_value(0);
    if (in.is_none()) return absl::InvalidArgumentError("the optional input is empty");
    ctx.output_value(0).CopyFrom(in);
    return absl::OkStatus();
  }
};

}  // namespace

void RegisterOptionalKernels(KernelRegistry& registry) {
  registry.Register("Optional", FactoryOf<OptionalKernel>(), 15);
  registry.Register("OptionalHasElement", FactoryOf<OptionalHasElementKernel>(), 15);
  registry.Register("OptionalGetElement", FactoryOf<OptionalGetElementKernel>(), 15);
}

}  // namespace loopserve::engine::sequence
