#include "server/metrics.h"

#include <exception>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
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

}  // namespace

void ModelVersionMetrics::RecordRequest(absl::StatusCode code, absl::Duration total) {
  const int index = static_cast<int>(code);
  prometheus::Counter* counter =
      index >= 0 && index < static_cast<int>(requests_.size()) ? requests_[index] : nullptr;
  if (counter == nullptr) counter = requests_[static_cast<int>(absl::StatusCode::kUnknown)];
  counter->Increment();
  request_duration_->Observe(absl::ToDoubleSeconds(total));
}

void ModelVersionMetrics::RecordQueue(absl::Duration waited) {
  queue_duration_->Observe(absl::ToDoubleSeconds(waited));
}

void ModelVersionMetrics::RecordCompute(absl::Duration computed) {
  compute_duration_->Observe(absl::ToDoubleSeconds(computed));
}

void ModelVersionMetrics::OnLoopFinished(int loop_index, int64_t iterations,
                                         absl::Duration elapsed) {
  if (loop_index < 0 || loop_index >= static_cast<int>(loop_iterations_.size())) return;
  loop_iterations_[loop_index]->Observe(static_cast<double>(iterations));
  if (iterations > 0) {
    loop_iteration_duration_[loop_index]->Observe(absl::ToDoubleSeconds(elapsed) /
                                                  static_cast<double>(iterations));
  }
}

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  requests_ = &prometheus::BuildCounter()
                   .Name("loopserve_requests_total")
                   .Help("ModelInfer requests answered, by model version and outcome")
                   .Register(*registry_);
  request_duration_ = &prometheus::BuildHistogram()
                           .Name("loopserve_request_duration_seconds")
                           .Help("ModelInfer time from receipt to answer")
                           .Register(*registry_);
  queue_duration_ = &prometheus::BuildHistogram()
                         .Name("loopserve_queue_duration_seconds")
                         .Help("ModelInfer time from receipt until a worker picked it up")
                         .Register(*registry_);
  compute_duration_ = &prometheus::BuildHistogram()
                           .Name("loopserve_compute_duration_seconds")
                           .Help("Time spent in the engine's Model::Run")
                           .Register(*registry_);
  loop_iterations_ = &prometheus::BuildHistogram()
                          .Name("loopserve_loop_iterations")
                          .Help("Iterations per Loop execution, by Loop node")
                          .Register(*registry_);
  loop_iteration_duration_ =
      &prometheus::BuildHistogram()
           .Name("loopserve_loop_iteration_duration_seconds")
           .Help("Mean time per iteration of one Loop execution, by Loop node")
           .Register(*registry_);
  model_ready_ = &prometheus::BuildGauge()
                      .Name("loopserve_model_ready")
                      .Help("1 when the model version is loaded and serving, 0 when it failed")
                      .Register(*registry_);
  auto& limit_hits = prometheus::BuildCounter()
                         .Name("loopserve_loop_limit_hits_total")
                         .Help("Runs stopped inside the engine by a limit, by reason")
                         .Register(*registry_);
  limit_iteration_cap_ = &limit_hits.Add({{"reason", "iteration_cap"}});
  limit_deadline_ = &limit_hits.Add({{"reason", "deadline"}});
  limit_cancelled_ = &limit_hits.Add({{"reason", "cancelled"}});
  inflight_ = &prometheus::BuildGauge()
                   .Name("loopserve_inflight_requests")
                   .Help("ModelInfer requests admitted and not yet answered")
                   .Register(*registry_)
                   .Add({});
  queue_depth_ = &prometheus::BuildGauge()
                      .Name("loopserve_queue_depth")
                      .Help("ModelInfer requests waiting for a worker")
                      .Register(*registry_)
                      .Add({});
}

prometheus::Histogram::BucketBoundaries Metrics::DurationBuckets() {
  prometheus::Histogram::BucketBoundaries buckets;
  for (double decade = 1e-6; decade < 100.0; decade *= 10) {
    for (double step : {1.0, 2.5, 5.0}) buckets.push_back(decade * step);
  }
  for (double seconds : {100.0, 300.0}) buckets.push_back(seconds);
  return buckets;
}

prometheus::Histogram::BucketBoundaries Metrics::IterationBuckets() {
  prometheus::Histogram::BucketBoundaries buckets;
  for (double decade = 1; decade < 1e6; decade *= 10) {
    for (double step : {1.0, 2.0, 5.0}) buckets.push_back(decade * step);
  }
  buckets.push_back(1e6);
  return buckets;
}

std::shared_ptr<ModelVersionMetrics> Metrics::ForModelVersion(
    const std::string& model, int64_t version, const std::vector<std::string>& loop_names) {
  std::shared_ptr<ModelVersionMetrics> metrics(new ModelVersionMetrics());
  const prometheus::Labels labels = {{"model", model}, {"version", absl::StrCat(version)}};
  for (absl::StatusCode code : kAllCodes) {
    prometheus::Labels with_outcome = labels;
    with_outcome["outcome"] = OutcomeLabel(code);
    metrics->requests_[static_cast<int>(code)] = &requests_->Add(with_outcome);
  }
  metrics->request_duration_ = &request_duration_->Add(labels, DurationBuckets());
  metrics->queue_duration_ = &queue_duration_->Add(labels, DurationBuckets());
  metrics->compute_duration_ = &compute_duration_->Add(labels, DurationBuckets());
  for (const std::string& loop : loop_names) {
    prometheus::Labels with_loop = labels;
    with_loop["loop"] = loop;
    metrics->loop_iterations_.push_back(&loop_iterations_->Add(with_loop, IterationBuckets()));
    metrics->loop_iteration_duration_.push_back(
        &loop_iteration_duration_->Add(with_loop, DurationBuckets()));
  }
  return metrics;
}

void Metrics::SetModelReady(const std::string& model, int64_t version, bool ready) {
  model_ready_->Add({{"model", model}, {"version", absl::StrCat(version)}}).Set(ready ? 1 : 0);
}

void Metrics::RecordLoopLimitHit(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kResourceExhausted:
      limit_iteration_cap_->Increment();
      break;
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

std::string Metrics::Serialize() const {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry_->Collect());
  return out.str();
}

absl::StatusOr<std::unique_ptr<MetricsExposer>> MetricsExposer::Start(
    const std::string& address, int port, std::shared_ptr<prometheus::Registry> registry) {
  // civetweb wants "[::1]:port" for IPv6 literals.
  const std::string host = address.find(':') != std::string::npos && address.front() != '['
                               ? "[" + address + "]"
                               : address;
  const std::string bind = absl::StrCat(host, ":", port);
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(bind, /*num_threads=*/2);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", bind, ": ", e.what()));
  }
  exposer->RegisterCollectable(registry, "/metrics");
  const std::vector<int> ports = exposer->GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", bind, ": no port bound"));
  }
  return std::unique_ptr<MetricsExposer>(new MetricsExposer(std::move(exposer), ports.front()));
}

}  // namespace loopserve::server
