#include "engine/transform/fold_into_conv.h"

#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "engine/transform/graph_util.h"

namespace loopserve::engine::transform {
namespace {

const Tensor* FloatConstant(const TransformContext& context, ValueId id) {
  if (id == kNoValue || !context.find_constant) return nullptr;
  const Tensor* t = context.find_constant(id);
  return t != nullptr && t->dtype() == DataType::kFloat32 ? t : nullptr;
}

// Per output channel values of `t` for a Conv result of rank `rank` with `channels` channels
// (BroadcastsPerChannel), or empty when it does not broadcast that way.
std::vector<double> PerChannel(const Tensor& t, int64_t rank, int64_t channels) {
  std::vector<double> values;
  if (!BroadcastsPerChannel(t, rank, channels)) return values;
  if (t.NumElements() == 1) {
    values.assign(channels, t.data<float>()[0]);
  } else {
    values.assign(t.data<float>(), t.data<float>() + channels);
  }
  return values;
}

// The scale a and shift b of an inference BatchNormalization node over `channels` channels
// (y = x * a + b), or false when the node is not one with constant float32 statistics.
bool BatchNormAffine(const Node& bn, const TransformContext& context, int64_t channels,
                     std::vector<double>& a, std::vector<double>& b) {
  if (bn.inputs.size() != 5 || bn.outputs.empty() || bn.outputs[0] == kNoValue) return false;
  for (size_t i = 1; i < bn.outputs.size(); ++i) {
    if (bn.outputs[i] != kNoValue) return false;  // training statistics
  }
  // Before opset 7, is_test = 0 with more than one output slot is training mode (as the kernel
  // reads it), even when the extra outputs are omitted.
  absl::StatusOr<int64_t> is_test = bn.GetInt("is_test", 0);
  if (bn.opset < 7 && bn.outputs.size() > 1 && (!is_test.ok() || *is_test == 0)) return false;
  absl::StatusOr<int64_t> training = bn.GetInt("training_mode", 0);
  absl::StatusOr<int64_t> spatial = bn.GetInt("spatial", 1);
  absl::StatusOr<float> epsilon = bn.GetFloat("epsilon", 1e-5f);
  if (!training.ok() || *training != 0 || !spatial.ok() || *spatial != 1 || !epsilon.ok() ||
      !(*epsilon >= 0)) {
    return false;
  }
  const Tensor* p[4];
  for (int i = 0; i < 4; ++i) {
    p[i] = FloatConstant(context, bn.inputs[1 + i]);
    if (p[i] == nullptr || p[i]->NumElements() != channels || p[i]->rank() != 1) return false;
  }
  a.resize(channels);
  b.resize(channels);
  for (int64_t c = 0; c < channels; ++c) {
    const double scale = p[0]->data<float>()[c], beta = p[1]->data<float>()[c];
    const double mean = p[2]->data<float>()[c], var = p[3]->data<float>()[c];
    a[c] = scale / std::sqrt(var + *epsilon);
    b[c] = beta - mean * a[c];
  }
  return true;
}

ValueId AddConstant(Graph& graph, const std::string& name, std::shared_ptr<Tensor> t) {
  const ValueId id = graph.AddValue(name);
  graph.values[id].type.dtype = DataType::kFloat32;
  graph.values[id].type.dims =
      std::vector<int64_t>(t->shape().dims().begin(), t->shape().dims().end());
  graph.constants.push_back({id, std::move(t)});
  return id;
}

}  // namespace

absl::Status FoldIntoConvPass::Run(Graph& graph, const TransformContext& context,
                                   std::vector<std::string>& log) const {
  // Rewrites only add constants and move a Conv's output to a later value no other Conv chain
  // reads, so the uses of the values the loop looks at stay as counted here.
  FuseEachNode(graph, [&](int n, const ValueUses& uses, std::vector<bool>& removed) {
    Node& conv = graph.nodes[n];
    const bool transposed = conv.op_type == "ConvTranspose";
    if ((conv.op_type != "Conv" && !transposed) ||
        !(conv.domain.empty() || conv.domain == "ai.onnx") || conv.inputs.size() < 2 ||
        conv.inputs.size() > 3 || conv.outputs.size() != 1 || conv.fusion != nullptr) {
      return false;
    }
    const Tensor* w = FloatConstant(context, conv.inputs[1]);
    const bool has_bias = conv.inputs.size() == 3 && conv.inputs[2] != kNoValue;
    const Tensor* bias = has_bias ? FloatConstant(context, conv.inputs[2]) : nullptr;
    if (w == nullptr || w->rank() < 3 || (has_bias && bias == nullptr)) return false;
    // Output channels: Conv's W is [M, C / group, k...]; ConvTranspose's [C, M / group, k...].
    absl::StatusOr<int64_t> group = conv.GetInt("group", 1);
    if (!group.ok() || *group < 1 || (transposed && w->dim(0) % *group != 0)) return false;
    const int64_t channels = transposed ? w->dim(1) * *group : w->dim(0);
    const int64_t rank = w->rank();
    if (bias != nullptr && bias->NumElements() != channels) return false;
    // The Conv as y = x (*) (W * scale) + shift, grown along the chain.
    std::vector<double> scale(channels, 1.0), shift(channels, 0.0);
    if (bias != nullptr) shift.assign(bias->data<float>(), bias->data<float>() + channels);
    std::vector<int> chain = {n};
    ValueId value = conv.outputs[0];
    while (true) {
      if (!uses.Single(value)) break;
      const int next = uses.consumer[value];
      if (next < 0 || removed[next]) break;
      const Node& node = graph.nodes[next];
      std::vector<double> a, b;
      if (node.op_type == "BatchNormalization") {
        if (!(node.domain.empty() || node.domain == "ai.onnx") || node.inputs.empty() ||
            node.inputs[0] != value || !BatchNormAffine(node, context, channels, a, b)) {
          break;
        }
      } else if (IsOp(node, "Mul", 2, 1) || IsOp(node, "Add", 2, 1)) {
        const ValueId other = node.inputs[0] == value ? node.inputs[1] : node.inputs[0];
        const Tensor* c = FloatConstant(context, other);
        if (c == nullptr) break;
        const std::vector<double> v = PerChannel(*c, rank, channels);
        if (v.empty()) break;
        if (node.op_type == "Mul") {
          a = v;
          b.assign(channels, 0.0);
        } else {
          a.assign(channels, 1.0);
          b = v;
        }
      } else {
        break;
      }
      for (int64_t c = 0; c < channels; ++c) {
        scale[c] *= a[c];
        shift[c] = shift[c] * a[c] + b[c];
      }
      chain.push_back(next);
      value = node.outputs[0];
    }
    if (chain.size() == 1) return false;

    auto new_w = std::make_shared<Tensor>(DataType::kFloat32, w->shape());
    // Blocks of `taps` weights that share an output channel, in order: Conv's [M][C/g][k...]
    // has M blocks of C/g * taps; ConvTranspose's [C][M/g][k...] has C * M/g blocks of taps,
    // block (c, j) feeding output channel (c / (C/g)) * M/g + j.
    const int64_t taps = w->shape().NumElements(2, rank);
    const int64_t blocks = w->dim(0) * w->dim(1);
    for (int64_t block = 0; block < blocks; ++block) {
      int64_t m = block / w->dim(1);
      if (transposed) {
        const int64_t c = block / w->dim(1), j = block % w->dim(1);
        m = c / (w->dim(0) / *group) * w->dim(1) + j;
      }
      const float* src = w->data<float>() + block * taps;
      float* dst = new_w->mutable_data<float>() + block * taps;
      for (int64_t k = 0; k < taps; ++k) dst[k] = static_cast<float>(src[k] * scale[m]);
    }
    auto new_b = std::make_shared<Tensor>(DataType::kFloat32, Shape{channels});
    for (int64_t c = 0; c < channels; ++c)
      new_b->mutable_data<float>()[c] = static_cast<float>(shift[c]);
    const std::string described = DescribeNodes(graph, chain);
    const std::string w_name = absl::StrCat(graph.ValueName(conv.inputs[1]), "/folded");
    const std::string b_name = absl::StrCat(conv.name, "/folded_bias");
    const ValueId w_id = AddConstant(graph, w_name, std::move(new_w));
    const ValueId b_id = AddConstant(graph, b_name, std::move(new_b));
    Node& target = graph.nodes[n];
    target.inputs.resize(3);
    target.inputs[1] = w_id;
    target.inputs[2] = b_id;
    target.outputs[0] = value;
    for (size_t k = 1; k < chain.size(); ++k) removed[chain[k]] = true;
    log.push_back(absl::StrCat(name(), ": ", described, " -> ", target.op_type, " '", target.name,
                               "' (weights and bias folded)"));
    return true;
  });
  return absl::OkStatus();
}

}  // namespace loopserve::engine::transform
