#include <limits.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/kernels/native/cpu_isa.h"

namespace loopserve::engine {

void SetIntraOpThreads(int threads) {
  omp_set_num_threads(threads > 0 ? threads : AvailableCores());
}

absl::StatusOr<LoopThreads> ParseLoopThreads(absl::string_view name) {
  for (LoopThreads mode :
       {LoopThreads::kAdaptive, LoopThreads::kIntraOp, LoopThreads::kOneThread}) {
    if (name == LoopThreadsName(mode)) return mode;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("must be adaptive, intra_op or one, not '", name, "'"));
}

const char* LoopThreadsName(LoopThreads mode) {
  switch (mode) {
    case LoopThreads::kAdaptive:
      return "adaptive";
    case LoopThreads::kIntraOp:
      return "intra_op";
    case LoopThreads::kOneThread:
      return "one";
  }
  return "adaptive";
}

int AvailableCores() {
  const int cores = omp_get_num_procs();
  return cores > 0 ? cores : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// The signal mask and the pending signals survive the exec: a program that handles SIGTERM
// blocks it before calling this and unblocks it once its handler is installed (server/main.cc),
// so a SIGTERM in between waits for the handler instead of ending the process.
void UsePassiveOpenMpWait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  if (argv == nullptr || argv[0] == nullptr) return;
  if (setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/0) != 0) return;
  // The binary by its own path, so the process keeps its name (/proc/<pid>/comm, ps, top), which
  // an exec of "/proc/self/exe" would make "exe"; that path only when the other fails (the
  // binary was replaced or deleted since: "... (deleted)").
  char path[PATH_MAX];
  const ssize_t length = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (length > 0) {
    path[length] = '\0';
    execv(path, argv);
  }
  execv("/proc/self/exe", argv);
  // The exec failed (no /proc, ...): run on with the policy libgomp already read.
}

const char* ActiveVectorIsa() { return native::IsaName(native::ActiveIsa()); }

}  // namespace loopserve::engine
