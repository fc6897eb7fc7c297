// LoopStepper (engine/engine.h): a batched Loop whose rows join and leave between iterations.
// Every row is held to two independent references: the same request run alone through
// Model::Run (the ordinary Loop kernel), and the numpy transcription of the decoder that
// make_stepper_models.py wrote (expected.txt), never loopserve's own output.

#include <atomic>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "engine/engine.h"
#include "gtest/gtest.h"
#include "tests/unit/engine/loop_stepper/decoder_cases.h"

#ifndef LOOPSERVE_STEPPER_MODELS_DIR
#error "LOOPSERVE_STEPPER_MODELS_DIR must be defined by the build"
#endif

// AdmitRefusesARowWhoseBuffersCannotBeAllocated asks for 128 GiB on purpose. AddressSanitizer's
// allocator aborts the process on such a request unless told to fail it like the system allocator
// does; flags from ASAN_OPTIONS are applied after these, so the sanitizer stage's own flags stay.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LOOPSERVE_TEST_UNDER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(LOOPSERVE_TEST_UNDER_ASAN)
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }
#endif

namespace loopserve::engine {
namespace {

using decoder_cases::kHidden;

std::shared_ptr<const Model> LoadOrDie(const std::string& name) {
  auto model = Model::Load(std::string(LOOPSERVE_STEPPER_MODELS_DIR) + "/" + name + "/model.onnx");
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

using decoder_cases::Case;
using decoder_cases::ReadCases;

template <typename T>
Value Make(DataType dtype, Shape shape, const std::vector<T>& values) {
  Tensor t(dtype, shape);
  for (size_t i = 0; i < values.size(); ++i) t.mutable_data<T>()[i] = values[i];
  return Value(std::move(t));
}

// The request's inputs, one row: M, cond, h0 [1,H], tok0 [1], budget0 [1].
std::vector<Value> Inputs(const Case& c) {
  std::vector<Value> in;
  in.push_back(Make<int64_t>(DataType::kInt64, Shape{}, {c.m}));
  in.push_back(Make<bool>(DataType::kBool, Shape{}, {true}));
  in.push_back(Make<float>(DataType::kFloat32, Shape{1, kHidden}, c.h0));
  in.push_back(Make<int64_t>(DataType::kInt64, Shape{1}, {c.tok0}));
  in.push_back(Make<int64_t>(DataType::kInt64, Shape{1}, {c.budget}));
  return in;
}

Case LongCase(int64_t budget, float seed) {
  Case c;
  c.m = 1000;
  c.budget = budget;
  c.tok0 = 3;
  for (int i = 0; i < kHidden; ++i) c.h0.push_back(std::sin(seed + i));
  return c;
}

// Floats within rtol 1e-5 (and a tiny atol for values near zero), everything else exactly.
void ExpectSameOutputs(const std::vector<Value>& got, const std::vector<Value>& want,
                       const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < got.size(); ++k) {
    const Tensor& a = got[k].tensor();
    const Tensor& b = want[k].tensor();
    ASSERT_EQ(a.dtype(), b.dtype()) << what << " output " << k;
    ASSERT_EQ(a.shape(), b.shape()) << what << " output " << k;
    for (int64_t e = 0; e < a.NumElements(); ++e) {
      if (a.dtype() == DataType::kFloat32) {
        const float x = a.data<float>()[e], y = b.data<float>()[e];
        ASSERT_NEAR(x, y, 1e-5 * std::fabs(y) + 1e-6)
            << what << " output " << k << " [" << e << "]";
      } else {
        ASSERT_EQ(a.data<int64_t>()[e], b.data<int64_t>()[e]) << what << " output " << k;
      }
    }
  }
}

std::vector<Value> LoneRun(const Model& model, const Case& c) {
  auto out = model.Run(Inputs(c), RunOptions{});
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *std::move(out) : std::vector<Value>{};
}

TEST(LoopStepperTest, RowsJoiningAndLeavingEqualTheirLoneRunsAndNumpy) {
  auto model = LoadOrDie("decoder_rows");
  ASSERT_NE(model, nullptr);
  const std::vector<Case> cases = ReadCases();
  ASSERT_EQ(cases.size(), 8u);
  auto stepper = LoopStepper::Create(model, LoopStepperOptions{});
  ASSERT_TRUE(stepper.ok()) << stepper.status();
  // Rows join at iterations 0, 1 and 3 of the running batch, and leave whenever they end
  // (budgets 1..20, one with a trip count of 3 and one of 0).
  const std::map<int, std::vector<int>> joins = {{0, {0, 1, 2}}, {1, {3, 4}}, {3, {5, 6, 7}}};
  std::map<int64_t, int> case_of;
  std::map<int, FinishedRow> done;
  for (int step = 0; step < 100 && done.size() < cases.size(); ++step) {
    if (auto it = joins.find(step); it != joins.end()) {
      for (int c : it->second) {
        auto id = (*stepper)->Admit(Inputs(cases[c]), RowOptions{});
        ASSERT_TRUE(id.ok()) << id.status();
        case_of[*id] = c;
      }
    }
    std::vector<FinishedRow> finished;
    (*stepper)->Step(&finished);
    for (FinishedRow& f : finished) done[case_of.at(f.id)] = std::move(f);
  }
  ASSERT_EQ(done.size(), cases.size());
  EXPECT_EQ((*stepper)->rows(), 0);
  for (size_t c = 0; c < cases.size(); ++c) {
    const FinishedRow& f = done[c];
    const std::string what = "case " + std::to_string(c);
    ASSERT_TRUE(f.outputs.ok()) << what << ": " << f.outputs.status();
    ExpectSameOutputs(*f.outputs, LoneRun(*model, cases[c]), what + " vs its lone run");
    // numpy: the tokens exactly, the final hidden state to rtol 1e-5.
    EXPECT_EQ(f.iterations, static_cast<int64_t>(cases[c].tokens.size())) << what;
    const Tensor& tokens = (*f.outputs)[3].tensor();
    ASSERT_EQ(tokens.NumElements(), static_cast<int64_t>(cases[c].tokens.size())) << what;
    for (size_t t = 0; t < cases[c].tokens.size(); ++t) {
      EXPECT_EQ(tokens.data<int64_t>()[t], cases[c].tokens[t]) << what << " token " << t;
    }
    const Tensor& h = (*f.outputs)[0].tensor();
    for (int i = 0; i < kHidden; ++i) {
      const float want = cases[c].h_final[i];
      EXPECT_NEAR(h.data<float>()[i], want, 1e-5 * std::fabs(want) + 1e-6) << what;
    }
  }
}

TEST(LoopStepperTest, CancelAndDeadlineTakeOutOnlyThatRowAtTheNextBoundary) {
  auto model = LoadOrDie("decoder_rows");
  ASSERT_NE(model, nullptr);
  auto stepper = LoopStepper::Create(model, LoopStepperOptions{});
  ASSERT_TRUE(stepper.ok()) << stepper.status();
  std::atomic<bool> cancel{false};
  RowOptions cancellable;
  cancellable.cancelled = &cancel;
  RowOptions late;
  late.deadline = absl::Now() + absl::Hours(1);
  const Case keep = LongCase(12, 0.5f), cancelled = LongCase(40, 1.5f),
             expired = LongCase(40, 2.5f);
  auto keep_id = (*stepper)->Admit(Inputs(keep), RowOptions{});
  auto cancel_id = (*stepper)->Admit(Inputs(cancelled), cancellable);
  ASSERT_TRUE(keep_id.ok() && cancel_id.ok());
  std::vector<FinishedRow> finished;
  for (int i = 0; i < 3; ++i) (*stepper)->Step(&finished);
  EXPECT_TRUE(finished.empty());
  // A row whose deadline has already passed joins and leaves at the next boundary.
  late.deadline = absl::Now() - absl::Seconds(1);
  auto late_id = (*stepper)->Admit(Inputs(expired), late);
  ASSERT_TRUE(late_id.ok());
  cancel = true;
  (*stepper)->Step(&finished);
  ASSERT_EQ(finished.size(), 2u);
  for (const FinishedRow& f : finished) {
    if (f.id == *cancel_id) {
      EXPECT_TRUE(absl::IsCancelled(f.outputs.status())) << f.outputs.status();
      EXPECT_EQ(f.iterations, 3);
    } else {
      EXPECT_EQ(f.id, *late_id);
      EXPECT_TRUE(absl::IsDeadlineExceeded(f.outputs.status())) << f.outputs.status();
      EXPECT_EQ(f.iterations, 0);
    }
  }
  EXPECT_EQ((*stepper)->rows(), 1);
  // The row that stayed is untouched by the two that left.
  finished.clear();
  while ((*stepper)->rows() > 0) (*stepper)->Step(&finished);
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].id, *keep_id);
  ASSERT_TRUE(finished[0].outputs.ok()) << finished[0].outputs.status();
  EXPECT_EQ(finished[0].iterations, 12);
  ExpectSameOutputs(*finished[0].outputs, LoneRun(*model, keep), "kept row");
}

