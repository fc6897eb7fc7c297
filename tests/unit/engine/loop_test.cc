// Loop behaviour that the conformance-style cases (loop_cases/, run by looprun) cannot show:
// interruption, the iteration cap, observers, malformed loops, and allocation-free iterations.
// Values are checked against the numpy-computed cases in the "loop_cases" CTest.

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <new>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "engine/engine.h"
#include "engine/kernels/dnnl/dnnl_kernel.h"
#include "engine/runtime/thread_mode.h"
#include "engine/tools/looprun.h"
#include "gtest/gtest.h"
#include "tests/unit/engine/operator_new_counter.h"
#include "tests/unit/engine/test_paths.h"

namespace loopserve::engine {
namespace {

std::shared_ptr<const Model> LoadOrDie(const std::string& path) {
  auto model = Model::Load(path);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

std::string CasePath(const std::string& name) {
  return std::string(LOOPSERVE_LOOP_CASES_DIR) + "/" + name + "/model.onnx";
}
std::string ModelPath(const std::string& name) {
  return std::string(LOOPSERVE_LOOP_MODELS_DIR) + "/" + name + ".onnx";
}

Value Scalar(int64_t v) {
  Tensor t(DataType::kInt64, Shape{});
  t.mutable_data<int64_t>()[0] = v;
  return Value(std::move(t));
}
Value Bool(bool v) {
  Tensor t(DataType::kBool, Shape{});
  t.mutable_data<bool>()[0] = v;
  return Value(std::move(t));
}

std::vector<Value> EndlessInputs() {
  std::vector<Value> in;
  in.push_back(Bool(true));
  in.push_back(Scalar(0));
  return in;
}

TEST(LoopTest, DeadlineStopsAnEndlessLoop) {
  auto model = LoadOrDie(ModelPath("endless"));
  ASSERT_NE(model, nullptr);
  RunOptions options;
  options.deadline = absl::Now() + absl::Milliseconds(200);
  const absl::Time start = absl::Now();
  auto result = model->Run(EndlessInputs(), options);
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded) << result.status();
  EXPECT_LT(took, absl::Milliseconds(700));
}

TEST(LoopTest, CancellationStopsAnEndlessLoop) {
  auto model = LoadOrDie(ModelPath("endless"));
  ASSERT_NE(model, nullptr);
  std::atomic<bool> cancelled{false};
  RunOptions options;
  options.cancelled = &cancelled;
  // The observer-free way to know the loop is running: cancel from another thread after the run
  // has started; the run cannot finish by itself, so ordering does not matter.
  absl::Notification started;
  std::thread canceller([&] {
    started.WaitForNotification();
    cancelled.store(true);
  });
  started.Notify();
  auto result = model->Run(EndlessInputs(), options);
  canceller.join();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled) << result.status();
}

// A recurrent layer over a long sequence is one kernel step (as is a TensorIterator over one cell,
// which runs as the layer): it checks the deadline every few steps, on the native path (batch 1)
// and on the primitive's (batch 2: a layer this long runs natively for that reason). Uninterrupted,
// 1000 steps of hidden 1024 (16 MB of recurrent weights read per step) take 0.7-1 s here.
// CPU time of the whole process (every thread a kernel might use).
absl::Duration ProcessCpuTime() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return absl::DurationFromTimespec(t);
}

TEST(LoopTest, DeadlineStopsALongRecurrentLayer) {
  auto model = LoadOrDie(ModelPath("long_lstm"));
  ASSERT_NE(model, nullptr);
  for (int64_t batch : {1, 2}) {
    SCOPED_TRACE(batch);
    Tensor x(DataType::kFloat32, Shape{1000, batch, 8});
    float* data = x.mutable_data<float>();
    for (int64_t i = 0; i < x.NumElements(); ++i) data[i] = 0.001f * static_cast<float>(i % 997);
    std::vector<Value> inputs;
    inputs.push_back(Value(std::move(x)));
    RunOptions options;
    options.deadline = absl::Now() + absl::Milliseconds(30);
    const absl::Time start = absl::Now();
    const absl::Duration cpu_start = ProcessCpuTime();
    auto result = model->Run(std::move(inputs), options);
    const absl::Duration took = absl::Now() - start;
    const absl::Duration cpu = ProcessCpuTime() - cpu_start;
    EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded) << result.status();
    // The whole sequence takes 1-2.5 s (1000 steps reading 16 MB of weights each), so stopping
    // within 300 ms of the start means the layer noticed the deadline between its steps. On a
    // loaded machine the wall clock alone can pass 300 ms while the process waits for a core; the
    // CPU time it spent then stays small, so either measure being small shows the prompt stop.
    EXPECT_LT(std::min(took, cpu), absl::Milliseconds(300)) << "wall " << took << ", CPU " << cpu;
  }
}

