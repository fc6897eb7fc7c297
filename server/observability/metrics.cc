#include "server/observability/metrics.h"

#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"
#include "server/status_util.h"

namespace loopserve::server {
namespace {

constexpr absl::StatusCode kAllCodes[] = {
    absl::StatusCode::kOk,
    absl::StatusCode::kCancelled,
    absl::StatusCode::kUnknown,
    absl::StatusCode::kInvalidArgument,
    absl::StatusCode::kDeadlineExceeded,
    absl::StatusCode::kNotFound,
    absl::StatusCode::kAlreadyExists,
    absl::StatusCode::kPermissionDenied,
    absl::StatusCode::kResourceExhausted,
    absl::StatusCode::kFailedPrecondition,
    absl::StatusCode::kAborted,
    absl::StatusCode::kOutOfRange,
    absl::StatusCode::kUnimplemented,
    absl::StatusCode::kInternal,
    absl::StatusCode::kUnavailable,
    absl::StatusCode::kDataLoss,
    absl::StatusCode::kUnauthenticated,
};

// Process metrics in the Prometheus client conventions (process_*), read from /proc/self when
// scraped. Absent fields (a non-Linux /proc) are left out rather than reported as 0.
std::vector<prometheus::MetricFamily> ProcessMetricFamilies() {
  std::vector<prometheus::MetricFamily> families;
  auto add = [&](const char* name, const char* help, prometheus::MetricType type, double value) {
    prometheus::MetricFamily family;
    family.name = name;
    family.help = help;
    family.type = type;
    prometheus::ClientMetric metric;
    if (type == prometheus::MetricType::Counter) {
      metric.counter.value = value;
    } else {
      metric.gauge.value = value;
    }
    family.metric.push_back(std::move(metric));
    families.push_back(std::move(family));
  };
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  // Fields after the command name "(...)", which may itself contain spaces: state is field 3.
  const size_t close = stat.rfind(')');
  if (close != std::string::npos) {
    std::vector<std::string> f = absl::StrSplit(stat.substr(close + 2), ' ', absl::SkipEmpty());
    // f[0] is field 3 (state): field N is f[N - 3].
    double utime = 0, stime = 0, threads = 0, start_ticks = 0, vsize = 0, rss_pages = 0;
    if (f.size() > 21 && absl::SimpleAtod(f[11], &utime) && absl::SimpleAtod(f[12], &stime) &&
        absl::SimpleAtod(f[17], &threads) && absl::SimpleAtod(f[19], &start_ticks) &&
        absl::SimpleAtod(f[20], &vsize) && absl::SimpleAtod(f[21], &rss_pages)) {
      const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
      const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
      add("process_cpu_seconds_total", "User and system CPU time spent, in seconds",
          prometheus::MetricType::Counter, (utime + stime) / ticks);
      add("process_resident_memory_bytes", "Resident memory size in bytes",
          prometheus::MetricType::Gauge, rss_pages * page);
      add("process_virtual_memory_bytes", "Virtual memory size in bytes",
          prometheus::MetricType::Gauge, vsize);
      add("process_threads", "Number of OS threads", prometheus::MetricType::Gauge, threads);
      std::ifstream proc_stat("/proc/stat");
      std::string line;
      while (std::getline(proc_stat, line)) {
        double boot = 0;
        if (line.rfind("btime ", 0) == 0 && absl::SimpleAtod(line.substr(6), &boot)) {
          add("process_start_time_seconds", "Start time of the process since the epoch, seconds",
              prometheus::MetricType::Gauge, boot + start_ticks / ticks);
          break;
        }
      }
    }
  }
  if (DIR* dir = opendir("/proc/self/fd")) {
    int fds = 0;
    while (const dirent* entry = readdir(dir)) {
      if (entry->d_name[0] != '.') ++fds;
    }
    closedir(dir);
    add("process_open_fds", "Number of open file descriptors", prometheus::MetricType::Gauge,
        fds - 1);  // minus the one listing the directory
  }
  return families;
}

// What /metrics serves: the registry, then the process metrics.
class ServerCollectable final : public prometheus::Collectable {
 public:
  explicit ServerCollectable(std::shared_ptr<prometheus::Registry> registry)
      : registry_(std::move(registry)) {}
  // At construction of Metrics only, before the collectable is shared.
  void AddHistograms(std::shared_ptr<const AtomicHistogramFamily> family) {
    histograms_.push_back(std::move(family));
  }
  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> families = registry_->Collect();
    for (const auto& histograms : histograms_) histograms->Collect(&families);
    for (prometheus::MetricFamily& family : ProcessMetricFamilies()) {
      families.push_back(std::move(family));
    }
    return families;
  }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::vector<std::shared_ptr<const AtomicHistogramFamily>> histograms_;
};

constexpr Protocol kProtocols[] = {Protocol::kGrpc, Protocol::kHttp};

}  // namespace

