// The per-model arena (engine/runtime/frame_pool.h): a model keeps its top-level frame, with its
// buffers and its Loop bodies' frames, across runs. Checked here: steady-state runs of a
// fixed-shape model allocate no tensor buffer but the outputs they hand over, with or without a
// Loop; a kept frame gives the numpy-computed outputs of the Loop cases (loop_cases/) after runs of
// other shapes; and the memory budget still sees the arena and refuses an over-budget run.

#include <sys/resource.h>

#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/runtime/thread_mode.h"
#include "engine/tools/looprun.h"
#include "gtest/gtest.h"
#include "tests/unit/engine/test_paths.h"

namespace loopserve::engine {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

std::string CaseDir(const std::string& name) {
  return std::string(LOOPSERVE_LOOP_CASES_DIR) + "/" + name;
}

std::shared_ptr<const Model> LoadCase(const std::string& name, int kept_frames = 8) {
  LoadOptions options;
  options.kept_frames = kept_frames;
  auto model = Model::Load(CaseDir(name) + "/model.onnx", options);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

std::vector<Value> CaseInputs(const Model& model, const std::string& name) {
  auto inputs = tools::ReadInputs(model, CaseDir(name) + "/test_data_set_0");
  EXPECT_TRUE(inputs.ok()) << inputs.status();
  return inputs.ok() ? *std::move(inputs) : std::vector<Value>();
}

// The case's inputs with a trip count (an int64 scalar input 0) of `trips` instead: a run whose
// scan outputs and carried values have other shapes than the case's.
std::vector<Value> OtherTripCount(const Model& model, const std::string& name, int64_t trips) {
  std::vector<Value> inputs = CaseInputs(model, name);
  if (!inputs.empty() && inputs[0].is_tensor() && inputs[0].tensor().dtype() == DataType::kInt64 &&
      inputs[0].tensor().NumElements() == 1) {
    Tensor m(DataType::kInt64, inputs[0].tensor().shape());
    m.mutable_data<int64_t>()[0] = trips;
    inputs[0] = Value(std::move(m));
  }
  return inputs;
}

// Runs the case's inputs and compares the outputs with its numpy-computed ones.
void ExpectReferenceOutputs(const Model& model, const std::string& name, RunStats* stats) {
  auto outputs = model.Run(CaseInputs(model, name), RunOptions(), stats);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  auto mismatch = tools::CompareWithReference(model, *outputs, CaseDir(name) + "/test_data_set_0",
                                              /*require_all=*/true);
  ASSERT_TRUE(mismatch.ok()) << mismatch.status();
  EXPECT_FALSE(mismatch->has_value()) << **mismatch;
}

// Loop cases of every kind of body state: carried values that change shape, scan outputs, tensor
// arrays updated in place, sequences, nested Loops, an If in the body, oneDNN products and
// convolutions, strings.
const char* const kCases[] = {
    "loop13_counter_mM_cx",   "loop_growing_carried",
    "loop_append_a1_alias_5", "loop_tensor_array_read_old_5",
    "loop_sequence_append_5", "loop_nested_tensor_array",
    "loop_nested_rnn",        "loop_if_inside",
    "loop_rnn_batch",         "loop_conv_c5",
    "loop_lstm_parallel",     "loop_string_scan_output",
    "scan16_strings",
};

TEST(FramePoolTest, KeptFramesGiveTheReferenceOutputsAfterOtherShapes) {
  for (const char* name : kCases) {
    SCOPED_TRACE(name);
    std::shared_ptr<const Model> model = LoadCase(name);
    ASSERT_NE(model, nullptr);
    RunStats stats;
    ExpectReferenceOutputs(*model, name, &stats);
    // Runs of shorter loops in between leave buffers of other shapes in the frame (the cases'
    // bodies may read inputs by iteration number, so never longer).
    for (int64_t trips : {1, 0, 2}) {
      auto other = model->Run(OtherTripCount(*model, name, trips), RunOptions());
      ASSERT_TRUE(other.ok()) << other.status();
      ExpectReferenceOutputs(*model, name, &stats);
    }
  }
}

// Concurrent runs of one model each get a frame of their own (taken from the pool or made) and
// give the reference outputs.
TEST(FramePoolTest, ConcurrentRunsGiveTheReferenceOutputs) {
  const std::string name = "loop_nested_rnn";
  std::shared_ptr<const Model> model = LoadCase(name);
  ASSERT_NE(model, nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10; ++i) ExpectReferenceOutputs(*model, name, nullptr);
    });
  }
  for (std::thread& thread : threads) thread.join();
}

// Tensor buffers one steady-state run allocates, and the bytes its frame keeps.
struct SteadyRun {
  int64_t allocations = 0;
  int64_t arena_bytes = 0;
  size_t outputs = 0;
};

int64_t MinorFaultsOfThisThread() {
  rusage usage;
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_minflt;
}