TEST(LoopTest, IterationCapGivesResourceExhausted) {
  auto model = LoadOrDie(ModelPath("endless"));
  ASSERT_NE(model, nullptr);
  RunOptions options;
  options.max_loop_iterations = 1000;
  RunStats stats;
  auto result = model->Run(EndlessInputs(), options, &stats);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kResourceExhausted) << result.status();
  EXPECT_NE(result.status().message().find("1000"), std::string::npos) << result.status();
  // The reason travels as a payload through every annotation layer, so callers need not parse it.
  EXPECT_EQ(GetLimitReason(result.status()), LimitReason::kIterationCap);
  EXPECT_EQ(GetLimitReason(absl::ResourceExhaustedError("out of memory")), LimitReason::kNone);
  EXPECT_EQ(stats.loop_iterations, 0);  // stats are only returned on success
}

TEST(LoopTest, CapAboveTheTripCountDoesNotTrigger) {
  auto model = LoadOrDie(CasePath("loop13_counter_mM_cx"));
  ASSERT_NE(model, nullptr);
  RunOptions options;
  options.max_loop_iterations = 5;  // the loop runs exactly 5 times
  std::vector<Value> in;
  in.push_back(Scalar(5));
  in.push_back(Scalar(10));
  auto result = model->Run(std::move(in), options);
  ASSERT_TRUE(result.ok()) << result.status();
  // x_final = x0 + M by the Loop spec (the body adds 1 per iteration).
  EXPECT_EQ((*result)[0].tensor().data<int64_t>()[0], 15);
}

class RecordingObserver : public LoopObserver {
 public:
  void OnLoopFinished(int loop_index, int64_t iterations, absl::Duration) override {
    calls.emplace_back(loop_index, iterations);
  }
  std::vector<std::pair<int, int64_t>> calls;
};

TEST(LoopTest, ObserverSeesEveryExecutionOfNestedLoops) {
  auto model = LoadOrDie(CasePath("loop_nested"));
  ASSERT_NE(model, nullptr);
  ASSERT_EQ(model->loop_names().size(), 2u);
  RecordingObserver observer;
  RunOptions options;
  options.loop_observer = &observer;
  std::vector<Value> in;
  in.push_back(Scalar(3));  // outer trip count
  in.push_back(Scalar(4));  // inner trip count
  Tensor s0(DataType::kFloat32, Shape{});
  s0.mutable_data<float>()[0] = 1;
  in.push_back(Value(std::move(s0)));
  Tensor step(DataType::kFloat32, Shape{});
  step.mutable_data<float>()[0] = 0.25f;
  in.push_back(Value(std::move(step)));
  RunStats stats;
  auto result = model->Run(std::move(in), options, &stats);
  ASSERT_TRUE(result.ok()) << result.status();
  // 3 inner executions of 4 iterations, then 1 outer execution of 3.
  ASSERT_EQ(observer.calls.size(), 4u);
  int outer = -1;
  for (size_t i = 0; i < model->loop_names().size(); ++i) {
    if (observer.calls.back().first == static_cast<int>(i)) outer = static_cast<int>(i);
  }
  ASSERT_GE(outer, 0);
  for (int k = 0; k < 3; ++k) {
    EXPECT_NE(observer.calls[k].first, outer);
    EXPECT_EQ(observer.calls[k].second, 4);
  }
  EXPECT_EQ(observer.calls[3].second, 3);
  EXPECT_EQ(stats.loop_executions, 4);
  EXPECT_EQ(stats.loop_iterations, 15);
}

TEST(LoopTest, BodyArityMismatchIsRejectedAtLoad) {
  auto model = Model::Load(ModelPath("bad_body_arity"));
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(model.status().message().find("(Loop)"), std::string::npos) << model.status();
  EXPECT_NE(model.status().message().find("inputs, expected 4"), std::string::npos)
      << model.status();
}

TEST(LoopTest, ScanOutputThatChangesShapeIsAnError) {
  auto model = LoadOrDie(ModelPath("changing_scan"));
  ASSERT_NE(model, nullptr);
  std::vector<Value> in;
  in.push_back(Scalar(3));
  auto result = model->Run(std::move(in), RunOptions());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  EXPECT_NE(result.status().message().find("scan output"), std::string::npos) << result.status();
}

