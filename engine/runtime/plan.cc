#include "engine/runtime/plan.h"

#include <optional>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"

namespace loopserve::engine {

namespace {
// Loop/If nesting deeper than this is rejected at load (hostile models could otherwise recurse
// the compiler and executor off the stack).
constexpr int kMaxNestingDepth = 64;

bool IsOnnxOp(const Node& node, const char* op_type, size_t inputs, size_t outputs) {
  return node.op_type == op_type && node.domain.empty() && node.inputs.size() == inputs &&
         node.outputs.size() == outputs;
}

// Rewrites every MatMul -> Add -> [Tanh | Relu | Sigmoid] chain whose intermediate values have no
// other reader into one kFusedMatMulOp node, so the body of an RNN cell runs as one oneDNN
// primitive instead of three (one execute floor and one pass over the data instead of three).
// The fused node takes the chain's last position, where every operand is already computed.
// Returns `graph` itself when nothing matches.
std::shared_ptr<const Graph> FuseMatMulChains(std::shared_ptr<const Graph> graph,
                                              const KernelRegistry& registry) {
  const Graph& g = *graph;
  const int num_nodes = static_cast<int>(g.nodes.size());
  std::vector<int> uses(g.values.size(), 0);
  std::vector<int> consumer(g.values.size(), -1);
  for (int n = 0; n < num_nodes; ++n) {
    for (ValueId v : g.nodes[n].inputs) {
      if (v == kNoValue) continue;
      ++uses[v];
      consumer[v] = n;
    }
    // A value a subgraph reads, or that the graph returns, is never fused away.
    for (ValueId v : g.nodes[n].implicit_inputs) uses[v] += 2;
  }
  for (ValueId v : g.outputs) uses[v] += 2;

  std::vector<bool> removed(num_nodes, false);
  std::vector<std::optional<Node>> replacement(num_nodes);
  bool changed = false;
  for (int n = 0; n < num_nodes; ++n) {
    const Node& matmul = g.nodes[n];
    if (!IsOnnxOp(matmul, "MatMul", 2, 1) || matmul.inputs[0] == kNoValue ||
        matmul.inputs[1] == kNoValue || registry.Find(kFusedMatMulOp, matmul.opset) == nullptr) {
      continue;
    }
    const ValueId product = matmul.outputs[0];
    if (product == kNoValue || uses[product] != 1) continue;
    const int add_index = consumer[product];
    const Node& add = g.nodes[add_index];
    if (removed[add_index] || !IsOnnxOp(add, "Add", 2, 1) || add.opset < 7) continue;
    const ValueId bias = add.inputs[0] == product ? add.inputs[1] : add.inputs[0];
    if (bias == kNoValue || bias == product || add.outputs[0] == kNoValue) continue;
    int last = add_index;
    std::string activation;
    const ValueId sum = add.outputs[0];
    if (uses[sum] == 1) {
      const Node& act = g.nodes[consumer[sum]];
      if ((act.op_type == "Tanh" || act.op_type == "Relu" || act.op_type == "Sigmoid") &&
          IsOnnxOp(act, act.op_type.c_str(), 1, 1) && act.outputs[0] != kNoValue) {
        last = consumer[sum];
        activation = act.op_type;
      }
    }
    Node fused;
    fused.name = matmul.name;
    fused.op_type = kFusedMatMulOp;
    fused.opset = matmul.opset;
    fused.inputs = {matmul.inputs[0], matmul.inputs[1], bias};
    fused.outputs = {g.nodes[last].outputs[0]};
    Attribute attr;
    attr.type = Attribute::Type::kString;
    attr.s = activation;
    fused.attributes["activation"] = std::move(attr);
    removed[n] = true;
    removed[add_index] = true;
    removed[last] = true;
    replacement[last] = std::move(fused);
    changed = true;
  }
  // Gemm -> Tanh | Relu | Sigmoid: the activation rides on the Gemm as a post-op.
  for (int n = 0; n < num_nodes; ++n) {
    const Node& gemm = g.nodes[n];
    if (removed[n] || gemm.op_type != "Gemm" || !gemm.domain.empty() || gemm.outputs.size() != 1 ||
        gemm.outputs[0] == kNoValue || gemm.attributes.count(kFusedActivationAttribute) > 0 ||
        uses[gemm.outputs[0]] != 1) {
      continue;
    }
    const int act_index = consumer[gemm.outputs[0]];
    const Node& act = g.nodes[act_index];
    if (removed[act_index] ||
        !(act.op_type == "Tanh" || act.op_type == "Relu" || act.op_type == "Sigmoid") ||
        !IsOnnxOp(act, act.op_type.c_str(), 1, 1) || act.outputs[0] == kNoValue) {
      continue;
    }
    Node fused = gemm;
    fused.outputs = {act.outputs[0]};
    Attribute attr;
    attr.type = Attribute::Type::kString;
    attr.s = act.op_type;
    fused.attributes[kFusedActivationAttribute] = std::move(attr);
    removed[n] = true;
    removed[act_index] = true;
    replacement[act_index] = std::move(fused);
    changed = true;
  }
  // Elementwise chains: binary -> [binary] -> [activation], at least two ops.
  auto is_binary = [](const Node& node) {
    return (node.op_type == "Add" || node.op_type == "Sub" || node.op_type == "Mul" ||
            node.op_type == "Div") &&
           node.domain.empty() && node.opset >= 7 && node.inputs.size() == 2 &&
           node.outputs.size() == 1 && node.inputs[0] != kNoValue && node.inputs[1] != kNoValue &&
           node.outputs[0] != kNoValue;
  };
  auto is_activation = [](const Node& node) {
    return (node.op_type == "Tanh" || node.op_type == "Relu" || node.op_type == "Sigmoid") &&
           node.domain.empty() && node.inputs.size() == 1 && node.outputs.size() == 1 &&
           node.outputs[0] != kNoValue;
  };
  for (int n = 0; n < num_nodes; ++n) {
    const Node& first = g.nodes[n];
    if (removed[n] || !is_binary(first) || registry.Find(kFusedBinaryOp, first.opset) == nullptr) {
      continue;
    }
    int last = n;
    std::vector<ValueId> inputs = first.inputs;
    std::string op2;
    ValueId value = first.outputs[0];
    if (uses[value] == 1 && !removed[consumer[value]] && is_binary(g.nodes[consumer[value]])) {
      const Node& second = g.nodes[consumer[value]];
      // The chain's value must be the first operand (oneDNN's post-op computes dst op c);
      // Add and Mul commute.
      const bool commutes = second.op_type == "Add" || second.op_type == "Mul";
      const int other = second.inputs[0] == value ? 1 : 0;
      if (second.inputs[other] != value && (other == 1 || commutes)) {
        inputs.push_back(second.inputs[other]);
        op2 = second.op_type;
        last = consumer[value];
        value = second.outputs[0];
      }
    }
    std::string activation;
    if (uses[value] == 1 && !removed[consumer[value]] && is_activation(g.nodes[consumer[value]])) {
      last = consumer[value];
      activation = g.nodes[last].op_type;
      value = g.nodes[last].outputs[0];
    }
    if (last == n) continue;
    Node fused;
    fused.name = first.name;
    fused.op_type = kFusedBinaryOp;
    fused.opset = first.opset;
    fused.inputs = std::move(inputs);
    fused.outputs = {value};
    for (const auto& [name, text] : {std::pair<const char*, std::string>{"op", first.op_type},
                                     {"op2", op2},
                                     {"activation", activation}}) {
      Attribute attr;
      attr.type = Attribute::Type::kString;
      attr.s = text;
      fused.attributes[name] = std::move(attr);
    }
    removed[n] = true;
    if (!op2.empty()) removed[consumer[first.outputs[0]]] = true;
    removed[last] = true;
    replacement[last] = std::move(fused);
    changed = true;
  }
  if (!changed) return graph;
  auto rewritten = std::make_shared<Graph>(g);
  rewritten->nodes.clear();
  for (int n = 0; n < num_nodes; ++n) {
    if (replacement[n].has_value()) {
      rewritten->nodes.push_back(*std::move(replacement[n]));
    } else if (!removed[n]) {
      rewritten->nodes.push_back(g.nodes[n]);
    }
  }
  return rewritten;
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
  graph = FuseMatMulChains(std::move(graph), context.registry());
  if (context.scopes_.empty()) context.strings_possible_ = GraphMayHoldStrings(*graph);
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
  return std::shared_ptr<const Plan>(std::move(plan));
}

}  // namespace loopserve::engine