absl::string_view ProtocolName(Protocol protocol) {
  return protocol == Protocol::kHttp ? "http" : "grpc";
}

ModelVersionMetrics::ModelVersionMetrics(const std::vector<std::string>& loop_names) {
  for (const std::string& name : loop_names) {
    loops_.push_back(std::make_unique<LoopStat>());
    loops_.back()->name = name;
  }
}

std::shared_ptr<ModelVersionMetrics> ModelVersionMetrics::StatisticsOnly(
    const std::vector<std::string>& loop_names) {
  return std::shared_ptr<ModelVersionMetrics>(new ModelVersionMetrics(loop_names));
}

void ModelVersionMetrics::RecordRequest(Protocol protocol, absl::StatusCode code,
                                        absl::Duration total) {
  if (code == absl::StatusCode::kOk) {
    success_.Add(total);
    last_inference_ms_.store(static_cast<uint64_t>(absl::ToUnixMillis(absl::Now())),
                             std::memory_order_relaxed);
  } else {
    fail_.Add(total);
  }
  if (!has_handles_) return;
  const auto& counters = requests_[static_cast<int>(protocol)];
  const int index = static_cast<int>(code);
  prometheus::Counter* counter =
      index >= 0 && index < static_cast<int>(counters.size()) ? counters[index] : nullptr;
  if (counter == nullptr) counter = counters[static_cast<int>(absl::StatusCode::kUnknown)];
  counter->Increment();
  request_duration_[static_cast<int>(protocol)]->Observe(absl::ToDoubleSeconds(total));
}

void ModelVersionMetrics::RecordQueue(absl::Duration waited) {
  queue_.Add(waited);
  if (has_handles_) queue_duration_->Observe(absl::ToDoubleSeconds(waited));
}

void ModelVersionMetrics::RecordComputeInput(absl::Duration decoding) {
  compute_input_.Add(decoding);
}

void ModelVersionMetrics::RecordCompute(absl::Duration computed) {
  compute_infer_.Add(computed);
  if (has_handles_) compute_duration_->Observe(absl::ToDoubleSeconds(computed));
}

void ModelVersionMetrics::RecordInferences(int64_t count) {
  const uint64_t n = static_cast<uint64_t>(std::max<int64_t>(count, 0));
  inferences_.fetch_add(n, std::memory_order_relaxed);
  if (has_handles_) inferences_total_->Increment(static_cast<double>(n));
}

void ModelVersionMetrics::RecordExecution(int64_t batch_size) {
  executions_.fetch_add(1, std::memory_order_relaxed);
  if (!has_handles_) return;
  executions_total_->Increment();
  batch_size_->Observe(static_cast<double>(batch_size));
}

void ModelVersionMetrics::RecordIterationStep(int64_t rows, int64_t admitted, int64_t retired) {
  if (!has_handles_) return;
  if (rows > 0) iteration_batch_rows_->Observe(static_cast<double>(rows));
  if (admitted > 0) iteration_rows_admitted_->Increment(static_cast<double>(admitted));
  if (retired > 0) iteration_rows_retired_->Increment(static_cast<double>(retired));
}

void ModelVersionMetrics::RecordRowIterations(int64_t iterations) {
  if (has_handles_) iteration_row_iterations_->Observe(static_cast<double>(iterations));
}

void ModelVersionMetrics::RecordStreamSlice(bool first, absl::Duration since_received) {
  if (!has_handles_) return;
  stream_slices_->Increment();
  if (first) stream_first_slice_->Observe(absl::ToDoubleSeconds(since_received));
}

void ModelVersionMetrics::RecordComputeOutput(absl::Duration encoding) {
  compute_output_.Add(encoding);
}

