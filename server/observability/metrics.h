#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "server/observability/histogram.h"

namespace loopserve::server {

class Metrics;

// The protocol a request came over: the `protocol` label of the request metrics.
enum class Protocol : uint8_t { kGrpc = 0, kHttp = 1 };
inline constexpr int kNumProtocols = 2;
// "grpc", "http".
absl::string_view ProtocolName(Protocol protocol);

// A cumulative count and duration (Triton's StatisticDuration). Thread-safe (relaxed atomics).
struct DurationStat {
  std::atomic<uint64_t> count{0};
  std::atomic<uint64_t> ns{0};
  void Add(absl::Duration d) {
    count.fetch_add(1, std::memory_order_relaxed);
    ns.fetch_add(static_cast<uint64_t>(std::max<int64_t>(0, absl::ToInt64Nanoseconds(d))),
                 std::memory_order_relaxed);
  }
};

// A plain copy of one model version's statistics (the ModelStatistics RPC's content).
struct ModelVersionStatistics {
  struct Duration {
    uint64_t count = 0;
    uint64_t ns = 0;
  };
  struct Loop {
    std::string name;
    Duration execution;  // count = executions
    uint64_t iterations = 0;
  };
  uint64_t last_inference_ms = 0;  // since the epoch; 0 = never
  uint64_t inference_count = 0;    // inferences of successful requests (a batch of n counts n)
  uint64_t execution_count = 0;    // successful Model::Run calls (a merged batch counts 1)
  Duration success, fail, queue, compute_input, compute_infer, compute_output;
  std::vector<Loop> loops;
};

// Statistics and metric handles of one model version. The handles are resolved once when the
// version loads, so the request path never calls Family::Add; the statistics (Triton's
// ModelStatistics: success/fail/queue/compute durations, Loop executions and iterations) are
// atomics. Also the engine's LoopObserver for that version's runs.
//
// Created by Metrics::ForModelVersion (statistics + Prometheus; the Metrics object must outlive
// it) or StatisticsOnly (no Prometheus, for registries without Metrics). Thread-safe; shared by
// every request pinned to the version and kept across reloads of the same version.
class ModelVersionMetrics : public engine::LoopObserver {
 public:
  static std::shared_ptr<ModelVersionMetrics> StatisticsOnly(
      const std::vector<std::string>& loop_names);

  // Records one finished request: loopserve_requests_total{protocol,outcome}, its total duration
  // (loopserve_request_duration_seconds{protocol}), and the success/fail statistics.
  void RecordRequest(Protocol protocol, absl::StatusCode code, absl::Duration total);
  void RecordQueue(absl::Duration waited);
  void RecordComputeInput(absl::Duration decoding);   // request decoding and validation
  void RecordCompute(absl::Duration computed);        // Model::Run
  void RecordComputeOutput(absl::Duration encoding);  // response encoding
  // A successful request's inferences: its batch size with max_batch_size > 0, else 1
  // (Triton's inference_count; loopserve_inferences_total).
  void RecordInferences(int64_t count);
  // One successful Model::Run over `batch_size` inferences (Triton's execution_count;
  // loopserve_executions_total, loopserve_batch_size).
  void RecordExecution(int64_t batch_size);
  // One iteration's response of a `stream_iterations` request handed to the protocol:
  // loopserve_stream_slices_total, and for the request's first one (`first`) its time since the
  // request arrived in loopserve_stream_first_slice_seconds.
  void RecordStreamSlice(bool first, absl::Duration since_received);
  // Iteration batching (server/scheduling/iteration_batcher.h): one iteration of a running batch
  // of `rows` rows, `admitted` of which joined and `retired` left at its boundary
  // (loopserve_iteration_batch_rows, loopserve_iteration_rows_{admitted,retired}_total); and a
  // row that left after `iterations` iterations (loopserve_iteration_row_iterations).
  void RecordIterationStep(int64_t rows, int64_t admitted, int64_t retired);
  void RecordRowIterations(int64_t iterations);

  // engine::LoopObserver: loopserve_loop_iterations / _loop_iteration_duration_seconds and the
  // per-loop statistics.
  void OnLoopFinished(int loop_index, int64_t iterations, absl::Duration elapsed) override;

  ModelVersionStatistics Statistics() const;

 private:
  friend class Metrics;
  explicit ModelVersionMetrics(const std::vector<std::string>& loop_names);

  struct LoopStat {
    std::string name;
    DurationStat execution;
    std::atomic<uint64_t> iterations{0};
  };
  std::atomic<uint64_t> last_inference_ms_{0};
  DurationStat success_, fail_, queue_, compute_input_, compute_infer_, compute_output_;
  std::atomic<uint64_t> inferences_{0};
  std::atomic<uint64_t> executions_{0};
  std::vector<std::unique_ptr<LoopStat>> loops_;  // by loop index

