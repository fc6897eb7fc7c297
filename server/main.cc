// loopserve: the KServe v2 / Open Inference Protocol server (gRPC and HTTP/REST) for Loop models.
//
//   loopserve --model_repository=DIR [--grpc_port=8001] [--http_port=8000] [--metrics_port=8002]
//   loopserve --config_path=config.json ...          (OpenVINO Model Server's model list)
//
// Once the repository is loaded and the ports are bound it prints exactly these lines to stdout
// (flushed; integration tests parse them; <address> is --address as given):
//   loopserve: grpc listening on <address>:<port>
//   loopserve: http listening on <address>:<port>
//   loopserve: metrics listening on <address>:<port>
// or, with --http_port=-1 / --metrics_port=-1, "loopserve: http disabled" / "loopserve: metrics
// disabled" instead. Logs go to
// stderr, one line per event. It serves until SIGTERM or SIGINT, then reports NOT_SERVING (still
// serving new requests for --drain_delay_seconds), answers new requests UNAVAILABLE, lets requests
// in flight finish (up to --exit_timeout_seconds), cancels the rest and exits 0 -- at the latest
// --drain_delay_seconds + --exit_timeout_seconds + 1 s after the signal, whatever the models are
// doing (a watchdog ends the process if the orderly shutdown has not by then).
// Startup errors exit 1. A SIGTERM/SIGINT during start-up (model loading, warm-up) stops it: the
// model loading stops (a warm-up run in progress is cancelled), nothing is served, and the process
// exits 0 within the same bound; one that arrives before the handlers are installed (even across
// the OpenMP re-exec) is held blocked until they are, then handled the same way.

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "server/observability/logging.h"
#include "server/observability/otlp_exporter.h"
#include "server/observability/tracer.h"
#include "server/server.h"

ABSL_FLAG(std::string, model_repository, "",
          "Model repository root, laid out as for Triton: <root>/<model>/<version>/model.onnx (or "
          "model.xml + model.bin), optional <root>/<model>/config.pbtxt (Triton's ModelConfig)");
ABSL_FLAG(std::string, config_path, "",
          "Instead of --model_repository: an OpenVINO Model Server config.json; serves the models "
          "of its model_config_list from their base_path (relative paths start at the file's "
          "folder); poll mode picks up changes to the file");
ABSL_FLAG(bool, disable_auto_complete_config, false,
          "As Triton's --disable-auto-complete-config: every model needs a config.pbtxt naming "
          "its platform and declaring every input and output (by default what a config leaves "
          "out is completed from the model)");
ABSL_FLAG(std::string, address, "0.0.0.0", "Address to bind the gRPC, HTTP and metrics ports on");
ABSL_FLAG(int, grpc_port, 8001, "gRPC port; 0 picks a free port");
ABSL_FLAG(int, http_port, 8000,
          "KServe v2 HTTP/REST port (JSON and Triton's binary tensor extension); 0 picks a free "
          "port, -1 disables");
ABSL_FLAG(int, http_threads, 2,
          "HTTP event threads; each serves many keep-alive connections, none blocks on a slow "
          "client");
ABSL_FLAG(int, metrics_port, 8002, "Prometheus /metrics port; 0 picks a free port, -1 disables");
ABSL_FLAG(int, workers, 2, "Worker threads running inference");
ABSL_FLAG(int, intra_op_threads, 0,
          "oneDNN threads each worker may use; 0 = cores / workers (workers x threads <= cores)");
ABSL_FLAG(std::string, loop_threads, "adaptive",
          "How a Loop's iterations use the intra-op threads when there are more than one: "
          "adaptive (time blocks of iterations on the team, on one thread and on one thread with "
          "products split over loopserve's own spinning team, run the fastest), intra_op (always "
          "the OpenMP team) or one (always one thread plus the spinning team); a model's "
          "config.pbtxt may set "
          "its own (parameters key loop_threads)");
