#pragma once

// Helpers for the oneDNN kernel tests: a one-node graph run through the real kernel path (Plan,
// ExecutionFrame, KernelState), random tensors and a tolerant comparison.

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/ir/graph.h"
#include "engine/runtime/execution_frame.h"
#include "engine/runtime/plan.h"
#include "engine/runtime/run_context.h"
#include "engine/tensor/tensor.h"
#include "gtest/gtest.h"
#include "tests/unit/engine/attribute_builders.h"

namespace loopserve::engine::testing {

using test_attrs::FloatAttr;
using test_attrs::IntAttr;
using test_attrs::IntsAttr;
using test_attrs::StringAttr;

// One node of `op_type` at `opset`, compiled with a registry holding only the oneDNN kernels, and
// one frame to run it in (reused across Run calls, as a Loop body's frame is). Inputs are bound as
// views, so they must outlive Run. Not thread-safe.
class NodeRunner {
 public:
  // `num_inputs` node inputs; those in `omitted` are left out (kNoValue). `declared` gives the
  // declared input types (default: unknown dims).
  static absl::StatusOr<std::unique_ptr<NodeRunner>> Create(
      const std::string& op_type, int opset, int num_inputs,
      absl::flat_hash_map<std::string, Attribute> attributes = {}, std::vector<int> omitted = {},
      std::vector<ValueType> declared = {}, int num_outputs = 1);

  // Runs the node on `inputs` (nullptr for an omitted one) and returns its output (owned by the
  // frame; valid until the next Run).
  absl::StatusOr<const Tensor*> Run(const std::vector<const Tensor*>& inputs);
  // Output i of the last Run.
  const Tensor& output(int i) const;
  // What the runs so far counted (reference_steps, ...).
  const RunStats& stats() { return context_->stats(); }

  // Another runner with its own frame (and RunContext) over the same plan and kernel.
  std::unique_ptr<NodeRunner> NewFrame() const;

 private:
  NodeRunner() = default;
  std::shared_ptr<const Plan> plan_;
  std::unique_ptr<RunContext> context_;
  std::unique_ptr<ExecutionFrame> frame_;
  std::vector<ValueId> inputs_;
  std::vector<ValueId> outputs_;
};

// Runs a fresh one-node graph with `num_outputs` outputs once; returns copies of them.
absl::StatusOr<std::vector<Tensor>> RunOnceOutputs(
    const std::string& op_type, int opset, const std::vector<const Tensor*>& inputs,
    absl::flat_hash_map<std::string, Attribute> attributes, int num_outputs);

// Runs a fresh one-node graph once; returns a copy of the output.
absl::StatusOr<Tensor> RunOnce(const std::string& op_type, int opset,
                               const std::vector<const Tensor*>& inputs,
                               absl::flat_hash_map<std::string, Attribute> attributes = {});

template <typename T>
Tensor MakeTensor(const Shape& shape, const std::vector<T>& values) {
  Tensor t(DataTypeOf<T>::value, shape);
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.NumElements());
  std::copy(values.begin(), values.end(), t.mutable_data<T>());
  return t;
}

// What values a random tensor holds.
enum class Range {
  kSigned,    // [-2, 2] for floats, [-20, 20] for signed integers, [0, 40] for unsigned
  kPositive,  // (0.1, 4] / [1, 40]
  kNonZero,   // magnitude in [0.5, 2] / [1, 20], either sign where the type has one
};

Tensor RandomTensor(DataType type, const Shape& shape, std::mt19937& rng,
                    Range range = Range::kSigned);

// A random shape of rank [min_rank, max_rank] with dims in [1, max_dim], and a 0 dim with
// probability `zero_probability` per shape.
Shape RandomShape(std::mt19937& rng, int min_rank, int max_rank, int max_dim,
                  double zero_probability = 0.1);

// A shape that broadcasts onto `out`: some leading dims dropped, some dims set to 1.
Shape RandomBroadcastable(const Shape& out, std::mt19937& rng);

// Element-wise comparison: exact for integers, |a - e| <= atol + rtol * |e| for floats (NaNs
// must match).
::testing::AssertionResult TensorsNear(const Tensor& actual, const Tensor& expected,
                                       double rtol = 1e-5, double atol = 1e-6);

}  // namespace loopserve::engine::testing