TEST(LoopStepperTest, LimitsArePerRow) {
  auto model = LoadOrDie("decoder_rows");
  ASSERT_NE(model, nullptr);
  auto stepper = LoopStepper::Create(model, LoopStepperOptions{});
  ASSERT_TRUE(stepper.ok()) << stepper.status();
  RowOptions capped;
  capped.max_loop_iterations = 4;
  RowOptions small_output;
  small_output.max_output_bytes = 5 * kHidden * 4;  // hs holds 5 iterations of [1, 16] floats
  // A row holds its carried h [1, 16] floats, tok [1] and budget [1] int64s (80 bytes) and 72
  // bytes of scan slices per iteration (a token and a [1, 16] hidden state): 3 iterations fit in
  // 296 bytes, the 4th goes over.
  RowOptions small_memory;
  small_memory.max_memory_bytes = 80 + 3 * 72;
  const Case a = LongCase(10, 0.1f), b = LongCase(10, 0.2f), c = LongCase(10, 0.3f),
             d = LongCase(10, 0.4f);
  auto a_id = (*stepper)->Admit(Inputs(a), capped);
  auto b_id = (*stepper)->Admit(Inputs(b), small_output);
  auto c_id = (*stepper)->Admit(Inputs(c), RowOptions{});
  auto d_id = (*stepper)->Admit(Inputs(d), small_memory);
  ASSERT_TRUE(a_id.ok() && b_id.ok() && c_id.ok() && d_id.ok());
  std::map<int64_t, FinishedRow> done;
  while ((*stepper)->rows() > 0) {
    std::vector<FinishedRow> finished;
    (*stepper)->Step(&finished);
    for (FinishedRow& f : finished) done[f.id] = std::move(f);
  }
  EXPECT_EQ(GetLimitReason(done[*a_id].outputs.status()), LimitReason::kIterationCap)
      << done[*a_id].outputs.status();
  EXPECT_EQ(done[*a_id].iterations, 4);
  EXPECT_EQ(GetLimitReason(done[*b_id].outputs.status()), LimitReason::kOutputBytes)
      << done[*b_id].outputs.status();
  EXPECT_EQ(GetLimitReason(done[*d_id].outputs.status()), LimitReason::kMemory)
      << done[*d_id].outputs.status();
  EXPECT_EQ(done[*d_id].iterations, 4);
  ASSERT_TRUE(done[*c_id].outputs.ok()) << done[*c_id].outputs.status();
  ExpectSameOutputs(*done[*c_id].outputs, LoneRun(*model, c), "unlimited row");
}

