#include "client/loopctl.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <ostream>
#include <random>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "client/onnx_tensor.h"
#include "google/protobuf/text_format.h"
#include "protocol/bytes.h"
#include "protocol/datatype.h"

namespace loopserve::client {
namespace {

constexpr char kDefaultAddress[] = "127.0.0.1:8001";
constexpr char kDefaultHttpAddress[] = "127.0.0.1:8000";

// Parsed command line: --flag=value options (repeatable ones keep every value) and positionals.
struct CommandLine {
  std::map<std::string, std::vector<std::string>> flags;
  std::vector<std::string> positional;

  bool Has(const std::string& name) const { return flags.count(name) > 0; }
  // The last value of a flag, or `fallback`.
  std::string Get(const std::string& name, const std::string& fallback = "") const {
    auto it = flags.find(name);
    return it == flags.end() ? fallback : it->second.back();
  }
  std::vector<std::string> All(const std::string& name) const {
    auto it = flags.find(name);
    return it == flags.end() ? std::vector<std::string>{} : it->second;
  }
};

const char* const kKnownFlags[] = {
    "addr",         "protocol",       "input",       "output",
    "timeout_ms",   "model_version",  "data_dir",    "max_elements",
    "shape",        "concurrency",    "requests",    "warmup",
    "typed",        "help",           "duration",    "concurrency_range",
    "progress",     "stream",         "sequence_id", "sequence_start",
    "sequence_end", "sequence_length"};

absl::StatusOr<CommandLine> ParseCommandLine(const std::vector<std::string>& args) {
  CommandLine cl;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h") {
      cl.flags["help"].push_back("true");
      continue;
    }
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      cl.positional.push_back(arg);
      continue;
    }
    const size_t eq = arg.find('=');
    std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    std::string value = eq == std::string::npos ? "true" : arg.substr(eq + 1);
    if (std::find(std::begin(kKnownFlags), std::end(kKnownFlags), name) == std::end(kKnownFlags)) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    cl.flags[name].push_back(std::move(value));
  }
  return cl;
}

absl::StatusOr<int64_t> ParseInt(const std::string& flag, const std::string& text) {
  int64_t v;
  if (!absl::SimpleAtoi(text, &v)) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", text, " is not an integer"));
  }
  return v;
}

absl::StatusOr<std::vector<int64_t>> ParseDims(absl::string_view text) {
  std::vector<int64_t> dims;
  if (absl::StripAsciiWhitespace(text).empty()) return dims;  // scalar
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t d;
    if (!absl::SimpleAtoi(part, &d)) {
      return absl::InvalidArgumentError(absl::StrCat("bad dim '", part, "' in shape '", text, "'"));
    }
    dims.push_back(d);
  }
  return dims;
}