  // Prometheus handles; null for StatisticsOnly.

  bool has_handles_ = false;
  // Indexed by Protocol, then absl::StatusCode (0..16).
  std::array<std::array<prometheus::Counter*, 17>, kNumProtocols> requests_{};
  std::array<AtomicHistogram*, kNumProtocols> request_duration_{};  // by Protocol
  AtomicHistogram* queue_duration_ = nullptr;
  AtomicHistogram* compute_duration_ = nullptr;
  AtomicHistogram* stream_first_slice_ = nullptr;
  prometheus::Counter* stream_slices_ = nullptr;
  prometheus::Counter* inferences_total_ = nullptr;
  prometheus::Counter* executions_total_ = nullptr;
  AtomicHistogram* batch_size_ = nullptr;
  AtomicHistogram* iteration_batch_rows_ = nullptr;
  prometheus::Counter* iteration_rows_admitted_ = nullptr;
  prometheus::Counter* iteration_rows_retired_ = nullptr;
  AtomicHistogram* iteration_row_iterations_ = nullptr;
  std::vector<AtomicHistogram*> loop_iterations_;          // by loop index
  std::vector<AtomicHistogram*> loop_iteration_duration_;  // by loop index
};

// The Prometheus handles of one version's sequence batcher (Metrics::ForSequences), resolved at
// load. Thread-safe (prometheus-cpp's metrics are).
struct SequenceMetrics {
  enum Outcome { kStarted, kEnded, kExpired, kFailed, kRestarted, kRejected, kNumOutcomes };
  prometheus::Gauge* live = nullptr;                          // loopserve_sequences_live
  prometheus::Gauge* slots = nullptr;                         // loopserve_sequence_slots
  prometheus::Gauge* backlog = nullptr;                       // loopserve_sequence_backlog
  std::array<prometheus::Counter*, kNumOutcomes> outcomes{};  // loopserve_sequences_total
};

// The server's Prometheus registry and metric families:
//   loopserve_requests_total{model,version,protocol,outcome}   counter
//   loopserve_request_duration_seconds{model,version,protocol} histogram (receipt -> answer)
//   loopserve_queue_duration_seconds{model,version}            histogram (receipt -> worker start)
//   loopserve_compute_duration_seconds{model,version}          histogram (Model::Run)
//   loopserve_loop_iterations{model,version,loop}              histogram, once per Loop execution
//   loopserve_loop_iteration_duration_seconds{model,version,loop} histogram, mean per execution
//   loopserve_stream_first_slice_seconds{model,version}        histogram (receipt -> first
//                                                              iteration response,
//                                                              stream_iterations)
//   loopserve_stream_slices_total{model,version}               counter (iteration responses sent)
//   loopserve_inferences_total{model,version}                  counter (Triton's
//                                                              nv_inference_count: a successful
//                                                              request of batch size n counts n)
//   loopserve_executions_total{model,version}                  counter (nv_inference_exec_count:
//                                                              Model::Run calls; a merged batch
//                                                              counts 1)
//   loopserve_batch_size{model,version}                        histogram, batch size (inferences)
//                                                              per execution
//   loopserve_iteration_batch_rows{model,version}              histogram, rows of a running batch
//                                                              per iteration (iteration_batching)
//   loopserve_iteration_rows_admitted_total{model,version}     counter (rows that joined one)
//   loopserve_iteration_rows_retired_total{model,version}      counter (rows that left one)
//   loopserve_iteration_row_iterations{model,version}          histogram, iterations per row
//   loopserve_sequences_live{model,version}                    gauge (sequence_batching: sequences
//                                                              holding a slot)
//   loopserve_sequence_slots{model,version}                    gauge (the version's slots)
//   loopserve_sequence_backlog{model,version}                  gauge (starts waiting for a slot)
//   loopserve_sequences_total{model,version,outcome}           counter; started | ended |
//                                                              expired (idle) | failed |
//                                                              restarted | rejected (steps);
//                                                              steps per execution are
//                                                              loopserve_batch_size
//   loopserve_loop_limit_hits_total{reason}                    counter; reason = iteration_cap |
//                                                              deadline | cancelled |
//                                                              output_bytes | memory
//   loopserve_inflight_requests                                gauge (admitted, not yet answered)
//   loopserve_queue_depth                                      gauge (waiting for a worker)
//   loopserve_model_ready{model,version}                       gauge (1 ready, 0 failed/unloaded)
//   loopserve_model_load_duration_seconds{model,version}       gauge (last load of the version)
//   loopserve_model_loads_total{outcome}                       counter; success | failure
//   process_resident_memory_bytes, process_virtual_memory_bytes, process_cpu_seconds_total,
//   process_open_fds, process_threads, process_start_time_seconds  (from /proc/self, at scrape)
// `protocol` is "grpc" or "http" (ProtocolName); `outcome` is "success" or the lower-case gRPC
// code name ("invalid_argument", ...), whatever the protocol (HTTP answers map from it). Durations
// are histograms in seconds with buckets from 1 µs to 5 min.
//
// Thread-safe. Owns the registry (shared with the exposer); outlives every ModelVersionMetrics.
class Metrics {
 public:
  Metrics();