// Records one row's streamed token slices.
class TokenRecorder : public IterationObserver {
 public:
  absl::Status OnIteration(int loop_index, int64_t iteration,
                           absl::Span<const ScanSlice> slices) override {
    iterations.push_back(iteration);
    for (const ScanSlice& s : slices) {
      if (s.output == 3) tokens.push_back(s.tensor->data<int64_t>()[0]);
      if (s.output == 4) {
        EXPECT_EQ(s.tensor->shape(), (Shape{1, kHidden}));
      }
    }
    return absl::OkStatus();
  }
  std::vector<int64_t> iterations;
  std::vector<int64_t> tokens;
};

TEST(LoopStepperTest, StreamsEachRowsOwnSlices) {
  auto model = LoadOrDie("decoder_rows");
  ASSERT_NE(model, nullptr);
  auto stepper = LoopStepper::Create(model, LoopStepperOptions{});
  ASSERT_TRUE(stepper.ok()) << stepper.status();
  TokenRecorder first, second;
  RowOptions o1, o2;
  o1.iteration_observer = &first;
  o2.iteration_observer = &second;
  const Case a = LongCase(6, 0.7f), b = LongCase(9, 1.7f);
  ASSERT_TRUE((*stepper)->Admit(Inputs(a), o1).ok());
  std::vector<FinishedRow> finished;
  (*stepper)->Step(&finished);
  ASSERT_TRUE((*stepper)->Admit(Inputs(b), o2).ok());
  while ((*stepper)->rows() > 0) (*stepper)->Step(&finished);
  ASSERT_EQ(finished.size(), 2u);
  const std::vector<Value> lone_a = LoneRun(*model, a), lone_b = LoneRun(*model, b);
  const Tensor& ta = lone_a[3].tensor();
  const Tensor& tb = lone_b[3].tensor();
  EXPECT_EQ(first.iterations, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(first.tokens, std::vector<int64_t>(ta.data<int64_t>(), ta.data<int64_t>() + 6));
  EXPECT_EQ(second.iterations.size(), 9u);
  EXPECT_EQ(second.tokens, std::vector<int64_t>(tb.data<int64_t>(), tb.data<int64_t>() + 9));
}

TEST(LoopStepperTest, RefusesBodiesThatMixRowsWithTheReason) {
  auto any = LoadOrDie("decoder_any");
  ASSERT_NE(any, nullptr);
  auto refused = LoopStepper::Create(any, LoopStepperOptions{});
  ASSERT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "(ReduceMax)")) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "batch")) << refused.status();
  auto counter = LoadOrDie("counter_reads_i");
  ASSERT_NE(counter, nullptr);
  refused = LoopStepper::Create(counter, LoopStepperOptions{});
  ASSERT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "iteration counter"))
      << refused.status();
}

