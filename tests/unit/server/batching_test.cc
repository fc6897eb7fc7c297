// The dynamic batcher's merging and splitting (server/scheduling/batching.h). Expected values are
// written out by hand from the layout (row r of request k is row offset_k + r of the batch), never
// taken from the functions under test.

#include "server/scheduling/batching.h"

#include <cstdint>
#include <numeric>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tensor/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/repository/model_config.h"
#include "tests/unit/server/test_util.h"

namespace loopserve::server {
namespace {

using engine::DataType;
using engine::Value;
using ::testing::HasSubstr;

// M int64 (rank unknown, so that it may be an output with a batch axis) and s float [-1, -1, 2]
// without a batch dim, x float [-1, 3] batched; as outputs, x is batched at axis 0 and s at axis 1.
ModelIo Layout() {
  static const std::shared_ptr<const engine::Model> model =
      testing::PassthroughModelOf({{"M", DataType::kInt64, std::nullopt},
                                   {"x", DataType::kFloat32, std::vector<int64_t>{-1, 3}},
                                   {"s", DataType::kFloat32, std::vector<int64_t>{-1, -1, 2}}});
  absl::StatusOr<ParsedModelConfig> parsed = ParseModelConfig(
      "max_batch_size: 16\n"
      "dynamic_batching { }\n"
      "parameters { key: \"unbatched_inputs\" value: { string_value: \"M,s\" } }\n"
      "parameters { key: \"output_batch_axes\" value: { string_value: \"s:1\" } }\n",
      "m");
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  absl::StatusOr<inference::ModelConfig> config =
      CompleteModelConfig(*parsed, *model, "/r/m/1/model.onnx", {});
  EXPECT_TRUE(config.ok()) << config.status();
  return ModelIo::Build(*config, *model);
}

// A float tensor of `dims` holding first, first + 1, ...
Value Floats(std::vector<int64_t> dims, float first) {
  engine::Tensor t(DataType::kFloat32, engine::Shape(dims));
  float* data = t.mutable_data<float>();
  for (int64_t i = 0; i < t.NumElements(); ++i) data[i] = first + static_cast<float>(i);
  return Value(std::move(t));
}

Value Int64(int64_t v) {
  engine::Tensor t(DataType::kInt64, engine::Shape{});
  *t.mutable_data<int64_t>() = v;
  return Value(std::move(t));
}

std::vector<Value> Request(int64_t m, int64_t batch, float first) {
  std::vector<Value> inputs;
  inputs.push_back(Int64(m));
  inputs.push_back(Floats({batch, 3}, first));
  inputs.push_back(Floats({1, 2, 2}, 0));
  return inputs;
}

std::vector<float> Data(const Value& v) {
  const engine::Tensor& t = v.tensor();
  return std::vector<float>(t.data<float>(), t.data<float>() + t.NumElements());
}

TEST(BatchingTest, PolicyFromConfig) {
  inference::ModelConfig config;
  EXPECT_FALSE(BatchingPolicy::FromConfig(config).has_value());
  config.set_max_batch_size(8);
  config.mutable_dynamic_batching()->add_preferred_batch_size(8);
  config.mutable_dynamic_batching()->add_preferred_batch_size(4);
  config.mutable_dynamic_batching()->set_max_queue_delay_microseconds(250);
  config.mutable_dynamic_batching()->set_preserve_ordering(true);
  std::optional<BatchingPolicy> policy = BatchingPolicy::FromConfig(config);
  ASSERT_TRUE(policy.has_value());
  EXPECT_EQ(policy->max_batch_size, 8);
  EXPECT_EQ(policy->preferred, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(policy->max_queue_delay, absl::Microseconds(250));
  EXPECT_TRUE(policy->preserve_ordering);
  EXPECT_EQ(BatchQueue(*policy, 4).max_collectors(), 1);  // preserve_ordering: one at a time
  policy->preserve_ordering = false;
  EXPECT_EQ(BatchQueue(*policy, 4).max_collectors(), 4);
}

TEST(BatchingTest, WhoMayMerge) {
  const ModelIo io = Layout();
  const std::vector<Value> a = Request(5, 2, 0);
  EXPECT_EQ(BatchSize(io, a), 2);
  EXPECT_TRUE(Mergeable(io, a));
  EXPECT_TRUE(CanMerge(io, a, Request(5, 3, 100)));  // other batch size, other values
  EXPECT_FALSE(CanMerge(io, a, Request(6, 2, 0)));   // another trip count
  std::vector<Value> other_s = Request(5, 2, 0);
  other_s[2] = Floats({1, 2, 2}, 1);  // same shape, other bytes
  EXPECT_FALSE(CanMerge(io, a, other_s));
  std::vector<Value> wider = Request(5, 2, 0);
  wider[1] = Floats({2, 4}, 0);  // another dim after the batch dim
  EXPECT_FALSE(CanMerge(io, a, wider));
  std::vector<Value> absent = Request(5, 2, 0);
  absent[2] = Value();
  EXPECT_FALSE(CanMerge(io, a, absent));
  std::vector<Value> strings = Request(5, 2, 0);
  strings[2] = Value(engine::Tensor(DataType::kString, engine::Shape{1}));
  EXPECT_FALSE(Mergeable(io, strings));
}

TEST(BatchingTest, MergeConcatenatesBatchedInputsAndKeepsTheOthers) {
  const ModelIo io = Layout();
  std::vector<Value> a = Request(5, 1, 0);    // x rows: {0,1,2}
  std::vector<Value> b = Request(5, 2, 10);   // {10,11,12}, {13,14,15}
  std::vector<Value> c = Request(5, 1, 100);  // {100,101,102}
  std::vector<std::vector<Value>*> requests = {&a, &b, &c};
  std::vector<Value> merged = MergeInputs(io, requests);
  ASSERT_EQ(merged.size(), 3u);
  EXPECT_EQ(merged[0].tensor().ScalarAsInt64(), 5);
  EXPECT_EQ(merged[1].tensor().shape(), (engine::Shape{4, 3}));
  EXPECT_EQ(Data(merged[1]), (std::vector<float>{0, 1, 2, 10, 11, 12, 13, 14, 15, 100, 101, 102}));
  EXPECT_EQ(merged[2].tensor().shape(), (engine::Shape{1, 2, 2}));
  EXPECT_EQ(Data(merged[2]), (std::vector<float>{0, 1, 2, 3}));
}

TEST(BatchingTest, SplitAlongEachOutputsBatchAxis) {
  const ModelIo io = Layout();
  // The outputs of a batch of 1 + 2 requests: x [3, 3] (axis 0), s [2, 3, 2] (axis 1: T = 2).
  std::vector<Value> outputs;
  outputs.push_back(Int64(7));  // M is an output too, without a batch axis of its own (0)
  outputs.push_back(Floats({3, 3}, 0));
  outputs.push_back(Floats({2, 3, 2}, 0));
  // M's batch axis is 0 here (every output has one with batching); a scalar cannot be split.
  absl::StatusOr<std::vector<std::vector<Value>>> split = SplitOutputs(io, outputs, {1, 2});
  ASSERT_FALSE(split.ok());
  EXPECT_THAT(split.status().message(), HasSubstr("output 'M': shape []"));

  outputs[0] = Value(engine::Tensor(DataType::kInt64, engine::Shape{3}));
  split = SplitOutputs(io, outputs, {1, 2});
  ASSERT_TRUE(split.ok()) << split.status();
  ASSERT_EQ(split->size(), 2u);
  const std::vector<Value>& first = (*split)[0];
  const std::vector<Value>& second = (*split)[1];
  EXPECT_EQ(first[1].tensor().shape(), (engine::Shape{1, 3}));
  EXPECT_EQ(Data(first[1]), (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(Data(second[1]), (std::vector<float>{3, 4, 5, 6, 7, 8}));
  // s[t][b][h] = 6t + 2b + h: request 0 has b = 0, request 1 has b = 1, 2.
  EXPECT_EQ(first[2].tensor().shape(), (engine::Shape{2, 1, 2}));
  EXPECT_EQ(Data(first[2]), (std::vector<float>{0, 1, 6, 7}));
  EXPECT_EQ(second[2].tensor().shape(), (engine::Shape{2, 2, 2}));
  EXPECT_EQ(Data(second[2]), (std::vector<float>{2, 3, 4, 5, 8, 9, 10, 11}));
  // Rows contiguous on axis 0 are views into the batch's output (no copy); axis 1's are copies.
  const float* x = outputs[1].tensor().data<float>();
  EXPECT_TRUE(first[1].tensor().is_view());
  EXPECT_EQ(first[1].tensor().data<float>(), x);
  EXPECT_TRUE(second[1].tensor().is_view());
  EXPECT_EQ(second[1].tensor().data<float>(), x + 3);
  EXPECT_FALSE(first[2].tensor().is_view());
  EXPECT_FALSE(second[2].tensor().is_view());

  // A batch dim that is not the sum of the requests' (the model mixed its batch): INTERNAL.
  split = SplitOutputs(io, outputs, {1, 1});
  ASSERT_FALSE(split.ok());
  EXPECT_EQ(split.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(split.status().message(), HasSubstr("no batch dim of 2 at axis 0"));
}

}  // namespace
}  // namespace loopserve::server