TEST(LoopTest, TripCountAndConditionOfShapeOneWork) {
  auto model = LoadOrDie(CasePath("loop_m_rank1"));
  ASSERT_NE(model, nullptr);
  std::vector<Value> in;
  Tensor m(DataType::kInt64, Shape{1});
  m.mutable_data<int64_t>()[0] = 2;
  in.push_back(Value(std::move(m)));
  Tensor cond(DataType::kBool, Shape{1});
  cond.mutable_data<bool>()[0] = true;
  in.push_back(Value(std::move(cond)));
  in.push_back(Scalar(0));
  ASSERT_TRUE(model->Run(std::move(in), RunOptions()).ok());
}

struct Allocations {
  int64_t heap = 0;        // every operator new in the process
  int64_t tensors = 0;     // tensor buffers
  int64_t primitives = 0;  // oneDNN primitive creations
};

// Runs `model` with trip count `m` and returns what the run allocated.
Allocations AllocationsForTripCount(const Model& model, int64_t m,
                                    std::vector<Value> (*inputs)(int64_t),
                                    LoopThreads loop_threads) {
  std::vector<Value> in = inputs(m);
  const Allocations before{OperatorNewCount(), TensorAllocationCount(),
                           DnnlPrimitiveCreationCount()};
  RunOptions options;
  options.loop_threads = loop_threads;
  auto result = model.Run(std::move(in), options);
  const Allocations after{OperatorNewCount(), TensorAllocationCount(),
                          DnnlPrimitiveCreationCount()};
  EXPECT_TRUE(result.ok()) << result.status();
  return {after.heap - before.heap, after.tensors - before.tensors,
          after.primitives - before.primitives};
}

std::vector<Value> CounterInputs(int64_t m) {
  std::vector<Value> in;
  in.push_back(Scalar(m));
  in.push_back(Scalar(0));
  return in;
}

std::vector<Value> RnnInputs(int64_t m) {
  std::vector<Value> in;
  in.push_back(Scalar(m));
  Tensor h(DataType::kFloat32, Shape{1, 8});
  for (int i = 0; i < 8; ++i) h.mutable_data<float>()[i] = 0.1f * static_cast<float>(i);
  in.push_back(Value(std::move(h)));
  return in;
}

// What a run allocates must not depend on how many iterations it makes: steady-state iterations
// allocate nothing. The counter's body runs on native kernels, so not even one operator new is
// allowed. The RNN body runs oneDNN primitives, and oneDNN 2.6 itself allocates inside every
// dnnl_primitive_execute (its per-call exec context: 4 allocations for a bare eltwise, measured
// outside the engine), so there the check is on what the engine owns: tensor buffers and
// primitive creations.
// Each thread mode on its own (the adaptive one binds both, once each, at times that depend on
// its measurements).
// Each run builds its frame afresh (no kept frames: FramePool's own test covers runs that reuse
// one), so every run starts from the same state whatever the trip count of the one before.
TEST(LoopTest, SteadyStateIterationsDoNotAllocate) {
  LoadOptions fresh_frames;
  fresh_frames.kept_frames = 0;
  auto load = [&](const std::string& path) {
    auto model = Model::Load(path, fresh_frames);
    EXPECT_TRUE(model.ok()) << model.status();
    return model.ok() ? *model : nullptr;
  };
  for (LoopThreads mode : {LoopThreads::kIntraOp, LoopThreads::kOneThread}) {
    SCOPED_TRACE(mode == LoopThreads::kIntraOp ? "intra-op threads" : "one thread");
    auto counter = load(CasePath("loop13_counter_mM_cx"));
    ASSERT_NE(counter, nullptr);
    AllocationsForTripCount(*counter, 3, CounterInputs, mode);  // warm caches
    const Allocations few = AllocationsForTripCount(*counter, 10, CounterInputs, mode);
    const Allocations many = AllocationsForTripCount(*counter, 5000, CounterInputs, mode);
    EXPECT_EQ(few.heap, many.heap);
    EXPECT_EQ(few.tensors, many.tensors);

    auto rnn = load(CasePath("loop_rnn"));
    ASSERT_NE(rnn, nullptr);
    AllocationsForTripCount(*rnn, 3, RnnInputs, mode);
    const Allocations rnn_few = AllocationsForTripCount(*rnn, 10, RnnInputs, mode);
    const Allocations rnn_many = AllocationsForTripCount(*rnn, 2000, RnnInputs, mode);
    EXPECT_EQ(rnn_few.tensors, rnn_many.tensors);
    EXPECT_EQ(rnn_many.primitives, 0);
    EXPECT_EQ(rnn_few.primitives, 0);
  }
}