// Parses one element of numeric `datatype` (C++ type T) and appends its little-endian bytes.
template <typename T>
absl::Status AppendNumber(absl::string_view datatype, absl::string_view text, std::string* bytes) {
  T v{};
  bool ok = false;
  if constexpr (std::is_same_v<T, bool>) {
    ok = absl::SimpleAtob(text, &v);
  } else if constexpr (std::is_same_v<T, float>) {
    ok = absl::SimpleAtof(text, &v);
  } else if constexpr (std::is_same_v<T, double>) {
    ok = absl::SimpleAtod(text, &v);
  } else if constexpr (std::is_signed_v<T>) {
    int64_t wide = 0;
    ok = absl::SimpleAtoi(text, &wide) && wide >= std::numeric_limits<T>::min() &&
         wide <= std::numeric_limits<T>::max();
    v = static_cast<T>(wide);
  } else {
    uint64_t wide = 0;
    ok = absl::SimpleAtoi(text, &wide) && wide <= std::numeric_limits<T>::max();
    v = static_cast<T>(wide);
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not a valid ", datatype, " value"));
  }
  if constexpr (std::is_same_v<T, bool>) {
    bytes->push_back(v ? 1 : 0);
  } else {
    bytes->append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  return absl::OkStatus();
}

absl::Status AppendValue(absl::string_view datatype, absl::string_view text, std::string* bytes) {
  text = absl::StripAsciiWhitespace(text);
  const protocol::Datatype d = protocol::ParseDatatype(datatype);
  if (d == protocol::Datatype::kBytes) {
    // The element's text as given (after trimming), length-prefixed.
    protocol::AppendBytesElement(text, bytes);
    return absl::OkStatus();
  }
  absl::Status status =
      absl::InvalidArgumentError(absl::StrCat("datatype ", datatype, " cannot be given inline"));
  protocol::VisitNumeric(d, [&](auto tag) {
    status = AppendNumber<typename decltype(tag)::type>(datatype, text, bytes);
  });
  return status;
}

// Random contents for `datatype`/`shape`: floats uniform in [-1, 1), integers in [0, 8), bools
// fair coin flips. Small non-negative integers keep trip counts and token ids meaningful.
absl::StatusOr<Tensor> RandomTensor(const std::string& name, const std::string& datatype,
                                    const std::vector<int64_t>& shape, std::mt19937_64* rng) {
  absl::StatusOr<int64_t> n = ElementCount(shape);
  if (!n.ok()) return n.status();
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  std::uniform_int_distribution<int> small(0, 7);
  std::string text;
  for (int64_t i = 0; i < *n; ++i) {
    if (i > 0) text += ",";
    if (datatype == "FP32" || datatype == "FP64") {
      absl::StrAppend(&text, real(*rng));
    } else if (datatype == "BOOL") {
      text += small(*rng) % 2 ? "true" : "false";
    } else if (datatype == "BYTES") {
      absl::StrAppend(&text, "w", small(*rng));
    } else {
      absl::StrAppend(&text, small(*rng));
    }
  }
  return ParseTensorText(name, datatype, shape, text);
}

void PrintError(const absl::Status& status, std::ostream& err) {
  err << "error: " << absl::StatusCodeToString(status.code()) << ": " << status.message() << "\n";
}

std::string FormatShape(const google::protobuf::RepeatedField<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

int CmdBool(const absl::StatusOr<bool>& answer, const char* yes, const char* no, std::ostream& out,
            std::ostream& err) {
  if (!answer.ok()) {
    PrintError(answer.status(), err);
    return 1;
  }
  out << (*answer ? yes : no) << "\n";
  return *answer ? 0 : 1;
}

int CmdMetadata(Client& client, const std::string& model, const CommandLine& cl, std::ostream& out,
                std::ostream& err) {
  auto md = client.ModelMetadata(model, cl.Get("model_version"));
  if (!md.ok()) {
    PrintError(md.status(), err);
    return 1;
  }
  out << "model: " << md->name() << "\n"
      << "versions: " << absl::StrJoin(md->versions(), ",") << "\n"
      << "platform: " << md->platform() << "\n"
      << "inputs:\n";
  for (const auto& t : md->inputs()) {
    out << "  " << t.name() << " " << t.datatype() << " " << FormatShape(t.shape()) << "\n";
  }
  out << "outputs:\n";
  for (const auto& t : md->outputs()) {
    out << "  " << t.name() << " " << t.datatype() << " " << FormatShape(t.shape()) << "\n";
  }
  return 0;
}

// Prints the version's complete config in protobuf text format: a config.pbtxt that loads as is.
int CmdConfig(Client& client, const std::string& model, const CommandLine& cl, std::ostream& out,
              std::ostream& err) {
  absl::StatusOr<inference::ModelConfig> config =
      client.ModelConfig(model, cl.Get("model_version"));
  if (!config.ok()) {
    PrintError(config.status(), err);
    return 1;
  }
  std::string text;
  google::protobuf::TextFormat::Printer printer;
  printer.SetUseShortRepeatedPrimitives(true);  // dims: [-1, 4], as config.pbtxt files write it
  if (!printer.PrintToString(*config, &text)) {
    PrintError(absl::InternalError("cannot print the config as text"), err);
    return 1;
  }
  out << text;
  return 0;
}

// Collects the inputs given by --data_dir and --input (the latter override same-named ones).
absl::StatusOr<std::vector<Tensor>> CollectInputs(const CommandLine& cl) {
  std::vector<Tensor> inputs;
  if (cl.Has("data_dir")) {
    auto from_dir = ReadOnnxTensorDir(cl.Get("data_dir"), "input");
    if (!from_dir.ok()) return from_dir.status();
    inputs = *std::move(from_dir);
  }
  for (const std::string& spec : cl.All("input")) {
    auto tensor = ParseInputSpec(spec);
    if (!tensor.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--input=", spec, ": ", tensor.status().message()));
    }
    auto same = std::find_if(inputs.begin(), inputs.end(),
                             [&](const Tensor& t) { return t.name == tensor->name; });
    if (same != inputs.end()) {
      *same = *std::move(tensor);
    } else {
      inputs.push_back(*std::move(tensor));
    }
  }
  return inputs;
}

absl::StatusOr<InferOptions> CommonOptions(const CommandLine& cl) {
  InferOptions options;
  options.model_version = cl.Get("model_version");
  if (cl.Has("timeout_ms")) {
    auto ms = ParseInt("timeout_ms", cl.Get("timeout_ms"));
    if (!ms.ok()) return ms.status();
    options.timeout = absl::Milliseconds(*ms);
  }
  if (cl.Has("typed")) {
    bool typed;
    if (!absl::SimpleAtob(cl.Get("typed"), &typed)) {
      return absl::InvalidArgumentError("--typed takes true or false");
    }
    options.contents = typed ? ContentsMode::kTyped : ContentsMode::kRaw;
  }
  if (cl.Has("sequence_id")) {
    const std::string id = cl.Get("sequence_id");
    if (!absl::SimpleAtoi(id, &options.sequence_id) || options.sequence_id == 0) {
      options.sequence_id = 0;
      options.sequence_string_id = id;  // Triton's string ids
    }
    if (id.empty()) return absl::InvalidArgumentError("--sequence_id needs a value");
  }
  for (auto [flag, target] :
       {std::pair<const char*, bool*>{"sequence_start", &options.sequence_start},
        {"sequence_end", &options.sequence_end}}) {
    if (!cl.Has(flag)) continue;
    if (!absl::SimpleAtob(cl.Get(flag), target)) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, " takes true or false"));
    }
    if (!cl.Has("sequence_id")) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, " needs --sequence_id"));
    }
  }
  return options;
}

