#include "engine/transform/fold_qdq.h"

#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/tensor/dtype.h"
#include "engine/transform/graph_util.h"

namespace loopserve::engine::transform {
namespace {

bool IsOnnxDomain(const Node& node) { return node.domain.empty() || node.domain == "ai.onnx"; }

bool Is8Bit(DataType t) { return t == DataType::kInt8 || t == DataType::kUint8; }

// A DequantizeLinear whose factors can leave the sum: q 8-bit, a float32 constant scale, a
// constant zero point of q's type (or none) with as many values as the scale.
struct Dequantize {
  int node = -1;
  ValueId q = kNoValue;
  ValueId zero_point = kNoValue;
  const Tensor* scale = nullptr;
  const Tensor* q_constant = nullptr;  // q's value when constant
  int64_t axis = 1;                    // as written (may be negative)
};

class Folder {
 public:
  Folder(Graph& graph, const TransformContext& context)
      : graph_(graph), context_(context), producer_(graph.values.size(), -1) {
    for (int n = 0; n < static_cast<int>(graph.nodes.size()); ++n) {
      for (ValueId v : graph.nodes[n].outputs) {
        if (v != kNoValue) producer_[v] = n;
      }
    }
  }

  // Rewrites every foldable product; returns whether any was.
  bool Run(absl::string_view pass, std::vector<std::string>& log) {
    std::vector<std::vector<Node>> replacements(graph_.nodes.size());
    std::vector<ValueId> dq_outputs;  // of the DequantizeLinears a fold may have left unread
    bool changed = false;
    for (int n = 0; n < static_cast<int>(graph_.nodes.size()); ++n) {
      const Node& node = graph_.nodes[n];
      if (!IsOnnxDomain(node) || node.fusion != nullptr) continue;
      std::vector<int> dq;
      bool folded = false;
      if (node.op_type == "MatMul" || node.op_type == "Gemm") {
        folded = FoldProduct(node, replacements[n], dq);
      } else if (node.op_type == "Conv") {
        folded = FoldConv(node, replacements[n], dq);
      }
      if (!folded) continue;
      changed = true;
      std::string made;
      for (const Node& r : replacements[n]) {
        absl::StrAppend(&made, made.empty() ? "" : " + ", r.op_type);
      }
      log.push_back(absl::StrCat(pass, ": ", DescribeNodes(graph_, dq), " + ", node.op_type, " '",
                                 node.name, "' -> ", made));
      for (int d : dq) dq_outputs.push_back(graph_.nodes[d].outputs[0]);
    }
    if (!changed) return false;
    std::vector<Node> nodes;
    nodes.reserve(graph_.nodes.size() + 3 * dq_outputs.size());
    for (size_t n = 0; n < graph_.nodes.size(); ++n) {
      if (replacements[n].empty()) {
        nodes.push_back(std::move(graph_.nodes[n]));
      } else {
        for (Node& r : replacements[n]) nodes.push_back(std::move(r));
      }
    }
    graph_.nodes = std::move(nodes);
    // The folded DequantizeLinears nothing reads any more go.
    const ValueUses uses(graph_);
    std::vector<bool> removed(graph_.nodes.size(), false);
    for (size_t n = 0; n < graph_.nodes.size(); ++n) {
      const Node& node = graph_.nodes[n];
      if (node.op_type != "DequantizeLinear" || node.outputs.size() != 1) continue;
      for (ValueId v : dq_outputs) {
        if (node.outputs[0] == v && uses.count[v] == 0) removed[n] = true;
      }
    }
    RemoveNodes(graph_, removed);
    return true;
  }

 private:
  const Tensor* Constant(ValueId id) const {
    return id == kNoValue || !context_.find_constant ? nullptr : context_.find_constant(id);
  }

  // The DequantizeLinear producing `v`, when its factors can leave a sum.
  std::optional<Dequantize> DequantizeOf(ValueId v) {
    if (v == kNoValue || producer_[v] < 0) return std::nullopt;
    const int n = producer_[v];
    const Node& node = graph_.nodes[n];
    if (node.op_type != "DequantizeLinear" || !IsOnnxDomain(node) || node.inputs.size() < 2 ||
        node.inputs.size() > 3 || node.inputs[0] == kNoValue || node.inputs[1] == kNoValue ||
        node.outputs.size() != 1) {
      return std::nullopt;
    }
    absl::StatusOr<int64_t> block = node.GetInt("block_size", 0);
    absl::StatusOr<int64_t> axis = node.GetInt("axis", 1);
    if (!block.ok() || *block != 0 || !axis.ok()) return std::nullopt;
    Dequantize d;
    d.node = n;
    d.q = node.inputs[0];
    d.zero_point = node.inputs.size() == 3 ? node.inputs[2] : kNoValue;
    d.scale = Constant(node.inputs[1]);
    d.q_constant = Constant(d.q);
    d.axis = *axis;
    if (d.scale == nullptr || d.scale->dtype() != DataType::kFloat32 ||
        d.scale->NumElements() < 1 || d.scale->rank() > 1) {
      return std::nullopt;
    }
    const std::optional<DataType> q_type = QuantizedType(d.q, d.zero_point);
    if (!q_type.has_value() || !Is8Bit(*q_type)) return std::nullopt;
    if (d.q_constant != nullptr && d.q_constant->dtype() != *q_type) return std::nullopt;
    if (d.zero_point != kNoValue) {
      const Tensor* zp = Constant(d.zero_point);
      if (zp == nullptr || zp->dtype() != *q_type || zp->NumElements() != d.scale->NumElements() ||
          zp->rank() > 1) {
        return std::nullopt;
      }
    }
    return d;
  }

