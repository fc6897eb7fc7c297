#include <omp.h>

#include <algorithm>
#include <thread>

#include "engine/engine.h"
#include "engine/kernels/native/cpu_isa.h"

namespace loopserve::engine {

void SetIntraOpThreads(int threads) {
  omp_set_num_threads(threads > 0 ? threads : AvailableCores());
}

int AvailableCores() {
  const int cores = omp_get_num_procs();
  return cores > 0 ? cores : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

const char* ActiveVectorIsa() { return native::IsaName(native::ActiveIsa()); }

}  // namespace loopserve::engine
