#include "tests/unit/engine/kernels/dnnl/test_util.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/builtin.h"
#include "engine/kernels/dnnl/dnnl_kernel.h"
#include "engine/kernels/registry.h"

namespace loopserve::engine::testing {
namespace {

const KernelRegistry& DnnlRegistry() {
  static const KernelRegistry* registry = [] {
    auto* r = new KernelRegistry();
    RegisterDnnlKernels(*r);
    // The pool tests cover LpPool too, a native kernel.
    RegisterNativeKernels(*r);
    return r;
  }();
  return *registry;
}

}  // namespace

absl::StatusOr<std::unique_ptr<NodeRunner>> NodeRunner::Create(
    const std::string& op_type, int opset, int num_inputs,
    absl::flat_hash_map<std::string, Attribute> attributes, std::vector<int> omitted,
    std::vector<ValueType> declared, int num_outputs) {
  // These tests compare oneDNN with the reference kernels: keep small tensors on oneDNN too.
  SetDnnlSmallTensorLimit(0);
  SetNativeElementwiseLimit(0);
  auto graph = std::make_shared<Graph>();
  graph->name = "test";
  std::unique_ptr<NodeRunner> runner(new NodeRunner());
  Node node;
  node.name = "node";
  node.op_type = op_type;
  node.opset = opset;
  node.attributes = std::move(attributes);
  for (int i = 0; i < num_inputs; ++i) {
    if (std::find(omitted.begin(), omitted.end(), i) != omitted.end()) {
      node.inputs.push_back(kNoValue);
      runner->inputs_.push_back(kNoValue);
      continue;
    }
    ValueType type;
    if (i < static_cast<int>(declared.size())) type = declared[i];
    const ValueId id = graph->AddValue(absl::StrCat("x", i), type);
    graph->inputs.push_back(id);
    node.inputs.push_back(id);
    runner->inputs_.push_back(id);
  }
  for (int i = 0; i < num_outputs; ++i) {
    const ValueId id = graph->AddValue(absl::StrCat("y", i));
    runner->outputs_.push_back(id);
    node.outputs.push_back(id);
    graph->outputs.push_back(id);
  }
  graph->nodes.push_back(std::move(node));
  CompileContext compile(DnnlRegistry());
  LS_ASSIGN_OR_RETURN(runner->plan_, Plan::Compile(std::move(graph), compile));
  runner->context_ = std::make_unique<RunContext>(RunOptions{});
  runner->frame_ = std::make_unique<ExecutionFrame>(*runner->plan_, *runner->context_);
  return runner;
}

absl::StatusOr<const Tensor*> NodeRunner::Run(const std::vector<const Tensor*>& inputs) {
  for (size_t i = 0; i < inputs_.size(); ++i) {
    if (inputs_[i] == kNoValue) continue;
    if (i >= inputs.size() || inputs[i] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("test: input ", i, " missing"));
    }
    frame_->slot(inputs_[i]).mutable_tensor() = Tensor::ViewOf(*inputs[i]);
  }
  LS_RETURN_IF_ERROR(frame_->Run());
  return &frame_->slot(outputs_[0]).tensor();
}

const Tensor& NodeRunner::output(int i) const { return frame_->slot(outputs_[i]).tensor(); }

std::unique_ptr<NodeRunner> NodeRunner::NewFrame() const {
  std::unique_ptr<NodeRunner> runner(new NodeRunner());
  runner->plan_ = plan_;
  runner->inputs_ = inputs_;
  runner->outputs_ = outputs_;
  runner->context_ = std::make_unique<RunContext>(RunOptions{});
  runner->frame_ = std::make_unique<ExecutionFrame>(*runner->plan_, *runner->context_);
  return runner;
}

absl::StatusOr<std::vector<Tensor>> RunOnceOutputs(
    const std::string& op_type, int opset, const std::vector<const Tensor*>& inputs,
    absl::flat_hash_map<std::string, Attribute> attributes, int num_outputs) {
  std::vector<int> omitted;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == nullptr) omitted.push_back(static_cast<int>(i));
  }
  LS_ASSIGN_OR_RETURN(std::unique_ptr<NodeRunner> runner,
                      NodeRunner::Create(op_type, opset, static_cast<int>(inputs.size()),
                                         std::move(attributes), omitted, {}, num_outputs));
  LS_RETURN_IF_ERROR(runner->Run(inputs).status());
  std::vector<Tensor> outputs(num_outputs);
  for (int i = 0; i < num_outputs; ++i) outputs[i].CopyFrom(runner->output(i));
  return outputs;
}

