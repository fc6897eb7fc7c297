#include "engine/import/onnx_scan.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"

namespace loopserve::engine {
namespace {

// What a Scan node's attributes and body say about its shape.
struct ScanLayout {
  int num_states = 0;        // N
  int num_scan_inputs = 0;   // M
  int num_scan_outputs = 0;  // K
  std::vector<int64_t> input_axes;
  std::vector<int64_t> input_directions;
  std::vector<int64_t> output_axes;
  std::vector<int64_t> output_directions;
};

absl::Status Invalid(const Node& node, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(node.Label(), ": ", message));
}

// Reads an int list attribute of `count` entries (default: all 0); directions must be 0 or 1.
absl::StatusOr<std::vector<int64_t>> ReadList(const Node& node, const std::string& name, int count,
                                              bool directions) {
  LS_ASSIGN_OR_RETURN(std::vector<int64_t> values,
                      node.GetInts(name, std::vector<int64_t>(count, 0)));
  if (static_cast<int>(values.size()) != count) {
    return Invalid(node, absl::StrCat("attribute '", name, "' has ", values.size(),
                                      " entries, expected ", count));
  }
  for (int64_t v : values) {
    if (directions && v != 0 && v != 1) {
      return Invalid(node, absl::StrCat("attribute '", name, "' holds ", v,
                                        "; a direction is 0 (forward) or 1 (reverse)"));
    }
  }
  return values;
}

// `first_input` is where the states start among the node's inputs (0, or 1 for Scan-8's
// sequence_lens); the scan inputs follow them.
absl::StatusOr<ScanLayout> ReadLayout(const Node& node, const Graph& body, int first_input,
                                      bool opset8) {
  ScanLayout layout;
  LS_ASSIGN_OR_RETURN(int64_t m, node.GetInt("num_scan_inputs", std::nullopt));
  const int operands = static_cast<int>(node.inputs.size()) - first_input;
  if (m < 1 || m > operands) {
    return Invalid(node, absl::StrCat("num_scan_inputs is ", m, " but the node has ", operands,
                                      " state and scan inputs (at least one scan input is "
                                      "needed to fix the number of iterations)"));
  }
  layout.num_scan_inputs = static_cast<int>(m);
  layout.num_states = operands - layout.num_scan_inputs;
  const int n = layout.num_states;
  if (static_cast<int>(body.inputs.size()) != n + layout.num_scan_inputs) {
    return Invalid(node, absl::StrCat("the body has ", body.inputs.size(), " inputs, expected ",
                                      n + layout.num_scan_inputs, " (", n, " states and ",
                                      layout.num_scan_inputs, " scan input slices)"));
  }
  if (static_cast<int>(body.outputs.size()) < n) {
    return Invalid(node, absl::StrCat("the body has ", body.outputs.size(),
                                      " outputs, fewer than its ", n, " states"));
  }
  layout.num_scan_outputs = static_cast<int>(body.outputs.size()) - n;
  if (static_cast<int>(node.outputs.size()) > n + layout.num_scan_outputs) {
    return Invalid(node, absl::StrCat("the node has ", node.outputs.size(),
                                      " outputs, but the body gives only ", n, " states and ",
                                      layout.num_scan_outputs, " scan outputs"));
  }
  for (size_t i = first_input; i < node.inputs.size(); ++i) {
    if (node.inputs[i] == kNoValue) {
      return Invalid(node, absl::StrCat("input ", i, " is required"));
    }
  }
  const int scans_in = layout.num_scan_inputs;
  const int scans_out = layout.num_scan_outputs;
  if (opset8) {
    LS_ASSIGN_OR_RETURN(layout.input_directions, ReadList(node, "directions", scans_in, true));
    layout.input_axes.assign(scans_in, 0);
    layout.output_axes.assign(scans_out, 0);
    layout.output_directions.assign(scans_out, 0);
    return layout;
  }
  LS_ASSIGN_OR_RETURN(layout.input_axes, ReadList(node, "scan_input_axes", scans_in, false));
  LS_ASSIGN_OR_RETURN(layout.input_directions,
                      ReadList(node, "scan_input_directions", scans_in, true));
  LS_ASSIGN_OR_RETURN(layout.output_axes, ReadList(node, "scan_output_axes", scans_out, false));
  LS_ASSIGN_OR_RETURN(layout.output_directions,
                      ReadList(node, "scan_output_directions", scans_out, true));
  return layout;
}

// The port map of Scan-9's semantics for a Loop node whose inputs are [no trip count, no
// condition, states..., scan inputs...] and whose outputs are [states..., scan outputs...]
// (the first `num_outputs` of them).
std::shared_ptr<LoopSpec> ScanSpec(const ScanLayout& layout, int num_outputs) {
  auto spec = std::make_shared<LoopSpec>();
  const int n = layout.num_states;
  for (int j = 0; j < n; ++j) {
    LoopSpec::InputPort port;
    port.kind = LoopSpec::InputPort::Kind::kCarried;
    port.node_input = 2 + j;
    port.body_param = j;
    port.back_edge = j;
    spec->inputs.push_back(port);
  }
  for (int j = 0; j < layout.num_scan_inputs; ++j) {
    LoopSpec::InputPort port;
    port.kind = LoopSpec::InputPort::Kind::kSliced;
    port.node_input = 2 + n + j;
    port.body_param = n + j;
    port.axis = layout.input_axes[j];
    port.stride = layout.input_directions[j] == 1 ? -1 : 1;
    port.squeeze = true;
    spec->inputs.push_back(port);
  }
  for (int k = 0; k < num_outputs; ++k) {
    LoopSpec::OutputPort port;
    port.node_output = k;
    port.body_result = k;
    if (k < n) {
      port.kind = LoopSpec::OutputPort::Kind::kLastValue;
    } else {
      port.kind = LoopSpec::OutputPort::Kind::kStack;
      port.axis = layout.output_axes[k - n];
      port.stride = layout.output_directions[k - n] == 1 ? -1 : 1;
    }
    spec->outputs.push_back(port);
  }
  return spec;
}

Attribute GraphAttribute(std::shared_ptr<const Graph> graph) {
  Attribute a;
  a.type = Attribute::Type::kGraph;
  a.graph = std::move(graph);
  return a;
}

Attribute IntAttribute(int64_t v) {
  Attribute a;
  a.type = Attribute::Type::kInt;
  a.i = v;
  return a;
}

// Builds the body of Scan-8's loop over the batch: one batch entry's states and sequences in,
// that entry's final states and scan outputs out.
class BatchBodyBuilder {
 public:
  BatchBodyBuilder(const Node& scan, const ScanLayout& layout, std::shared_ptr<const Graph> body,
                   bool has_lengths)
      : scan_(scan), layout_(layout), body_(std::move(body)), has_lengths_(has_lengths) {
    graph_ = std::make_shared<Graph>();
    graph_->name = absl::StrCat(scan.name, "/batch_entry");
  }