// An input that starts a carried value and is also read by the body keeps two packed buffers: the
// body reads each row's own x0 however the carried x changes and whichever rows left.
TEST(LoopStepperTest, AnInputBothCarriedAndCapturedKeepsItsRows) {
  auto model = LoadOrDie("carried_and_captured");
  ASSERT_NE(model, nullptr);
  auto stepper = LoopStepper::Create(model, LoopStepperOptions{});
  ASSERT_TRUE(stepper.ok()) << stepper.status();
  auto inputs = [](int64_t m, float base) {
    std::vector<Value> in;
    in.push_back(Make<int64_t>(DataType::kInt64, Shape{}, {m}));
    in.push_back(
        Make<float>(DataType::kFloat32, Shape{1, 4}, {base, base + 1, base + 2, base + 3}));
    return in;
  };
  const std::vector<std::pair<int64_t, float>> rows = {{5, 1.f}, {2, -3.f}, {7, 10.f}};
  std::map<int64_t, size_t> index;
  std::map<size_t, FinishedRow> done;
  for (size_t k = 0; k < rows.size(); ++k) {
    auto id = (*stepper)->Admit(inputs(rows[k].first, rows[k].second), RowOptions{});
    ASSERT_TRUE(id.ok()) << id.status();
    index[*id] = k;
    std::vector<FinishedRow> finished;
    (*stepper)->Step(&finished);  // rows join one iteration apart
    for (FinishedRow& f : finished) done[index.at(f.id)] = std::move(f);
  }
  while ((*stepper)->rows() > 0) {
    std::vector<FinishedRow> finished;
    (*stepper)->Step(&finished);
    for (FinishedRow& f : finished) done[index.at(f.id)] = std::move(f);
  }
  ASSERT_EQ(done.size(), rows.size());
  for (size_t k = 0; k < rows.size(); ++k) {
    ASSERT_TRUE(done[k].outputs.ok()) << done[k].outputs.status();
    auto lone = model->Run(inputs(rows[k].first, rows[k].second), RunOptions{});
    ASSERT_TRUE(lone.ok()) << lone.status();
    ExpectSameOutputs(*done[k].outputs, *lone, "row " + std::to_string(k));
    // The spec: x_i = x_{i-1} / 2 + x0 from x0, M times; element 0 of the final value.
    float x = rows[k].second;
    for (int64_t i = 0; i < rows[k].first; ++i) x = x * 0.5f + rows[k].second;
    EXPECT_FLOAT_EQ((*done[k].outputs)[0].tensor().data<float>()[0], x) << "row " << k;
  }
}

