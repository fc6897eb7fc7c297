#pragma once

// looprun: an in-process runner, benchmark and conformance tool over the engine (like
// onnxruntime_perf_test / benchmark_app). looprun_main.cc parses the flags and calls RunModelMain
// or RunConformanceMain (conformance.h); the helpers below are shared by both modes.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "engine/tensor/value.h"
#include "engine/tools/compare.h"

namespace loopserve::tools {

// Exit statuses of looprun.
inline constexpr int kExitOk = 0;
inline constexpr int kExitMismatch = 1;  // an output differs from the reference (or a case failed)
inline constexpr int kExitError = 2;     // bad flags, load/run failure, missing or malformed files

struct RunModelOptions {
  std::string model;       // model.onnx or model.xml
  std::string data;        // folder with input_<k>.pb (and output_<k>.pb); empty: synthesize
  std::string output_dir;  // where output_<k>.pb are written; empty: not written
  int repeat = 1;          // timed runs
  int warmup = 0;          // untimed runs before them
  bool dump_plan = false;  // print Model::plan_dump() before running
  bool verbose = false;    // print the ISA and reference steps on stderr too
  // RunOptions::loop_threads: "adaptive", "intra_op" or "one"; anything else is an error.
  std::string loop_threads = "adaptive";
  bool loop_team = true;  // RunOptions::loop_team
  // LoadOptions::precision: "fp32" or "bf16" (then the model is also run once in fp32 and the
  // JSON line has the largest deviation from it); anything else is an error.
  std::string precision = "fp32";
  bool force_precision = false;  // LoadOptions::force_precision
};

// `looprun --model=...`: loads the model, feeds the inputs, runs warmup + repeat times, writes and
// compares the outputs of the last run, prints one JSON line of timings on stdout and any mismatch
// or error on stderr. The JSON line has median_us, p90_us, min_us (wall clock per run),
// cpu_median_us (the process's CPU time per run, all threads: at 1 thread the work itself, which
// other processes on a shared machine do not inflate the way they do wall time), loop_iterations,
// loop_executions, reference_steps (RunStats; 0 unless a float op ran on a reference kernel),
// one_thread_iterations (RunStats: the last run's Loop iterations run on one thread although it
// had more intra-op threads), team_splits (RunStats: kernel runs split over the Loop's SpinTeam),
// arena_bytes (RunStats: what the model keeps for its next run), peak_memory_bytes (RunStats) and
// isa (the engine's kernel ISA). Returns kExitOk, kExitMismatch or kExitError.
int RunModelMain(const RunModelOptions& options);

// Reads `dir`/input_<k>.pb for each model input k, in the encoding the input's declared kind calls
// for. A missing file for an optional input feeds the empty optional; otherwise a missing file is
// NotFound naming it.
absl::StatusOr<std::vector<engine::Value>> ReadInputs(const engine::Model& model,
                                                      const std::string& dir);

// Zero-filled inputs built from the declared types (variable dims taken as 1; sequences empty;
// optionals empty). InvalidArgument when an input's element type or rank is unknown.
absl::StatusOr<std::vector<engine::Value>> SynthesizeInputs(const engine::Model& model);

// Views of `inputs` (no copy) for one Model::Run; `inputs` must outlive the run.
std::vector<engine::Value> ViewInputs(const std::vector<engine::Value>& inputs);

// Compares `outputs` with `dir`/output_<k>.pb. With `require_all`, every model output needs its
// file and no extra output_<k>.pb may exist (conformance); otherwise outputs without a file are
// skipped. Returns nullopt when everything compared matches, else a one-line description naming the
// output ("output 1 'y': shape [2], expected [3]"); an error status for unreadable files. Float
// elements compare within `tolerance`.
absl::StatusOr<std::optional<std::string>> CompareWithReference(
    const engine::Model& model, const std::vector<engine::Value>& outputs, const std::string& dir,
    bool require_all, const Tolerance& tolerance = {});

}  // namespace loopserve::tools
