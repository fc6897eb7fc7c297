#include "tests/integration/server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "tests/integration/test_util.h"

extern char** environ;

namespace loopserve::testing {
namespace {

constexpr absl::string_view kGrpcLine = "loopserve: grpc listening on ";
constexpr absl::string_view kMetricsLine = "loopserve: metrics listening on ";
// Printed before the metrics line, when HTTP is on.
constexpr absl::string_view kHttpLine = "loopserve: http listening on ";
constexpr char kMetricsDisabled[] = "loopserve: metrics disabled";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The port at the end of the line that starts with `prefix` ("...:<port>"), 0 if not there yet.
int PortAfter(absl::string_view text, absl::string_view prefix) {
  const size_t start = text.find(prefix);
  if (start == absl::string_view::npos) return 0;
  const size_t end = text.find('\n', start);
  if (end == absl::string_view::npos) return 0;  // line not complete yet
  absl::string_view line = text.substr(start, end - start);
  const size_t colon = line.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || !absl::SimpleAtoi(line.substr(colon + 1), &port)) {
    return -1;
  }
  return port;
}

int DecodeWaitStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// The servers this test process started and has not reaped. Killed when the process ends through
// std::terminate (a joinable std::thread destroyed after a failed ASSERT), which runs no
// destructors: otherwise a server left running an endless Loop spins on after the test is gone.
std::mutex g_children_mutex;
std::vector<pid_t>* const g_children = new std::vector<pid_t>;  // never freed: terminate reads it
std::terminate_handler g_previous_terminate = nullptr;

void KillChildrenAndTerminate() {
  // No lock: terminate may come on a thread that holds it; a stale list beats a leaked server.
  for (pid_t pid : *g_children) kill(pid, SIGKILL);
  if (g_previous_terminate != nullptr) g_previous_terminate();
  std::abort();
}

void TrackChild(pid_t pid) {
  std::lock_guard<std::mutex> lock(g_children_mutex);
  static const bool installed = [] {
    g_previous_terminate = std::set_terminate(KillChildrenAndTerminate);
    return true;
  }();
  (void)installed;
  g_children->push_back(pid);
}

void UntrackChild(pid_t pid) {
  std::lock_guard<std::mutex> lock(g_children_mutex);
  g_children->erase(std::remove(g_children->begin(), g_children->end(), pid), g_children->end());
}

// posix_spawn with stdout/stderr redirected to `out_fd` (dup'ed onto 1) and the file `err_path`.
absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, int out_fd,
                            const std::string& err_path) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("posix_spawn ", argv[0], ": ", std::strerror(rc)));
  }
  return pid;
}

}  // namespace