int CmdInfer(Client& client, const std::string& model, const CommandLine& cl, std::ostream& out,
             std::ostream& err) {
  auto options = CommonOptions(cl);
  if (!options.ok()) {
    PrintError(options.status(), err);
    return 2;
  }
  auto inputs = CollectInputs(cl);
  if (!inputs.ok()) {
    PrintError(inputs.status(), err);
    return 2;
  }
  int64_t max_elements = 32;
  if (cl.Has("max_elements")) {
    auto v = ParseInt("max_elements", cl.Get("max_elements"));
    if (!v.ok()) {
      PrintError(v.status(), err);
      return 2;
    }
    max_elements = *v;
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<InferResult> result;
  absl::Duration first_slice = absl::InfiniteDuration();
  int64_t slices = 0;
  if (cl.Has("stream") && cl.Get("stream") != "false") {
    // Single-element slices (a token per iteration) go on one line per output as they come;
    // larger ones get a line per iteration.
    std::string line_output;  // the output whose elements are being printed on one line
    result = client.StreamInfer(model, *inputs, cl.All("output"), *options,
                                [&](int64_t iteration, const std::vector<Tensor>& outputs) {
                                  if (slices++ == 0) first_slice = absl::Now() - start;
                                  const bool one_line =
                                      outputs.size() == 1 &&
                                      ElementCount(outputs[0].shape).value_or(0) == 1;
                                  if (one_line) {
                                    if (line_output != outputs[0].name) {
                                      if (!line_output.empty()) out << "\n";
                                      line_output = outputs[0].name;
                                      out << line_output << ":";
                                    }
                                    out << " " << FormatElement(outputs[0], 0);
                                  } else {
                                    if (!line_output.empty()) out << "\n";
                                    line_output.clear();
                                    out << "iteration " << iteration << ":";
                                    for (const Tensor& t : outputs)
                                      out << " " << FormatTensor(t, max_elements);
                                    out << "\n";
                                  }
                                  out.flush();
                                });
    if (!line_output.empty()) out << "\n";
  } else {
    result = client.Infer(model, *inputs, cl.All("output"), *options);
  }
  const absl::Duration elapsed = absl::Now() - start;
  if (!result.ok()) {
    PrintError(result.status(), err);
    return 1;
  }
  out << "model: " << result->model_name << " version " << result->model_version << " ("
      << absl::StrFormat("%.3f", absl::ToDoubleMilliseconds(elapsed)) << " ms";
  if (slices > 0) {
    out << absl::StrFormat(", %d slices, first after %.3f ms", slices,
                           absl::ToDoubleMilliseconds(first_slice));
  }
  out << ")\n";
  for (const Tensor& t : result->outputs) out << FormatTensor(t, max_elements) << "\n";
  return 0;
}

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * sorted.size()));
  return sorted[std::min(sorted.size(), std::max<size_t>(rank, 1)) - 1];
}

// What `loopctl perf` measures at one concurrency level.
struct PerfLevel {
  int64_t concurrency = 1;
  int64_t requests = 0;           // measured requests (the stop condition without duration)
  absl::Duration duration;        // > 0: run for this long instead
  absl::Duration progress_every;  // > 0: redraw a progress line on `err` this often
  // > 0: each client drives sequences of this many steps (sequence_start on the first,
  // sequence_end on the last; ids from `next_sequence_id`), ending the one it holds at the end.
  int64_t sequence_length = 0;
  std::atomic<uint64_t>* next_sequence_id = nullptr;
};

struct PerfResult {
  std::vector<double> latencies_us;  // sorted
  double seconds = 0;
  double Throughput() const { return seconds > 0 ? latencies_us.size() / seconds : 0; }
};