  // Resolves every per-version handle (17 outcome counters and a duration histogram per protocol,
  // 4 more handles, 2 per loop).
  std::shared_ptr<ModelVersionMetrics> ForModelVersion(const std::string& model, int64_t version,
                                                       const std::vector<std::string>& loop_names);
  // The sequence-batching handles of a version with sequence_batching (only those get the
  // series).
  SequenceMetrics ForSequences(const std::string& model, int64_t version);
  // Sets loopserve_model_ready{model,version}. Not for the request path (resolves the gauge).
  void SetModelReady(const std::string& model, int64_t version, bool ready);
  // Records one load attempt: its duration (successful loads) and loopserve_model_loads_total.
  void RecordModelLoad(const std::string& model, int64_t version, bool ok, absl::Duration took);

  // Counts a Loop limit hit for a run that ended with `code` (DeadlineExceeded or Cancelled);
  // other codes are ignored. Engine limits (iteration cap, output bytes, memory) are told apart by
  // engine::GetLimitReason and recorded with RecordLimitHit (kNone is ignored).
  void RecordLoopLimitHit(absl::StatusCode code);
  void RecordLimitHit(engine::LimitReason reason);

  prometheus::Gauge& inflight_requests() { return *inflight_; }
  prometheus::Gauge& queue_depth() { return *queue_depth_; }

  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }
  // The registry's metrics plus the process metrics: what /metrics serves.
  const std::shared_ptr<prometheus::Collectable>& collectable() const { return collectable_; }
  // The text exposition format, as /metrics serves it.
  std::string Serialize() const;

  // Bucket boundaries: durations from 1 µs to 5 min (1-2.5-5 steps); iteration counts
  // 1, 2, 5, 10, ..., 1e6.
  static std::vector<double> DurationBuckets();
  static std::vector<double> IterationBuckets();
  // Batch sizes: 1, 2, 4, ..., 1024.
  static std::vector<double> BatchBuckets();

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<prometheus::Collectable> collectable_;
  prometheus::Family<prometheus::Counter>* requests_;
  std::shared_ptr<AtomicHistogramFamily> request_duration_;
  std::shared_ptr<AtomicHistogramFamily> queue_duration_;
  std::shared_ptr<AtomicHistogramFamily> compute_duration_;
  std::shared_ptr<AtomicHistogramFamily> loop_iterations_;
  std::shared_ptr<AtomicHistogramFamily> loop_iteration_duration_;
  std::shared_ptr<AtomicHistogramFamily> stream_first_slice_;
  prometheus::Family<prometheus::Counter>* stream_slices_;
  prometheus::Family<prometheus::Counter>* inferences_;
  prometheus::Family<prometheus::Counter>* executions_;
  std::shared_ptr<AtomicHistogramFamily> batch_size_;
  std::shared_ptr<AtomicHistogramFamily> iteration_batch_rows_;
  prometheus::Family<prometheus::Counter>* iteration_rows_admitted_;
  prometheus::Family<prometheus::Counter>* iteration_rows_retired_;
  std::shared_ptr<AtomicHistogramFamily> iteration_row_iterations_;
  prometheus::Family<prometheus::Gauge>* model_ready_;
  prometheus::Family<prometheus::Gauge>* model_load_duration_;
  prometheus::Family<prometheus::Gauge>* sequences_live_;
  prometheus::Family<prometheus::Gauge>* sequence_slots_;
  prometheus::Family<prometheus::Gauge>* sequence_backlog_;
  prometheus::Family<prometheus::Counter>* sequences_total_;
  prometheus::Counter* loads_success_;
  prometheus::Counter* loads_failure_;
  prometheus::Counter* limit_iteration_cap_;
  prometheus::Counter* limit_deadline_;
  prometheus::Counter* limit_cancelled_;
  prometheus::Counter* limit_output_bytes_;
  prometheus::Counter* limit_memory_;
  prometheus::Gauge* inflight_;
  prometheus::Gauge* queue_depth_;
};

}  // namespace loopserve::server
