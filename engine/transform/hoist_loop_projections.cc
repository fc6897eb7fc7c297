#include "engine/transform/hoist_loop_projections.h"

#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "engine/transform/graph_util.h"

namespace loopserve::engine::transform {
namespace {

// An invariant operand of the body as the enclosing graph sees it: a value of that graph (through
// a capture) or a constant tensor (the body's own, to be added to the enclosing graph).
struct Invariant {
  ValueId outer = kNoValue;
  std::shared_ptr<const Tensor> constant;  // set for a body constant
};

std::optional<Invariant> FindInvariant(const Graph& body, ValueId id) {
  for (const Capture& c : body.captures) {
    if (c.inner == id) return Invariant{c.outer, nullptr};
  }
  for (const auto& [value, tensor] : body.constants) {
    if (value == id) return Invariant{kNoValue, tensor};
  }
  return std::nullopt;
}

// The tensor an invariant stands for when it is constant, else null.
const Tensor* ConstantOf(const Invariant& inv, const TransformContext& context) {
  if (inv.constant != nullptr) return inv.constant.get();
  return context.find_constant ? context.find_constant(inv.outer) : nullptr;
}

// Declared dims of an invariant, when known.
std::optional<std::vector<int64_t>> DimsOf(const Graph& graph, const Invariant& inv,
                                           const TransformContext& context) {
  if (const Tensor* t = ConstantOf(inv, context)) {
    return std::vector<int64_t>(t->shape().dims().begin(), t->shape().dims().end());
  }
  return graph.values[inv.outer].type.dims;
}

// A product of the body to move out: body node `node` computes `MatMul(x_t, weights)` [+ bias]
// for the step x_t of the enclosing graph's `sequence`.
struct Hoist {
  int node = -1;
  ValueId step = kNoValue;       // x_t, in the body
  ValueId sequence = kNoValue;   // X, in the enclosing graph
  Invariant weights;             // [K, N]
  std::shared_ptr<Tensor> bias;  // beta * C of a Gemm, or null
};

// When a step's product moves out: when it has at most kMaxRowsPerStep rows, or weights of at
// least kStreamedWeightBytes. A product of few rows is close to a matrix-vector one, and weights
// larger than L2 (1 MB on the Zen 4 measured) come from L3 every step: either way the step
// streams the weights for a few FLOPs each. Hoisted, batch-1 cells ran 1.3-1.4x faster and
// lstm_b64_h512 ([64, 512] x [512, 2048], 4 MB) 6% (CPU time, AMD EPYC Zen 4, AVX-512). A product
// of more rows on weights that stay in L2 already runs at the GEMM rate in the body, its result
// in cache, while hoisted it writes T times that result to memory and the body copies each step
// back: batch 8 3% slower, 32 8%, 64 8% at hidden 64-128 (AVX-512), 16-22% on the AVX2 path.
// The threshold is 1 MB, half of a 2 MB L2 (Sapphire Rapids): weights that fill half of L2 leave
// the body's other product no room beside them (rnn_b8_h512 / rnn_b16_h512, two [512, 512]
// products: hoisted 16.0 -> 12.5 ms and 27.3 -> 24.2 ms, lstm_b16_h256 -4%, rnn_b32_h512 even;
// CPU time, 1 thread, Intel Xeon Sapphire Rapids, AVX-512).
constexpr int64_t kMaxRowsPerStep = 4;
constexpr int64_t kStreamedWeightBytes = int64_t{1} << 20;

// Whether a step's product of `rows` rows on [k, n] weights of `element_bytes` moves out.
bool WorthHoisting(int64_t rows, int64_t k, int64_t n, int64_t element_bytes) {
  if (rows <= kMaxRowsPerStep) return true;
  int64_t bytes = 0;
  if (k <= 0 || n <= 0 || __builtin_mul_overflow(k, n, &bytes) ||
      __builtin_mul_overflow(bytes, element_bytes, &bytes)) {
    return false;  // unknown, or dims no tensor can have
  }
  return bytes >= kStreamedWeightBytes;
}

// The rows of one step's product (X's dims between the step axis and the inner one), when X's
// dims are known.
std::optional<int64_t> RowsPerStep(const std::optional<std::vector<int64_t>>& x_dims) {
  if (!x_dims.has_value() || x_dims->size() < 2) return std::nullopt;
  int64_t rows = 1;
  for (size_t d = 1; d + 1 < x_dims->size(); ++d) {
    if ((*x_dims)[d] < 0 || __builtin_mul_overflow(rows, (*x_dims)[d], &rows)) return std::nullopt;
  }
  return rows;
}

// Whether the last dim of `x` can be K (unknown counts as yes).
bool InnerDimFits(const std::optional<std::vector<int64_t>>& x, int64_t k) {
  return !x.has_value() || x->empty() || x->back() < 0 || k < 0 || x->back() == k;
}

// `Gemm(x_t, B, C)` as a product with constant [K, N] weights alpha * op(B) and a bias beta * C,
// or nullopt when it is not of that form.
std::optional<Hoist> GemmHoist(const Graph& body, const Graph& graph, const Node& gemm,
                               ValueId sequence, const TransformContext& context) {
  const bool has_c = gemm.inputs.size() == 3 && gemm.inputs[2] != kNoValue;
  if (gemm.inputs.size() < 2 || gemm.inputs.size() > 3 || gemm.outputs.size() != 1) {
    return std::nullopt;
  }
  const std::optional<std::vector<int64_t>>& x_dims = graph.values[sequence].type.dims;
  if (!x_dims.has_value() || x_dims->size() != 3) return std::nullopt;  // x_t must be 2-D
  absl::StatusOr<int64_t> trans_a = gemm.GetInt("transA", 0);
  absl::StatusOr<int64_t> trans_b = gemm.GetInt("transB", 0);
  absl::StatusOr<float> alpha = gemm.GetFloat("alpha", 1.0f);
  absl::StatusOr<float> beta = gemm.GetFloat("beta", 1.0f);
  if (!trans_a.ok() || !trans_b.ok() || !alpha.ok() || !beta.ok() || *trans_a != 0) {
    return std::nullopt;
  }
  std::optional<Invariant> b_inv = FindInvariant(body, gemm.inputs[1]);
  if (!b_inv.has_value()) return std::nullopt;
  const Tensor* b = ConstantOf(*b_inv, context);
  if (b == nullptr || b->dtype() != DataType::kFloat32 || b->rank() != 2) return std::nullopt;
  const int64_t k = *trans_b ? b->shape()[1] : b->shape()[0];
  const int64_t n = *trans_b ? b->shape()[0] : b->shape()[1];
  if (!InnerDimFits(x_dims, k)) return std::nullopt;
  Hoist h;
  h.sequence = sequence;
  auto w = std::make_shared<Tensor>(DataType::kFloat32, Shape{k, n});
  const float* src = b->data<float>();
  float* dst = w->mutable_data<float>();
  for (int64_t r = 0; r < k; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      dst[r * n + c] = *alpha * (*trans_b ? src[c * k + r] : src[r * n + c]);
    }
  }
  h.weights.constant = std::move(w);
  if (has_c && *beta != 0.0f) {
    std::optional<Invariant> c_inv = FindInvariant(body, gemm.inputs[2]);
    const Tensor* c = c_inv.has_value() ? ConstantOf(*c_inv, context) : nullptr;
    if (c == nullptr || c->dtype() != DataType::kFloat32 || c->rank() > 2) return std::nullopt;
    h.bias = std::make_shared<Tensor>(DataType::kFloat32, c->shape());
    for (int64_t e = 0; e < c->NumElements(); ++e) {
      h.bias->mutable_data<float>()[e] = *beta * c->data<float>()[e];
    }
  }
  return h;
}

// The products of `body` (run by `loop`) that can move out, in body order.
std::vector<Hoist> FindHoists(const Graph& graph, const Node& loop, const Graph& body,
                              const TransformContext& context) {
  std::vector<Hoist> hoists;
  const LoopSpec& spec = *loop.loop;
  const int param = spec.current_iteration_param;
  if (param < 0 || param >= static_cast<int>(body.inputs.size())) return hoists;
  const ValueId iteration = body.inputs[param];
  for (const Node& gather : body.nodes) {
    if (!IsOp(gather, "Gather", 2, 1) || gather.inputs[1] != iteration) continue;
    absl::StatusOr<int64_t> axis = gather.GetInt("axis", 0);
    if (!axis.ok() || *axis != 0) continue;
    std::optional<Invariant> x = FindInvariant(body, gather.inputs[0]);
    if (!x.has_value() || x->constant != nullptr) continue;
    const std::optional<int64_t> rows = RowsPerStep(graph.values[x->outer].type.dims);
    if (!rows.has_value()) continue;
    const ValueId step = gather.outputs[0];
    for (int n = 0; n < static_cast<int>(body.nodes.size()); ++n) {
      const Node& product = body.nodes[n];
      if (product.inputs.empty() || product.inputs[0] != step || product.outputs.size() != 1 ||
          product.outputs[0] == kNoValue) {
        continue;
      }
      if (IsOp(product, "MatMul", 2, 1) && product.inputs[1] != step) {
        std::optional<Invariant> w = FindInvariant(body, product.inputs[1]);
        if (!w.has_value()) continue;
        std::optional<std::vector<int64_t>> w_dims = DimsOf(graph, *w, context);
        if (!w_dims.has_value() || w_dims->size() != 2) continue;
        const std::optional<std::vector<int64_t>>& x_dims = graph.values[x->outer].type.dims;
        if (!x_dims.has_value() || x_dims->size() < 2) continue;
        if (!InnerDimFits(x_dims, (*w_dims)[0])) continue;
        // Weights counted at float32's 4 bytes an element, the type the thresholds were measured
        // on.
        if (!WorthHoisting(*rows, (*w_dims)[0], (*w_dims)[1], 4)) continue;
        Hoist h;
        h.node = n;
        h.step = step;
        h.sequence = x->outer;
        h.weights = *w;
        hoists.push_back(std::move(h));
      } else if (product.op_type == "Gemm" && product.domain.empty() && product.inputs[1] != step) {
        std::optional<Hoist> h = GemmHoist(body, graph, product, x->outer, context);
        if (!h.has_value()) continue;
        const Shape& w = h->weights.constant->shape();
        if (!WorthHoisting(*rows, w[0], w[1], 4)) continue;
        h->node = n;
        h->step = step;
        hoists.push_back(*std::move(h));
      }
    }
  }
  return hoists;
}

}  // namespace

