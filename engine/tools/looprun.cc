#include "engine/tools/looprun.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <iostream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/base/status_macros.h"
#include "engine/tools/compare.h"
#include "engine/tools/onnx_tensor_io.h"

namespace loopserve::tools {
namespace {

namespace fs = std::filesystem;
using engine::Model;
using engine::Tensor;
using engine::Value;
using engine::ValueKind;

std::string InputPath(const std::string& dir, size_t k) {
  return (fs::path(dir) / absl::StrCat("input_", k, ".pb")).string();
}

std::string OutputPath(const std::string& dir, size_t k) {
  return (fs::path(dir) / absl::StrCat("output_", k, ".pb")).string();
}

bool FileExists(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// Median, 90th percentile (nearest rank) and minimum of `us`, which must not be empty.
struct Percentiles {
  double median = 0;
  double p90 = 0;
  double min = 0;
};

Percentiles Summarize(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  const size_t n = us.size();
  Percentiles p;
  p.min = us.front();
  p.median = n % 2 == 1 ? us[n / 2] : (us[n / 2 - 1] + us[n / 2]) / 2;
  const size_t rank = static_cast<size_t>(std::ceil(0.9 * static_cast<double>(n)));
  p.p90 = us[std::max<size_t>(rank, 1) - 1];
  return p;
}

// CPU time of the whole process (every thread) so far, in microseconds.
double ProcessCpuMicros() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

// The load options --precision, --force_precision and --dump_plan ask for.
absl::StatusOr<engine::LoadOptions> LoadOptionsFor(const RunModelOptions& options) {
  engine::LoadOptions load_options;
  load_options.dump_plan = options.dump_plan;
  if (options.precision == "bf16") {
    load_options.precision = engine::LoadOptions::Precision::kBf16;
  } else if (options.precision != "fp32") {
    return absl::InvalidArgumentError(
        absl::StrCat("--precision '", options.precision, "': expected fp32 or bf16"));
  }
  load_options.force_precision = options.force_precision;
  return load_options;
}

// The run options --loop_team and --loop_threads ask for.
absl::StatusOr<engine::RunOptions> RunOptionsFor(const RunModelOptions& options) {
  engine::RunOptions run_options;
  run_options.loop_team = options.loop_team;
  absl::StatusOr<engine::LoopThreads> loop_threads = engine::ParseLoopThreads(options.loop_threads);
  if (!loop_threads.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--loop_threads ", loop_threads.status().message()));
  }
  run_options.loop_threads = *loop_threads;
  return run_options;
}

// What the timed runs leave: the last run's outputs and statistics, and each timed (non-warm-up)
// run's wall and process CPU time in microseconds.
struct TimedRuns {
  std::vector<Value> outputs;
  engine::RunStats stats;
  std::vector<double> times_us;
  std::vector<double> cpu_us;
};

// Runs `model` options.warmup + options.repeat times on views of `inputs`.
absl::StatusOr<TimedRuns> TimeRuns(const Model& model, const std::vector<Value>& inputs,
                                   const engine::RunOptions& run_options,
                                   const RunModelOptions& options) {
  TimedRuns runs;
  runs.times_us.reserve(static_cast<size_t>(options.repeat));
  runs.cpu_us.reserve(static_cast<size_t>(options.repeat));
  for (int i = 0; i < options.warmup + options.repeat; ++i) {
    std::vector<Value> feed = ViewInputs(inputs);
    const double cpu_start = ProcessCpuMicros();
    const auto start = std::chrono::steady_clock::now();
    runs.stats = engine::RunStats();
    auto result = model.Run(std::move(feed), run_options, &runs.stats);
    const auto end = std::chrono::steady_clock::now();
    const double cpu_end = ProcessCpuMicros();
    if (!result.ok()) {
      return Annotate(result.status(), absl::StrCat("running '", options.model, "': "));
    }
    runs.outputs = std::move(result).value();
    if (i >= options.warmup) {
      runs.times_us.push_back(std::chrono::duration<double, std::micro>(end - start).count());
      runs.cpu_us.push_back(cpu_end - cpu_start);
    }
  }
  return runs;
}

// Writes `outputs` as output_<k>.pb files into `dir`, creating it when missing.
absl::Status WriteOutputs(const Model& model, const std::vector<Value>& outputs,
                          const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::NotFoundError(absl::StrCat("cannot create '", dir, "': ", ec.message()));
  for (size_t k = 0; k < outputs.size(); ++k) {
    const engine::TensorSpec& spec = model.outputs()[k];
    LS_RETURN_IF_ERROR(WriteValueFile(OutputPath(dir, k), spec.name, outputs[k], spec.type));
  }
  return absl::OkStatus();
}

// Reduced precision: the largest deviation of any float output from the fp32 model's, absolute
// and relative to that output's largest magnitude, as JSON fields (with a leading comma) for the
// report line.
absl::StatusOr<std::string> DeviationVsFp32(const RunModelOptions& options,
                                            const std::vector<Value>& inputs,
                                            const engine::RunOptions& run_options,
                                            const std::vector<Value>& outputs) {
  engine::LoadOptions fp32_options;
  LS_ASSIGN_OR_RETURN(std::shared_ptr<const Model> fp32, Model::Load(options.model, fp32_options));
  LS_ASSIGN_OR_RETURN(std::vector<Value> want, fp32->Run(ViewInputs(inputs), run_options));
  double max_abs = 0, max_rel = 0;
  for (size_t k = 0; k < outputs.size() && k < want.size(); ++k) {
    if (!outputs[k].is_tensor() || !want[k].is_tensor()) continue;
    const Tensor& got = outputs[k].tensor();
    const Tensor& ref = want[k].tensor();
    if (got.dtype() != engine::DataType::kFloat32 || ref.dtype() != got.dtype() ||
        got.NumElements() != ref.NumElements()) {
      continue;
    }
    double scale = 0, diff = 0;
    for (int64_t i = 0; i < ref.NumElements(); ++i) {
      scale = std::max(scale, static_cast<double>(std::abs(ref.data<float>()[i])));
      diff = std::max(diff,
                      static_cast<double>(std::abs(got.data<float>()[i] - ref.data<float>()[i])));
    }
    max_abs = std::max(max_abs, diff);
    if (scale > 0) max_rel = std::max(max_rel, diff / scale);
  }
  return absl::StrFormat(
      ",\"precision\":%s,\"max_abs_diff_vs_fp32\":%.3g,"
      "\"max_rel_diff_vs_fp32\":%.3g",
      JsonString(options.precision), max_abs, max_rel);
}

// Prints the JSON report line on stdout (and, with --verbose, a line on stderr).
void PrintReport(const RunModelOptions& options, const TimedRuns& runs,
                 const std::string& deviation) {
  const Percentiles p = Summarize(runs.times_us);
  const Percentiles cpu = Summarize(runs.cpu_us);
  const engine::RunStats& stats = runs.stats;
  std::cout << absl::StrFormat(
                   "{\"model\":%s,\"repeat\":%d,\"median_us\":%.1f,\"p90_us\":%.1f,"
                   "\"min_us\":%.1f,\"cpu_median_us\":%.1f,\"loop_iterations\":%d,"
                   "\"loop_executions\":%d,\"reference_steps\":%d,"
                   "\"one_thread_iterations\":%d,\"team_splits\":%d,\"arena_bytes\":%d,"
                   "\"peak_memory_bytes\":%d,\"isa\":%s%s}",
                   JsonString(options.model), options.repeat, p.median, p.p90, p.min, cpu.median,
                   stats.loop_iterations, stats.loop_executions, stats.reference_steps,
                   stats.one_thread_iterations, stats.team_splits, stats.arena_bytes,
                   stats.peak_memory_bytes, JsonString(engine::ActiveVectorIsa()), deviation)
            << std::endl;
  if (options.verbose) {
    std::cerr << "looprun: kernels for " << engine::ActiveVectorIsa() << "; "
              << stats.reference_steps
              << " step(s) ran float work on a reference kernel in the last run; "
              << stats.one_thread_iterations << " of its " << stats.loop_iterations
              << " Loop iteration(s) ran on one thread (--loop_threads=" << options.loop_threads
              << ")" << std::endl;
  }
}

// Runs the whole --model command; errors come back as a status and become exit status 2.
absl::StatusOr<int> RunModel(const RunModelOptions& options) {
  if (options.repeat < 1) return absl::InvalidArgumentError("--repeat must be at least 1");
  if (options.warmup < 0) return absl::InvalidArgumentError("--warmup must not be negative");

  LS_ASSIGN_OR_RETURN(const engine::LoadOptions load_options, LoadOptionsFor(options));
  auto loaded = Model::Load(options.model, load_options);
  if (!loaded.ok()) {
    return Annotate(loaded.status(), absl::StrCat("loading '", options.model, "': "));
  }
  const Model& model = **loaded;
  if (options.dump_plan) std::cout << model.plan_dump() << std::flush;

  std::vector<Value> inputs;
  if (options.data.empty()) {
    LS_ASSIGN_OR_RETURN(inputs, SynthesizeInputs(model));
  } else {
    LS_ASSIGN_OR_RETURN(inputs, ReadInputs(model, options.data));
  }
  LS_ASSIGN_OR_RETURN(const engine::RunOptions run_options, RunOptionsFor(options));
  LS_ASSIGN_OR_RETURN(const TimedRuns runs, TimeRuns(model, inputs, run_options, options));
  if (!options.output_dir.empty()) {
    LS_RETURN_IF_ERROR(WriteOutputs(model, runs.outputs, options.output_dir));
  }
  std::string deviation;
  if (load_options.precision != engine::LoadOptions::Precision::kFp32) {
    LS_ASSIGN_OR_RETURN(deviation, DeviationVsFp32(options, inputs, run_options, runs.outputs));
  }
  PrintReport(options, runs, deviation);

  if (options.data.empty()) return kExitOk;
  LS_ASSIGN_OR_RETURN(
      std::optional<std::string> mismatch,
      CompareWithReference(model, runs.outputs, options.data, /*require_all=*/false));
  if (mismatch.has_value()) {
    std::cerr << "looprun: '" << options.model << "': " << *mismatch << std::endl;
    return kExitMismatch;
  }
  return kExitOk;
}

}  // namespace

absl::StatusOr<std::vector<Value>> ReadInputs(const Model& model, const std::string& dir) {
  std::vector<Value> inputs;
  inputs.reserve(model.inputs().size());
  for (size_t k = 0; k < model.inputs().size(); ++k) {
    const engine::TensorSpec& spec = model.inputs()[k];
    const std::string path = InputPath(dir, k);
    if (spec.type.kind == ValueKind::kOptional && !FileExists(path)) {
      inputs.emplace_back();
      continue;
    }
    if (!FileExists(path)) {
      return absl::NotFoundError(
          absl::StrCat("'", path, "' not found (model input ", k, " '", spec.name, "')"));
    }
    LS_ASSIGN_OR_RETURN(Value value, ReadValueFile(path, spec.type));
    inputs.push_back(std::move(value));
  }
  return inputs;
}

absl::StatusOr<std::vector<Value>> SynthesizeInputs(const Model& model) {
  std::vector<Value> inputs;
  for (const engine::TensorSpec& spec : model.inputs()) {
    const engine::ValueType& type = spec.type;
    if (type.kind == ValueKind::kOptional) {
      inputs.emplace_back();
      continue;
    }
    if (type.kind == ValueKind::kSequence) {
      Value v;
      v.mutable_sequence();
      inputs.push_back(std::move(v));
      continue;
    }
    if (type.dtype == engine::DataType::kUndefined || !type.dims.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("input '", spec.name,
                                                     "' has no declared element type or rank (",
                                                     type.ToString(), "): pass --data"));
    }
    engine::Shape::Dims dims;
    for (int64_t d : *type.dims) dims.push_back(d < 0 ? 1 : d);
    LS_ASSIGN_OR_RETURN(engine::Shape shape,
                        engine::ValidateDims(dims, absl::StrCat("input '", spec.name, "'")));
    Tensor t(type.dtype, shape);
    if (t.ByteSize() > 0) std::memset(t.mutable_raw_data(), 0, t.ByteSize());
    inputs.emplace_back(std::move(t));
  }
  return inputs;
}

std::vector<Value> ViewInputs(const std::vector<Value>& inputs) {
  std::vector<Value> views(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].is_tensor()) {
      views[i] = Value(Tensor::ViewOf(inputs[i].tensor()));
    } else if (inputs[i].is_sequence()) {
      std::vector<Tensor>& elements = views[i].mutable_sequence();
      for (const Tensor& t : inputs[i].sequence()) elements.push_back(Tensor::ViewOf(t));
    }
  }
  return views;
}