// Runs `level.concurrency` closed-loop clients (each sends its next request when the previous
// one is answered, like perf_analyzer's concurrency mode) until `requests` are done or
// `duration` has passed. Stops at the first error and returns it.
absl::StatusOr<PerfResult> RunPerfLevel(Client& client, const std::string& model,
                                        const std::vector<Tensor>& inputs,
                                        const InferOptions& options, const PerfLevel& level,
                                        std::ostream& err) {
  const bool timed = level.duration > absl::ZeroDuration();
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  std::atomic<bool> stop{false};
  absl::Mutex mu;
  absl::Status first_error;
  std::vector<std::vector<double>> latencies(level.concurrency);
  const absl::Time start = absl::Now();
  const absl::Time end = timed ? start + level.duration : absl::InfiniteFuture();
  std::vector<std::thread> threads;
  for (int64_t w = 0; w < level.concurrency; ++w) {
    threads.emplace_back([&, w] {
      InferOptions step = options;
      int64_t k = 0;  // steps of this client's sequences
      auto next_step = [&] {
        if (level.sequence_length <= 0) return;
        const int64_t at = k++ % level.sequence_length;
        if (at == 0) step.sequence_id = level.next_sequence_id->fetch_add(1);
        step.sequence_start = at == 0;
        step.sequence_end = at == level.sequence_length - 1;
      };
      while (!stop.load() && (timed ? absl::Now() < end : next.fetch_add(1) < level.requests)) {
        next_step();
        const absl::Time t0 = absl::Now();
        auto r = client.Infer(model, inputs, {}, step);
        if (!r.ok()) {
          absl::MutexLock lock(&mu);
          if (first_error.ok()) first_error = r.status();
          stop.store(true);
          return;
        }
        latencies[w].push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
        done.fetch_add(1);
      }
      // A sequence left open would hold its server slot until it expires: end it (unmeasured).
      if (level.sequence_length > 0 && k % level.sequence_length != 0 && !stop.load()) {
        step.sequence_start = false;
        step.sequence_end = true;
        (void)client.Infer(model, inputs, {}, step);
      }
    });
  }
  // The progress line: only for runs long enough to need one, redrawn in place with '\r'.
  absl::Notification finished;
  std::thread progress;
  if (level.progress_every > absl::ZeroDuration()) {
    progress = std::thread([&] {
      bool drawn = false;
      while (!finished.WaitForNotificationWithTimeout(level.progress_every)) {
        const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
        const int64_t n = done.load();
        std::string goal = timed ? absl::StrFormat("%.0f s", absl::ToDoubleSeconds(level.duration))
                                 : absl::StrCat(level.requests, " requests");
        err << absl::StrFormat(
                   "\r\033[Kperf: concurrency %d  %d requests  %.1f s of %s  %.1f infer/s",
                   level.concurrency, n, elapsed, goal, elapsed > 0 ? n / elapsed : 0)
            << std::flush;
        drawn = true;
      }
      if (drawn) err << "\r\033[K" << std::flush;
    });
  }
  for (std::thread& t : threads) t.join();
  PerfResult result;
  result.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  finished.Notify();
  if (progress.joinable()) progress.join();
  if (!first_error.ok()) return first_error;
  for (const auto& l : latencies) {
    result.latencies_us.insert(result.latencies_us.end(), l.begin(), l.end());
  }
  std::sort(result.latencies_us.begin(), result.latencies_us.end());
  if (result.latencies_us.empty()) {
    return absl::DeadlineExceededError("no request finished within --duration");
  }
  return result;
}

void PrintPerfResult(const std::string& model, int64_t concurrency, const PerfResult& r,
                     std::ostream& out) {
  const std::vector<double>& all = r.latencies_us;
  double sum = 0;
  for (double v : all) sum += v;
  out << absl::StrFormat("model %s: %d requests, concurrency %d, %.3f s\n", model, all.size(),
                         concurrency, r.seconds)
      << absl::StrFormat("throughput: %.1f infer/s\n", r.Throughput())
      << absl::StrFormat("latency us: p50 %.1f  p90 %.1f  p99 %.1f  max %.1f  mean %.1f\n",
                         Percentile(all, 50), Percentile(all, 90), Percentile(all, 99), all.back(),
                         sum / all.size())
      << absl::StrFormat(
             "{\"model\":\"%s\",\"requests\":%d,\"concurrency\":%d,\"seconds\":%.3f,"
             "\"throughput\":%.3f,\"p50_us\":%.1f,\"p90_us\":%.1f,\"p99_us\":%.1f,"
             "\"max_us\":%.1f,\"mean_us\":%.1f}\n",
             model, all.size(), concurrency, r.seconds, r.Throughput(), Percentile(all, 50),
             Percentile(all, 90), Percentile(all, 99), all.back(), sum / all.size());
}