// The thread modes of a Loop (RunOptions::loop_threads) run different primitives for a product
// big enough for oneDNN's threads (created for 2 threads and for 1), and the adaptive mode
// switches between them mid-loop; the outputs must not depend on it. The case's expected values
// come from numpy (loop_cases "loop_rnn_parallel"); here the modes are compared with each other.
TEST(LoopTest, ThreadModesGiveIdenticalOutputs) {
  const int saved = ThreadsOfThisThread();
  SetIntraOpThreads(2);
  auto model = LoadOrDie(CasePath("loop_rnn_parallel"));
  ASSERT_NE(model, nullptr);
  constexpr int64_t kTrips = 16;
  auto run = [&](LoopThreads mode, RunStats& stats) {
    std::vector<Value> in;
    in.push_back(Scalar(kTrips));
    Tensor h(DataType::kFloat32, Shape{64, 256});
    for (int64_t i = 0; i < h.NumElements(); ++i) {
      h.mutable_data<float>()[i] = 0.01f * static_cast<float>((i * 37) % 101 - 50);
    }
    in.push_back(Value(std::move(h)));
    RunOptions options;
    options.loop_threads = mode;
    auto result = model->Run(std::move(in), options, &stats);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *std::move(result) : std::vector<Value>();
  };
  RunStats team_stats, one_stats;
  const std::vector<Value> team = run(LoopThreads::kIntraOp, team_stats);
  const std::vector<Value> one = run(LoopThreads::kOneThread, one_stats);
  ASSERT_EQ(team.size(), 2u);
  ASSERT_EQ(one.size(), 2u);
  EXPECT_EQ(team_stats.one_thread_iterations, 0);
  EXPECT_EQ(one_stats.one_thread_iterations, kTrips);
  auto expect_identical = [](const std::vector<Value>& a, const std::vector<Value>& b) {
    for (size_t k = 0; k < a.size(); ++k) {
      ASSERT_EQ(a[k].tensor().shape(), b[k].tensor().shape());
      EXPECT_EQ(
          std::memcmp(a[k].tensor().raw_data(), b[k].tensor().raw_data(), a[k].tensor().ByteSize()),
          0)
          << "output " << k;
    }
  };
  expect_identical(team, one);
  // The adaptive mode, run until it has probed and switched at least once (its choice depends on
  // this machine's timings, so the run count is bounded rather than fixed).
  for (int r = 0; r < 200; ++r) {
    RunStats stats;
    const std::vector<Value> adaptive = run(LoopThreads::kAdaptive, stats);
    ASSERT_EQ(adaptive.size(), 2u);
    expect_identical(team, adaptive);
    if (stats.one_thread_iterations > 0 && stats.one_thread_iterations < kTrips) break;
  }
  SetIntraOpThreads(saved);
}