ABSL_FLAG(std::string, precision, "fp32",
          "Precision of the products of every model: fp32 or bf16 (MatMul/Gemm products with "
          "constant weights in bfloat16 with float32 accumulation; refused at load on a CPU "
          "without AVX512_BF16 or AMX unless --force_precision); a model's config.pbtxt may set "
          "its own (parameters key precision)");
ABSL_FLAG(bool, force_precision, false,
          "Load bf16 models on a CPU without native bf16 too (oneDNN emulates it, slower than "
          "fp32)");
ABSL_FLAG(int, max_queue_size, 64,
          "Requests that may wait for a worker; more are rejected with RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, max_loop_iterations, 0,
          "Cap on the iterations of any single Loop execution (0 = unlimited); a model's "
          "config.pbtxt may set its own (parameters key max_loop_iterations)");
ABSL_FLAG(int64_t, max_output_bytes, 0,
          "Cap on the output bytes of one request: each Loop scan output as it grows and the sum "
          "of the final outputs (RESOURCE_EXHAUSTED beyond it); 0 = --max_message_bytes; a "
          "model's config.pbtxt may set its own (parameters key max_output_bytes)");
ABSL_FLAG(int64_t, max_request_memory_bytes, 0,
          "Cap on the tensor bytes one request may hold at once (carried values, intermediates, "
          "scan outputs; RESOURCE_EXHAUSTED before it is passed), and on a model's constants at "
          "load; 0 = the memory the process may use (cgroup limit or RAM) / (2 x --workers); a "
          "model's config.pbtxt may set its own (parameters key max_request_memory_bytes)");
ABSL_FLAG(int64_t, max_model_file_bytes, 0,
          "Largest model file loaded (model.onnx, model.xml, model.bin each), checked before it "
          "is read; 0 = 2 GiB");
ABSL_FLAG(int, inline_run_limit_us, 1000,
          "Requests to a model version whose recent runs averaged under this many microseconds "
          "run on the gRPC thread when a worker slot is free (saves two thread hand-offs); 0 "
          "disables");
ABSL_FLAG(int, max_message_bytes, 1 << 30,
          "Largest gRPC message received or sent, and largest HTTP request body (413 beyond it), "
          "in bytes");
ABSL_FLAG(int, exit_timeout_seconds, 30,
          "On SIGTERM/SIGINT, how long to wait for calls in flight before cancelling them; the "
          "process exits at most 1 s later");
ABSL_FLAG(int, drain_delay_seconds, 0,
          "On SIGTERM/SIGINT, first report not ready (grpc.health.v1 NOT_SERVING, "
          "/v2/health/ready 503) for this many seconds while still serving new requests, so load "
          "balancers stop routing here before any request is refused; then drain as "
          "--exit_timeout_seconds says (the process exits at most the sum + 1 s after the signal)");
ABSL_FLAG(int, unready_queue_depth, 0,
          "Report not ready (/v2/health/ready 503, ServerReady false) while more than this many "
          "requests wait for a worker, so a load balancer sends new requests to other replicas; "
          "0 = readiness ignores the queue");
ABSL_FLAG(std::string, model_control_mode, "poll",
          "none (load the repository once), poll (also rescan it every "
          "--repository_poll_seconds) or explicit (RepositoryModelLoad/Unload RPCs; --load_model "
          "at startup)");
ABSL_FLAG(int, repository_poll_seconds, 2,
          "Poll mode: seconds between repository rescans (new, changed and removed models and "
          "versions); 0 disables polling");
ABSL_FLAG(std::vector<std::string>, load_model, {},
          "Explicit mode: models to load at startup (comma-separated; '*' = all)");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM server certificate (chain); enables TLS on gRPC and HTTP");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA bundle; when set, clients must present a certificate it signed (mutual TLS)");
ABSL_FLAG(std::string, log_level, "info", "debug, info, warning or error");
ABSL_FLAG(std::string, log_dir, "",
          "Folder in which clients may name a log file (Triton's logging extension: log_file); "
          "empty: logs go to stderr only");
ABSL_FLAG(std::string, trace_dir, "",
          "Folder in which trace_file names a file (Triton's trace extension); empty: --log_dir");
