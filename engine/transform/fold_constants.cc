#include "engine/transform/fold_constants.h"

#include <algorithm>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "engine/transform/graph_util.h"

namespace loopserve::engine::transform {
namespace {

// A folded result may exceed its inputs by this much: beyond, the constant would cost more memory
// than recomputing it costs time.
constexpr size_t kMaxGrowthBytes = size_t{1} << 20;
// Elements an expanding op (ConstantOfShape, Expand, Tile) may produce for it to be evaluated at
// all: checked before running it, so a hostile shape cannot make the load allocate gigabytes.
constexpr int64_t kMaxExpandedElements = int64_t{1} << 18;

bool IsOnnx(const Node& node) { return node.domain.empty() || node.domain == "ai.onnx"; }

bool HasSubgraph(const Node& node) {
  for (const auto& [name, attribute] : node.attributes) {
    if (attribute.type == Attribute::Type::kGraph || attribute.type == Attribute::Type::kGraphs) {
      return true;
    }
  }
  return false;
}

// Ops whose result is not a function of their inputs.
bool IsNondeterministic(const std::string& op) {
  return op == "RandomNormal" || op == "RandomUniform" || op == "RandomNormalLike" ||
         op == "RandomUniformLike" || op == "Multinomial" || op == "Bernoulli";
}

// The product of an int64 shape tensor's values, or -1 when it is not one or overflows the cap.
int64_t ShapeProduct(const Tensor* shape) {
  if (shape == nullptr || shape->dtype() != DataType::kInt64 || shape->rank() > 1) return -1;
  int64_t product = 1;
  for (int64_t i = 0; i < shape->NumElements(); ++i) {
    const int64_t d = shape->data<int64_t>()[i];
    if (d < 0) return -1;
    if (d > 0 && product > kMaxExpandedElements / d) return -1;
    product *= d;
  }
  return product;
}

// Whether an op that can make a result much larger than its inputs stays under the cap (checked
// before evaluating: the size limit on results alone would come after the allocation).
bool SmallEnoughToEvaluate(const Node& node, const std::vector<const Tensor*>& inputs) {
  const std::string& op = node.op_type;
  if (op == "ConstantOfShape") return ShapeProduct(inputs[0]) >= 0;
  if (op == "Expand") {
    const int64_t target = ShapeProduct(inputs[1]);
    return target >= 0 && inputs[0]->NumElements() <= kMaxExpandedElements &&
           (target == 0 ||
            inputs[0]->NumElements() <= kMaxExpandedElements / std::max<int64_t>(1, target));
  }
  if (op == "Tile") {
    const int64_t repeats = ShapeProduct(inputs[1]);
    return repeats >= 0 && inputs[0]->NumElements() <= kMaxExpandedElements &&
           (repeats == 0 || inputs[0]->NumElements() <= kMaxExpandedElements / repeats);
  }
  // Shapes are computed from their attributes or inputs by ops we do not bound here.
  return op != "Range" && op != "EyeLike" && op != "OneHot" && op != "Resize" && op != "Upsample" &&
         op != "Pad" && op != "Col2Im";
}

// The declared shape of a checked top-level input with every dim known, else null. Scalars and
// one-element [1] inputs are left out: a request may send either for the other (as ORT allows).
const std::vector<int64_t>* StaticInputShape(const Graph& graph, const TransformContext& context,
                                             ValueId id) {
  if (!context.inputs_checked || id == kNoValue) return nullptr;
  if (std::find(graph.inputs.begin(), graph.inputs.end(), id) == graph.inputs.end()) {
    return nullptr;
  }
  const ValueType& type = graph.values[id].type;
  if (type.kind != ValueKind::kTensor || !type.dims.has_value()) return nullptr;
  int64_t elements = 1;
  for (int64_t d : *type.dims) {
    if (d < 0) return nullptr;
    elements *= d;
  }
  if (type.dims->size() <= 1 && elements == 1) return nullptr;
  return &*type.dims;
}

// Shape (opset 15's start and end included) or Size of a known shape.
std::shared_ptr<Tensor> FoldShape(const Node& node, const std::vector<int64_t>& dims) {
  const int64_t rank = static_cast<int64_t>(dims.size());
  if (node.op_type == "Size") {
    int64_t elements = 1;
    for (int64_t d : dims) elements *= d;
    auto t = std::make_shared<Tensor>();
    t->Resize(DataType::kInt64, Shape());
    t->mutable_data<int64_t>()[0] = elements;
    return t;
  }
  absl::StatusOr<int64_t> start = node.GetInt("start", 0);
  absl::StatusOr<int64_t> end = node.GetInt("end", rank);
  if (!start.ok() || !end.ok()) return nullptr;
  const auto clamp = [rank](int64_t v) {
    if (v < 0) v += rank;
    return std::clamp<int64_t>(v, 0, rank);
  };
  const int64_t first = clamp(*start);
  const int64_t last = std::max(first, clamp(*end));
  auto t = std::make_shared<Tensor>(DataType::kInt64, Shape{last - first});
  for (int64_t i = first; i < last; ++i) t->mutable_data<int64_t>()[i - first] = dims[i];
  return t;
}

}  // namespace

absl::Status FoldConstantsPass::Run(Graph& graph, const TransformContext& context,
                                    std::vector<std::string>& log) const {
  absl::flat_hash_map<ValueId, const Tensor*> folded;
  const auto constant = [&](ValueId id) -> const Tensor* {
    if (id == kNoValue) return nullptr;
    auto it = folded.find(id);
    if (it != folded.end()) return it->second;
    return context.find_constant ? context.find_constant(id) : nullptr;
  };
  std::vector<bool> removed(graph.nodes.size(), false);
  bool changed = false;
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const Node& node = graph.nodes[n];
    if (!IsOnnx(node) || node.fusion != nullptr || node.loop != nullptr ||
        !node.implicit_inputs.empty() || HasSubgraph(node) || IsNondeterministic(node.op_type)) {
      continue;
    }
    std::vector<std::shared_ptr<Tensor>> results;
    if ((node.op_type == "Shape" || node.op_type == "Size") && node.inputs.size() == 1 &&
        node.outputs.size() == 1 && constant(node.inputs[0]) == nullptr) {
      const std::vector<int64_t>* dims = StaticInputShape(graph, context, node.inputs[0]);
      if (dims == nullptr) continue;
      std::shared_ptr<Tensor> t = FoldShape(node, *dims);
      if (t == nullptr) continue;
      results.push_back(std::move(t));
    } else {
      if (!context.evaluate) continue;
      std::vector<const Tensor*> inputs;
      bool all_constant = true;
      size_t input_bytes = 0;
      for (ValueId v : node.inputs) {
        const Tensor* t = v == kNoValue ? nullptr : constant(v);
        if (v != kNoValue && t == nullptr) {
          all_constant = false;
          break;
        }
        if (t != nullptr) input_bytes += t->ByteSize();
        inputs.push_back(t);
      }
      if (!all_constant) continue;
      if (std::all_of(inputs.begin(), inputs.end(), [](const Tensor* t) { return t == nullptr; })) {
        continue;
      }
      if (!SmallEnoughToEvaluate(node, inputs)) continue;
      absl::StatusOr<std::vector<Tensor>> outputs = context.evaluate(node, inputs);
      if (!outputs.ok() || outputs->size() != node.outputs.size()) continue;
      size_t output_bytes = 0;
      for (const Tensor& t : *outputs) output_bytes += t.ByteSize();
      if (output_bytes > input_bytes + kMaxGrowthBytes) continue;
      for (Tensor& t : *outputs) results.push_back(std::make_shared<Tensor>(std::move(t)));
    }
    std::string shapes;
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      const ValueId v = node.outputs[i];
      if (v == kNoValue) continue;
      folded[v] = results[i].get();
      graph.constants.push_back({v, results[i]});
      absl::StrAppend(&shapes, shapes.empty() ? "" : ", ", DataTypeName(results[i]->dtype()),
                      results[i]->shape().ToString());
    }
    log.push_back(absl::StrCat(name(), ": ", node.Label(), " -> constant ", shapes));
    removed[n] = true;
    changed = true;
  }
  if (changed) RemoveNodes(graph, removed);
  return absl::OkStatus();
}

}  // namespace loopserve::engine::transform