void ModelVersionMetrics::OnLoopFinished(int loop_index, int64_t iterations,
                                         absl::Duration elapsed) {
  if (loop_index < 0 || loop_index >= static_cast<int>(loops_.size())) return;
  LoopStat& loop = *loops_[loop_index];
  loop.execution.Add(elapsed);
  loop.iterations.fetch_add(static_cast<uint64_t>(std::max<int64_t>(0, iterations)),
                            std::memory_order_relaxed);
  if (!has_handles_) return;
  loop_iterations_[loop_index]->Observe(static_cast<double>(iterations));
  if (iterations > 0) {
    loop_iteration_duration_[loop_index]->Observe(absl::ToDoubleSeconds(elapsed) /
                                                  static_cast<double>(iterations));
  }
}

ModelVersionStatistics ModelVersionMetrics::Statistics() const {
  auto copy = [](const DurationStat& d) {
    return ModelVersionStatistics::Duration{d.count.load(std::memory_order_relaxed),
                                            d.ns.load(std::memory_order_relaxed)};
  };
  ModelVersionStatistics stats;
  stats.last_inference_ms = last_inference_ms_.load(std::memory_order_relaxed);
  stats.success = copy(success_);
  stats.inference_count = inferences_.load(std::memory_order_relaxed);
  stats.execution_count = executions_.load(std::memory_order_relaxed);
  stats.fail = copy(fail_);
  stats.queue = copy(queue_);
  stats.compute_input = copy(compute_input_);
  stats.compute_infer = copy(compute_infer_);
  stats.compute_output = copy(compute_output_);
  for (const std::unique_ptr<LoopStat>& loop : loops_) {
    stats.loops.push_back(ModelVersionStatistics::Loop{
        loop->name, copy(loop->execution), loop->iterations.load(std::memory_order_relaxed)});
  }
  return stats;
}

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  auto collectable = std::make_shared<ServerCollectable>(registry_);
  collectable_ = collectable;
  // Histograms are loopserve's lock-free ones (histogram.h), served after the registry's metrics.
  auto NewHistogramFamily = [&](const char* name, const char* help) {
    auto family = std::make_shared<AtomicHistogramFamily>(name, help);
    collectable->AddHistograms(family);
    return family;
  };
  requests_ = &prometheus::BuildCounter()
                   .Name("loopserve_requests_total")
                   .Help("Inference requests answered, by model version, protocol and outcome")
                   .Register(*registry_);
  request_duration_ = NewHistogramFamily("loopserve_request_duration_seconds",
                                         "Inference request time from receipt to answer");
  queue_duration_ =
      NewHistogramFamily("loopserve_queue_duration_seconds",
                         "Inference request time from receipt until a worker picked it up");
  compute_duration_ = NewHistogramFamily("loopserve_compute_duration_seconds",
                                         "Time spent in the engine's Model::Run");
  loop_iterations_ = NewHistogramFamily("loopserve_loop_iterations",
                                        "Iterations per Loop execution, by Loop node");
  loop_iteration_duration_ =
      NewHistogramFamily("loopserve_loop_iteration_duration_seconds",
                         "Mean time per iteration of one Loop execution, by Loop node");
  stream_first_slice_ = NewHistogramFamily(
      "loopserve_stream_first_slice_seconds",
      "Time from receipt to the first iteration response of a stream_iterations request");
  stream_slices_ = &prometheus::BuildCounter()
                        .Name("loopserve_stream_slices_total")
                        .Help(
                            "Iteration responses of stream_iterations requests handed to the "
                            "protocol")
                        .Register(*registry_);
  inferences_ = &prometheus::BuildCounter()
                     .Name("loopserve_inferences_total")
                     .Help(
                         "Inferences of successful requests (a request of batch size n counts n; "
                         "Triton's nv_inference_count)")
                     .Register(*registry_);
  executions_ = &prometheus::BuildCounter()
                     .Name("loopserve_executions_total")
                     .Help(
                         "Successful model executions; requests the dynamic batcher merged count "
                         "once (Triton's nv_inference_exec_count)")
                     .Register(*registry_);
  batch_size_ =
      NewHistogramFamily("loopserve_batch_size", "Batch size (inferences) of each model execution");
  iteration_batch_rows_ =
      NewHistogramFamily("loopserve_iteration_batch_rows",
                         "Rows of a running batch (iteration_batching) per iteration");
  iteration_rows_admitted_ = &prometheus::BuildCounter()
                                  .Name("loopserve_iteration_rows_admitted_total")
                                  .Help("Requests that joined a running batch (iteration_batching)")
                                  .Register(*registry_);
  iteration_rows_retired_ = &prometheus::BuildCounter()
                                 .Name("loopserve_iteration_rows_retired_total")
                                 .Help("Requests that left a running batch (iteration_batching)")
                                 .Register(*registry_);
  iteration_row_iterations_ = NewHistogramFamily("loopserve_iteration_row_iterations",
                                                 "Iterations a request ran in a running batch");
  sequences_live_ = &prometheus::BuildGauge()
                         .Name("loopserve_sequences_live")
                         .Help("Sequences holding a slot of the version's sequence batcher")
                         .Register(*registry_);
  sequence_slots_ = &prometheus::BuildGauge()
                         .Name("loopserve_sequence_slots")
                         .Help("Slots (live sequences at most) of the version's sequence batcher")
                         .Register(*registry_);
  sequence_backlog_ = &prometheus::BuildGauge()
                           .Name("loopserve_sequence_backlog")
                           .Help("Sequence starts waiting for a free slot")
                           .Register(*registry_);
  sequences_total_ = &prometheus::BuildCounter()
                          .Name("loopserve_sequences_total")
                          .Help(
                              "Sequences by outcome: started, ended (by their END request), "
                              "expired (idle), failed, restarted; rejected counts refused steps")
                          .Register(*registry_);
  model_ready_ = &prometheus::BuildGauge()
                      .Name("loopserve_model_ready")
                      .Help("1 when the model version is loaded and serving, 0 when it failed")
                      .Register(*registry_);
  model_load_duration_ = &prometheus::BuildGauge()
                              .Name("loopserve_model_load_duration_seconds")
                              .Help("How long the last successful load of the model version took")
                              .Register(*registry_);
  auto& loads = prometheus::BuildCounter()
                    .Name("loopserve_model_loads_total")
                    .Help("Model version loads attempted, by outcome")
                    .Register(*registry_);
  loads_success_ = &loads.Add({{"outcome", "success"}});
  loads_failure_ = &loads.Add({{"outcome", "failure"}});
  auto& limit_hits = prometheus::BuildCounter()
                         .Name("loopserve_loop_limit_hits_total")
                         .Help("Runs stopped inside the engine by a limit, by reason")
                         .Register(*registry_);
  limit_iteration_cap_ = &limit_hits.Add({{"reason", "iteration_cap"}});
  limit_deadline_ = &limit_hits.Add({{"reason", "deadline"}});
  limit_cancelled_ = &limit_hits.Add({{"reason", "cancelled"}});
  limit_output_bytes_ = &limit_hits.Add({{"reason", "output_bytes"}});
  limit_memory_ = &limit_hits.Add({{"reason", "memory"}});
  inflight_ = &prometheus::BuildGauge()
                   .Name("loopserve_inflight_requests")
                   .Help("Inference requests admitted and not yet answered")
                   .Register(*registry_)
                   .Add({});
  queue_depth_ = &prometheus::BuildGauge()
                      .Name("loopserve_queue_depth")
                      .Help("Inference requests waiting for a worker")
                      .Register(*registry_)
                      .Add({});
}