ABSL_FLAG(std::string, trace_file, "", "Trace file name inside --trace_dir (Triton's trace_file)");
ABSL_FLAG(std::vector<std::string>, trace_level, {"OFF"},
          "OFF, or TIMESTAMPS and/or LOOP_ITERATIONS (one span per top-level Loop iteration)");
ABSL_FLAG(int64_t, trace_rate, 1000, "Trace 1 of N requests");
ABSL_FLAG(int64_t, trace_count, -1, "Traces to collect; -1: no limit");
ABSL_FLAG(std::string, trace_mode, "triton",
          "triton (trace files) or opentelemetry (OTLP/HTTP JSON to --trace_otlp_url)");
ABSL_FLAG(std::string, trace_otlp_url, "",
          "OpenTelemetry collector for trace_mode opentelemetry: http://host:port/v1/traces");
ABSL_FLAG(int64_t, trace_log_frequency, 0,
          "Write the trace file every N traces; 0: when the count runs out or at shutdown");

namespace {

// The --trace_* flags -> the tracer's server settings (the trace extension changes them later).
bool StartTracing() {
  loopserve::server::Tracer& tracer = loopserve::server::Tracer::Global();
  const std::string dir = absl::GetFlag(FLAGS_trace_dir);
  tracer.SetDirectory(dir.empty() ? absl::GetFlag(FLAGS_log_dir) : dir);
  const std::string url = absl::GetFlag(FLAGS_trace_otlp_url);
  if (!url.empty()) {
    absl::StatusOr<std::unique_ptr<loopserve::server::OtlpExporter>> exporter =
        loopserve::server::OtlpExporter::Create(url);
    if (!exporter.ok()) {
      loopserve::server::LogError(absl::StrCat("--trace_otlp_url: ", exporter.status().message()));
      return false;
    }
    tracer.SetExporter(*std::move(exporter));
  }
  const loopserve::server::TraceSettingList settings = {
      {"trace_file", {absl::GetFlag(FLAGS_trace_file)}},
      {"trace_level", absl::GetFlag(FLAGS_trace_level)},
      {"trace_rate", {absl::StrCat(absl::GetFlag(FLAGS_trace_rate))}},
      {"trace_count", {absl::StrCat(absl::GetFlag(FLAGS_trace_count))}},
      {"log_frequency", {absl::StrCat(absl::GetFlag(FLAGS_trace_log_frequency))}},
      {"trace_mode", {absl::GetFlag(FLAGS_trace_mode)}}};
  const absl::Status status = tracer.Update("", settings).status();
  if (!status.ok()) loopserve::server::LogError(absl::StrCat("--trace_*: ", status.message()));
  return status.ok();
}

// The main thread waits on the first pipe (and reads its byte); the watchdog on the second, so
// each sees the signal whoever wakes first.
int g_signal_pipe[2] = {-1, -1};
int g_watchdog_pipe[2] = {-1, -1};
// Set by the first SIGTERM/SIGINT: ServerOptions::stop (stops a start-up in progress).
std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free, "g_stop is set in a signal handler");

std::atomic<int> g_first_signal{0};

void OnSignal(int signal_number) {
  int none = 0;
  g_first_signal.compare_exchange_strong(none, signal_number);
  g_stop.store(true);
  const unsigned char byte = static_cast<unsigned char>(signal_number);
  [[maybe_unused]] ssize_t written = write(g_signal_pipe[1], &byte, 1);
  written = write(g_watchdog_pipe[1], &byte, 1);
}

const char* SignalName() { return g_first_signal.load() == SIGINT ? "SIGINT" : "SIGTERM"; }

// SIGTERM and SIGINT, for pthread_sigmask.
sigset_t StopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  return signals;
}

