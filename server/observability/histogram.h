#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/client_metric.h"
#include "prometheus/labels.h"
#include "prometheus/metric_family.h"

namespace loopserve::server {

// A Prometheus histogram whose Observe takes no lock: one relaxed atomic add on the value's
// bucket and a compare-and-swap on the sum. prometheus-cpp 1.0's Histogram takes a mutex in every
// Observe, and the request path observes four to six of them per request (issue 34).
//
// Collect reads the buckets one by one while requests may be observing, so a scrape can see an
// observation's bucket without its sum (or the reverse); the count is the sum of the buckets read,
// so `_count` always equals the `+Inf` bucket, as the exposition format requires. The next scrape
// sees both.
class AtomicHistogram {
 public:
  // `bounds`: the finite upper bounds, ascending (a value v counts in the first bucket whose bound
  // is >= v; above the last, and NaN, in +Inf).
  explicit AtomicHistogram(std::vector<double> bounds);

  void Observe(double value);

  // The cumulative buckets (the last one +Inf), count and sum, as prometheus-cpp's Collect gives
  // them.
  prometheus::ClientMetric Collect() const;

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds_.size() + 1 (+Inf last)
  std::atomic<double> sum_{0.0};
};

// The histograms of one metric name, one per label set (prometheus::Family<Histogram>'s role).
// Add takes a lock and is for load time; Observe on what it returns is lock-free. Adding a label
// set twice returns the first histogram (its counts carry on), as prometheus-cpp's Family::Add.
class AtomicHistogramFamily {
 public:
  AtomicHistogramFamily(std::string name, std::string help)
      : name_(std::move(name)), help_(std::move(help)) {}

  AtomicHistogram& Add(const prometheus::Labels& labels, const std::vector<double>& bounds);

  // Appends the family, its histograms in label-set order, to `families`; nothing while it has
  // none (as prometheus-cpp's Family::Collect).
  void Collect(std::vector<prometheus::MetricFamily>* families) const;

 private:
  const std::string name_;
  const std::string help_;
  mutable absl::Mutex mu_;
  std::map<prometheus::Labels, std::unique_ptr<AtomicHistogram>> histograms_ ABSL_GUARDED_BY(mu_);
};

}  // namespace loopserve::server