std::vector<double> Metrics::DurationBuckets() {
  std::vector<double> buckets;
  for (double decade = 1e-6; decade < 100.0; decade *= 10) {
    for (double step : {1.0, 2.5, 5.0}) buckets.push_back(decade * step);
  }
  for (double seconds : {100.0, 300.0}) buckets.push_back(seconds);
  return buckets;
}

std::vector<double> Metrics::BatchBuckets() {
  std::vector<double> buckets;
  for (double size = 1; size <= 1024; size *= 2) buckets.push_back(size);
  return buckets;
}

std::vector<double> Metrics::IterationBuckets() {
  std::vector<double> buckets;
  for (double decade = 1; decade < 1e6; decade *= 10) {
    for (double step : {1.0, 2.0, 5.0}) buckets.push_back(decade * step);
  }
  buckets.push_back(1e6);
  return buckets;
}

std::shared_ptr<ModelVersionMetrics> Metrics::ForModelVersion(
    const std::string& model, int64_t version, const std::vector<std::string>& loop_names) {
  std::shared_ptr<ModelVersionMetrics> metrics(new ModelVersionMetrics(loop_names));
  metrics->has_handles_ = true;
  const prometheus::Labels labels = {{"model", model}, {"version", absl::StrCat(version)}};
  for (Protocol protocol : kProtocols) {
    prometheus::Labels with_protocol = labels;
    with_protocol["protocol"] = std::string(ProtocolName(protocol));
    for (absl::StatusCode code : kAllCodes) {
      prometheus::Labels with_outcome = with_protocol;
      with_outcome["outcome"] = OutcomeLabel(code);
      metrics->requests_[static_cast<int>(protocol)][static_cast<int>(code)] =
          &requests_->Add(with_outcome);
    }
    metrics->request_duration_[static_cast<int>(protocol)] =
        &request_duration_->Add(with_protocol, DurationBuckets());
  }
  metrics->queue_duration_ = &queue_duration_->Add(labels, DurationBuckets());
  metrics->compute_duration_ = &compute_duration_->Add(labels, DurationBuckets());
  metrics->stream_first_slice_ = &stream_first_slice_->Add(labels, DurationBuckets());
  metrics->stream_slices_ = &stream_slices_->Add(labels);
  metrics->inferences_total_ = &inferences_->Add(labels);
  metrics->executions_total_ = &executions_->Add(labels);
  metrics->batch_size_ = &batch_size_->Add(labels, BatchBuckets());
  metrics->iteration_batch_rows_ = &iteration_batch_rows_->Add(labels, BatchBuckets());
  metrics->iteration_rows_admitted_ = &iteration_rows_admitted_->Add(labels);
  metrics->iteration_rows_retired_ = &iteration_rows_retired_->Add(labels);
  metrics->iteration_row_iterations_ = &iteration_row_iterations_->Add(labels, IterationBuckets());
  for (const std::string& loop : loop_names) {
    prometheus::Labels with_loop = labels;
    with_loop["loop"] = loop;
    metrics->loop_iterations_.push_back(&loop_iterations_->Add(with_loop, IterationBuckets()));
    metrics->loop_iteration_duration_.push_back(
        &loop_iteration_duration_->Add(with_loop, DurationBuckets()));
  }
  return metrics;
}