absl::StatusOr<Tensor> RunOnce(const std::string& op_type, int opset,
                               const std::vector<const Tensor*>& inputs,
                               absl::flat_hash_map<std::string, Attribute> attributes) {
  std::vector<int> omitted;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == nullptr) omitted.push_back(static_cast<int>(i));
  }
  LS_ASSIGN_OR_RETURN(std::unique_ptr<NodeRunner> runner,
                      NodeRunner::Create(op_type, opset, static_cast<int>(inputs.size()),
                                         std::move(attributes), omitted));
  LS_ASSIGN_OR_RETURN(const Tensor* out, runner->Run(inputs));
  Tensor copy;
  copy.CopyFrom(*out);
  return copy;
}

Tensor RandomTensor(DataType type, const Shape& shape, std::mt19937& rng, Range range) {
  Tensor t(type, shape);
  DispatchNumeric(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* data = t.mutable_data<T>();
    for (int64_t i = 0; i < t.NumElements(); ++i) {
      if constexpr (std::is_floating_point_v<T>) {
        std::uniform_real_distribution<double> u(0.0, 1.0);
        const double x = u(rng);
        switch (range) {
          case Range::kSigned:
            data[i] = static_cast<T>(-2.0 + 4.0 * x);
            break;
          case Range::kPositive:
            data[i] = static_cast<T>(0.1 + 3.9 * x);
            break;
          case Range::kNonZero: {
            const double m = 0.5 + 1.5 * x;
            data[i] = static_cast<T>(rng() % 2 ? m : -m);
            break;
          }
        }
      } else {
        const int64_t r = static_cast<int64_t>(rng() % 41);  // [0, 40]
        int64_t v = 0;
        switch (range) {
          case Range::kSigned:
            v = std::is_signed_v<T> ? r - 20 : r;
            break;
          case Range::kPositive:
            v = 1 + r % 40;
            break;
          case Range::kNonZero:
            v = (1 + r % 20) * (std::is_signed_v<T> && rng() % 2 ? -1 : 1);
            break;
        }
        data[i] = static_cast<T>(v);
      }
    }
  });
  return t;
}

Shape RandomShape(std::mt19937& rng, int min_rank, int max_rank, int max_dim,
                  double zero_probability) {
  const int rank = min_rank + static_cast<int>(rng() % (max_rank - min_rank + 1));
  Shape::Dims dims(rank);
  for (int i = 0; i < rank; ++i) dims[i] = 1 + static_cast<int64_t>(rng() % max_dim);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  if (rank > 0 && u(rng) < zero_probability) dims[rng() % rank] = 0;
  return Shape(std::move(dims));
}

Shape RandomBroadcastable(const Shape& out, std::mt19937& rng) {
  const int drop = out.rank() == 0 ? 0 : static_cast<int>(rng() % (out.rank() + 1));
  Shape::Dims dims;
  for (int i = drop; i < out.rank(); ++i) dims.push_back(rng() % 3 == 0 ? 1 : out[i]);
  return Shape(std::move(dims));
}

::testing::AssertionResult TensorsNear(const Tensor& actual, const Tensor& expected, double rtol,
                                       double atol) {
  if (actual.dtype() != expected.dtype()) {
    return ::testing::AssertionFailure() << "element types " << DataTypeName(actual.dtype())
                                         << " and " << DataTypeName(expected.dtype());
  }
  if (actual.shape() != expected.shape()) {
    return ::testing::AssertionFailure()
           << "shapes " << actual.shape().ToString() << " and " << expected.shape().ToString();
  }
  std::string failure;
  DispatchNumeric(actual.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* a = actual.data<T>();
    const T* e = expected.data<T>();
    for (int64_t i = 0; i < actual.NumElements() && failure.empty(); ++i) {
      bool ok;
      if constexpr (std::is_floating_point_v<T>) {
        ok = (std::isnan(a[i]) && std::isnan(e[i])) ||
             std::abs(static_cast<double>(a[i]) - e[i]) <= atol + rtol * std::abs(e[i]);
      } else {
        ok = a[i] == e[i];
      }
      if (!ok) {
        failure = absl::StrCat("element ", i, ": got ", +a[i], ", expected ", +e[i], " in ",
                               actual.shape().ToString());
      }
    }
  });
  if (!failure.empty()) return ::testing::AssertionFailure() << failure;
  return ::testing::AssertionSuccess();
}

}  // namespace loopserve::engine::testing
