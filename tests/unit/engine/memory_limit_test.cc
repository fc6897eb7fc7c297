// The per-run memory budget (RunOptions::max_memory_bytes) and interruption inside one long kernel
// step (InterruptPacer): a Loop whose carried tensor doubles every iteration is stopped before it
// passes its budget, and a cancel or deadline stops a large Concat between chunks.

#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "engine/engine.h"
#include "engine/runtime/run_context.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"

namespace loopserve::engine {
namespace {

void SetTensorType(onnx::ValueInfoProto* v, const std::string& name, int elem,
                   std::vector<int64_t> dims) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem);
  auto* shape = t->mutable_shape();
  for (int64_t d : dims) {
    if (d < 0) {
      shape->add_dim()->set_dim_param("N");
    } else {
      shape->add_dim()->set_dim_value(d);
    }
  }
}

onnx::NodeProto* AddNode(onnx::GraphProto* g, const std::string& op,
                         std::vector<std::string> inputs, std::vector<std::string> outputs) {
  onnx::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(outputs[0] + "_node");
  for (auto& i : inputs) n->add_input(i);
  for (auto& o : outputs) n->add_output(o);
  return n;
}

void SetAxis(onnx::NodeProto* n) {
  auto* axis = n->add_attribute();
  axis->set_name("axis");
  axis->set_type(onnx::AttributeProto::INT);
  axis->set_i(0);
}

// y = x after M iterations of x = Concat(x, x): the carried value doubles every iteration.
std::shared_ptr<const Model> DoublingModel() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("doubling");
  SetTensorType(g->add_input(), "M", onnx::TensorProto::INT64, {});
  SetTensorType(g->add_input(), "x", onnx::TensorProto::FLOAT, {-1});
  SetTensorType(g->add_output(), "y", onnx::TensorProto::FLOAT, {-1});
  onnx::TensorProto* cond = g->add_initializer();
  cond->set_name("cond");
  cond->set_data_type(onnx::TensorProto::BOOL);
  cond->add_int32_data(1);
  onnx::NodeProto* loop = AddNode(g, "Loop", {"M", "cond", "x"}, {"y"});
  auto* body_attr = loop->add_attribute();
  body_attr->set_name("body");
  body_attr->set_type(onnx::AttributeProto::GRAPH);
  onnx::GraphProto* body = body_attr->mutable_g();
  body->set_name("body");
  SetTensorType(body->add_input(), "i", onnx::TensorProto::INT64, {});
  SetTensorType(body->add_input(), "c_in", onnx::TensorProto::BOOL, {});
  SetTensorType(body->add_input(), "x_in", onnx::TensorProto::FLOAT, {-1});
  SetTensorType(body->add_output(), "c_out", onnx::TensorProto::BOOL, {});
  SetTensorType(body->add_output(), "x_out", onnx::TensorProto::FLOAT, {-1});
  AddNode(body, "Identity", {"c_in"}, {"c_out"});
  SetAxis(AddNode(body, "Concat", {"x_in", "x_in"}, {"x_out"}));
  auto model = Model::LoadOnnx(m.SerializeAsString());
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

// y = Concat(x, x, x, x) at the top level: one step whose output is 4x its input.
std::shared_ptr<const Model> ConcatModel() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("concat");
  SetTensorType(g->add_input(), "x", onnx::TensorProto::FLOAT, {-1});
  SetTensorType(g->add_output(), "y", onnx::TensorProto::FLOAT, {-1});
  SetAxis(AddNode(g, "Concat", {"x", "x", "x", "x"}, {"y"}));
  auto model = Model::LoadOnnx(m.SerializeAsString());
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

std::vector<Value> DoublingInputs(int64_t m) {
  Tensor trips(DataType::kInt64, Shape{});
  trips.mutable_data<int64_t>()[0] = m;
  Tensor x(DataType::kFloat32, Shape{1024});
  for (int i = 0; i < 1024; ++i) x.mutable_data<float>()[i] = static_cast<float>(i);
  std::vector<Value> inputs;
  inputs.emplace_back(std::move(trips));
  inputs.emplace_back(std::move(x));
  return inputs;
}