// In the one-thread mode a Loop's larger products split by rows over the calling thread's
// SpinTeam (RunOptions::loop_team); each row is computed by the same kernel as unsplit, so the
// outputs must be bitwise those of plain one thread and of the intra-op team. The cases' expected
// values come from numpy (loop_cases; checked against them by the loop_cases ctest); here the
// modes are compared with each other. loop_nested_rnn splits in an inner Loop that runs inside
// the outer one's engagement; loop_input_projection_split splits a Gemm (alpha, beta, transB).
TEST(LoopTest, TeamSplitsGiveIdenticalOutputs) {
  const int saved = ThreadsOfThisThread();
  SetIntraOpThreads(2);
  for (const char* name : {"loop_rnn_parallel", "loop_nested_rnn", "loop_input_projection_split"}) {
    SCOPED_TRACE(name);
    auto model = LoadOrDie(CasePath(name));
    ASSERT_NE(model, nullptr);
    const std::string data =
        std::string(LOOPSERVE_LOOP_CASES_DIR) + "/" + name + "/test_data_set_0";
    auto run = [&](LoopThreads mode, bool team, RunStats& stats) {
      absl::StatusOr<std::vector<Value>> in = tools::ReadInputs(*model, data);
      EXPECT_TRUE(in.ok()) << in.status();
      if (!in.ok()) return std::vector<Value>();
      RunOptions options;
      options.loop_threads = mode;
      options.loop_team = team;
      auto result = model->Run(*std::move(in), options, &stats);
      EXPECT_TRUE(result.ok()) << result.status();
      return result.ok() ? *std::move(result) : std::vector<Value>();
    };
    RunStats split_stats, plain_stats, team_stats;
    // Twice: the first run creates the primitives, the second runs on them.
    run(LoopThreads::kOneThread, true, split_stats);
    const std::vector<Value> split = run(LoopThreads::kOneThread, true, split_stats);
    const std::vector<Value> plain = run(LoopThreads::kOneThread, false, plain_stats);
    const std::vector<Value> team = run(LoopThreads::kIntraOp, true, team_stats);
    ASSERT_EQ(split.size(), 2u);
    ASSERT_EQ(plain.size(), 2u);
    ASSERT_EQ(team.size(), 2u);
    EXPECT_GT(split_stats.team_splits, 0);
    EXPECT_EQ(plain_stats.team_splits, 0);
    EXPECT_EQ(team_stats.team_splits, 0);
    for (size_t k = 0; k < split.size(); ++k) {
      ASSERT_EQ(split[k].tensor().shape(), plain[k].tensor().shape());
      ASSERT_EQ(split[k].tensor().shape(), team[k].tensor().shape());
      const size_t bytes = split[k].tensor().ByteSize();
      EXPECT_EQ(std::memcmp(split[k].tensor().raw_data(), plain[k].tensor().raw_data(), bytes), 0)
          << "output " << k << " split vs one thread";
      EXPECT_EQ(std::memcmp(split[k].tensor().raw_data(), team[k].tensor().raw_data(), bytes), 0)
          << "output " << k << " split vs intra-op team";
    }
  }
  SetIntraOpThreads(saved);
}

// oneDNN's RNN primitives plan for the thread count they are created at, so the recurrent kernel
// creates one per thread mode as the other oneDNN kernels do: a layer first run in a Loop's
// one-thread mode gets a primitive of its own when the Loop later runs on the intra-op team, and
// the outputs agree. (The values themselves are checked against numpy in the "loop_cases" CTest
// and looprun_loop_threads_*_lstm.)
TEST(LoopTest, RecurrentPrimitivesFollowTheThreadMode) {
  const int saved = ThreadsOfThisThread();
  SetIntraOpThreads(2);
  auto model = LoadOrDie(CasePath("loop_lstm_parallel"));
  ASSERT_NE(model, nullptr);
  auto run = [&](LoopThreads mode, int64_t& primitives) {
    std::vector<Value> in;
    in.push_back(Scalar(5));
    for (int k = 0; k < 2; ++k) {
      Tensor state(DataType::kFloat32, Shape{1, 16, 128});
      for (int64_t i = 0; i < state.NumElements(); ++i) {
        state.mutable_data<float>()[i] = 0.01f * static_cast<float>((i * (31 + k)) % 97 - 48);
      }
      in.push_back(Value(std::move(state)));
    }
    RunOptions options;
    options.loop_threads = mode;
    const int64_t before = DnnlPrimitiveCreationCount();
    auto result = model->Run(std::move(in), options);
    primitives = DnnlPrimitiveCreationCount() - before;
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *std::move(result) : std::vector<Value>();
  };
  int64_t one_created = 0, team_created = 0, again_created = 0;
  const std::vector<Value> one = run(LoopThreads::kOneThread, one_created);
  const std::vector<Value> team = run(LoopThreads::kIntraOp, team_created);
  const std::vector<Value> again = run(LoopThreads::kOneThread, again_created);
  EXPECT_GE(one_created, 1);
  EXPECT_GE(team_created, 1) << "the team ran the primitive created for one thread";
  EXPECT_EQ(again_created, 0) << "each mode's primitive is cached";
  ASSERT_EQ(one.size(), 3u);
  ASSERT_EQ(team.size(), 3u);
  ASSERT_EQ(again.size(), 3u);
  for (size_t k = 0; k < one.size(); ++k) {
    const Tensor& a = one[k].tensor();
    ASSERT_EQ(a.shape(), team[k].tensor().shape()) << "output " << k;
    ASSERT_EQ(a.shape(), again[k].tensor().shape()) << "output " << k;
    for (int64_t i = 0; i < a.NumElements(); ++i) {
      ASSERT_NEAR(a.data<float>()[i], team[k].tensor().data<float>()[i], 1e-5)
          << "output " << k << " element " << i;
      ASSERT_EQ(a.data<float>()[i], again[k].tensor().data<float>()[i])
          << "output " << k << " element " << i;
    }
  }
  SetIntraOpThreads(saved);
}

}  // namespace
}  // namespace loopserve::engine
