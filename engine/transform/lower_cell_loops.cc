#include "engine/transform/lower_cell_loops.h"

#include <cstring>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "engine/transform/graph_util.h"

namespace loopserve::engine::transform {
namespace {

using InputKind = LoopSpec::InputPort::Kind;
using OutputKind = LoopSpec::OutputPort::Kind;

// The importer's `_layout` of a cell (native::RecurrentLayout::kOpenVinoCell).
constexpr int64_t kCellLayout = 3;
// Recurrent node inputs (ONNX order).
enum { kX = 0, kW, kR, kB, kLengths, kH0, kC0, kP };

// The constant a body value stands for: a body constant or, through a capture, one of the
// enclosing graph's.
const Tensor* BodyConstant(const Graph& body, ValueId id, const TransformContext& context) {
  for (const auto& [value, tensor] : body.constants) {
    if (value == id) return tensor.get();
  }
  for (const Capture& capture : body.captures) {
    if (capture.inner == id && context.find_constant) return context.find_constant(capture.outer);
  }
  return nullptr;
}

// The single axis of a one-element int64 axes constant (input 1) or `axes` attribute of a
// Squeeze / Unsqueeze, or nullopt.
std::optional<int64_t> SingleAxis(const Graph& body, const Node& node,
                                  const TransformContext& context) {
  if (node.inputs.size() == 2) {
    const Tensor* axes = BodyConstant(body, node.inputs[1], context);
    if (axes == nullptr || axes->NumElements() != 1) return std::nullopt;
    if (axes->dtype() == DataType::kInt64) return axes->data<int64_t>()[0];
    if (axes->dtype() == DataType::kInt32) return axes->data<int32_t>()[0];
    return std::nullopt;
  }
  const Attribute* axes = node.FindAttribute("axes");
  if (node.inputs.size() != 1 || axes == nullptr || axes->type != Attribute::Type::kInts ||
      axes->ints.size() != 1) {
    return std::nullopt;
  }
  return axes->ints[0];
}

// A Reshape's target shape: its constant int64 shape input, or nullopt.
std::optional<std::vector<int64_t>> ReshapeTarget(const Graph& body, const Node& node,
                                                  const TransformContext& context) {
  if (node.inputs.size() != 2) return std::nullopt;
  const Tensor* shape = BodyConstant(body, node.inputs[1], context);
  if (shape == nullptr || shape->dtype() != DataType::kInt64 || shape->rank() != 1) {
    return std::nullopt;
  }
  return std::vector<int64_t>(shape->data<int64_t>(),
                              shape->data<int64_t>() + shape->NumElements());
}

// The declared dims of a rank-3 body value, every one known and positive, or nullopt.
std::optional<std::vector<int64_t>> StaticDims3(const Graph& body, ValueId v) {
  const std::optional<std::vector<int64_t>>& dims = body.values[v].type.dims;
  if (!dims.has_value() || dims->size() != 3) return std::nullopt;
  for (int64_t d : *dims) {
    if (d < 1) return std::nullopt;
  }
  return *dims;
}

// Whether `node` (Squeeze or Reshape of the rank-3 part) drops `axis`, the part's dim 1.
bool RemovesAxis(const Graph& body, const Node& node, int64_t axis,
                 const TransformContext& context) {
  if (node.op_type == "Squeeze") {
    const std::optional<int64_t> a = SingleAxis(body, node, context);
    return a.has_value() && *a == axis;
  }
  const std::optional<std::vector<int64_t>> part = StaticDims3(body, node.inputs[0]);
  const std::optional<std::vector<int64_t>> target = ReshapeTarget(body, node, context);
  if (!part.has_value() || !target.has_value() || (*part)[axis] != 1) return false;
  std::vector<int64_t> want = *part;
  want.erase(want.begin() + axis);
  return *target == want;
}

// Whether `node` (Unsqueeze or Reshape of the cell's hidden state [B, H]) inserts `axis`.
bool InsertsAxis(const Graph& body, const Node& node, const Node& squeeze, const Node& cell,
                 int64_t axis, const TransformContext& context) {
  if (node.op_type == "Unsqueeze") {
    const std::optional<int64_t> a = SingleAxis(body, node, context);
    return a.has_value() && *a == axis;
  }
  const std::optional<std::vector<int64_t>> part = StaticDims3(body, squeeze.inputs[0]);
  const std::optional<std::vector<int64_t>> target = ReshapeTarget(body, node, context);
  absl::StatusOr<int64_t> hidden = cell.GetInt("hidden_size", -1);
  if (!part.has_value() || !target.has_value() || !hidden.ok() || *hidden < 1) return false;
  const int64_t batch = (*part)[1 - axis];
  const std::vector<int64_t> want =
      axis == 0 ? std::vector<int64_t>{1, batch, *hidden} : std::vector<int64_t>{batch, 1, *hidden};
  return *target == want;
}

// What the rewrite needs of a matching Loop.
struct Match {
  const Node* squeeze = nullptr;
  const Node* cell = nullptr;
  const Node* unsqueeze = nullptr;  // absent when no output concatenates the states
  int64_t axis = 0;
  int64_t stride = 1;
  ValueId x = kNoValue;  // the Loop's inputs: the sequence and the initial states
  ValueId h0 = kNoValue;
  ValueId c0 = kNoValue;
  // Body result -> which cell output it is: 1 hidden, 2 cell state, 3 the Unsqueeze.
  std::vector<int> result_kind;
};

// Cell input / output k, or kNoValue when the cell has fewer.
ValueId CellInput(const Node& cell, int k) {
  return k < static_cast<int>(cell.inputs.size()) ? cell.inputs[k] : kNoValue;
}
ValueId CellOutput(const Node& cell, int k) {
  return k < static_cast<int>(cell.outputs.size()) ? cell.outputs[k] : kNoValue;
}

// The body's nodes, in order: the Squeeze (or Reshape) of the part, the cell, the Unsqueeze (or
// Reshape) of its hidden state. Fills m.squeeze, m.cell and m.unsqueeze.
bool MatchBodyNodes(const Graph& body, Match& m) {
  for (const Node& n : body.nodes) {
    if (!n.domain.empty() && n.domain != "ai.onnx") return false;
    if ((n.op_type == "Squeeze" || n.op_type == "Reshape") && m.squeeze == nullptr &&
        m.cell == nullptr) {
      m.squeeze = &n;
    } else if ((n.op_type == "Unsqueeze" || n.op_type == "Reshape") && m.unsqueeze == nullptr &&
               m.cell != nullptr) {
      m.unsqueeze = &n;
    } else if ((n.op_type == "LSTM" || n.op_type == "GRU" || n.op_type == "RNN") &&
               m.squeeze != nullptr && m.cell == nullptr) {
      m.cell = &n;
    } else {
      return false;
    }
    if (n.inputs.empty() || n.inputs[0] == kNoValue || n.outputs.empty()) return false;
  }
  return m.squeeze != nullptr && m.cell != nullptr;
}

// The cell: our layout, fed by the Squeeze, no sequence lengths, constant float32 weights (the
// layer gets copies with a direction axis), and its hidden state what the Unsqueeze reads.
bool MatchCell(const Graph& body, const Match& m, const TransformContext& context) {
  const Node& cell = *m.cell;
  absl::StatusOr<int64_t> layout = cell.GetInt("_layout", -1);
  if (!layout.ok() || *layout != kCellLayout) return false;
  if (CellInput(cell, kX) != m.squeeze->outputs[0] || CellInput(cell, kLengths) != kNoValue) {
    return false;
  }
  for (int k : {kW, kR, kB, kP}) {
    if (CellInput(cell, k) == kNoValue) continue;
    const Tensor* weights = BodyConstant(body, CellInput(cell, k), context);
    if (weights == nullptr || weights->dtype() != DataType::kFloat32) return false;
  }
  if (CellInput(cell, kW) == kNoValue || CellInput(cell, kR) == kNoValue) return false;
  return m.unsqueeze == nullptr || m.unsqueeze->inputs[0] == CellOutput(cell, 1);
}

// Every body result is a cell output: fills m.result_kind.
bool ClassifyResults(const Graph& body, Match& m) {
  const bool lstm = m.cell->op_type == "LSTM";
  const int num_results = static_cast<int>(body.outputs.size());
  m.result_kind.assign(num_results, 0);
  for (int r = 0; r < num_results; ++r) {
    const ValueId v = body.outputs[r];
    if (v == kNoValue) return false;
    if (v == CellOutput(*m.cell, 1)) m.result_kind[r] = 1;
    if (lstm && v == CellOutput(*m.cell, 2)) m.result_kind[r] = 2;
    if (m.unsqueeze != nullptr && v == m.unsqueeze->outputs[0]) m.result_kind[r] = 3;
    if (m.result_kind[r] == 0) return false;
  }
  return true;
}

// The port map's inputs: one sliced input feeding the Squeeze on its axis, carried states whose
// back edges are the cell's outputs, nothing else. Fills m.axis, m.stride, m.x, m.h0, m.c0.
bool MatchInputPorts(const Node& loop, const Graph& body, const TransformContext& context,
                     Match& m) {
  const Node& cell = *m.cell;
  const bool lstm = cell.op_type == "LSTM";
  const int num_results = static_cast<int>(body.outputs.size());
  bool sliced = false;
  for (const LoopSpec::InputPort& in : loop.loop->inputs) {
    if (in.body_param < 0 || in.body_param >= static_cast<int>(body.inputs.size()) ||
        in.node_input < 0 || in.node_input >= static_cast<int>(loop.inputs.size())) {
      return false;
    }
    const ValueId param = body.inputs[in.body_param];
    const ValueId outer = loop.inputs[in.node_input];
    if (in.kind == InputKind::kSliced) {
      // [0, -1] and [-1, 0] are the whole axis whatever its length.
      const bool whole = (in.start == 0 && in.end == -1) || (in.start == -1 && in.end == 0);
      if (sliced || param != m.squeeze->inputs[0] || in.part_size != 1 || in.squeeze || !whole ||
          (in.stride != 1 && in.stride != -1) || (in.axis != 0 && in.axis != 1)) {
        return false;
      }
      if (!RemovesAxis(body, *m.squeeze, in.axis, context)) return false;
      sliced = true;
      m.axis = in.axis;
      m.stride = in.stride;
      m.x = outer;
    } else if (in.kind == InputKind::kCarried) {
      if (in.back_edge < 0 || in.back_edge >= num_results) return false;
      const int kind = m.result_kind[in.back_edge];
      if (param == CellInput(cell, kH0) && kind == 1 && m.h0 == kNoValue) {
        m.h0 = outer;
      } else if (lstm && param == CellInput(cell, kC0) && kind == 2 && m.c0 == kNoValue) {
        m.c0 = outer;
      } else {
        return false;
      }
    } else {
      return false;  // invariant inputs: the cell reads only constants and states
    }
  }
  if (!sliced || m.h0 == kNoValue || (lstm && m.c0 == kNoValue)) return false;
  // Every state the cell reads is carried, and the Squeeze reads only the slice.
  return CellInput(cell, kH0) != kNoValue && !(lstm && CellInput(cell, kC0) == kNoValue);
}

// The port map's outputs: last values of the states, or the Unsqueeze's states concatenated
// along the sliced axis in the slicing order.
bool MatchOutputPorts(const Node& loop, const Graph& body, const TransformContext& context,
                      const Match& m) {
  const int num_results = static_cast<int>(body.outputs.size());
  for (const LoopSpec::OutputPort& out : loop.loop->outputs) {
    if (out.body_result < 0 || out.body_result >= num_results || out.node_output < 0 ||
        out.node_output >= static_cast<int>(loop.outputs.size())) {
      return false;
    }
    const int kind = m.result_kind[out.body_result];
    if (out.kind == OutputKind::kLastValue) {
      if (kind != 1 && kind != 2) return false;
    } else if (out.kind == OutputKind::kConcat) {
      if (kind != 3 || out.axis != m.axis || out.stride != m.stride) return false;
      if (!InsertsAxis(body, *m.unsqueeze, *m.squeeze, *m.cell, m.axis, context)) return false;
    } else {
      return false;
    }
  }
  return true;
}

std::optional<Match> MatchCellLoop(const Node& loop, const Graph& body,
                                   const TransformContext& context) {
  const LoopSpec& spec = *loop.loop;
  if (loop.inputs.size() < 2 || loop.inputs[0] != kNoValue || loop.inputs[1] != kNoValue ||
      spec.condition_result >= 0 || spec.current_iteration_param >= 0) {
    return std::nullopt;
  }
  Match m;
  if (!MatchBodyNodes(body, m) || !MatchCell(body, m, context) || !ClassifyResults(body, m) ||
      !MatchInputPorts(loop, body, context, m) || !MatchOutputPorts(loop, body, context, m)) {
    return std::nullopt;
  }
  return m;
}

// Adds a constant value to `graph`.
ValueId AddConstant(Graph& graph, const std::string& name, Tensor tensor) {
  ValueType type;
  type.dtype = tensor.dtype();
  type.dims = std::vector<int64_t>(tensor.shape().dims().begin(), tensor.shape().dims().end());
  const ValueId id = graph.AddValue(name, std::move(type));
  graph.constants.emplace_back(id, std::make_shared<const Tensor>(std::move(tensor)));
  return id;
}

// `tensor` with a leading dim of 1 (the direction axis a layer's weights have and a cell's lack).
Tensor WithDirectionAxis(const Tensor& tensor) {
  Shape::Dims dims = {1};
  dims.insert(dims.end(), tensor.shape().dims().begin(), tensor.shape().dims().end());
  Tensor out(tensor.dtype(), Shape(std::move(dims)));
  if (tensor.ByteSize() > 0)
    std::memcpy(out.mutable_raw_data(), tensor.raw_data(), tensor.ByteSize());
  return out;
}

Node AxisNode(const char* op, const std::string& name, ValueId in, ValueId axes, ValueId out) {
  Node n;
  n.name = name;
  n.op_type = op;
  n.opset = 13;
  n.inputs = {in, axes};
  n.outputs = {out};
  return n;
}

// The nodes that replace `loop`, appended to `out`.
void Lower(Graph& graph, const Node& loop, const Graph& body, const Match& m,
           const TransformContext& context, std::vector<Node>& out) {
  const Node& cell = *m.cell;
  const bool lstm = cell.op_type == "LSTM";
  const std::string prefix = loop.name + "/layer";
  // Layout 0: X [T,B,I], states [1,B,H], Y [T,1,B,H]; layout 1: X [B,T,I], states [B,1,H],
  // Y [B,T,1,H]. The direction axis of the states is the sliced axis; Y's is the one after it.
  auto axis_constant = [&](const char* name, int64_t axis) {
    Tensor t(DataType::kInt64, Shape{1});
    t.mutable_data<int64_t>()[0] = axis;
    return AddConstant(graph, prefix + name, std::move(t));
  };
  const ValueId state_axis = axis_constant("/state_axis", m.axis);
  const ValueId y_axis = axis_constant("/y_axis", m.axis + 1);

  Node layer = cell;
  layer.name = prefix;
  layer.attributes.erase("_layout");
  Attribute layout;
  layout.i = m.axis;
  layer.attributes["layout"] = layout;
  Attribute direction;
  direction.type = Attribute::Type::kString;
  direction.s = m.stride == 1 ? "forward" : "reverse";
  layer.attributes["direction"] = direction;
  layer.inputs.assign(lstm ? 8 : 6, kNoValue);
  layer.inputs[kX] = m.x;
  for (int k : {kW, kR, kB, kP}) {
    if (k >= static_cast<int>(cell.inputs.size()) || cell.inputs[k] == kNoValue) continue;
    const Tensor* weights = BodyConstant(body, cell.inputs[k], context);
    layer.inputs[k] = AddConstant(graph, absl::StrCat(prefix, "/", body.ValueName(cell.inputs[k])),
                                  WithDirectionAxis(*weights));
  }
  const ValueId h0 = graph.AddValue(prefix + "/initial_h");
  out.push_back(AxisNode("Unsqueeze", prefix + "/unsqueeze_h", m.h0, state_axis, h0));
  layer.inputs[kH0] = h0;
  if (lstm) {
    const ValueId c0 = graph.AddValue(prefix + "/initial_c");
    out.push_back(AxisNode("Unsqueeze", prefix + "/unsqueeze_c", m.c0, state_axis, c0));
    layer.inputs[kC0] = c0;
  }

  // Which Loop outputs take which layer output.
  std::vector<ValueId> wants[4];  // by result kind
  for (const LoopSpec::OutputPort& port : loop.loop->outputs) {
    const ValueId v = loop.outputs[port.node_output];
    if (v != kNoValue) wants[m.result_kind[port.body_result]].push_back(v);
  }
  layer.outputs.assign(lstm ? 3 : 2, kNoValue);
  std::vector<Node> squeezes;
  const int kinds[] = {3, 1, 2};  // Y, Y_h, Y_c
  for (int k = 0; k < static_cast<int>(layer.outputs.size()); ++k) {
    const std::vector<ValueId>& targets = wants[kinds[k]];
    if (targets.empty()) continue;
    layer.outputs[k] = graph.AddValue(absl::StrCat(prefix, "/output_", k));
    const ValueId axes = k == 0 ? y_axis : state_axis;
    squeezes.push_back(AxisNode("Squeeze", absl::StrCat(prefix, "/squeeze_", k), layer.outputs[k],
                                axes, targets[0]));
    for (size_t t = 1; t < targets.size(); ++t) {
      Node identity;
      identity.name = absl::StrCat(prefix, "/identity_", k, "_", t);
      identity.op_type = "Identity";
      identity.opset = 13;
      identity.inputs = {targets[0]};
      identity.outputs = {targets[t]};
      squeezes.push_back(std::move(identity));
    }
  }
  out.push_back(std::move(layer));
  for (Node& n : squeezes) out.push_back(std::move(n));
}

}  // namespace

absl::Status LowerCellLoopsPass::Run(Graph& graph, const TransformContext& context,
                                     std::vector<std::string>& log) const {
  bool any = false;
  for (const Node& node : graph.nodes) {
    if (node.op_type != "Loop" || node.loop == nullptr || node.GetGraph("body") == nullptr) {
      continue;
    }
    if (MatchCellLoop(node, *node.GetGraph("body"), context).has_value()) any = true;
  }
  if (!any) return absl::OkStatus();
  std::vector<Node> nodes;
  nodes.reserve(graph.nodes.size() + 8);
  const std::vector<Node> old = std::move(graph.nodes);
  for (const Node& node : old) {
    std::shared_ptr<const Graph> body =
        node.op_type == "Loop" && node.loop != nullptr ? node.GetGraph("body") : nullptr;
    std::optional<Match> m;
    if (body != nullptr) m = MatchCellLoop(node, *body, context);
    if (!m.has_value()) {
      nodes.push_back(node);
      continue;
    }
    Lower(graph, node, *body, *m, context, nodes);
    log.push_back(absl::StrCat(name(), ": ", node.Label(), ": the loop over one ", m->cell->op_type,
                               " cell runs as one ", m->cell->op_type, " layer (",
                               m->stride == 1 ? "forward" : "reverse", ", layout ", m->axis, ")"));
  }
  graph.nodes = std::move(nodes);
  return absl::OkStatus();
}

}  // namespace loopserve::engine::transform