TEST(MemoryLimitTest, DoublingLoopStopsBeforeItsBudget) {
  std::shared_ptr<const Model> model = DoublingModel();
  ASSERT_NE(model, nullptr);
  // Small trip counts run and give the right answer under the budget: 2^10 copies of x.
  RunOptions options;
  options.max_memory_bytes = int64_t{64} << 20;
  RunStats stats;
  auto ok = model->Run(DoublingInputs(10), options, &stats);
  ASSERT_TRUE(ok.ok()) << ok.status();
  const Tensor& y = (*ok)[0].tensor();
  ASSERT_EQ(y.NumElements(), 1024 * 1024);
  EXPECT_EQ(y.data<float>()[1024 * 1000 + 7], 7.f);
  EXPECT_GT(stats.peak_memory_bytes, 4 << 20);  // the last two carried values at least
  EXPECT_LE(stats.peak_memory_bytes, options.max_memory_bytes);
  // M = 64 would need 2^64 x 4 KB: stopped when the next doubling would pass 64 MB.
  auto stopped = model->Run(DoublingInputs(64), options, &stats);
  ASSERT_EQ(stopped.status().code(), absl::StatusCode::kResourceExhausted) << stopped.status();
  EXPECT_EQ(GetLimitReason(stopped.status()), LimitReason::kMemory);
  EXPECT_NE(stopped.status().message().find("Concat"), std::string::npos) << stopped.status();
  EXPECT_NE(stopped.status().message().find("memory budget of 67108864"), std::string::npos)
      << stopped.status();
}

// A cancel that arrives while one Concat writes 256 MB stops it between chunks: the run returns
// long before the copy would have finished.
TEST(MemoryLimitTest, CancelStopsALargeConcatBetweenChunks) {
  std::shared_ptr<const Model> model = ConcatModel();
  ASSERT_NE(model, nullptr);
  constexpr int64_t kElements = int64_t{16} << 20;  // 64 MB in, 256 MB out
  Tensor x(DataType::kFloat32, Shape{kElements});
  std::memset(x.mutable_raw_data(), 0, x.ByteSize());
  // Time the whole copy first.
  std::vector<Value> inputs;
  inputs.emplace_back(Tensor::ViewOf(x));
  absl::Time start = absl::Now();
  auto full = model->Run(std::move(inputs), RunOptions());
  ASSERT_TRUE(full.ok()) << full.status();
  const absl::Duration whole = absl::Now() - start;
  full->clear();

  std::atomic<bool> cancelled{false};
  RunOptions options;
  options.cancelled = &cancelled;
  inputs.clear();
  inputs.emplace_back(Tensor::ViewOf(x));
  absl::Time cancelled_at;
  std::thread canceller([&] {
    absl::SleepFor(whole / 10);
    cancelled_at = absl::Now();
    cancelled.store(true);
  });
  auto stopped = model->Run(std::move(inputs), options);
  const absl::Time returned = absl::Now();
  canceller.join();
  ASSERT_EQ(stopped.status().code(), absl::StatusCode::kCancelled) << stopped.status();
  const absl::Duration after_cancel = returned - cancelled_at;
  std::printf("256 MB Concat: %.1f ms whole; returned %.2f ms after the cancel\n",
              absl::ToDoubleMilliseconds(whole), absl::ToDoubleMilliseconds(after_cancel));
  EXPECT_LT(after_cancel, whole / 2);
}

// The pacer checks once per kChunkBytes: a 64 MB copy with the flag already set stops after the
// first chunk.
TEST(MemoryLimitTest, PacerChecksEveryChunk) {
  std::atomic<bool> cancelled{true};
  RunOptions options;
  options.cancelled = &cancelled;
  RunContext context(options);
  std::vector<char> from(64 << 20, 'a');
  std::vector<char> to(64 << 20, 'b');
  InterruptPacer pacer(context);
  EXPECT_FALSE(pacer.Copy(to.data(), from.data(), from.size()));
  EXPECT_EQ(pacer.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(to[InterruptPacer::kChunkBytes - 1], 'a');
  EXPECT_EQ(to[InterruptPacer::kChunkBytes], 'b');
  // Below a chunk nothing is checked.
  InterruptPacer small(context);
  EXPECT_TRUE(small.Copy(to.data(), from.data(), 1000));
}

}  // namespace
}  // namespace loopserve::engine