void InstallSignalHandlers() {
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

// The orderly shutdown's time limit beyond --exit_timeout_seconds; the watchdog's margin below the
// promised one second.
constexpr absl::Duration kForcedExitAfter = absl::Milliseconds(900);

// Triton's command-line spellings (tritonserver --model-repository=DIR ...) as aliases of the flags
// that mean the same: argv is rewritten before absl parses it. A Triton flag with no counterpart
// stays as written, and absl rejects it as unknown.
struct TritonFlag {
  const char* triton;
  const char* ours;
  // How a value translates: kSame as given (`--flag value` or `--flag=value`); kBool the same, but
  // `--flag` alone is true; kDisablePort: --allow-x=false -> --x_port=-1 (true: nothing);
  // kVerbose: a level > 0 -> --log_level=debug; kTraceConfig: TranslateTraceConfig.
  enum Kind { kSame, kBool, kDisablePort, kVerbose, kTraceConfig } kind;
};

// Triton's `--trace-config [<mode>,]<setting>=<value>` -> one of our --trace_* flags.
absl::StatusOr<std::string> TranslateTraceConfig(absl::string_view config) {
  absl::string_view mode;
  absl::string_view setting = config;
  const size_t comma = config.find(',');
  if (comma != absl::string_view::npos) {
    mode = config.substr(0, comma);
    setting = config.substr(comma + 1);
  }
  const size_t eq = setting.find('=');
  const absl::string_view name = setting.substr(0, eq);
  const absl::string_view value =
      eq == absl::string_view::npos ? absl::string_view() : setting.substr(eq + 1);
  struct Setting {
    const char* mode;
    const char* name;
    const char* ours;
  };
  constexpr Setting kSettings[] = {
      {"", "rate", "trace_rate"},
      {"", "level", "trace_level"},
      {"", "count", "trace_count"},
      {"", "mode", "trace_mode"},
      {"triton", "file", "trace_file"},
      {"triton", "log-frequency", "trace_log_frequency"},
      {"opentelemetry", "url", "trace_otlp_url"},
  };
  for (const Setting& s : kSettings) {
    if (eq != absl::string_view::npos && mode == s.mode && name == s.name) {
      return absl::StrCat("--", s.ours, "=", value);
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--trace-config ", config,
      ": loopserve takes rate, level, count, mode, triton,file, triton,log-frequency and "
      "opentelemetry,url"));
}

constexpr TritonFlag kTritonFlags[] = {
    {"model-repository", "model_repository", TritonFlag::kSame},
    {"model-store", "model_repository", TritonFlag::kSame},
    {"grpc-port", "grpc_port", TritonFlag::kSame},
    {"http-port", "http_port", TritonFlag::kSame},
    {"metrics-port", "metrics_port", TritonFlag::kSame},
    {"http-address", "address", TritonFlag::kSame},
    {"grpc-address", "address", TritonFlag::kSame},
    {"http-thread-count", "http_threads", TritonFlag::kSame},
    {"model-control-mode", "model_control_mode", TritonFlag::kSame},
    {"load-model", "load_model", TritonFlag::kSame},
    {"repository-poll-secs", "repository_poll_seconds", TritonFlag::kSame},
    {"exit-timeout-secs", "exit_timeout_seconds", TritonFlag::kSame},
    {"disable-auto-complete-config", "disable_auto_complete_config", TritonFlag::kBool},
    {"strict-model-config", "disable_auto_complete_config", TritonFlag::kBool},
    {"allow-http", "http_port", TritonFlag::kDisablePort},
    {"allow-metrics", "metrics_port", TritonFlag::kDisablePort},
    {"log-verbose", "log_level", TritonFlag::kVerbose},
    {"trace-file", "trace_file", TritonFlag::kSame},
    {"trace-level", "trace_level", TritonFlag::kSame},
    {"trace-rate", "trace_rate", TritonFlag::kSame},
    {"trace-count", "trace_count", TritonFlag::kSame},
    {"trace-log-frequency", "trace_log_frequency", TritonFlag::kSame},
    {"trace-config", "", TritonFlag::kTraceConfig},
};

// Rewrites Triton's spellings in argv (kept alive in `storage`); returns the new argv, or
// InvalidArgument for a Triton flag without its value or with a value of the wrong kind. As
// Triton's, a boolean takes its value after '=' or as the next argument (`--allow-http false`);
// alone it is true.
absl::StatusOr<std::vector<char*>> TranslateTritonFlags(int argc, char** argv,
                                                        std::vector<std::string>* storage) {
  storage->reserve(static_cast<size_t>(argc) * 2);
  std::vector<char*> out = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    const TritonFlag* flag = nullptr;
    absl::string_view value;
    bool has_value = false;
    if (absl::StartsWith(arg, "--") && arg != "--") {
      absl::string_view name = arg.substr(2);
      const size_t eq = name.find('=');
      if (eq != absl::string_view::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_value = true;
      }
      for (const TritonFlag& f : kTritonFlags) {
        if (name == f.triton) flag = &f;
      }
    }
    if (flag == nullptr) {
      out.push_back(argv[i]);
      continue;
    }
    const bool boolean = flag->kind == TritonFlag::kBool || flag->kind == TritonFlag::kDisablePort;
    bool on = true;
    if (!has_value && i + 1 < argc && (!boolean || absl::SimpleAtob(argv[i + 1], &on))) {
      value = argv[++i];  // --flag value
      has_value = true;
    }
    if (!has_value && !boolean) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag->triton, " needs a value"));
    }
    if (!has_value) value = "true";
    if (boolean && !absl::SimpleAtob(value, &on)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag->triton, "=", value, ": expected true or false"));
    }
    int verbose = 0;
    if (flag->kind == TritonFlag::kVerbose && !absl::SimpleAtoi(value, &verbose)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag->triton, "=", value, ": expected an integer level"));
    }
    std::string translated;
    switch (flag->kind) {
      case TritonFlag::kSame:
        translated = absl::StrCat("--", flag->ours, "=", value);
        break;
      case TritonFlag::kBool:
        translated = absl::StrCat("--", flag->ours, "=", on ? "true" : "false");
        break;
      case TritonFlag::kDisablePort:
        if (!on) translated = absl::StrCat("--", flag->ours, "=-1");
        break;
      case TritonFlag::kVerbose:
        translated = absl::StrCat("--", flag->ours, "=", verbose > 0 ? "debug" : "info");
        break;
      case TritonFlag::kTraceConfig: {
        absl::StatusOr<std::string> trace = TranslateTraceConfig(value);
        if (!trace.ok()) return trace.status();
        translated = *std::move(trace);
        break;
      }
    }
    if (translated.empty()) continue;
    storage->push_back(std::move(translated));
    out.push_back(storage->back().data());
  }
  out.push_back(nullptr);
  return out;
}