  // The element type of the quantized value `q` (zero point `zp`): the zero point's, the declared
  // one, or what the QuantizeLinear producing it makes.
  std::optional<DataType> QuantizedType(ValueId q, ValueId zp) const {
    if (const Tensor* z = Constant(zp)) return z->dtype();
    if (const Tensor* c = Constant(q)) return c->dtype();
    const DataType declared = graph_.values[q].type.dtype;
    if (declared != DataType::kUndefined) return declared;
    if (producer_[q] < 0) return std::nullopt;
    const Node& quantize = graph_.nodes[producer_[q]];
    if (quantize.op_type != "QuantizeLinear" || !IsOnnxDomain(quantize)) return std::nullopt;
    if (quantize.inputs.size() < 3 || quantize.inputs[2] == kNoValue) return DataType::kUint8;
    const Tensor* z = Constant(quantize.inputs[2]);
    if (z == nullptr) return std::nullopt;
    return z->dtype();
  }

  ValueId AddConstant(const std::string& name, Tensor&& tensor) {
    ValueType type;
    type.dtype = tensor.dtype();
    const ValueId v = graph_.AddValue(name, type);
    graph_.constants.push_back({v, std::make_shared<const Tensor>(std::move(tensor))});
    return v;
  }

  ValueId AddValue(const std::string& name, DataType dtype) {
    ValueType type;
    type.dtype = dtype;
    return graph_.AddValue(name, type);
  }

  static Node MakeNode(const std::string& op, int opset, std::string name,
                       std::vector<ValueId> inputs, ValueId output) {
    Node n;
    n.op_type = op;
    n.opset = opset;
    n.name = std::move(name);
    n.inputs = std::move(inputs);
    n.outputs = {output};
    return n;
  }

  // Cast<float>(integer) * scale [+ addend] -> output: the dequantization after the product.
  void AppendEpilogue(const Node& product_node, ValueId integer, ValueId scale, ValueId addend,
                      std::vector<Node>& out) {
    const std::string& base = product_node.name;
    const ValueId output = product_node.outputs[0];
    const ValueId f = AddValue(absl::StrCat(base, "/qdq_float"), DataType::kFloat32);
    Node cast = MakeNode("Cast", 13, absl::StrCat(base, "/qdq_cast"), {integer}, f);
    cast.attributes["to"].type = Attribute::Type::kInt;
    cast.attributes["to"].i = DataTypeToOnnx(DataType::kFloat32);
    out.push_back(std::move(cast));
    const ValueId scaled = addend == kNoValue
                               ? output
                               : AddValue(absl::StrCat(base, "/qdq_scaled"), DataType::kFloat32);
    out.push_back(MakeNode("Mul", 14, absl::StrCat(base, "/qdq_scale"), {f, scale}, scaled));
    if (addend != kNoValue) {
      out.push_back(MakeNode("Add", 14, absl::StrCat(base, "/qdq_bias"), {scaled, addend}, output));
    }
  }