std::string MakeScratchDir(const std::string& prefix) {
  std::string base = ::testing::TempDir();
  if (!base.empty() && base.back() == '/') base.pop_back();
  // mkdtemp, not the pid and a counter: a directory a finished run left under a reused pid would
  // be handed out again, non-empty (fs::copy into it then fails with "File exists").
  std::string dir = absl::StrCat(base, "/", prefix, "_", getpid(), "_XXXXXX");
  if (mkdtemp(dir.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp(" << dir << "): " << std::strerror(errno);
  }
  return dir;
}

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(const Options& options) {
  std::unique_ptr<ServerProcess> server(new ServerProcess());
  server->log_path_ = MakeScratchDir("loopserve") + "/loopserve.log";

  std::vector<std::string> argv = {options.binary, "--address=127.0.0.1", "--grpc_port=0",
                                   "--http_port=0", "--metrics_port=0"};
  if (!options.model_repository.empty()) {
    argv.push_back("--model_repository=" + options.model_repository);
  }
  argv.insert(argv.end(), options.extra_flags.begin(), options.extra_flags.end());

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  absl::StatusOr<pid_t> pid = Spawn(argv, fds[1], server->log_path_);
  close(fds[1]);
  if (!pid.ok()) {
    close(fds[0]);
    return pid.status();
  }
  server->pid_ = *pid;
  TrackChild(*pid);
  server->reader_ = std::thread([s = server.get(), fd = fds[0]] { s->ReadStdout(fd); });
  server->waiter_ = std::thread([s = server.get()] { s->Reap(); });

  // Wait for both port lines, the end of stdout (the process is exiting) or the timeout.
  // Runs under s->mu_ (an absl::Condition). Not annotated: clang does not accept an attribute
  // naming a lambda capture.
  auto ports_known = [s = server.get()]() {
    if (s->stdout_closed_) return true;
    const bool metrics = PortAfter(s->stdout_, kMetricsLine) != 0 ||
                         s->stdout_.find(kMetricsDisabled) != std::string::npos;
    return PortAfter(s->stdout_, kGrpcLine) != 0 && metrics;
  };
  {
    absl::MutexLock lock(&server->mu_);
    server->mu_.AwaitWithTimeout(absl::Condition(&ports_known), options.startup_timeout);
    server->grpc_port_ = PortAfter(server->stdout_, kGrpcLine);
    server->metrics_port_ = PortAfter(server->stdout_, kMetricsLine);
    server->http_port_ = PortAfter(server->stdout_, kHttpLine);
  }
  if (server->grpc_port_ <= 0) {
    return absl::UnavailableError(absl::StrCat(
        "loopserve did not report its gRPC port (", server->exited() ? "it exited" : "timeout",
        ").\nstdout:\n", server->stdout_text(), "\nlog:\n", server->log()));
  }
  return server;
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0 && !exited()) {
    kill(pid_, SIGKILL);
  }
  if (waiter_.joinable()) waiter_.join();
  if (reader_.joinable()) reader_.join();
}

std::string ServerProcess::grpc_address() const { return absl::StrCat("127.0.0.1:", grpc_port_); }

absl::Status ServerProcess::Signal(int signal_number) {
  if (exited()) return absl::FailedPreconditionError("loopserve already exited");
  if (kill(pid_, signal_number) != 0) {
    return absl::InternalError(absl::StrCat("kill: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ServerProcess::WaitForExit(absl::Duration timeout) {
  if (!exited_.WaitForNotificationWithTimeout(timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("loopserve still running after ", absl::FormatDuration(timeout)));
  }
  return DecodeWaitStatus(wait_status_);
}

std::string ServerProcess::stdout_text() const {
  absl::MutexLock lock(&mu_);
  return stdout_;
}

std::string ServerProcess::log() const { return ReadFile(log_path_); }

void ServerProcess::ReadStdout(int fd) {
  char buf[4096];
  while (true) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    absl::MutexLock lock(&mu_);
    stdout_.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  absl::MutexLock lock(&mu_);
  stdout_closed_ = true;
}

void ServerProcess::Reap() {
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  UntrackChild(pid_);
  wait_status_ = status;
  exited_.Notify();
}

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv) {
  const std::string dir = MakeScratchDir("cmd");
  const std::string out_path = dir + "/stdout", err_path = dir + "/stderr";
  const int out_fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out_fd < 0) return absl::InternalError(absl::StrCat("open ", out_path));
  absl::StatusOr<pid_t> pid = Spawn(argv, out_fd, err_path);
  close(out_fd);
  if (!pid.ok()) return pid.status();
  int status = 0;
  while (waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
  }
  CommandResult result;
  result.exit_code = DecodeWaitStatus(status);
  result.out = ReadFile(out_path);
  result.err = ReadFile(err_path);
  return result;
}

absl::StatusOr<std::unique_ptr<ServerProcess>> StartLoopserve(const std::string& repository,
                                                              std::vector<std::string> flags) {
  ServerProcess::Options options;
  options.binary = LoopserveBinary();
  options.model_repository = repository;
  options.extra_flags = std::move(flags);
  return ServerProcess::Start(options);
}

}  // namespace loopserve::testing