// An unbatched input (listed in LoopStepperOptions::unbatched_inputs) is shared by the batch: a
// row with another value cannot join (FailedPrecondition) until the batch is empty.
TEST(LoopStepperTest, UnbatchedInputsMustMatchTheRunningBatch) {
  auto model = LoadOrDie("scaled");
  ASSERT_NE(model, nullptr);
  LoopStepperOptions options;
  options.unbatched_inputs = {"s"};
  auto stepper = LoopStepper::Create(model, options);
  ASSERT_TRUE(stepper.ok()) << stepper.status();
  auto inputs = [](int64_t m, float s, float x0) {
    std::vector<Value> in;
    in.push_back(Make<int64_t>(DataType::kInt64, Shape{}, {m}));
    in.push_back(Make<float>(DataType::kFloat32, Shape{}, {s}));
    in.push_back(Make<float>(DataType::kFloat32, Shape{1, 4}, {x0, x0, x0, x0}));
    return in;
  };
  // The spec: x_i = x_{i-1} / 2 + s, M times from x0.
  auto expected = [](int64_t m, float s, float x0) {
    for (int64_t i = 0; i < m; ++i) x0 = x0 * 0.5f + s;
    return x0;
  };
  ASSERT_TRUE((*stepper)->Admit(inputs(3, 1.f, 2.f), RowOptions{}).ok());
  ASSERT_TRUE((*stepper)->Admit(inputs(5, 1.f, -1.f), RowOptions{}).ok());  // same s: joins
  auto other = (*stepper)->Admit(inputs(2, 4.f, 0.f), RowOptions{});
  EXPECT_TRUE(absl::IsFailedPrecondition(other.status())) << other.status();
  std::vector<FinishedRow> finished;
  while ((*stepper)->rows() > 0) (*stepper)->Step(&finished);
  ASSERT_EQ(finished.size(), 2u);
  // The batch is empty: a row with another s starts the next one.
  ASSERT_TRUE((*stepper)->Admit(inputs(2, 4.f, 0.f), RowOptions{}).ok());
  while ((*stepper)->rows() > 0) (*stepper)->Step(&finished);
  ASSERT_EQ(finished.size(), 3u);
  const std::vector<float> want = {expected(3, 1, 2), expected(5, 1, -1), expected(2, 4, 0)};
  for (size_t k = 0; k < finished.size(); ++k) {
    ASSERT_TRUE(finished[k].outputs.ok()) << finished[k].outputs.status();
    EXPECT_FLOAT_EQ((*finished[k].outputs)[0].tensor().data<float>()[0], want[k]) << k;
  }
}

// A string unbatched input is compared by its strings: a row whose s differs cannot join (it
// joined before, bytes of strings were not compared, and ran with the batch's s).
TEST(LoopStepperTest, UnbatchedStringInputsMustMatchTheRunningBatch) {
  auto model = LoadOrDie("scaled_text");
  ASSERT_NE(model, nullptr);
  LoopStepperOptions options;
  options.unbatched_inputs = {"s"};
  auto stepper = LoopStepper::Create(model, options);
  ASSERT_TRUE(stepper.ok()) << stepper.status();
  auto inputs = [](int64_t m, const std::string& s, float x0) {
    std::vector<Value> in;
    in.push_back(Make<int64_t>(DataType::kInt64, Shape{}, {m}));
    in.push_back(Make<std::string>(DataType::kString, Shape{1}, {s}));
    in.push_back(Make<float>(DataType::kFloat32, Shape{1, 4}, {x0, x0, x0, x0}));
    return in;
  };
  ASSERT_TRUE((*stepper)->Admit(inputs(3, "1", 2.f), RowOptions{}).ok());
  ASSERT_TRUE((*stepper)->Admit(inputs(2, std::string("1"), 0.f), RowOptions{}).ok());
  auto other = (*stepper)->Admit(inputs(2, "4", 0.f), RowOptions{});
  EXPECT_TRUE(absl::IsFailedPrecondition(other.status())) << other.status();
  std::vector<FinishedRow> finished;
  while ((*stepper)->rows() > 0) (*stepper)->Step(&finished);
  ASSERT_EQ(finished.size(), 2u);
  // The spec: x_i = x_{i-1} / 2 + s, M times from x0 (s = 1): 2 -> 2 -> 2 -> 2; 0 -> 1 -> 1.5.
  std::map<int64_t, float> want = {{3, 2.f}, {2, 1.5f}};
  for (const FinishedRow& f : finished) {
    ASSERT_TRUE(f.outputs.ok()) << f.outputs.status();
    EXPECT_FLOAT_EQ((*f.outputs)[0].tensor().data<float>()[0], want[f.iterations]);
  }
  // The batch is empty: the row with s = "4" starts the next one (0 -> 4 -> 6).
  ASSERT_TRUE((*stepper)->Admit(inputs(2, "4", 0.f), RowOptions{}).ok());
  finished.clear();
  while ((*stepper)->rows() > 0) (*stepper)->Step(&finished);
  ASSERT_EQ(finished.size(), 1u);
  ASSERT_TRUE(finished[0].outputs.ok()) << finished[0].outputs.status();
  EXPECT_FLOAT_EQ((*finished[0].outputs)[0].tensor().data<float>()[0], 6.f);
}

