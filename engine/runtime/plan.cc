#include "engine/runtime/plan.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/runtime/node_evaluator.h"
#include "engine/transform/pipeline.h"

namespace loopserve::engine {

namespace {
// Loop/If nesting deeper than this is rejected at load (hostile models could otherwise recurse
// the compiler and executor off the stack).
constexpr int kMaxNestingDepth = 64;

// Sets Step::takeable_inputs: the inputs whose slot this one read is the only use of. Graph
// outputs, constants and captures are never takeable (the caller, the plan or the parent frame
// owns them), nor are the top-level graph's inputs (the request's); a Loop body's parameters are
// (the Loop kernel owns them and refills them every iteration).
void MarkTakeableInputs(const Graph& graph, bool top_level, std::vector<Step>& steps) {
  std::vector<int> reads(graph.values.size(), 0);
  auto read = [&reads](ValueId v) {
    if (v != kNoValue && static_cast<size_t>(v) < reads.size()) ++reads[v];
  };
  for (const Node& node : graph.nodes) {
    for (ValueId v : node.inputs) read(v);
    for (ValueId v : node.implicit_inputs) read(v);
  }
  auto pin = [&reads](ValueId v) {
    if (v != kNoValue && static_cast<size_t>(v) < reads.size()) reads[v] += 2;
  };
  for (ValueId v : graph.outputs) pin(v);
  for (const auto& [v, tensor] : graph.constants) pin(v);
  for (const Capture& c : graph.captures) pin(c.inner);
  if (top_level) {
    for (ValueId v : graph.inputs) pin(v);
  }
  for (Step& step : steps) {
    step.takeable_inputs = 0;
    const int n = std::min<int>(static_cast<int>(step.inputs.size()), 32);
    for (int i = 0; i < n; ++i) {
      const int32_t v = step.inputs[i];
      if (v >= 0 && static_cast<size_t>(v) < reads.size() && reads[v] == 1) {
        step.takeable_inputs |= uint32_t{1} << i;
      }
    }
  }
}

// Sets Step::releases: each produced value is released after the last step that reads it (a
// subgraph's capture counts as a read by the node that owns the subgraph), or after its producer
// when nothing reads it. Graph inputs and outputs, constants and captures are never released.
void MarkReleases(const Graph& graph, int num_slots, std::vector<Step>& steps) {
  std::vector<int> last_read(num_slots, -1);
  std::vector<bool> pinned(num_slots, false);
  auto pin = [&pinned](ValueId v) {
    if (v != kNoValue && v >= 0 && v < static_cast<int>(pinned.size())) pinned[v] = true;
  };
  for (ValueId v : graph.inputs) pin(v);
  for (ValueId v : graph.outputs) pin(v);
  for (const auto& [v, tensor] : graph.constants) pin(v);
  for (const Capture& c : graph.captures) pin(c.inner);
  for (size_t s = 0; s < steps.size(); ++s) {
    steps[s].releases.clear();
    auto read = [&](ValueId v) {
      if (v != kNoValue && v >= 0 && v < num_slots) last_read[v] = static_cast<int>(s);
    };
    for (ValueId v : steps[s].node->inputs) read(v);
    for (ValueId v : steps[s].node->implicit_inputs) read(v);
  }
  for (size_t s = 0; s < steps.size(); ++s) {
    for (const int32_t v : steps[s].outputs) {
      if (v < 0 || pinned[v]) continue;
      pinned[v] = true;  // an output listed twice is released once
      const int last = std::max(last_read[v], static_cast<int>(s));
      steps[last].releases.push_back(v);
    }
  }
}

}  // namespace

const Tensor* CompileContext::FindConstant(ValueId id) const {
  for (int level = static_cast<int>(scopes_.size()) - 1; level >= 0 && id != kNoValue; --level) {
    const Graph& g = *scopes_[level];
    for (const auto& [value, tensor] : g.constants) {
      if (value == id) return tensor.get();
    }
    ValueId outer = kNoValue;
    for (const Capture& capture : g.captures) {
      if (capture.inner == id) {
        outer = capture.outer;
        break;
      }
    }
    id = outer;
  }
  return nullptr;
}

absl::StatusOr<std::shared_ptr<const Plan>> Plan::Compile(std::shared_ptr<const Graph> graph,
                                                          const CompileContext& context) {
  if (context.depth() > kMaxNestingDepth) {
    return absl::InvalidArgumentError(absl::StrCat("graph '", graph->name,
                                                   "': subgraphs are nested more than ",
                                                   kMaxNestingDepth, " levels deep"));
  }
  if (context.scopes_.empty()) context.strings_possible_ = GraphMayHoldStrings(*graph);
  std::vector<std::string> rewrites;
  const std::shared_ptr<const Graph> source = graph;
  if (context.transforms()) {
    // The optimizer reads constants through the scopes pushed so far plus this graph.
    context.PushScope(graph.get());
    transform::TransformContext transform_context;
    transform_context.find_constant = [&context](ValueId id) { return context.FindConstant(id); };
    transform_context.evaluate = [&context](const Node& node,
                                            const std::vector<const Tensor*>& inputs) {
      return EvaluateNode(context.registry(), node, inputs);
    };
    transform_context.inputs_checked = context.scopes_.size() == 1;
    transform_context.bf16_products = context.bf16_products();
    absl::StatusOr<std::shared_ptr<const Graph>> optimized =
        transform::Optimize(graph, transform_context, &rewrites);
    context.PopScope();
    if (!optimized.ok()) return optimized.status();
    graph = *std::move(optimized);
  }
  context.PushScope(graph.get());
  absl::Cleanup pop_scope = [&context] { context.PopScope(); };
  std::shared_ptr<Plan> plan(new Plan());
  plan->graph_ = graph;
  int num_slots = static_cast<int>(graph->values.size());
  plan->produced_.assign(num_slots, false);
  plan->steps_.reserve(graph->nodes.size());
  plan->kernels_.reserve(graph->nodes.size());

  for (const Node& node : graph->nodes) {
    const KernelFactory* factory = context.registry().Find(node.op_type, node.opset);
    if (!node.domain.empty() && node.domain != "ai.onnx") factory = nullptr;
    if (factory == nullptr) {
      return absl::UnimplementedError(
          absl::StrCat(node.Label(), ": op type '", node.op_type, "' ",
                       node.domain.empty() ? "" : absl::StrCat("of domain '", node.domain, "' "),
                       "at opset ", node.opset, " is not supported"));
    }
    KernelInit init(node, *graph, context);
    absl::StatusOr<std::unique_ptr<Kernel>> kernel = (*factory)(init);
    if (!kernel.ok()) {
      // Factories usually name the node already; add it when they did not.
      const std::string label = node.Label();
      if (absl::StrContains(kernel.status().message(), label)) return kernel.status();
      return Annotate(kernel.status(), absl::StrCat(label, ": "));
    }
    Step step;
    step.kernel = kernel->get();
    step.node = &node;
    step.label = absl::StrCat(node.Label(), ": ");
    step.tensor_inputs_only = !step.kernel->AcceptsNonTensorInputs();
    step.reject_strings = context.strings_possible() && !step.kernel->AcceptsStringInputs();
    for (ValueId v : node.inputs) step.inputs.push_back(v);
    for (ValueId v : node.outputs) {
      if (v == kNoValue) {
        step.outputs.push_back(num_slots++);
        plan->produced_.push_back(true);
      } else {
        step.outputs.push_back(v);
        plan->produced_[v] = true;
      }
    }
    plan->kernels_.push_back(*std::move(kernel));
    plan->steps_.push_back(std::move(step));
  }
  plan->num_slots_ = num_slots;
  MarkTakeableInputs(*graph, context.depth() == 0, plan->steps_);
  MarkReleases(*graph, num_slots, plan->steps_);
  if (std::string* dump = context.dump()) {
    absl::StrAppend(dump, "graph '", graph->name, "' (depth ", context.depth(), ")\n");
    if (!rewrites.empty()) {
      absl::StrAppend(dump, " before the optimizer:\n", transform::DumpNodes(*source),
                      " rewrites:\n");
      for (const std::string& line : rewrites) absl::StrAppend(dump, "  ", line, "\n");
    }
    absl::StrAppend(dump, " plan:\n", transform::DumpNodes(*graph));
  }
  return std::shared_ptr<const Plan>(std::move(plan));
}

}  // namespace loopserve::engine