absl::Status HoistLoopProjectionsPass::Run(Graph& graph, const TransformContext& context,
                                           std::vector<std::string>& log) const {
  RewriteLoops(graph, [&](Node& loop, Attribute& body_attribute, std::vector<Node>& nodes) {
    const std::vector<Hoist> hoists = FindHoists(graph, loop, *body_attribute.graph, context);
    if (hoists.empty()) {
      return;
    }
    auto body = std::make_shared<Graph>(*body_attribute.graph);
    const ValueId iteration = body->inputs[loop.loop->current_iteration_param];
    for (const Hoist& h : hoists) {
      const std::string product_name = body->nodes[h.node].name;
      const int product_opset = body->nodes[h.node].opset;
      const ValueId y = body->nodes[h.node].outputs[0];
      const std::string y_name = body->ValueName(y);
      ValueType type;
      type.dtype = graph.values[h.sequence].type.dtype;
      // The product over all steps, before the Loop.
      ValueId weights = h.weights.outer;
      if (weights == kNoValue) {
        weights = graph.AddValue(absl::StrCat(y_name, "/weights"));
        graph.constants.push_back({weights, h.weights.constant});
      }
      Node matmul;
      matmul.name = absl::StrCat(product_name, "/all_steps");
      matmul.op_type = "MatMul";
      matmul.opset = loop.opset;
      matmul.inputs = {h.sequence, weights};
      ValueId all_steps = graph.AddValue(absl::StrCat(y_name, "/all_steps"), type);
      matmul.outputs = {all_steps};
      nodes.push_back(std::move(matmul));
      if (h.bias != nullptr) {
        const ValueId bias = graph.AddValue(absl::StrCat(y_name, "/bias"));
        graph.constants.push_back({bias, h.bias});
        Node add;
        add.name = absl::StrCat(product_name, "/all_steps_bias");
        add.op_type = "Add";
        add.opset = loop.opset;
        const ValueId sum = graph.AddValue(absl::StrCat(y_name, "/all_steps_biased"), type);
        add.inputs = {all_steps, bias};
        add.outputs = {sum};
        nodes.push_back(std::move(add));
        all_steps = sum;
      }
      loop.implicit_inputs.push_back(all_steps);
      // The body reads its step of it.
      const ValueId inner = body->AddValue(absl::StrCat(y_name, "/all_steps"), type);
      body->captures.push_back({inner, all_steps});
      Node slice;
      slice.name = absl::StrCat(product_name, "/step");
      slice.op_type = "Gather";
      slice.opset = product_opset;
      slice.inputs = {inner, iteration};
      slice.outputs = {y};
      Attribute axis;
      axis.type = Attribute::Type::kInt;
      axis.i = 0;
      slice.attributes["axis"] = axis;
      body->nodes[h.node] = std::move(slice);
    }
    // A step Gather nothing reads any more goes.
    const ValueUses uses(*body);
    std::vector<bool> removed(body->nodes.size(), false);
    for (size_t n = 0; n < body->nodes.size(); ++n) {
      const Node& node = body->nodes[n];
      for (const Hoist& h : hoists) {
        if (node.outputs.size() == 1 && node.outputs[0] == h.step && uses.count[h.step] == 0) {
          removed[n] = true;
        }
      }
    }
    RemoveNodes(*body, removed);
    log.push_back(absl::StrCat(name(), ": ", loop.Label(), ": ", hoists.size(),
                               " product(s) of the iteration's input step computed for all steps "
                               "before the Loop"));
    body_attribute.graph = std::move(body);
  });
  return absl::OkStatus();
}

}  // namespace loopserve::engine::transform