void PrintLine(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

// SIGTERM/SIGINT set g_stop and write a byte to each of two pipes (all async-signal-safe): the
// main thread waits on one once the server has started, the watchdog on the other. False (logged)
// when the pipes cannot be made.
bool StartSignalHandling(absl::Duration exit_timeout, absl::Duration drain_delay) {
  // The write ends do not block: a flood of signals cannot stall the handler on a full pipe.
  for (int* fds : {g_signal_pipe, g_watchdog_pipe}) {
    if (pipe2(fds, O_CLOEXEC) != 0 || fcntl(fds[1], F_SETFL, O_NONBLOCK) != 0) {
      loopserve::server::LogError("cannot create the signal pipes");
      return false;
    }
  }
  InstallSignalHandlers();
  // From the first signal on (during start-up or serving), the process ends within
  // --drain_delay_seconds + --exit_timeout_seconds + 1 s: a watchdog ends it if the orderly stop
  // has not by then (a model file still compiling, a request that does not stop).
  std::thread([exit_timeout, drain_delay] {
    // Its own pipe: the main thread reads the byte of the other one, so a wait on that one could
    // miss it (then a shutdown that hangs would never be ended).
    unsigned char signal_number = 0;
    while (read(g_watchdog_pipe[0], &signal_number, 1) < 0 && errno == EINTR) {
    }
    absl::SleepFor(drain_delay + exit_timeout + kForcedExitAfter);
    loopserve::server::LogError(
        "shutdown is taking longer than --drain_delay_seconds + --exit_timeout_seconds + 1 s: "
        "exiting now");
    std::_Exit(0);
  }).detach();
  return true;
}

// The server's options from the flags; the flag's error when one does not parse.
absl::StatusOr<loopserve::server::ServerOptions> OptionsFromFlags(absl::Duration exit_timeout,
                                                                  absl::Duration drain_delay) {
  loopserve::server::ServerOptions options;
  options.model_repository = absl::GetFlag(FLAGS_model_repository);
  options.config_path = absl::GetFlag(FLAGS_config_path);
  options.disable_auto_complete_config = absl::GetFlag(FLAGS_disable_auto_complete_config);
  options.address = absl::GetFlag(FLAGS_address);
  options.grpc_port = absl::GetFlag(FLAGS_grpc_port);
  options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  options.http_port = absl::GetFlag(FLAGS_http_port);
  options.http_threads = absl::GetFlag(FLAGS_http_threads);
  options.workers = absl::GetFlag(FLAGS_workers);
  options.intra_op_threads = absl::GetFlag(FLAGS_intra_op_threads);
  absl::StatusOr<loopserve::engine::LoopThreads> loop_threads =
      loopserve::engine::ParseLoopThreads(absl::GetFlag(FLAGS_loop_threads));
  if (!loop_threads.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--loop_threads ", loop_threads.status().message()));
  }
  options.loop_threads = *loop_threads;
  absl::StatusOr<loopserve::engine::LoadOptions::Precision> precision =
      loopserve::server::ParsePrecision(absl::GetFlag(FLAGS_precision));
  if (!precision.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--precision ", precision.status().message()));
  }
  options.precision = *precision;
  options.force_precision = absl::GetFlag(FLAGS_force_precision);
  options.max_queue_size = absl::GetFlag(FLAGS_max_queue_size);
  options.max_loop_iterations = absl::GetFlag(FLAGS_max_loop_iterations);
  options.max_output_bytes = absl::GetFlag(FLAGS_max_output_bytes);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.max_request_memory_bytes = absl::GetFlag(FLAGS_max_request_memory_bytes);
  options.max_model_file_bytes = absl::GetFlag(FLAGS_max_model_file_bytes);
  options.inline_run_limit = absl::Microseconds(absl::GetFlag(FLAGS_inline_run_limit_us));
  options.exit_timeout = exit_timeout;
  options.drain_delay = drain_delay;
  options.unready_queue_depth = absl::GetFlag(FLAGS_unready_queue_depth);
  options.stop = &g_stop;
  absl::StatusOr<loopserve::server::ModelControlMode> mode =
      loopserve::server::ParseModelControlMode(absl::GetFlag(FLAGS_model_control_mode));
  if (!mode.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model_control_mode: ", mode.status().message()));
  }
  options.model_control_mode = *mode;
  options.repository_poll_interval = absl::Seconds(absl::GetFlag(FLAGS_repository_poll_seconds));
  options.load_models = absl::GetFlag(FLAGS_load_model);
  options.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key = absl::GetFlag(FLAGS_tls_key);
  options.tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca);

  return options;
}