// Parses --concurrency_range=START:END[:STEP] (perf_analyzer's --concurrency-range); a STEP
// written xK multiplies by K (1:32:x2 = 1, 2, 4, 8, 16, 32).
absl::StatusOr<std::vector<int64_t>> ParseConcurrencyRange(const std::string& text) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  int64_t start = 0, end = 0, step = 1;
  const bool geometric = parts.size() == 3 && absl::StartsWith(parts[2], "x");
  if ((parts.size() != 2 && parts.size() != 3) || !absl::SimpleAtoi(parts[0], &start) ||
      !absl::SimpleAtoi(parts[1], &end) ||
      (parts.size() == 3 && !absl::SimpleAtoi(geometric ? parts[2].substr(1) : parts[2], &step)) ||
      start < 1 || end < start || step < (geometric ? 2 : 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--concurrency_range=", text,
                     ": expected START:END[:STEP] with 1 <= START <= END, STEP >= 1 (or xK with "
                     "K >= 2: multiply by K)"));
  }
  std::vector<int64_t> levels;
  for (int64_t c = start; c <= end && levels.size() < 256; c = geometric ? c * step : c + step) {
    levels.push_back(c);
  }
  return levels;
}

// perf's settings, from its flags.
struct PerfPlan {
  PerfLevel level;                                     // what each concurrency level runs
  std::vector<int64_t> levels;                         // the concurrencies, in order
  int64_t warmup = 10;                                 // requests before measuring
  std::map<std::string, std::vector<int64_t>> shapes;  // --shape=NAME:d0,d1,...
};

// --concurrency, --requests, --warmup.
absl::Status ParsePerfCounts(const CommandLine& cl, int64_t* concurrency, PerfPlan& plan) {
  for (auto [flag, target] : {std::pair<const char*, int64_t*>{"concurrency", concurrency},
                              {"requests", &plan.level.requests},
                              {"warmup", &plan.warmup}}) {
    if (!cl.Has(flag)) continue;
    auto v = ParseInt(flag, cl.Get(flag));
    if (!v.ok() || *v < (std::string(flag) == "warmup" ? 0 : 1)) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, " must be a positive integer"));
    }
    *target = *v;
  }
  return absl::OkStatus();
}

// --sequence_length: its sequences are numbered with `next_sequence_id`.
absl::Status ParsePerfSequences(const CommandLine& cl, const InferOptions& options,
                                std::atomic<uint64_t>* next_sequence_id, PerfPlan& plan) {
  if (!cl.Has("sequence_length")) return absl::OkStatus();
  auto length = ParseInt("sequence_length", cl.Get("sequence_length"));
  if (!length.ok() || *length < 1) {
    return absl::InvalidArgumentError("--sequence_length must be a positive integer");
  }
  if (!options.sequence_string_id.empty()) {
    // Each client's sequences are numbered from it: one string id would make them all one.
    return absl::InvalidArgumentError(
        "--sequence_length numbers its sequences from --sequence_id: give a positive integer");
  }
  plan.level.sequence_length = *length;
  plan.level.next_sequence_id = next_sequence_id;
  return absl::OkStatus();
}

// perf's flags, checked in this order; InvalidArgument naming the flag.
absl::StatusOr<PerfPlan> ParsePerfFlags(const CommandLine& cl, const InferOptions& options,
                                        std::atomic<uint64_t>* next_sequence_id) {
  PerfPlan plan;
  plan.level.requests = 100;
  int64_t concurrency = 1;
  absl::Status status = ParsePerfCounts(cl, &concurrency, plan);
  if (status.ok()) status = ParsePerfSequences(cl, options, next_sequence_id, plan);
  if (!status.ok()) return status;
  if (cl.Has("duration")) {
    double seconds = 0;
    if (cl.Has("requests") || !absl::SimpleAtod(cl.Get("duration"), &seconds) || !(seconds > 0)) {
      return absl::InvalidArgumentError(cl.Has("requests")
                                            ? "--duration and --requests exclude each other"
                                            : "--duration must be a positive number of seconds");
    }
    plan.level.duration = absl::Seconds(seconds);
  }
  plan.levels = {concurrency};
  if (cl.Has("concurrency_range")) {
    if (cl.Has("concurrency")) {
      return absl::InvalidArgumentError("--concurrency and --concurrency_range exclude each other");
    }
    auto range = ParseConcurrencyRange(cl.Get("concurrency_range"));
    if (!range.ok()) return range.status();
    plan.levels = *std::move(range);
  }
  // Progress on a terminal only (never into pipes, files or tests), by default after 1 s.
  std::string progress = cl.Get("progress", "auto");
  if (progress != "auto" && progress != "true" && progress != "false") {
    return absl::InvalidArgumentError("--progress takes auto, true or false");
  }
  if (progress == "true" || (progress == "auto" && isatty(STDERR_FILENO))) {
    plan.level.progress_every = absl::Seconds(1);
  }
  for (const std::string& spec : cl.All("shape")) {
    std::vector<std::string> parts = absl::StrSplit(spec, absl::MaxSplits(':', 1));
    auto dims = parts.size() == 2 ? ParseDims(parts[1])
                                  : absl::StatusOr<std::vector<int64_t>>(
                                        absl::InvalidArgumentError("expected NAME:d0,d1,..."));
    if (!dims.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--shape=", spec, ": ", dims.status().message()));
    }
    plan.shapes[parts[0]] = *dims;
  }
  return plan;
}

