// The LoopStepper's cost against the ordinary Loop kernel, in process: the greedy decoder of
// tests/unit/engine/loop_stepper/make_stepper_models.py run (A) alone through Model::Run at batch
// 1, (B) as one row of a LoopStepper, (C) through Model::Run at batch 32 (decoder_any: one
// condition per run) and (D) as 32 rows of a LoopStepper, every row `steps` long. Prints the
// median microseconds per run over rounds (the cases alternate, so a shifting load hits all
// alike) and the ratios B/A (what the mode costs a lone request) and D/C (what the stepper costs
// a full batch).
//
// Usage: /usr/bin/python3 tests/unit/engine/loop_stepper/make_stepper_models.py DIR 512 2048
//        build/bin/loop_stepper_bench DIR [steps=36] [rounds=7] [runs=10]

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace {

using loopserve::engine::DataType;
using loopserve::engine::Shape;
using loopserve::engine::Tensor;
using loopserve::engine::Value;

std::vector<Value> Inputs(int64_t rows, int64_t hidden, int64_t steps) {
  std::vector<Value> in;
  Tensor m(DataType::kInt64, Shape{});
  m.mutable_data<int64_t>()[0] = 256;
  in.emplace_back(std::move(m));
  Tensor cond(DataType::kBool, Shape{});
  cond.mutable_data<bool>()[0] = true;
  in.emplace_back(std::move(cond));
  Tensor h(DataType::kFloat32, Shape{rows, hidden});
  for (int64_t i = 0; i < rows * hidden; ++i) h.mutable_data<float>()[i] = std::sin(0.1f * i);
  in.emplace_back(std::move(h));
  Tensor tok(DataType::kInt64, Shape{rows});
  Tensor budget(DataType::kInt64, Shape{rows});
  for (int64_t r = 0; r < rows; ++r) {
    tok.mutable_data<int64_t>()[r] = 3;
    budget.mutable_data<int64_t>()[r] = steps;
  }
  in.emplace_back(std::move(tok));
  in.emplace_back(std::move(budget));
  return in;
}

// One row's inputs out of a batch's (row r of every batched input).
std::vector<Value> Row(const std::vector<Value>& batch, int64_t r) {
  std::vector<Value> row(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    const Tensor& t = batch[i].tensor();
    if (i < 2) {
      row[i].CopyFrom(batch[i]);
      continue;
    }
    Shape shape = t.shape();
    shape[0] = 1;
    Tensor one(t.dtype(), shape);
    std::memcpy(one.mutable_raw_data(), static_cast<const char*>(t.raw_data()) + r * one.ByteSize(),
                one.ByteSize());
    row[i] = Value(std::move(one));
  }
  return row;
}

double Micros(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [steps] [rounds] [runs]\n", argv[0]);
    return 2;
  }
  loopserve::engine::UsePassiveOpenMpWait(argv);
  loopserve::engine::SetIntraOpThreads(1);
  const std::string dir = argv[1];
  const int64_t steps = argc > 2 ? std::atoll(argv[2]) : 36;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 7;
  const int runs = argc > 4 ? std::atoi(argv[4]) : 10;
  auto rows_model = loopserve::engine::Model::Load(dir + "/decoder_rows/model.onnx");
  auto any_model = loopserve::engine::Model::Load(dir + "/decoder_any/model.onnx");
  if (!rows_model.ok() || !any_model.ok()) {
    std::fprintf(stderr, "cannot load the models: %s %s\n", rows_model.status().ToString().c_str(),
                 any_model.status().ToString().c_str());
    return 1;
  }
  const int64_t hidden = (*rows_model)->inputs()[2].type.dims->at(1);
  constexpr int64_t kRows = 32;
  loopserve::engine::LoopStepperOptions options;
  options.max_rows = kRows;
  auto stepper = loopserve::engine::LoopStepper::Create(*rows_model, options);
  if (!stepper.ok()) {
    std::fprintf(stderr, "%s\n", stepper.status().ToString().c_str());
    return 1;
  }
  const std::vector<Value> one = Inputs(1, hidden, steps);
  const std::vector<Value> full = Inputs(kRows, hidden, steps);
  auto copy = [](const std::vector<Value>& v) {
    std::vector<Value> c(v.size());
    for (size_t i = 0; i < v.size(); ++i) c[i].CopyFrom(v[i]);
    return c;
  };
  auto run_model = [&](const loopserve::engine::Model& model, const std::vector<Value>& in) {
    auto out = model.Run(copy(in), loopserve::engine::RunOptions{});
    if (!out.ok()) {
      std::fprintf(stderr, "%s\n", out.status().ToString().c_str());
      std::exit(1);
    }
  };
  auto run_stepper = [&](int64_t rows) {
    for (int64_t r = 0; r < rows; ++r) {
      if (!(*stepper)->Admit(Row(rows == 1 ? one : full, r), {}).ok()) std::exit(1);
    }
    std::vector<loopserve::engine::FinishedRow> finished;
    while ((*stepper)->rows() > 0) (*stepper)->Step(&finished);
    for (const auto& f : finished) {
      if (!f.outputs.ok() || f.iterations != steps) std::exit(1);
    }
  };
  std::vector<double> a, b, c, d;
  auto timed = [&](std::vector<double>& into, auto&& body) {
    body();  // warm
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < runs; ++i) body();
    into.push_back(Micros(t0, std::chrono::steady_clock::now()) / runs);
  };
  for (int r = 0; r < rounds; ++r) {
    timed(a, [&] { run_model(**rows_model, one); });
    timed(b, [&] { run_stepper(1); });
    timed(c, [&] { run_model(**any_model, full); });
    timed(d, [&] { run_stepper(kRows); });
  }
  std::printf("hidden %lld, %lld steps per row, median of %d rounds of %d runs (one thread)\n",
              static_cast<long long>(hidden), static_cast<long long>(steps), rounds, runs);
  std::printf("A Model::Run, batch 1          %10.1f us\n", Median(a));
  std::printf("B LoopStepper, 1 row           %10.1f us  (B/A %.3f)\n", Median(b),
              Median(b) / Median(a));
  std::printf("C Model::Run, batch 32         %10.1f us\n", Median(c));
  std::printf("D LoopStepper, 32 rows         %10.1f us  (D/C %.3f)\n", Median(d),
              Median(d) / Median(c));
  return 0;
}