  std::shared_ptr<Graph> Build() {
    const int n = layout_.num_states;
    const int m = layout_.num_scan_inputs;
    ValueId length = kNoValue;
    if (has_lengths_) {
      ValueType scalar;
      scalar.dtype = DataType::kInt64;
      scalar.dims = std::vector<int64_t>{};
      length = graph_->AddValue(Name("sequence_length"), scalar);
      graph_->inputs.push_back(length);
    }
    std::vector<ValueId> states, sequences;
    for (int j = 0; j < n; ++j) {
      states.push_back(graph_->AddValue(Name(absl::StrCat("state_", j)), ValueType::Unknown()));
      graph_->inputs.push_back(states.back());
    }
    for (int j = 0; j < m; ++j) {
      sequences.push_back(
          graph_->AddValue(Name(absl::StrCat("sequence_", j)), ValueType::Unknown()));
      graph_->inputs.push_back(sequences.back());
    }

    // Sequences cut to this entry's length: Slice(x, [0], [length], [0]).
    ValueId zero = kNoValue, axis0 = kNoValue, end = kNoValue;
    std::vector<ValueId> cut = sequences;
    if (has_lengths_) {
      zero = Constant1D("zero", 0);
      axis0 = Constant1D("axis0", 0);
      end = NewValue("length_1d", DataType::kInt64);
      Emit("Unsqueeze", 13, {length, axis0}, {end});
      for (int j = 0; j < m; ++j) {
        cut[j] = NewValue(absl::StrCat("sequence_", j, "_cut"), DataType::kUndefined);
        Emit("Slice", 13, {sequences[j], zero, end, axis0}, {cut[j]});
      }
    }

    // The Scan-9 form of the body over axis 0 of the entry.
    Node inner;
    inner.name = absl::StrCat(scan_.name, "/entry_scan");
    inner.op_type = "Loop";
    inner.opset = scan_.opset;
    inner.inputs = {kNoValue, kNoValue};
    inner.inputs.insert(inner.inputs.end(), states.begin(), states.end());
    inner.inputs.insert(inner.inputs.end(), cut.begin(), cut.end());
    const int num_outputs = n + layout_.num_scan_outputs;
    std::vector<ValueId> results;
    for (int k = 0; k < num_outputs; ++k) {
      results.push_back(NewValue(absl::StrCat("result_", k), DataType::kUndefined));
    }
    inner.outputs = results;
    inner.attributes["body"] = GraphAttribute(RebindCaptures());
    inner.implicit_inputs = implicit_inputs_;
    inner.loop = ScanSpec(layout_, num_outputs);
    graph_->nodes.push_back(std::move(inner));

    // Scan outputs padded back to the full sequence length with zeros:
    // Pad(y, [0, T - length], axes [0]) with T = Shape(sequence_0)[0].
    if (has_lengths_) {
      const ValueId shape = NewValue("shape", DataType::kInt64);
      Emit("Shape", 13, {sequences[0]}, {shape});
      const ValueId full = NewValue("full_length", DataType::kInt64);
      Emit("Gather", 13, {shape, zero}, {full}).attributes["axis"] = IntAttribute(0);
      const ValueId missing = NewValue("missing", DataType::kInt64);
      Emit("Sub", 14, {full, end}, {missing});
      const ValueId pads = NewValue("pads", DataType::kInt64);
      Emit("Concat", 13, {zero, missing}, {pads}).attributes["axis"] = IntAttribute(0);
      for (int k = n; k < num_outputs; ++k) {
        const ValueId padded = NewValue(absl::StrCat("padded_", k), DataType::kUndefined);
        Emit("Pad", 18, {results[k], pads, kNoValue, axis0}, {padded});
        results[k] = padded;
      }
    }
    graph_->outputs = results;
    return graph_;
  }