// The request perf sends: the inputs given on the command line, random values for the others
// (their variable dims from --shape, else 1, with a note on `err`).
absl::StatusOr<std::vector<Tensor>> PerfInputs(const inference::ModelMetadataResponse& md,
                                               const std::vector<Tensor>& given,
                                               const PerfPlan& plan, std::ostream& err) {
  std::mt19937_64 rng(42);
  std::vector<Tensor> inputs;
  for (const auto& spec : md.inputs()) {
    auto fixed = std::find_if(given.begin(), given.end(),
                              [&](const Tensor& t) { return t.name == spec.name(); });
    if (fixed != given.end()) {
      inputs.push_back(*fixed);
      continue;
    }
    std::vector<int64_t> shape(spec.shape().begin(), spec.shape().end());
    if (auto it = plan.shapes.find(spec.name()); it != plan.shapes.end()) {
      if (it->second.size() != shape.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--shape for '", spec.name(), "' has ", it->second.size(),
                         " dims; the model declares ", FormatShape(spec.shape())));
      }
      shape = it->second;
    }
    for (int64_t& d : shape) {
      if (d < 0) {
        err << "note: input '" << spec.name() << "' " << FormatShape(spec.shape())
            << ": variable dim set to 1 (use --shape=" << spec.name() << ":...)\n";
        d = 1;
      }
    }
    auto tensor = RandomTensor(spec.name(), spec.datatype(), shape, &rng);
    if (!tensor.ok()) return tensor.status();
    inputs.push_back(*std::move(tensor));
  }
  return inputs;
}

// The warm-up before measuring: `plan.warmup` requests, or as many sequences of their own.
absl::Status PerfWarmup(Client& client, const std::string& model, const std::vector<Tensor>& inputs,
                        const InferOptions& options, const PerfPlan& plan, std::ostream& err) {
  if (plan.level.sequence_length > 0 && plan.warmup > 0) {
    PerfLevel warm = plan.level;
    warm.requests = plan.warmup;
    warm.progress_every = absl::ZeroDuration();
    warm.duration = absl::ZeroDuration();
    return RunPerfLevel(client, model, inputs, options, warm, err).status();
  }
  for (int64_t i = 0; i < plan.warmup; ++i) {
    auto r = client.Infer(model, inputs, {}, options);
    if (!r.ok()) return r.status();
  }
  return absl::OkStatus();
}

int CmdPerf(Client& client, const std::string& model, const CommandLine& cl, std::ostream& out,
            std::ostream& err) {
  auto options = CommonOptions(cl);
  if (!options.ok()) {
    PrintError(options.status(), err);
    return 2;
  }
  auto given = CollectInputs(cl);
  if (!given.ok()) {
    PrintError(given.status(), err);
    return 2;
  }
  std::atomic<uint64_t> next_sequence_id{options->sequence_id != 0 ? options->sequence_id : 1};
  auto plan = ParsePerfFlags(cl, *options, &next_sequence_id);
  if (!plan.ok()) {
    PrintError(plan.status(), err);
    return 2;
  }
  auto md = client.ModelMetadata(model, options->model_version);
  if (!md.ok()) {
    PrintError(md.status(), err);
    return 1;
  }
  auto inputs = PerfInputs(*md, *given, *plan, err);
  if (!inputs.ok()) {
    PrintError(inputs.status(), err);
    return 2;
  }
  if (absl::Status warmed = PerfWarmup(client, model, *inputs, *options, *plan, err);
      !warmed.ok()) {
    PrintError(warmed, err);
    return 1;
  }

  std::vector<std::pair<int64_t, PerfResult>> results;
  for (int64_t c : plan->levels) {
    plan->level.concurrency = c;
    auto result = RunPerfLevel(client, model, *inputs, *options, plan->level, err);
    if (!result.ok()) {
      PrintError(result.status(), err);
      return 1;
    }
    PrintPerfResult(model, c, *result, out);
    results.emplace_back(c, *std::move(result));
  }
  if (plan->levels.size() > 1) {
    out << "\nconcurrency   infer/s    p50 us    p90 us    p99 us\n";
    for (const auto& [c, r] : results) {
      out << absl::StrFormat("%11d %9.1f %9.1f %9.1f %9.1f\n", c, r.Throughput(),
                             Percentile(r.latencies_us, 50), Percentile(r.latencies_us, 90),
                             Percentile(r.latencies_us, 99));
    }
  }
  return 0;
}

}  // namespace