SequenceMetrics Metrics::ForSequences(const std::string& model, int64_t version) {
  const prometheus::Labels labels = {{"model", model}, {"version", absl::StrCat(version)}};
  SequenceMetrics metrics;
  metrics.live = &sequences_live_->Add(labels);
  metrics.slots = &sequence_slots_->Add(labels);
  metrics.backlog = &sequence_backlog_->Add(labels);
  const char* const names[SequenceMetrics::kNumOutcomes] = {"started", "ended",     "expired",
                                                            "failed",  "restarted", "rejected"};
  for (int k = 0; k < SequenceMetrics::kNumOutcomes; ++k) {
    prometheus::Labels with_outcome = labels;
    with_outcome["outcome"] = names[k];
    metrics.outcomes[k] = &sequences_total_->Add(with_outcome);
  }
  return metrics;
}

void Metrics::SetModelReady(const std::string& model, int64_t version, bool ready) {
  model_ready_->Add({{"model", model}, {"version", absl::StrCat(version)}}).Set(ready ? 1 : 0);
}

void Metrics::RecordModelLoad(const std::string& model, int64_t version, bool ok,
                              absl::Duration took) {
  (ok ? loads_success_ : loads_failure_)->Increment();
  if (ok) {
    model_load_duration_->Add({{"model", model}, {"version", absl::StrCat(version)}})
        .Set(absl::ToDoubleSeconds(took));
  }
}

void Metrics::RecordLoopLimitHit(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kDeadlineExceeded:
      limit_deadline_->Increment();
      break;
    case absl::StatusCode::kCancelled:
      limit_cancelled_->Increment();
      break;
    default:
      break;
  }
}

void Metrics::RecordLimitHit(engine::LimitReason reason) {
  switch (reason) {
    case engine::LimitReason::kIterationCap:
      limit_iteration_cap_->Increment();
      break;
    case engine::LimitReason::kOutputBytes:
      limit_output_bytes_->Increment();
      break;
    case engine::LimitReason::kMemory:
      limit_memory_->Increment();
      break;
    case engine::LimitReason::kNone:
      break;
  }
}

std::string Metrics::Serialize() const {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, collectable_->Collect());
  return out.str();
}

}  // namespace loopserve::server
