// The If kernel: runs one of two compiled branches and moves its results out.

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/control/control_flow.h"
#include "engine/kernels/control/register_control.h"
#include "engine/runtime/plan.h"

namespace loopserve::engine {
namespace {

class IfState : public KernelState {
 public:
  SubgraphFrame branches[2];  // [0] else, [1] then
};

class IfKernel : public Kernel {
 public:
  bool AcceptsStringInputs() const override { return true; }
  IfKernel(std::shared_ptr<const Plan> then_plan, std::shared_ptr<const Plan> else_plan)
      : plans_{std::move(else_plan), std::move(then_plan)} {}

  std::unique_ptr<KernelState> CreateState() const override { return std::make_unique<IfState>(); }
  bool AcceptsNonTensorInputs() const override { return true; }

  absl::Status Run(KernelContext& ctx) const override {
    const Value& c = ctx.input_value(0);
    if (!c.is_tensor() || c.tensor().NumElements() != 1) {
      return absl::InvalidArgumentError(
          "the condition must be a single value (a scalar or a 1-element tensor)");
    }
    const int branch = c.tensor().ScalarAsBool() ? 1 : 0;
    const Plan& plan = *plans_[branch];
    ExecutionFrame& frame = ctx.state<IfState>()->branches[branch].Get(plan, ctx.run_context());
    BindCaptures(plan, ctx.frame(), frame);
    LS_RETURN_IF_ERROR(frame.Run());
    const std::vector<ValueId>& results = plan.graph().outputs;
    for (int j = 0; j < ctx.num_outputs(); ++j) {
      int first = 0;
      while (results[first] != results[j]) ++first;
      if (first < j) {
        ctx.output_value(j).CopyFrom(ctx.output_value(first));
      } else {
        MoveOut(plan, results[j], frame.slot(results[j]), ctx.output_value(j));
      }
    }
    return absl::OkStatus();
  }

 private:
  std::shared_ptr<const Plan> plans_[2];
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateIf(const KernelInit& init) {
  const Node& node = init.node();
  if (!init.has_input(0)) return absl::InvalidArgumentError("If needs a condition input");
  std::shared_ptr<const Graph> then_graph = node.GetGraph("then_branch");
  std::shared_ptr<const Graph> else_graph = node.GetGraph("else_branch");
  if (then_graph == nullptr || else_graph == nullptr) {
    return absl::InvalidArgumentError("attributes 'then_branch' and 'else_branch' are required");
  }
  const size_t n = node.outputs.size();
  for (const auto& [name, g] :
       {std::pair{"then_branch", then_graph}, {"else_branch", else_graph}}) {
    if (g->outputs.size() != n) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " has ", g->outputs.size(), " outputs, the node has ", n));
    }
  }
  LS_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> then_plan, init.CompileSubgraph(then_graph));
  LS_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> else_plan, init.CompileSubgraph(else_graph));
  return std::make_unique<IfKernel>(std::move(then_plan), std::move(else_plan));
}

}  // namespace

void RegisterIfKernel(KernelRegistry& registry) { registry.Register("If", CreateIf); }

}  // namespace loopserve::engine