std::string LoopctlUsage() {
  return R"(loopctl: command-line client for loopserve (Open Inference Protocol / KServe v2, gRPC or
HTTP/REST).

Usage: loopctl [--protocol=grpc|http] [--addr=HOST:PORT] COMMAND [ARGS] [FLAGS]

Commands:
  live                 is the server live?    (exit 0 yes, 1 no)
  ready                is the server ready?   (exit 0 yes, 1 no)
  metadata MODEL       model name, versions, platform, input/output names, datatypes, shapes
  config MODEL         the complete model configuration the server runs the model with
                       (Triton's ModelConfig, auto-completed), printed as a config.pbtxt
  infer MODEL          run one request and print every output
  perf MODEL           load test with random inputs; prints throughput and p50/p90/p99 latency

Flags (always --flag=value):
  --protocol=P         grpc (default) or http: KServe v2 REST, tensors as Triton's binary
                       tensor data (with --typed=true: as JSON data, inputs and outputs)
  --addr=HOST:PORT     server address (default 127.0.0.1:8001 for grpc, 127.0.0.1:8000 for http)
  --model_version=N    model version (default: the server's choice, the latest)
  --timeout_ms=MS      deadline for each request (default: none)
  --input=SPEC         an input tensor (repeat for each input):
                         NAME:DTYPE:SHAPE:VALUES  inline. DTYPE is an OIP datatype (FP32, FP64,
                           INT8, INT16, INT32, INT64, UINT8, UINT16, UINT32, UINT64, BOOL);
                           SHAPE is comma-separated dims, empty for a scalar; VALUES are
                           comma-separated, row-major, or a single value that fills the tensor.
                           BOOL values: true/false/1/0.
                         NAME:FILE.pb             an ONNX TensorProto file (empty NAME: the name
                           stored in the file)
  --data_dir=DIR       read inputs from DIR/input_0.pb, input_1.pb, ... (ONNX TensorProtos named
                       after the model inputs); --input overrides single ones
  --output=NAME        infer: request only this output (repeat; default: all)
  --max_elements=N     infer: print at most N values per output (default 32)
  --stream             infer: ModelStreamInfer with stream_iterations: print each iteration's
                       scan-output slices as they arrive (single values on one line), then the
                       final outputs (gRPC only)
  --typed=true         send typed contents instead of raw_input_contents
  --shape=NAME:d0,...  perf: dims for an input with variable dims (default: each -1 becomes 1)
  --concurrency=N      perf: concurrent clients (default 1)
  --requests=R         perf: measured requests in total, per concurrency level (default 100)
  --duration=S         perf: measure for S seconds per level instead of --requests
  --concurrency_range=START:END[:STEP]
                       perf: sweep concurrency START, START+STEP, ... END (like perf_analyzer's
                       --concurrency-range; STEP xK multiplies: 1:32:x2 = 1,2,4,...,32); one
                       result per level, then a summary table
  --warmup=W           perf: unmeasured requests first (default 10)
  --sequence_id=ID     infer: Triton's sequence_id (an integer, or a string id); perf: the first
                       sequence id (default 1)
  --sequence_start     infer: the request starts its sequence (sequence_start: true)
  --sequence_end       infer: the request ends its sequence (sequence_end: true)
  --sequence_length=L  perf: each concurrent client drives sequences of L steps (a model with
                       sequence_batching): --concurrency=N keeps N sequences live
  --progress=auto      perf: progress line on stderr every second: auto (when stderr is a
                       terminal), true, false
perf fills every input not given by --input/--data_dir with random values: floats uniform in
[-1, 1), integers in [0, 8) (so trip counts and token ids stay small), random bools.

Errors go to stderr as "error: <GRPC_CODE>: <message>"; exit status 1 when the server answered
with an error, 2 for bad usage.

Examples:
  loopctl --addr=127.0.0.1:8001 metadata rnn
  loopctl --protocol=http infer rnn --input=M:INT64::6 --input=h0:FP32:2,4:0.5
  loopctl config counter > config.pbtxt
  loopctl infer counter --input=M:INT64::5 --input=start:INT64:1:10
  loopctl infer rnn --input=M:INT64::6 --input=h0:FP32:2,4:0.5 --output=h_final
  loopctl infer rnn --data_dir=deploy/models/rnn/expected
  loopctl infer endless --input=x:INT64:1:0 --timeout_ms=1000
  loopctl infer greedy_decoder --input=start_token:INT64:1:4 --input=max_len:INT64::12 --stream
  loopctl perf rnn --input=M:INT64::16 --shape=h0:8,4 --concurrency=4 --requests=1000
  loopctl perf rnn --input=M:INT64::16 --shape=h0:8,4 --concurrency_range=1:4 --duration=5
)";
}