 private:
  std::string Name(absl::string_view what) const { return absl::StrCat(graph_->name, "/", what); }

  ValueId NewValue(absl::string_view what, DataType dtype) {
    ValueType type = ValueType::Unknown();
    if (dtype != DataType::kUndefined) {
      type = ValueType();
      type.dtype = dtype;
    }
    return graph_->AddValue(Name(what), type);
  }

  ValueId Constant1D(absl::string_view what, int64_t v) {
    ValueType type;
    type.dtype = DataType::kInt64;
    type.dims = std::vector<int64_t>{1};
    const ValueId id = graph_->AddValue(Name(what), type);
    auto t = std::make_shared<Tensor>(DataType::kInt64, Shape{1});
    t->mutable_data<int64_t>()[0] = v;
    graph_->constants.emplace_back(id, std::move(t));
    return id;
  }

  Node& Emit(const std::string& op, int opset, std::vector<ValueId> inputs,
             std::vector<ValueId> outputs) {
    Node node;
    node.name = absl::StrCat(scan_.name, "/", op, "_", graph_->nodes.size());
    node.op_type = op;
    node.opset = opset;
    node.inputs = std::move(inputs);
    node.outputs = std::move(outputs);
    graph_->nodes.push_back(std::move(node));
    return graph_->nodes.back();
  }

  // The Scan body read values of the Scan's graph; it now sits one graph deeper, so each of its
  // captures goes through a capture of the batch body.
  std::shared_ptr<const Graph> RebindCaptures() {
    if (body_->captures.empty()) return body_;
    auto rebound = std::make_shared<Graph>(*body_);
    for (Capture& c : rebound->captures) {
      const ValueId mid =
          graph_->AddValue(body_->values[c.inner].name, body_->values[c.inner].type);
      graph_->captures.push_back(Capture{mid, c.outer});
      c.outer = mid;
      implicit_inputs_.push_back(mid);
    }
    return rebound;
  }

  const Node& scan_;
  const ScanLayout& layout_;
  std::shared_ptr<const Graph> body_;
  const bool has_lengths_;
  std::shared_ptr<Graph> graph_;
  std::vector<ValueId> implicit_inputs_;
};

}  // namespace

absl::Status LowerOnnxScan(Node& node) {
  std::shared_ptr<const Graph> body = node.GetGraph("body");
  if (body == nullptr) return Invalid(node, "attribute 'body' is missing");
  const bool opset8 = node.opset < 9;
  if (!opset8) {
    LS_ASSIGN_OR_RETURN(ScanLayout layout, ReadLayout(node, *body, 0, false));
    node.inputs.insert(node.inputs.begin(), {kNoValue, kNoValue});
    node.loop = ScanSpec(layout, static_cast<int>(node.outputs.size()));
    node.op_type = "Loop";
    return absl::OkStatus();
  }

  // Scan-8: [sequence_lens?, states..., scans...]; every input and output has the batch axis 0.
  if (node.inputs.empty()) return Invalid(node, "Scan-8 needs the sequence_lens input slot");
  LS_ASSIGN_OR_RETURN(ScanLayout layout, ReadLayout(node, *body, 1, true));
  const bool has_lengths = node.inputs[0] != kNoValue;
  BatchBodyBuilder builder(node, layout, body, has_lengths);
  std::shared_ptr<Graph> batch_body = builder.Build();

  auto spec = std::make_shared<LoopSpec>();
  std::vector<ValueId> inputs = {kNoValue, kNoValue};
  int param = 0;
  for (size_t i = has_lengths ? 0 : 1; i < node.inputs.size(); ++i) {
    LoopSpec::InputPort port;
    port.kind = LoopSpec::InputPort::Kind::kSliced;
    port.node_input = static_cast<int>(inputs.size());
    port.body_param = param++;
    port.axis = 0;
    port.squeeze = true;
    spec->inputs.push_back(port);
    inputs.push_back(node.inputs[i]);
  }
  for (size_t k = 0; k < node.outputs.size(); ++k) {
    LoopSpec::OutputPort port;
    port.kind = LoopSpec::OutputPort::Kind::kStack;
    port.node_output = static_cast<int>(k);
    port.body_result = static_cast<int>(k);
    spec->outputs.push_back(port);
  }
  node.inputs = std::move(inputs);
  node.attributes["body"] = GraphAttribute(std::move(batch_body));
  node.loop = std::move(spec);
  node.op_type = "Loop";
  return absl::OkStatus();
}

}  // namespace loopserve::engine
