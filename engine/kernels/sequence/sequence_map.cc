// SequenceMap: runs a body graph once per element of the input sequence(s) and collects each body
// output into an output sequence.

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/control/control_flow.h"
#include "engine/kernels/sequence/common.h"
#include "engine/kernels/sequence/register_sequence.h"
#include "engine/runtime/plan.h"

namespace loopserve::engine::sequence {
namespace {

class SequenceMapState : public KernelState {
 public:
  SubgraphFrame body;
};

// Inputs: input_sequence, then additional inputs that are sequences (of the same length; element
// i is fed to iteration i) or tensors (fed whole to every iteration). The body has one parameter
// per input and one result per output.
class SequenceMapKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    const Node& node = init.node();
    if (init.num_inputs() < 1 || !init.has_input(0)) {
      return absl::InvalidArgumentError("input_sequence is required");
    }
    for (int i = 1; i < init.num_inputs(); ++i) {
      if (!init.has_input(i))
        return absl::InvalidArgumentError(absl::StrCat("input ", i, " is missing"));
    }
    std::shared_ptr<const Graph> body = node.GetGraph("body");
    if (body == nullptr) return absl::InvalidArgumentError("attribute 'body' is missing");
    if (body->inputs.size() != node.inputs.size()) {
      return absl::InvalidArgumentError(absl::StrCat("body has ", body->inputs.size(),
                                                     " inputs, the node has ", node.inputs.size()));
    }
    if (body->outputs.size() != node.outputs.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "body has ", body->outputs.size(), " outputs, the node has ", node.outputs.size()));
    }
    LS_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, init.CompileSubgraph(body));
    return std::unique_ptr<Kernel>(new SequenceMapKernel(std::move(plan)));
  }

  bool AcceptsNonTensorInputs() const override { return true; }
  std::unique_ptr<KernelState> CreateState() const override {
    return std::make_unique<SequenceMapState>();
  }

  absl::Status Run(KernelContext& ctx) const override {
    LS_ASSIGN_OR_RETURN(const std::vector<Tensor>* first, InputSequence(ctx, 0, "input_sequence"));
    const size_t n = first->size();
    for (int j = 1; j < ctx.num_inputs(); ++j) {
      const Value& v = ctx.input_value(j);
      if (v.is_none()) {
        return absl::InvalidArgumentError(absl::StrCat("input ", j, " is an empty optional"));
      }
      if (v.is_sequence() && v.sequence().size() != n) {
        return absl::InvalidArgumentError(absl::StrCat("input ", j, " is a sequence of ",
                                                       v.sequence().size(),
                                                       " tensors, input_sequence has ", n));
      }
    }
    const Graph& g = body_->graph();
    ExecutionFrame& body = ctx.state<SequenceMapState>()->body.Get(*body_, ctx.run_context());
    BindCaptures(*body_, ctx.frame(), body);
    for (int k = 0; k < ctx.num_outputs(); ++k) ctx.output_value(k).mutable_sequence().resize(n);
    for (size_t i = 0; i < n; ++i) {
      LS_RETURN_IF_ERROR(ctx.run_context().CheckInterrupted());
      for (int j = 0; j < ctx.num_inputs(); ++j) {
        const Value& v = ctx.input_value(j);
        const Tensor& t = v.is_sequence() ? v.sequence()[i] : v.tensor();
        body.slot(g.inputs[j]).mutable_tensor() = Tensor::ViewOf(t);
      }
      LS_RETURN_IF_ERROR(body.Run());
      for (int k = 0; k < ctx.num_outputs(); ++k) {
        const Value& r = body.slot(g.outputs[k]);
        if (!r.is_tensor()) {
          return absl::InvalidArgumentError(absl::StrCat("body output ", k, " must be a tensor"));
        }
        ctx.output_value(k).mutable_sequence()[i].CopyFrom(r.tensor());
      }
    }
    return absl::OkStatus();
  }

 private:
  explicit SequenceMapKernel(std::shared_ptr<const Plan> body) : body_(std::move(body)) {}
  std::shared_ptr<const Plan> body_;
};

}  // namespace

void RegisterSequenceMapKernel(KernelRegistry& registry) {
  registry.Register("SequenceMap", FactoryOf<SequenceMapKernel>(), 17);
}

}  // namespace loopserve::engine::sequence