TEST(LoopStepperTest, AdmitChecksRowsAndCapacity) {
  auto model = LoadOrDie("decoder_rows");
  ASSERT_NE(model, nullptr);
  LoopStepperOptions options;
  options.max_rows = 2;
  auto stepper = LoopStepper::Create(model, options);
  ASSERT_TRUE(stepper.ok()) << stepper.status();
  Case wide = LongCase(5, 0);
  std::vector<Value> two_rows = Inputs(wide);
  two_rows[2] = Make<float>(DataType::kFloat32, Shape{2, kHidden}, std::vector<float>(32, 0.f));
  auto bad = (*stepper)->Admit(std::move(two_rows), RowOptions{});
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  ASSERT_TRUE((*stepper)->Admit(Inputs(wide), RowOptions{}).ok());
  ASSERT_TRUE((*stepper)->Admit(Inputs(wide), RowOptions{}).ok());
  auto full = (*stepper)->Admit(Inputs(wide), RowOptions{});
  EXPECT_TRUE(absl::IsResourceExhausted(full.status())) << full.status();
  std::vector<FinishedRow> finished;
  EXPECT_FALSE((*stepper)->Remove(12345, absl::CancelledError("x"), &finished));
  EXPECT_TRUE(finished.empty());
}

// The first row sizes the packed buffers for max_rows rows; when that memory is not there, Admit
// refuses the row with ResourceExhausted (it threw std::bad_alloc, which ended every row of the
// server's driver with Internal), and a row that fits is admitted after it.
TEST(LoopStepperTest, AdmitRefusesARowWhoseBuffersCannotBeAllocated) {
  std::ifstream overcommit("/proc/sys/vm/overcommit_memory");
  int mode = -1;
  if (overcommit >> mode && mode == 1) {
    GTEST_SKIP() << "vm.overcommit_memory=1 grants any allocation";
  }
  auto model = LoadOrDie("decoder_rows");
  ASSERT_NE(model, nullptr);
  LoopStepperOptions options;
  options.max_rows = std::numeric_limits<int>::max();  // h alone: 64 bytes * 2^31 = 128 GiB
  auto huge = LoopStepper::Create(model, options);
  ASSERT_TRUE(huge.ok()) << huge.status();
  const Case c = LongCase(3, 0.5f);
  auto refused = (*huge)->Admit(Inputs(c), RowOptions{});
  EXPECT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  EXPECT_EQ((*huge)->rows(), 0);

  auto stepper = LoopStepper::Create(model, LoopStepperOptions{});
  ASSERT_TRUE(stepper.ok()) << stepper.status();
  ASSERT_TRUE((*stepper)->Admit(Inputs(c), RowOptions{}).ok());
  std::vector<FinishedRow> finished;
  while ((*stepper)->rows() > 0) (*stepper)->Step(&finished);
  ASSERT_EQ(finished.size(), 1u);
  ASSERT_TRUE(finished[0].outputs.ok()) << finished[0].outputs.status();
  ExpectSameOutputs(*finished[0].outputs, LoneRun(*model, c), "after a refused row");
}

}  // namespace
}  // namespace loopserve::engine