  // MatMul(DQ(a), DQ(b)) and Gemm(DQ(a), DQ(b), c): b a constant matrix.
  bool FoldProduct(const Node& node, std::vector<Node>& out, std::vector<int>& dq) {
    const bool gemm = node.op_type == "Gemm";
    if (node.outputs.size() != 1 || node.outputs[0] == kNoValue) return false;
    if (gemm ? (node.inputs.size() < 2 || node.inputs.size() > 3) : node.inputs.size() != 2) {
      return false;
    }
    float alpha = 1.0f;
    bool trans_b = false;
    ValueId addend = kNoValue;
    if (gemm) {
      absl::StatusOr<float> a = node.GetFloat("alpha", 1.0f);
      absl::StatusOr<float> beta = node.GetFloat("beta", 1.0f);
      absl::StatusOr<int64_t> ta = node.GetInt("transA", 0);
      absl::StatusOr<int64_t> tb = node.GetInt("transB", 0);
      if (!a.ok() || !beta.ok() || !ta.ok() || !tb.ok() || *ta != 0) return false;
      addend = node.inputs.size() == 3 ? node.inputs[2] : kNoValue;
      if (addend != kNoValue && *beta != 1.0f) return false;
      alpha = *a;
      trans_b = *tb != 0;
    }
    const std::optional<Dequantize> a = DequantizeOf(node.inputs[0]);
    const std::optional<Dequantize> b = DequantizeOf(node.inputs[1]);
    if (!a.has_value() || !b.has_value() || a->scale->NumElements() != 1) return false;
    const Tensor* bq = b->q_constant;
    if (bq == nullptr || bq->rank() != 2) return false;
    // The output columns are b's dim 1 (dim 0 when transposed); a per-channel scale must run
    // along them.
    const int64_t n = trans_b ? bq->dim(0) : bq->dim(1);
    const int64_t column_axis = trans_b ? 0 : 1;
    const int64_t channels = b->scale->NumElements();
    if (channels != 1 &&
        (channels != n || (b->axis != column_axis && b->axis != column_axis - 2))) {
      return false;
    }
    // A MatMul's a must be a matrix or a stack of them; a Gemm's is a matrix by definition.
    const float a_scale = a->scale->data<float>()[0];
    Tensor scale(DataType::kFloat32, channels == 1 ? Shape{} : Shape{channels});
    for (int64_t c = 0; c < channels; ++c) {
      scale.mutable_data<float>()[c] = a_scale * b->scale->data<float>()[c] * alpha;
    }
    const std::string& base = node.name;
    ValueId b_input = b->q;
    if (trans_b) {
      const int64_t rows = bq->dim(0), cols = bq->dim(1);
      Tensor t(bq->dtype(), Shape{cols, rows});
      const uint8_t* src = static_cast<const uint8_t*>(bq->raw_data());
      uint8_t* dst = static_cast<uint8_t*>(t.mutable_raw_data());
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
      }
      b_input = AddConstant(absl::StrCat(base, "/qdq_b_transposed"), std::move(t));
    }
    const ValueId scale_value = AddConstant(absl::StrCat(base, "/qdq_scale"), std::move(scale));
    const ValueId integer = AddValue(absl::StrCat(base, "/qdq_int32"), DataType::kInt32);
    std::vector<ValueId> inputs = {a->q, b_input, a->zero_point, b->zero_point};
    while (inputs.back() == kNoValue) inputs.pop_back();
    out.push_back(MakeNode("MatMulInteger", 10, absl::StrCat(base, "/qdq_matmul"),
                           std::move(inputs), integer));
    AppendEpilogue(node, integer, scale_value, addend, out);
    dq = {a->node, b->node};
    return true;
  }

  // Conv(DQ(x), DQ(w), bias): w constant, its scale per tensor or per output channel (axis 0);
  // the bias a float32 constant or the DequantizeLinear of a constant.
  bool FoldConv(const Node& node, std::vector<Node>& out, std::vector<int>& dq) {
    if (node.outputs.size() != 1 || node.outputs[0] == kNoValue || node.inputs.size() < 2 ||
        node.inputs.size() > 3) {
      return false;
    }
    const std::optional<Dequantize> x = DequantizeOf(node.inputs[0]);
    const std::optional<Dequantize> w = DequantizeOf(node.inputs[1]);
    if (!x.has_value() || !w.has_value() || x->scale->NumElements() != 1) return false;
    const Tensor* wq = w->q_constant;
    if (wq == nullptr || wq->rank() < 3) return false;
    const int64_t m = wq->dim(0);
    const int64_t channels = w->scale->NumElements();
    if (channels != 1 && (channels != m || (w->axis != 0 && w->axis != -wq->rank()))) {
      return false;
    }
    // Per-channel factors as [M, 1, ...] over the output [N, M, spatial...].
    std::vector<int64_t> dims(wq->rank() - 1, 1);
    dims[0] = m;
    const Shape channel_shape{absl::Span<const int64_t>(dims)};
    std::optional<Tensor> bias;
    int bias_node = -1;
    if (node.inputs.size() == 3 && node.inputs[2] != kNoValue) {
      bias = ConstantBias(node.inputs[2], m, channel_shape, &bias_node);
      if (!bias.has_value()) return false;
    }
    const float x_scale = x->scale->data<float>()[0];
    Tensor scale(DataType::kFloat32, channel_shape);
    for (int64_t c = 0; c < m; ++c) {
      scale.mutable_data<float>()[c] = x_scale * w->scale->data<float>()[channels == 1 ? 0 : c];
    }
    const std::string& base = node.name;
    const ValueId scale_value = AddConstant(absl::StrCat(base, "/qdq_scale"), std::move(scale));
    const ValueId bias_value = bias.has_value()
                                   ? AddConstant(absl::StrCat(base, "/qdq_bias"), std::move(*bias))
                                   : kNoValue;
    const ValueId integer = AddValue(absl::StrCat(base, "/qdq_int32"), DataType::kInt32);
    std::vector<ValueId> inputs = {x->q, w->q, x->zero_point, w->zero_point};
    while (inputs.back() == kNoValue) inputs.pop_back();
    Node conv =
        MakeNode("ConvInteger", 10, absl::StrCat(base, "/qdq_conv"), std::move(inputs), integer);
    conv.attributes = node.attributes;  // auto_pad, dilations, group, kernel_shape, pads, strides
    out.push_back(std::move(conv));
    AppendEpilogue(node, integer, scale_value, bias_value, out);
    dq = {x->node, w->node};
    if (bias_node >= 0) dq.push_back(bias_node);
    return true;
  }

