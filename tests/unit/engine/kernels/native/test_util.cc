#include "tests/unit/engine/kernels/native/test_util.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"

namespace loopserve::engine::native_test {

absl::StatusOr<std::vector<Value>> RunOp(const OpCase& c) {
  auto graph = std::make_shared<Graph>();
  graph->name = "test";
  Node node;
  node.name = "n";
  node.op_type = c.op;
  node.opset = c.opset;
  std::vector<Value> feeds;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (!c.inputs[i].has_value()) {
      node.inputs.push_back(kNoValue);
      continue;
    }
    ValueType type;  // kind tensor, element type and dims unknown: accepts anything
    const ValueId v = graph->AddValue(absl::StrCat("in", i), type);
    graph->inputs.push_back(v);
    node.inputs.push_back(v);
    Tensor copy;
    copy.CopyFrom(*c.inputs[i]);
    feeds.emplace_back(std::move(copy));
  }
  for (int i = 0; i < c.num_outputs; ++i) {
    const ValueId v = graph->AddValue(absl::StrCat("out", i));
    graph->outputs.push_back(v);
    node.outputs.push_back(v);
  }
  for (const auto& [name, attr] : c.attributes) node.attributes[name] = attr;
  graph->nodes.push_back(std::move(node));
  auto model = Model::FromGraph(graph);
  if (!model.ok()) return model.status();
  return (*model)->Run(std::move(feeds), RunOptions());
}

Tensor RunOk(const OpCase& c) {
  const std::string& op = c.op;
  absl::StatusOr<std::vector<Value>> out = RunOp(c);
  EXPECT_TRUE(out.ok()) << op << ": " << out.status();
  if (!out.ok() || out->empty() || !(*out)[0].is_tensor()) return Tensor();
  Tensor t;
  t.CopyFrom((*out)[0].tensor());
  return t;
}

void ExpectError(const OpCase& c, absl::StatusCode code, const std::string& fragment) {
  const std::string& op = c.op;
  absl::StatusOr<std::vector<Value>> out = RunOp(c);
  ASSERT_FALSE(out.ok()) << op << " unexpectedly succeeded";
  EXPECT_EQ(out.status().code(), code) << out.status();
  EXPECT_NE(std::string(out.status().message()).find(fragment), std::string::npos)
      << "message '" << out.status().message() << "' lacks '" << fragment << "'";
}

}  // namespace loopserve::engine::native_test
