#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "engine/ir/graph.h"
#include "engine/kernels/registry.h"
#include "engine/runtime/kernel.h"

namespace loopserve::engine {

// One node of a plan, ready to run: its kernel and the frame slots it reads and writes.
struct Step {
  const Kernel* kernel = nullptr;
  const Node* node = nullptr;               // owned by Plan::graph()
  absl::InlinedVector<int32_t, 4> inputs;   // slot per input; -1 for an omitted input
  absl::InlinedVector<int32_t, 2> outputs;  // slot per output (scratch slot when omitted)
  std::string label;                        // "node 'x' (Op): " prefix for errors
  // !kernel->AcceptsNonTensorInputs(), resolved at compile time so the executor's per-step input
  // check is a few loads instead of a virtual call per input.
  bool tensor_inputs_only = true;
  // The model can hold strings and the kernel does not take them: the executor checks that no
  // input (or sequence element) is a kString tensor.
  bool reject_strings = false;
  // Bit i: input i's slot has no reader but this one input of this step (no other input, step,
  // subgraph capture or graph output reads it), and it is not a constant, a capture or an input of
  // the top-level graph. A kernel may then take the slot's tensor as its output and update it in
  // place (KernelContext::TakeInput) instead of copying it: a Loop's carried tensor array that
  // ScatterND writes one row of, or that Concat appends to. Inputs 32 and up are never set.
  uint32_t takeable_inputs = 0;
  // Slots no later step reads (this step was their last reader, or produced them unread): the
  // frame recycles their buffers for later steps' outputs after this step (ExecutionFrame). Never
  // graph inputs or outputs, constants or captures.
  absl::InlinedVector<int32_t, 2> releases;
};

// State shared while compiling one model: registry, the Loop table, the nesting depth.
class CompileContext {
 public:
  explicit CompileContext(const KernelRegistry& registry) : registry_(registry) {}
  const KernelRegistry& registry() const { return registry_; }

  // Whether Plan::Compile runs the graph optimizer (engine/transform) on the graphs it compiles;
  // off for the `unfused` fallbacks of fused nodes, which must run as they are.
  bool transforms() const { return transforms_; }
  void set_transforms(bool on) const { transforms_ = on; }
  // Whether the optimizer may run products in bfloat16 (LoadOptions::precision = kBf16).
  bool bf16_products() const { return bf16_products_; }
  void set_bf16_products(bool on) { bf16_products_ = on; }
  // When set, Plan::Compile appends each graph's nodes before and after the optimizer, the
  // rewrites that fired and the steps (LoadOptions::dump_plan).
  std::string* dump() const { return dump_; }
  void set_dump(std::string* dump) const { dump_ = dump; }
  const std::vector<std::string>& loop_names() const { return loop_names_; }
  int RegisterLoop(const std::string& name) const {
    loop_names_.push_back(name);
    return static_cast<int>(loop_names_.size() - 1);
  }
  // A model output (index into the top-level graph's outputs) that is the scan output of the
  // top-level Loop `loop_index` (Model::scan_output_loops).
  void RegisterScanOutput(int model_output, int loop_index) const {
    if (scan_output_loops_.size() <= static_cast<size_t>(model_output)) {
      scan_output_loops_.resize(model_output + 1, -1);
    }
    scan_output_loops_[model_output] = loop_index;
  }
  const std::vector<int>& scan_output_loops() const { return scan_output_loops_; }
  int depth() const { return depth_; }
  void set_depth(int depth) const { depth_ = depth; }
  // Whether the model being compiled can hold string tensors (GraphMayHoldStrings of the
  // top-level graph, set when it is compiled).
  bool strings_possible() const { return strings_possible_; }

  // The graphs being compiled, outermost first (Plan::Compile pushes and pops its own).
  void PushScope(const Graph* graph) const { scopes_.push_back(graph); }
  void PopScope() const { scopes_.pop_back(); }
  // The constant value `id` of the innermost graph stands for: one of its constants, or, through
  // its captures, a constant of an enclosing graph (a Loop body reading the model's weights).
  // Null when the value is computed at run time.
  const Tensor* FindConstant(ValueId id) const;

 private:
  const KernelRegistry& registry_;
  mutable bool transforms_ = true;
  bool bf16_products_ = false;
  mutable std::string* dump_ = nullptr;
  mutable std::vector<std::string> loop_names_;
  mutable std::vector<int> scan_output_loops_;
  mutable int depth_ = 0;
  mutable std::vector<const Graph*> scopes_;
  mutable bool strings_possible_ = false;
  friend class Plan;
};

// The immutable, compiled form of a Graph: steps in execution order, one slot per graph value
// (slot id == ValueId) plus scratch slots for omitted outputs, and the kernels. Built once at load
// and shared (shared_ptr<const Plan>) by every request and every iteration; thread-safe to run
// concurrently in different ExecutionFrames. Keeps its Graph alive.
class Plan {
 public:
  // Compiles `graph`; every node must have a kernel in the registry. Unimplemented names the node,
  // op type and opset when one has none.
  static absl::StatusOr<std::shared_ptr<const Plan>> Compile(std::shared_ptr<const Graph> graph,
                                                             const CompileContext& context);

  const Graph& graph() const { return *graph_; }
  const std::vector<Step>& steps() const { return steps_; }
  int num_slots() const { return num_slots_; }
  // True when a step of this plan writes the slot (so the frame owns its buffer and a Loop may swap
  // it away); false for inputs, constants and captures.
  bool is_produced(int slot) const { return produced_[slot]; }

 private:
  Plan() = default;

  std::shared_ptr<const Graph> graph_;
  std::vector<std::unique_ptr<Kernel>> kernels_;
  std::vector<Step> steps_;
  std::vector<bool> produced_;
  int num_slots_ = 0;
};

}  // namespace loopserve::engine
