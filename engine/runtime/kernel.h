#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/ir/graph.h"
#include "engine/tensor/value.h"

namespace loopserve::engine {

class ExecutionFrame;
class Plan;
class RunContext;
struct Step;

// Mutable per-frame state of one kernel (cached oneDNN memory objects, a Loop's body frame, ...).
// Created lazily by the frame on the kernel's first run in that frame and reused afterwards, so
// state built on a Loop body's first iteration serves every later iteration.
class KernelState {
 public:
  virtual ~KernelState() = default;
};

// What a kernel sees while it runs: its node's input values and output slots in the frame.
class KernelContext {
 public:
  // `slots` is the frame's slot array (ExecutionFrame::slot(0)); the accessors below index it
  // directly, inline, since they run several times per step of every loop iteration.
  KernelContext(ExecutionFrame& frame, const Step& step, KernelState* state, Value* slots);

  int num_inputs() const { return num_inputs_; }
  int num_outputs() const { return num_outputs_; }
  // False for an omitted optional input (and for i >= num_inputs()).
  bool has_input(int i) const { return i >= 0 && i < num_inputs_ && inputs_[i] >= 0; }
  // The executor has checked that every present input holds a tensor unless the kernel accepts
  // other values (Kernel::AcceptsNonTensorInputs).
  const Tensor& input(int i) const { return input_value(i).tensor(); }
  const Value& input_value(int i) const { return slots_[inputs_[i]]; }

  // The i-th output resized to `dtype`/`shape` (buffer reused when large enough). Omitted outputs
  // get a scratch slot, so the pointer is always valid.
  Tensor* output(int i, DataType dtype, const Shape& shape);
  Value& output_value(int i) { return slots_[outputs_[i]]; }
  // Output `out` holding input `in`'s tensor, moved (no copy), so the kernel can update it in
  // place; nullptr when the plan does not allow it (Step::takeable_inputs: another reader, a graph
  // output, a constant...) or the input is not an owned tensor (a view, a sequence). The input
  // slot gets the output's old value, which nothing reads. References to input(in) taken before
  // the call refer to that old value afterwards.
  Tensor* TakeInput(int in, int out);
  // The same for any value: an owned tensor or a sequence none of whose elements is a view
  // (SequenceInsert appending to a Loop's carried list).
  Value* TakeInputValue(int in, int out);

  ExecutionFrame& frame() { return frame_; }
  RunContext& run_context();
  template <typename S>
  S* state() {
    return static_cast<S*>(state_);
  }

 private:
  ExecutionFrame& frame_;
  const Step& step_;
  KernelState* state_;
  Value* slots_;
  const int32_t* inputs_;
  const int32_t* outputs_;
  int num_inputs_;
  int num_outputs_;
};

// One prepared op of a plan. Created once at model load; immutable afterwards and shared by every
// request, so Run must be thread-safe (mutable things go in a KernelState or the RunContext).
class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual absl::Status Run(KernelContext& ctx) const = 0;
  // Per-frame state, or nullptr when the kernel needs none.
  virtual std::unique_ptr<KernelState> CreateState() const { return nullptr; }
  // Sequence and optional ops return true to receive non-tensor inputs.
  virtual bool AcceptsNonTensorInputs() const { return false; }
  // Kernels that handle kString tensors (as elements, never as bytes) return true; the executor
  // gives the others a string input as an error instead (in models that can hold strings).
  virtual bool AcceptsStringInputs() const { return false; }
};

class KernelRegistry;

// Everything a kernel factory may look at while preparing a node.
class KernelInit {
 public:
  // Called by the compiler.
  KernelInit(const Node& node, const Graph& graph, const class CompileContext& context)
      : node_(node), graph_(graph), context_(context) {}

  const Node& node() const { return node_; }
  const Graph& graph() const { return graph_; }
  int num_inputs() const { return static_cast<int>(node_.inputs.size()); }
  bool has_input(int i) const { return i < num_inputs() && node_.inputs[i] != kNoValue; }
  // The declared type of input i (kind/dtype/dims may be unknown).
  const ValueType& input_type(int i) const { return graph_.values[node_.inputs[i]].type; }
  // The value of input i when it is a constant (initializer / Constant) of this graph or, through
  // a capture, of an enclosing one; else null. Owned by a graph that outlives the kernel.
  const Tensor* constant_input(int i) const;

  // Compiles a subgraph (Loop body, If branch) of this node with the same registry and options.
  absl::StatusOr<std::shared_ptr<const Plan>> CompileSubgraph(
      std::shared_ptr<const Graph> subgraph) const;
  // Compiles a fused node's FusionSpec::unfused graph as it is (no optimizer: it would fuse the
  // nodes again).
  absl::StatusOr<std::shared_ptr<const Plan>> CompileUnfused(
      std::shared_ptr<const Graph> subgraph) const;
  // Registers a Loop node and returns its index for LoopObserver / Model::loop_names().
  int RegisterLoop(const std::string& name) const;
  // Whether the node belongs to the model's top-level graph (not a Loop body or If branch).
  bool top_level() const;
  // Records that model output `model_output` is a scan output of top-level Loop `loop_index`.
  void RegisterScanOutput(int model_output, int loop_index) const;

 private:
  const Node& node_;
  const Graph& graph_;
  const CompileContext& context_;
};

using KernelFactory = std::function<absl::StatusOr<std::unique_ptr<Kernel>>(const KernelInit&)>;

}  // namespace loopserve::engine