  // A Conv bias of `m` values as a float32 tensor of `shape`: a float32 constant, or the
  // DequantizeLinear of an int32 constant (quantize_static's bias, scale x_s * w_s per channel),
  // whose node is then `*dequantize`.
  std::optional<Tensor> ConstantBias(ValueId v, int64_t m, const Shape& shape, int* dequantize) {
    Tensor result(DataType::kFloat32, shape);
    float* out = result.mutable_data<float>();
    if (const Tensor* c = Constant(v)) {
      if (c->dtype() != DataType::kFloat32 || c->NumElements() != m || c->rank() != 1) {
        return std::nullopt;
      }
      for (int64_t i = 0; i < m; ++i) out[i] = c->data<float>()[i];
      return result;
    }
    if (producer_[v] < 0) return std::nullopt;
    const Node& node = graph_.nodes[producer_[v]];
    if (node.op_type != "DequantizeLinear" || !IsOnnxDomain(node) || node.inputs.size() < 2 ||
        node.inputs.size() > 3) {
      return std::nullopt;
    }
    const Tensor* q = Constant(node.inputs[0]);
    const Tensor* scale = Constant(node.inputs[1]);
    const Tensor* zp = node.inputs.size() == 3 ? Constant(node.inputs[2]) : nullptr;
    if (node.inputs.size() == 3 && node.inputs[2] != kNoValue && zp == nullptr) return std::nullopt;
    absl::StatusOr<int64_t> block = node.GetInt("block_size", 0);
    if (!block.ok() || *block != 0) return std::nullopt;
    if (q == nullptr || q->dtype() != DataType::kInt32 || q->rank() != 1 || q->NumElements() != m ||
        scale == nullptr || scale->dtype() != DataType::kFloat32 ||
        (scale->NumElements() != 1 && scale->NumElements() != m) ||
        (zp != nullptr &&
         (zp->dtype() != DataType::kInt32 || zp->NumElements() != scale->NumElements()))) {
      return std::nullopt;
    }
    // DequantizeLinear's own arithmetic: (q - zp) * scale in float32.
    for (int64_t i = 0; i < m; ++i) {
      const int64_t c = scale->NumElements() == 1 ? 0 : i;
      const int64_t z = zp != nullptr ? zp->data<int32_t>()[c] : 0;
      out[i] = static_cast<float>(static_cast<int64_t>(q->data<int32_t>()[i]) - z) *
               scale->data<float>()[c];
    }
    *dequantize = producer_[v];
    return result;
  }

  Graph& graph_;
  const TransformContext& context_;
  std::vector<int> producer_;
};

// Folds in `graph`'s Loop bodies and If branches: each rewritten copy replaces its attribute.
void FoldSubgraphs(Graph& graph, const TransformContext& context, const FoldQdqPass& pass,
                   std::vector<std::string>& log) {
  for (Node& node : graph.nodes) {
    for (auto& [name, attribute] : node.attributes) {
      if (attribute.type != Attribute::Type::kGraph || attribute.graph == nullptr) continue;
      auto copy = std::make_shared<Graph>(*attribute.graph);
      TransformContext inner = context;
      inner.inputs_checked = false;
      const Graph* body = copy.get();
      inner.find_constant = [body, &context](ValueId id) -> const Tensor* {
        for (const auto& [value, tensor] : body->constants) {
          if (value == id) return tensor.get();
        }
        for (const Capture& c : body->captures) {
          if (c.inner == id)
            return context.find_constant ? context.find_constant(c.outer) : nullptr;
        }
        return nullptr;
      };
      const size_t before = log.size();
      if (!pass.Run(*copy, inner, log).ok()) continue;
      if (log.size() != before) attribute.graph = std::move(copy);
    }
  }
}

}  // namespace

absl::Status FoldQdqPass::Run(Graph& graph, const TransformContext& context,
                              std::vector<std::string>& log) const {
  Folder(graph, context).Run(name(), log);
  FoldSubgraphs(graph, context, *this, log);
  return absl::OkStatus();
}

}  // namespace loopserve::engine::transform
