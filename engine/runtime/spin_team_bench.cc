// SpinTeam (engine/runtime/spin_team.h) costs: one dispatch of two empty chunks to an engaged
// (spinning) helper and to a disengaged (sleeping) one, and a float32 tanh over n elements on one
// thread vs split in two over the team, to place the size from which a split pays. Wall clock;
// run on otherwise idle cores (flock /work/notes/bench.lock).

#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include "engine/runtime/spin_team.h"

namespace loopserve::engine {
namespace {

void BM_DispatchEngaged(benchmark::State& state) {
  SpinTeam team(1);
  ScopedSpinTeam engaged(&team);
  int sink = 0;
  for (auto _ : state) {
    team.ParallelFor(2, [&](int c) { benchmark::DoNotOptimize(sink + c); });
  }
  state.counters["helper_share"] =
      static_cast<double>(team.helper_chunks()) / (2.0 * static_cast<double>(state.iterations()));
}
BENCHMARK(BM_DispatchEngaged);

void BM_DispatchDisengaged(benchmark::State& state) {
  SpinTeam team(1);
  int sink = 0;
  for (auto _ : state) {
    team.ParallelFor(2, [&](int c) { benchmark::DoNotOptimize(sink + c); });
  }
}
BENCHMARK(BM_DispatchDisengaged);

void Tanh(const float* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = std::tanh(in[i]);
}

// state.range(0) elements; range(1): 0 one thread, 1 split in two over an engaged team.
void BM_Tanh(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> in(static_cast<size_t>(n)), out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    in[static_cast<size_t>(i)] = 0.001f * static_cast<float>(i % 2000);
  SpinTeam team(1);
  ScopedSpinTeam engaged(&team);
  const bool split = state.range(1) != 0;
  for (auto _ : state) {
    if (split) {
      team.ParallelFor(2, [&](int c) {
        const int64_t half = n / 2;
        const int64_t first = c == 0 ? 0 : half;
        Tanh(in.data() + first, out.data() + first, c == 0 ? half : n - half);
      });
    } else {
      Tanh(in.data(), out.data(), n);
    }
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_Tanh)->ArgsProduct({{256, 1024, 4096, 16384}, {0, 1}});

}  // namespace
}  // namespace loopserve::engine

BENCHMARK_MAIN();