absl::StatusOr<Tensor> ParseTensorText(absl::string_view name, absl::string_view datatype,
                                       const std::vector<int64_t>& shape,
                                       absl::string_view values) {
  auto n = ElementCount(shape);
  if (!n.ok()) return n.status();
  std::vector<absl::string_view> parts;
  if (!absl::StripAsciiWhitespace(values).empty()) parts = absl::StrSplit(values, ',');
  if (parts.size() != static_cast<size_t>(*n) && parts.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("shape [", absl::StrJoin(shape, ","), "] needs ",
                                                   *n, " values (or one to fill), got ",
                                                   parts.size()));
  }
  Tensor t;
  t.name = std::string(name);
  t.datatype = std::string(datatype);
  t.shape = shape;
  if (!IsDataType(datatype)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown datatype '", datatype, "'"));
  }
  for (int64_t i = 0; i < *n; ++i) {
    absl::Status s = AppendValue(datatype, parts.size() == 1 ? parts[0] : parts[i], &t.bytes);
    if (!s.ok()) return s;
  }
  return t;
}

absl::StatusOr<Tensor> ParseInputSpec(absl::string_view spec) {
  std::vector<absl::string_view> parts = absl::StrSplit(spec, absl::MaxSplits(':', 3));
  if (parts.size() < 2) {
    return absl::InvalidArgumentError("expected NAME:DTYPE:SHAPE:VALUES or NAME:FILE.pb");
  }
  const std::string datatype = absl::AsciiStrToUpper(parts[1]);
  if (parts.size() == 4 && IsDataType(datatype)) {
    auto dims = ParseDims(parts[2]);
    if (!dims.ok()) return dims.status();
    return ParseTensorText(parts[0], datatype, *dims, parts[3]);
  }
  // NAME:PATH (the path may itself contain ':').
  const size_t colon = spec.find(':');
  auto tensor = ReadOnnxTensorFile(std::string(spec.substr(colon + 1)));
  if (!tensor.ok() && parts.size() == 4 && absl::IsNotFound(tensor.status())) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", parts[1], "' is not a datatype (FP32, INT64, ", "BOOL, ...) and '",
                     spec.substr(colon + 1), "' is not a file"));
  }
  if (!tensor.ok()) return tensor.status();
  if (colon > 0) tensor->name = std::string(spec.substr(0, colon));
  return tensor;
}

int RunLoopctl(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  auto cl = ParseCommandLine(args);
  if (!cl.ok()) {
    PrintError(cl.status(), err);
    return 2;
  }
  if (cl->Has("help")) {
    out << LoopctlUsage();
    return 0;
  }
  if (cl->positional.empty()) {
    err << LoopctlUsage();
    return 2;
  }
  const std::string& command = cl->positional[0];
  const bool needs_model =
      command == "metadata" || command == "config" || command == "infer" || command == "perf";
  const bool known = needs_model || command == "live" || command == "ready";
  if (!known || cl->positional.size() != (needs_model ? 2u : 1u)) {
    PrintError(absl::InvalidArgumentError(
                   known ? absl::StrCat("'", command, "' takes ", needs_model ? "one MODEL" : "no",
                                        " argument", needs_model ? "" : "s")
                         : absl::StrCat("unknown command '", command, "' (see --help)")),
               err);
    return 2;
  }
  auto protocol = ParseProtocol(cl->Get("protocol", "grpc"));
  if (!protocol.ok()) {
    PrintError(protocol.status(), err);
    return 2;
  }
  auto client = Client::Create(
      cl->Get("addr", *protocol == Protocol::kHttp ? kDefaultHttpAddress : kDefaultAddress),
      *protocol);
  if (!client.ok()) {
    PrintError(client.status(), err);
    return 2;
  }
  Client& c = **client;
  if (command == "live") return CmdBool(c.ServerLive(), "live", "not live", out, err);
  if (command == "ready") return CmdBool(c.ServerReady(), "ready", "not ready", out, err);
  const std::string& model = cl->positional[1];
  if (command == "metadata") return CmdMetadata(c, model, *cl, out, err);
  if (command == "config") return CmdConfig(c, model, *cl, out, err);
  if (command == "infer") return CmdInfer(c, model, *cl, out, err);
  return CmdPerf(c, model, *cl, out, err);
}

}  // namespace loopserve::client
