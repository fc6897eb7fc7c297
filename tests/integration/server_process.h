#pragma once

// The real `loopserve` binary run as a child process for integration tests, plus a helper that
// runs any command to completion (used for loopctl).

#include <sys/types.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace loopserve::testing {

// One running loopserve process, bound to 127.0.0.1 on ports the kernel picked
// (--grpc_port=0 --metrics_port=0), with the ports read from the lines it prints on stdout
// ("loopserve: grpc listening on <address>:<port>", "loopserve: metrics listening on ...").
//
// A reader thread drains the child's stdout; a waiter thread reaps it (waitpid) and signals its
// exit, so nothing here sleeps to synchronise. stderr (the server log) goes to a file, shown by
// log() in failure messages. The destructor SIGKILLs a child that is still running and joins both
// threads. Methods are thread-safe.
class ServerProcess {
 public:
  struct Options {
    std::string binary;                    // path of the loopserve executable
    std::string model_repository;          // --model_repository (none when empty)
    std::vector<std::string> extra_flags;  // e.g. "--max_loop_iterations=1000"
    absl::Duration startup_timeout = absl::Seconds(60);
  };

  // Starts the server and waits until it has printed both port lines. Fails (with the server's
  // log in the message) when it exits first or does not print them within startup_timeout.
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(const Options& options);
  ~ServerProcess();

  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }
  int http_port() const { return http_port_; }  // 0 when HTTP is off (--http_port=-1)
  std::string grpc_address() const;             // "127.0.0.1:<grpc_port>"
  pid_t pid() const { return pid_; }

  // Sends `signal_number` to the child.
  absl::Status Signal(int signal_number);
  // Waits until the child exits; returns its exit status, or 128 + N when killed by signal N.
  // DEADLINE_EXCEEDED when it is still running after `timeout`.
  absl::StatusOr<int> WaitForExit(absl::Duration timeout);
  bool exited() const { return exited_.HasBeenNotified(); }

  // What the child printed so far on stdout, and its log (stderr) file contents.
  std::string stdout_text() const;
  std::string log() const;

 private:
  ServerProcess() = default;
  void ReadStdout(int fd);
  void Reap();

  pid_t pid_ = -1;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  int http_port_ = 0;
  std::string log_path_;

  mutable absl::Mutex mu_;
  std::string stdout_ ABSL_GUARDED_BY(mu_);
  bool stdout_closed_ ABSL_GUARDED_BY(mu_) = false;
  int wait_status_ = 0;  // written by the waiter thread before exited_ is notified
  absl::Notification exited_;
  std::thread reader_;
  std::thread waiter_;
};

// The loopserve binary of this build on `repository` (none when empty: give --config_path in
// `flags`) with `flags` added; see ServerProcess::Start.
absl::StatusOr<std::unique_ptr<ServerProcess>> StartLoopserve(const std::string& repository,
                                                              std::vector<std::string> flags);

// Result of RunCommand.
struct CommandResult {
  int exit_code = -1;  // 128 + N when killed by signal N
  std::string out;
  std::string err;
};

// Runs `argv` (argv[0] is the executable path) to completion, capturing stdout and stderr.
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv);

// A fresh, unique scratch directory under the test temp dir.
std::string MakeScratchDir(const std::string& prefix);

}  // namespace loopserve::testing
