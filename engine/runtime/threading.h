#pragma once

namespace loopserve::engine {

// Sets how many threads the oneDNN primitives run from the calling thread may use (oneDNN here
// runs on OpenMP, whose thread count is a per-thread setting). Call once on each thread that runs
// models; 0 or less means "all cores". A server keeps workers x intra-op threads <= cores.
void SetIntraOpThreads(int threads);

// Threads available to this process (at least 1).
int AvailableCores();

}  // namespace loopserve::engine