absl::StatusOr<std::optional<std::string>> CompareWithReference(const Model& model,
                                                                const std::vector<Value>& outputs,
                                                                const std::string& dir,
                                                                bool require_all,
                                                                const Tolerance& tolerance) {
  if (require_all && FileExists(OutputPath(dir, outputs.size()))) {
    size_t files = outputs.size();
    while (FileExists(OutputPath(dir, files))) ++files;
    return std::optional<std::string>(
        absl::StrCat("the model has ", outputs.size(), " outputs, the reference has ", files));
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    const engine::TensorSpec& spec = model.outputs()[k];
    const std::string path = OutputPath(dir, k);
    if (!FileExists(path)) {
      if (!require_all) continue;
      return absl::NotFoundError(
          absl::StrCat("'", path, "' not found (model output ", k, " '", spec.name, "')"));
    }
    engine::ValueType file_type = spec.type;
    if (file_type.kind == ValueKind::kUnknown) {
      file_type.kind = outputs[k].is_sequence() ? ValueKind::kSequence : ValueKind::kTensor;
    }
    LS_ASSIGN_OR_RETURN(Value expected, ReadValueFile(path, file_type));
    if (std::optional<std::string> diff = CompareValues(expected, outputs[k], tolerance)) {
      return std::optional<std::string>(absl::StrCat("output ", k, " '", spec.name, "': ", *diff));
    }
  }
  return std::optional<std::string>();
}

int RunModelMain(const RunModelOptions& options) {
  try {
    absl::StatusOr<int> exit_status = RunModel(options);
    if (exit_status.ok()) return *exit_status;
    std::cerr << "looprun: " << exit_status.status().ToString() << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "looprun: '" << options.model << "': exception: " << e.what() << std::endl;
  }
  return kExitError;
}

}  // namespace loopserve::tools