// The ports the server listens on, on stdout (scripts read them).
void PrintListening(const loopserve::server::Server& server, const std::string& address) {
  PrintLine(absl::StrCat("loopserve: grpc listening on ", address, ":", server.grpc_port()));
  if (server.http_port() >= 0) {
    PrintLine(absl::StrCat("loopserve: http listening on ", address, ":", server.http_port()));
  } else {
    PrintLine("loopserve: http disabled");
  }
  if (server.metrics_port() >= 0) {
    PrintLine(
        absl::StrCat("loopserve: metrics listening on ", address, ":", server.metrics_port()));
  } else {
    PrintLine("loopserve: metrics disabled");
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Until the handlers are installed, SIGTERM/SIGINT wait blocked (pending) instead of ending the
  // process. The mask and the pending signals survive the exec of UsePassiveOpenMpWait, and
  // threads inherit the mask of the thread that creates them, so after that exec no thread of
  // the process takes them before the handlers are there. (Without the exec, threads that
  // libraries start during static initialisation, before main, keep their own masks.)
  const sigset_t stop_signals = StopSignals();
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  loopserve::engine::UsePassiveOpenMpWait(argv);
  absl::SetProgramUsageMessage(
      "KServe v2 / Open Inference Protocol server (gRPC, HTTP/REST) for ONNX and OpenVINO models "
      "with Loops.\n"
      "Usage: loopserve --model_repository=DIR [--grpc_port=N] [--http_port=H] [--metrics_port=M] "
      "[flags]\n"
      "       loopserve --config_path=config.json [flags]");
  // --help lists the flags of this file (absl otherwise matches files named like the binary).
  absl::FlagsUsageConfig usage_config;
  usage_config.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "server/main.cc");
  };
  absl::SetFlagsUsageConfig(usage_config);
  std::vector<std::string> translated_storage;
  absl::StatusOr<std::vector<char*>> translated =
      TranslateTritonFlags(argc, argv, &translated_storage);
  if (!translated.ok()) {
    loopserve::server::LogError(std::string(translated.status().message()));
    return 1;
  }
  const std::vector<char*> positional =
      absl::ParseCommandLine(static_cast<int>(translated->size()) - 1, translated->data());
  if (positional.size() > 1) {
    // A stray word (`--allow-http maybe`, a flag without its dashes) would otherwise be ignored.
    loopserve::server::LogError(
        absl::StrCat("unexpected argument '", positional[1], "' (flags are --name=value)"));
    return 1;
  }
  // Debian's Abseil keeps absl::Mutex deadlock detection on in release builds (kAbort): every
  // lock then updates a global lock-order graph under its own lock, and a cycle it suspects
  // aborts the server. Tests keep it on; the served binary does not pay for it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  using loopserve::server::LogError;
  using loopserve::server::LogInfo;

  absl::StatusOr<loopserve::server::LogLevel> level =
      loopserve::server::ParseLogLevel(absl::GetFlag(FLAGS_log_level));
  if (!level.ok()) {
    LogError(std::string(level.status().message()));
    return 1;
  }
  loopserve::server::SetLogLevel(*level);
  loopserve::server::SetLogDirectory(absl::GetFlag(FLAGS_log_dir));
  loopserve::server::RouteProtobufLogs();
  if (!StartTracing()) return 1;

  const absl::Duration exit_timeout = absl::Seconds(absl::GetFlag(FLAGS_exit_timeout_seconds));
  const absl::Duration drain_delay = absl::Seconds(absl::GetFlag(FLAGS_drain_delay_seconds));
  if (!StartSignalHandling(exit_timeout, drain_delay)) return 1;
  // A signal that came before this is delivered now.
  pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);

  absl::StatusOr<loopserve::server::ServerOptions> options =
      OptionsFromFlags(exit_timeout, drain_delay);
  if (!options.ok()) {
    LogError(std::string(options.status().message()));
    return 1;
  }
  absl::StatusOr<std::unique_ptr<loopserve::server::Server>> server =
      loopserve::server::Server::Start(*options);
  if (!server.ok()) {
    if (absl::IsCancelled(server.status()) && g_stop.load()) {
      LogInfo(absl::StrCat("received ", SignalName(), " during start-up: stopped"));
      return 0;
    }
    LogError(absl::StrCat("loopserve failed to start: ", server.status().ToString()));
    return 1;
  }
  // Again, in case a library (civetweb) replaced the handlers while the server started.
  InstallSignalHandlers();
  PrintListening(**server, options->address);
  unsigned char signal_number = 0;
  while (read(g_signal_pipe[0], &signal_number, 1) < 0 && errno == EINTR) {
  }
  LogInfo(absl::StrCat("received ", signal_number == SIGTERM ? "SIGTERM" : "SIGINT",
                       ": shutting down"));
  // Requests still running after the exit timeout are cancelled and stop within a Loop iteration
  // or a kernel chunk; should one not (a single uninterruptible kernel), the watchdog ends the
  // process.
  (*server)->Shutdown();
  loopserve::server::Tracer::Global().WriteAll();
  LogInfo("loopserve stopped");
  return 0;
}
