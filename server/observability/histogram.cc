#include "server/observability/histogram.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace loopserve::server {

AtomicHistogram::AtomicHistogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void AtomicHistogram::Observe(double value) {
  // NaN and values above the last bound fail `value <= back()` and count in +Inf.
  const size_t bucket =
      !bounds_.empty() && value <= bounds_.back()
          ? static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) -
                                bounds_.begin())
          : bounds_.size();
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  double sum = sum_.load(std::memory_order_relaxed);
  while (!sum_.compare_exchange_weak(sum, sum + value, std::memory_order_relaxed)) {
  }
}

prometheus::ClientMetric AtomicHistogram::Collect() const {
  prometheus::ClientMetric metric;
  metric.histogram.bucket.reserve(bounds_.size() + 1);
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i].load(std::memory_order_relaxed);
    prometheus::ClientMetric::Bucket bucket;
    bucket.cumulative_count = cumulative;
    bucket.upper_bound = i < bounds_.size() ? bounds_[i] : std::numeric_limits<double>::infinity();
    metric.histogram.bucket.push_back(bucket);
  }
  metric.histogram.sample_count = cumulative;
  metric.histogram.sample_sum = sum_.load(std::memory_order_relaxed);
  return metric;
}

AtomicHistogram& AtomicHistogramFamily::Add(const prometheus::Labels& labels,
                                            const std::vector<double>& bounds) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<AtomicHistogram>& slot = histograms_[labels];
  if (slot == nullptr) slot = std::make_unique<AtomicHistogram>(bounds);
  return *slot;
}

void AtomicHistogramFamily::Collect(std::vector<prometheus::MetricFamily>* families) const {
  prometheus::MetricFamily family;
  family.name = name_;
  family.help = help_;
  family.type = prometheus::MetricType::Histogram;
  absl::MutexLock lock(&mu_);
  if (histograms_.empty()) return;
  family.metric.reserve(histograms_.size());
  for (const auto& [labels, histogram] : histograms_) {
    prometheus::ClientMetric metric = histogram->Collect();
    for (const auto& [name, value] : labels) metric.label.push_back({name, value});
    family.metric.push_back(std::move(metric));
  }
  families->push_back(std::move(family));
}

}  // namespace loopserve::server
