// The cost of one histogram observation on the request path (issue 34): prometheus-cpp 1.0's
// Histogram (a mutex per Observe) against loopserve's AtomicHistogram (server/observability/
// histogram.h), with the request path's duration buckets (Metrics::DurationBuckets), at 1 thread
// and at 2 threads observing the same histogram (the contended case: requests of one model
// version on two workers). Google Benchmark prints ns per observation per thread.
//
//   build/bin/metrics_bench [--benchmark_repetitions=5 --benchmark_report_aggregates_only=true]

#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "prometheus/histogram.h"
#include "server/observability/histogram.h"
#include "server/observability/metrics.h"

namespace {

std::vector<double> Values() {
  std::mt19937 rng(1);
  std::lognormal_distribution<double> seconds(-9.0, 1.5);  // ~10-1000 us, as request times
  std::vector<double> values(1024);
  for (double& v : values) v = seconds(rng);
  return values;
}

template <typename H>
void Observe(benchmark::State& state, H& histogram) {
  static const std::vector<double> values = Values();
  size_t i = static_cast<size_t>(state.thread_index()) * 97;
  for (auto _ : state) {
    histogram.Observe(values[i++ & 1023]);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_PrometheusCppHistogram(benchmark::State& state) {
  static prometheus::Histogram histogram(loopserve::server::Metrics::DurationBuckets());
  Observe(state, histogram);
}

void BM_AtomicHistogram(benchmark::State& state) {
  static loopserve::server::AtomicHistogram histogram(
      loopserve::server::Metrics::DurationBuckets());
  Observe(state, histogram);
}

BENCHMARK(BM_PrometheusCppHistogram)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_AtomicHistogram)->Threads(1)->Threads(2)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
