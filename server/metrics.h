#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/runtime/run_context.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace loopserve::server {

class Metrics;

// Metric handles of one model version, resolved once when the version loads so the request path
// never calls Family::Add. Also the engine's LoopObserver for that version's runs.
//
// Created by Metrics::ForModelVersion; the Metrics object must outlive it. Thread-safe (prometheus
// metrics are atomic); shared by every request pinned to the version.
class ModelVersionMetrics : public engine::LoopObserver {
 public:
  // Records one finished request: loopserve_requests_total{outcome} and its total duration.
  void RecordRequest(absl::StatusCode code, absl::Duration total);
  void RecordQueue(absl::Duration waited);
  void RecordCompute(absl::Duration computed);

  // engine::LoopObserver: loopserve_loop_iterations / _loop_iteration_duration_seconds.
  void OnLoopFinished(int loop_index, int64_t iterations, absl::Duration elapsed) override;

 private:
  friend class Metrics;
  ModelVersionMetrics() = default;

  std::array<prometheus::Counter*, 17> requests_{};  // indexed by absl::StatusCode (0..16)
  prometheus::Histogram* request_duration_ = nullptr;
  prometheus::Histogram* queue_duration_ = nullptr;
  prometheus::Histogram* compute_duration_ = nullptr;
  std::vector<prometheus::Histogram*> loop_iterations_;          // by loop index
  std::vector<prometheus::Histogram*> loop_iteration_duration_;  // by loop index
};

// The server's Prometheus registry and metric families:
//   loopserve_requests_total{model,version,outcome}            counter
//   loopserve_request_duration_seconds{model,version}          histogram (receipt -> answer)
//   loopserve_queue_duration_seconds{model,version}            histogram (receipt -> worker start)
//   loopserve_compute_duration_seconds{model,version}          histogram (Model::Run)
//   loopserve_loop_iterations{model,version,loop}              histogram, once per Loop execution
//   loopserve_loop_iteration_duration_seconds{model,version,loop} histogram, mean per execution
//   loopserve_loop_limit_hits_total{reason}                    counter; reason = iteration_cap |
//                                                              deadline | cancelled
//   loopserve_inflight_requests                                gauge (admitted, not yet answered)
//   loopserve_queue_depth                                      gauge (waiting for a worker)
//   loopserve_model_ready{model,version}                       gauge (1 ready, 0 failed to load)
// `outcome` is "success" or the lower-case gRPC code name ("invalid_argument", ...).
//
// Thread-safe. Owns the registry (shared with the exposer); outlives every ModelVersionMetrics.
class Metrics {
 public:
  Metrics();

  // Resolves every per-version handle (17 outcome counters, 3 histograms, 2 per loop).
  std::shared_ptr<ModelVersionMetrics> ForModelVersion(const std::string& model, int64_t version,
                                                       const std::vector<std::string>& loop_names);
  // Sets loopserve_model_ready{model,version}. Not for the request path (resolves the gauge).
  void SetModelReady(const std::string& model, int64_t version, bool ready);

  // Counts a Loop limit hit for a run that ended with `code` (ResourceExhausted: iteration cap,
  // DeadlineExceeded, Cancelled); other codes are ignored.
  void RecordLoopLimitHit(absl::StatusCode code);

  prometheus::Gauge& inflight_requests() { return *inflight_; }
  prometheus::Gauge& queue_depth() { return *queue_depth_; }

  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }
  // The text exposition format, as /metrics serves it.
  std::string Serialize() const;

  // Bucket boundaries: durations from 1 µs to 5 min (1-2.5-5 steps); iteration counts
  // 1, 2, 5, 10, ..., 1e6.
  static prometheus::Histogram::BucketBoundaries DurationBuckets();
  static prometheus::Histogram::BucketBoundaries IterationBuckets();

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Histogram>* request_duration_;
  prometheus::Family<prometheus::Histogram>* queue_duration_;
  prometheus::Family<prometheus::Histogram>* compute_duration_;
  prometheus::Family<prometheus::Histogram>* loop_iterations_;
  prometheus::Family<prometheus::Histogram>* loop_iteration_duration_;
  prometheus::Family<prometheus::Gauge>* model_ready_;
  prometheus::Counter* limit_iteration_cap_;
  prometheus::Counter* limit_deadline_;
  prometheus::Counter* limit_cancelled_;
  prometheus::Gauge* inflight_;
  prometheus::Gauge* queue_depth_;
};

// Serves a registry at http://<address>:<port>/metrics (civetweb, 2 threads). Owns the HTTP server;
// the registry is held weakly by the exposer, so keep it alive. Thread-safe.
class MetricsExposer {
 public:
  // Binds `address`:`port` (port 0 picks a free port). Unavailable with a clean message when the
  // port is taken or the address is invalid (civetweb throws; the exception stops here).
  static absl::StatusOr<std::unique_ptr<MetricsExposer>> Start(
      const std::string& address, int port, std::shared_ptr<prometheus::Registry> registry);

  int port() const { return port_; }

 private:
  MetricsExposer(std::unique_ptr<prometheus::Exposer> exposer, int port)
      : exposer_(std::move(exposer)), port_(port) {}

  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_;
};

}  // namespace loopserve::server