SteadyRun MeasureSteadyRun(const Model& model, const std::string& name) {
  for (int i = 0; i < 3; ++i) {
    auto warm = model.Run(CaseInputs(model, name), RunOptions());
    EXPECT_TRUE(warm.ok()) << warm.status();
  }
  std::vector<Value> inputs = CaseInputs(model, name);
  RunStats stats;
  const int64_t before = TensorAllocationCount();
  auto outputs = model.Run(std::move(inputs), RunOptions(), &stats);
  const int64_t allocations = TensorAllocationCount() - before;
  EXPECT_TRUE(outputs.ok()) << outputs.status();
  return {allocations, stats.arena_bytes, outputs.ok() ? outputs->size() : 0};
}

// A fixed-shape run allocates at most one buffer per output (the caller takes it away); the
// intermediates, the Loop bodies' values and the oneDNN bindings all come from the kept frame.
// Without the arena (kept_frames 0) the same run allocates its intermediates again.
TEST(FramePoolTest, SteadyStateRunsAllocateOnlyTheirOutputs) {
  for (const char* name : {"loop_rnn", "loop_conv_c16", "loop_nested_rnn", "loop_lstm_parallel",
                           "loop_input_projection_batch"}) {
    SCOPED_TRACE(name);
    std::shared_ptr<const Model> kept = LoadCase(name);
    std::shared_ptr<const Model> fresh = LoadCase(name, /*kept_frames=*/0);
    ASSERT_NE(kept, nullptr);
    ASSERT_NE(fresh, nullptr);
    const SteadyRun with_arena = MeasureSteadyRun(*kept, name);
    const SteadyRun without = MeasureSteadyRun(*fresh, name);
    EXPECT_LE(with_arena.allocations, static_cast<int64_t>(with_arena.outputs));
    EXPECT_GT(without.allocations, with_arena.allocations);
    EXPECT_GT(with_arena.arena_bytes, 0);
    EXPECT_EQ(without.arena_bytes, 0);
  }
}

// Steady-state runs fault no page in: every buffer is the frame's already, and the outputs' sizes
// come back from the allocator's free lists, which the engine keeps from being trimmed
// (KeepFreedHeapMemory). Counted on this thread, with one intra-op thread; the case's Loop body
// runs oneDNN products.
TEST(FramePoolTest, SteadyStateRunsTakeNoPageFaults) {
  if (kAddressSanitizer) {
    // ASan's allocator holds freed blocks in quarantine and hands out fresh ones: page faults
    // there measure the sanitizer, not the arena (the plain build runs this test).
    GTEST_SKIP() << "page faults are not the engine's under AddressSanitizer";
  }
  const int saved = ThreadsOfThisThread();
  SetIntraOpThreads(1);
  for (const char* name : {"loop_lstm_parallel", "loop_conv_c16", "loop_rnn_parallel"}) {
    SCOPED_TRACE(name);
    std::shared_ptr<const Model> model = LoadCase(name, std::getenv("ARENA_OFF") ? 0 : 8);
    ASSERT_NE(model, nullptr);
    const std::vector<Value> inputs = CaseInputs(*model, name);
    auto run = [&] {
      auto outputs = model->Run(tools::ViewInputs(inputs), RunOptions());
      ASSERT_TRUE(outputs.ok()) << outputs.status();
    };
    for (int i = 0; i < 3; ++i) run();
    constexpr int kRuns = 20;
    const int64_t before = MinorFaultsOfThisThread();
    for (int i = 0; i < kRuns; ++i) run();
    EXPECT_EQ(MinorFaultsOfThisThread() - before, 0) << "page faults in " << kRuns << " runs";
  }
  SetIntraOpThreads(saved);
}

// The budget sees the arena: a run on a kept frame is charged the frame's bytes before it starts
// (its peak includes them), and a budget too small for a run is refused with kMemory whether the
// frame fits it (the run's own allocations then pass it) or not (a fresh frame is made); after
// the refusals the model runs right again.
TEST(FramePoolTest, TheMemoryBudgetStillRefusesAnOverBudgetRun) {
  const std::string name = "loop_rnn_parallel";
  std::shared_ptr<const Model> model = LoadCase(name);
  ASSERT_NE(model, nullptr);
  RunStats first, kept;
  ExpectReferenceOutputs(*model, name, &first);
  ExpectReferenceOutputs(*model, name, &kept);
  ASSERT_GT(first.arena_bytes, 0);
  EXPECT_GE(kept.peak_memory_bytes, first.arena_bytes);
  EXPECT_GT(kept.peak_memory_bytes, kept.arena_bytes);  // and the outputs on top

  const int64_t fits_frame_not_run = (kept.arena_bytes + kept.peak_memory_bytes) / 2;
  const int64_t fits_nothing = kept.arena_bytes / 2;
  for (const int64_t limit : {fits_frame_not_run, fits_nothing}) {
    SCOPED_TRACE(limit);
    RunOptions options;
    options.max_memory_bytes = limit;
    auto refused = model->Run(CaseInputs(*model, name), options);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
    EXPECT_EQ(GetLimitReason(refused.status()), LimitReason::kMemory);
  }
  RunOptions enough;
  enough.max_memory_bytes = 2 * kept.peak_memory_bytes;
  auto ran = model->Run(CaseInputs(*model, name), enough);
  EXPECT_TRUE(ran.ok()) << ran.status();
  ExpectReferenceOutputs(*model, name, &kept);
}

}  // namespace
}  // namespace loopserve::engine
