// RunOptions::iteration_observer: the per-iteration scan slices of a model's top-level Loop
// (what ModelStreamInfer's stream_iterations sends). Expected values follow from the ONNX Loop
// spec applied to the cases' bodies (see loop_cases/make_loop_cases.py).

#include <vector>

#include "absl/status/status.h"
#include "engine/engine.h"
#include "gtest/gtest.h"
#include "tests/unit/engine/test_paths.h"

namespace loopserve::engine {
namespace {

std::shared_ptr<const Model> LoadOrDie(const std::string& name) {
  auto model = Model::Load(std::string(LOOPSERVE_LOOP_CASES_DIR) + "/" + name + "/model.onnx");
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

Value Scalar(int64_t v) {
  Tensor t(DataType::kInt64, Shape{});
  t.mutable_data<int64_t>()[0] = v;
  return Value(std::move(t));
}

Value Float(float v) {
  Tensor t(DataType::kFloat32, Shape{});
  t.mutable_data<float>()[0] = v;
  return Value(std::move(t));
}

// M, x0 = 0.
std::vector<Value> CounterInputs(int64_t m) {
  std::vector<Value> in;
  in.push_back(Scalar(m));
  in.push_back(Scalar(0));
  return in;
}

// Records what the top-level Loops stream (RunOptions::iteration_observer); fails the run at
// iteration `stop_at` when it is set.
class SliceRecorder : public IterationObserver {
 public:
  absl::Status OnIteration(int loop_index, int64_t iteration,
                           absl::Span<const ScanSlice> slices) override {
    loops.push_back(loop_index);
    iterations.push_back(iteration);
    for (const ScanSlice& slice : slices) {
      outputs.push_back(slice.output);
      shapes.push_back(slice.tensor->shape());
      values.push_back(slice.tensor->dtype() == DataType::kInt64
                           ? static_cast<double>(slice.tensor->data<int64_t>()[0])
                           : static_cast<double>(slice.tensor->data<float>()[0]));
    }
    if (iteration == stop_at) return absl::CancelledError("the observer stopped the run");
    return absl::OkStatus();
  }
  void OnLoopStart(int loop_index) override { starts.push_back(loop_index); }
  int64_t stop_at = -1;
  std::vector<int> starts;  // OnLoopStart's calls
  std::vector<int> loops;
  std::vector<int64_t> iterations;
  std::vector<int> outputs;
  std::vector<Shape> shapes;
  std::vector<double> values;
};

TEST(LoopTest, IterationObserverGetsEachScanSliceInOrder) {
  auto model = LoadOrDie("loop13_counter_mM_cx");
  ASSERT_NE(model, nullptr);
  // Outputs: x_final (a last value), scan (the scan output).
  EXPECT_EQ(model->scan_output_loops(), (std::vector<int>{-1, 0}));
  SliceRecorder recorder;
  RunOptions options;
  options.iteration_observer = &recorder;
  auto result = model->Run(CounterInputs(5), options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(recorder.iterations, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(recorder.loops, (std::vector<int>{0, 0, 0, 0, 0}));
  EXPECT_EQ(recorder.outputs, (std::vector<int>{1, 1, 1, 1, 1}));
  for (const Shape& shape : recorder.shapes) EXPECT_EQ(shape.rank(), 0);  // no scan axis
  // The body computes x + 1 from x0 = 0: iteration i scans i + 1 (the ONNX Loop spec).
  EXPECT_EQ(recorder.values, (std::vector<double>{1, 2, 3, 4, 5}));
}

TEST(LoopTest, IterationObserverErrorStopsTheRun) {
  auto model = LoadOrDie("loop13_counter_mM_cx");
  ASSERT_NE(model, nullptr);
  SliceRecorder recorder;
  recorder.stop_at = 2;
  RunOptions options;
  options.iteration_observer = &recorder;
  auto result = model->Run(CounterInputs(1000), options);
  EXPECT_TRUE(absl::IsCancelled(result.status())) << result.status();
  EXPECT_EQ(recorder.iterations, (std::vector<int64_t>{0, 1, 2}));
}

TEST(LoopTest, OnlyTheTopLevelLoopStreams) {
  auto model = LoadOrDie("loop_nested");
  ASSERT_NE(model, nullptr);
  // Outputs: s (a last value) and the outer Loop's scan output.
  ASSERT_EQ(model->scan_output_loops().size(), 2u);
  EXPECT_EQ(model->scan_output_loops()[0], -1);
  const int outer = model->scan_output_loops()[1];
  ASSERT_GE(outer, 0);
  SliceRecorder recorder;
  RunOptions options;
  options.iteration_observer = &recorder;
  std::vector<Value> in;
  in.push_back(Scalar(3));
  in.push_back(Scalar(4));
  in.push_back(Float(1));
  in.push_back(Float(0.25f));
  auto result = model->Run(std::move(in), options);
  ASSERT_TRUE(result.ok()) << result.status();
  // Three outer iterations; the inner Loop's twelve iterations are not streamed.
  EXPECT_EQ(recorder.loops, (std::vector<int>{outer, outer, outer}));
  // Outer iteration i adds i * 0.25 four times to s (s0 = 1) and scans the sum of the four inner
  // values: 1+1+1+1, 1.25+1.5+1.75+2, 2.5+3+3.5+4 (exact in float).
  EXPECT_EQ(recorder.values, (std::vector<double>{4, 6.5, 13}));
  for (const Shape& shape : recorder.shapes) EXPECT_EQ(shape.rank(), 0);
  // The complete scan output holds the same rows.
  const Tensor& scan = (*result)[1].tensor();
  ASSERT_EQ(scan.NumElements(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(scan.data<float>()[i], recorder.values[i]);
}

// A top-level Loop without a scan output among the model's outputs still reports its start and
// each iteration (with no slices): what tracing's per-iteration spans need.
TEST(LoopTest, ALoopWithoutScanOutputsReportsItsIterations) {
  auto model = LoadOrDie("loop_growing_carried");
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->scan_output_loops(), (std::vector<int>{-1}));
  SliceRecorder recorder;
  RunOptions options;
  options.iteration_observer = &recorder;
  std::vector<Value> in;
  in.push_back(Scalar(6));
  Tensor y0(DataType::kInt64, Shape{1});
  y0.mutable_data<int64_t>()[0] = 100;
  in.push_back(Value(std::move(y0)));
  auto result = model->Run(std::move(in), options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(recorder.starts, (std::vector<int>{0}));
  EXPECT_EQ(recorder.iterations, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_TRUE(recorder.outputs.empty());
  // y = [100, 0, 1, ..., 5] (the ONNX Loop spec on the case's body).
  EXPECT_EQ((*result)[0].tensor().NumElements(), 7);
}

}  // namespace
}  // namespace loopserve::engine
