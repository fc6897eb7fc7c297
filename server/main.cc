// loopserve: the KServe v2 / Open Inference Protocol gRPC server for Loop models.
//
//   loopserve --model_repository=DIR [--grpc_port=8001] [--metrics_port=8002] ...
//
// Once the repository is loaded and the ports are bound it prints exactly these lines to stdout
// (flushed; integration tests parse them; <address> is --address as given):
//   loopserve: grpc listening on <address>:<port>
//   loopserve: metrics listening on <address>:<port>
// or, with --metrics_port=-1, "loopserve: metrics disabled" instead of the second line. Logs go to
// stderr. It serves until SIGTERM or SIGINT, then reports NOT_SERVING, drains calls in flight (up
// to --exit_timeout_seconds) and exits 0. Startup errors exit 1.

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/logging.h"
#include "server/server.h"

ABSL_FLAG(std::string, model_repository, "",
          "Model repository root: <root>/<model>/<version>/model.onnx (or model.xml)");
ABSL_FLAG(std::string, address, "0.0.0.0", "Address to bind the gRPC and metrics ports on");
ABSL_FLAG(int, grpc_port, 8001, "gRPC port; 0 picks a free port");
ABSL_FLAG(int, metrics_port, 8002, "Prometheus /metrics port; 0 picks a free port, -1 disables");
ABSL_FLAG(int, workers, 2, "Worker threads running inference");
ABSL_FLAG(int, max_queue_size, 64,
          "Requests that may wait for a worker; more are rejected with RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, max_loop_iterations, 0,
          "Cap on the iterations of any single Loop execution (0 = unlimited); a model's "
          "config.pbtxt may set its own");
ABSL_FLAG(int, exit_timeout_seconds, 30,
          "On SIGTERM/SIGINT, how long to wait for calls in flight before cancelling them");
ABSL_FLAG(std::string, log_level, "info", "debug, info, warning or error");

namespace {

int g_signal_pipe[2] = {-1, -1};

void OnSignal(int signal_number) {
  const unsigned char byte = static_cast<unsigned char>(signal_number);
  [[maybe_unused]] ssize_t written = write(g_signal_pipe[1], &byte, 1);
}

void InstallSignalHandlers() {
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

void PrintLine(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "KServe v2 / Open Inference Protocol gRPC server for ONNX and OpenVINO models with Loops.\n"
      "Usage: loopserve --model_repository=DIR [--grpc_port=N] [--metrics_port=M] [flags]");
  // --help lists the flags of this file (absl otherwise matches files named like the binary).
  absl::FlagsUsageConfig usage_config;
  usage_config.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "server/main.cc");
  };
  absl::SetFlagsUsageConfig(usage_config);
  absl::ParseCommandLine(argc, argv);
  using loopserve::server::LogError;
  using loopserve::server::LogInfo;

  absl::StatusOr<loopserve::server::LogLevel> level =
      loopserve::server::ParseLogLevel(absl::GetFlag(FLAGS_log_level));
  if (!level.ok()) {
    LogError(std::string(level.status().message()));
    return 1;
  }
  loopserve::server::SetLogLevel(*level);

  // SIGTERM/SIGINT only write a byte to a pipe (async-signal-safe); the main thread waits on it.
  // (Blocking the signals instead is unreliable: libraries may start threads during static
  // initialisation, before main could block them.)
  if (pipe(g_signal_pipe) != 0) {
    LogError("cannot create the signal pipe");
    return 1;
  }
  InstallSignalHandlers();

  loopserve::server::ServerOptions options;
  options.model_repository = absl::GetFlag(FLAGS_model_repository);
  options.address = absl::GetFlag(FLAGS_address);
  options.grpc_port = absl::GetFlag(FLAGS_grpc_port);
  options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  options.workers = absl::GetFlag(FLAGS_workers);
  options.max_queue_size = absl::GetFlag(FLAGS_max_queue_size);
  options.max_loop_iterations = absl::GetFlag(FLAGS_max_loop_iterations);
  options.exit_timeout = absl::Seconds(absl::GetFlag(FLAGS_exit_timeout_seconds));

  absl::StatusOr<std::unique_ptr<loopserve::server::Server>> server =
      loopserve::server::Server::Start(options);
  if (!server.ok()) {
    LogError(absl::StrCat("loopserve failed to start: ", server.status().ToString()));
    return 1;
  }
  // Again, in case a library (civetweb) replaced the handlers while the server started.
  InstallSignalHandlers();
  PrintLine(
      absl::StrCat("loopserve: grpc listening on ", options.address, ":", (*server)->grpc_port()));
  if ((*server)->metrics_port() >= 0) {
    PrintLine(absl::StrCat("loopserve: metrics listening on ", options.address, ":",
                           (*server)->metrics_port()));
  } else {
    PrintLine("loopserve: metrics disabled");
  }

  unsigned char signal_number = 0;
  while (read(g_signal_pipe[0], &signal_number, 1) < 0 && errno == EINTR) {
  }
  LogInfo(absl::StrCat("received ", signal_number == SIGTERM ? "SIGTERM" : "SIGINT"));
  (*server)->Shutdown();
  LogInfo("loopserve stopped");
  return 0;
}
