// AtomicHistogram (server/observability/histogram.h) against prometheus-cpp's own Histogram, the
// implementation it replaces on the request path: the same observations give the same buckets,
// count and sum, and concurrent observations are all counted.

#include <cmath>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "prometheus/histogram.h"
#include "server/observability/histogram.h"

namespace loopserve::server {
namespace {

void ExpectSameHistogram(const prometheus::ClientMetric& ours,
                         const prometheus::ClientMetric& theirs) {
  ASSERT_EQ(ours.histogram.bucket.size(), theirs.histogram.bucket.size());
  for (size_t i = 0; i < ours.histogram.bucket.size(); ++i) {
    EXPECT_EQ(ours.histogram.bucket[i].cumulative_count,
              theirs.histogram.bucket[i].cumulative_count)
        << "bucket " << i;
    EXPECT_EQ(ours.histogram.bucket[i].upper_bound, theirs.histogram.bucket[i].upper_bound)
        << "bucket " << i;
  }
  EXPECT_EQ(ours.histogram.sample_count, theirs.histogram.sample_count);
  EXPECT_DOUBLE_EQ(ours.histogram.sample_sum, theirs.histogram.sample_sum);
}

TEST(AtomicHistogramTest, BucketsAsPrometheusCpp) {
  const std::vector<double> bounds = {1e-6, 2.5e-6, 5e-6, 1e-5, 0.001, 0.5, 1.0, 300.0};
  AtomicHistogram ours(bounds);
  prometheus::Histogram theirs(bounds);
  // Every bound itself (counts in its own bucket: `le`), just above and below, zero, negative,
  // past the last bound, infinity, then random values over the whole range.
  std::vector<double> values = {0.0, -1.0, 1e9, std::numeric_limits<double>::infinity()};
  for (double b : bounds) {
    values.push_back(b);
    values.push_back(std::nextafter(b, 0.0));
    values.push_back(std::nextafter(b, 1e300));
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> exponent(-7.0, 3.0);
  for (int i = 0; i < 2000; ++i) values.push_back(std::pow(10.0, exponent(rng)));
  for (double v : values) {
    ours.Observe(v);
    theirs.Observe(v);
  }
  ExpectSameHistogram(ours.Collect(), theirs.Collect());
}

TEST(AtomicHistogramTest, NanCountsInTheLastBucket) {
  AtomicHistogram ours({1.0, 2.0});
  ours.Observe(std::nan(""));
  const prometheus::ClientMetric metric = ours.Collect();
  ASSERT_EQ(metric.histogram.bucket.size(), 3u);
  EXPECT_EQ(metric.histogram.bucket[0].cumulative_count, 0u);
  EXPECT_EQ(metric.histogram.bucket[1].cumulative_count, 0u);
  EXPECT_EQ(metric.histogram.bucket[2].cumulative_count, 1u);
  EXPECT_TRUE(std::isinf(metric.histogram.bucket[2].upper_bound));
}

TEST(AtomicHistogramTest, ConcurrentObservationsAreAllCounted) {
  AtomicHistogram histogram({1.0, 10.0, 100.0});
  constexpr int kThreads = 4;
  constexpr int kEach = 50000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&histogram, t] {
      // Integers: the sum is exact in a double, so any lost compare-and-swap would show.
      for (int i = 0; i < kEach; ++i) histogram.Observe(static_cast<double>((i + t) % 200));
    });
  }
  for (std::thread& thread : threads) thread.join();
  const prometheus::ClientMetric metric = histogram.Collect();
  EXPECT_EQ(metric.histogram.sample_count, static_cast<uint64_t>(kThreads * kEach));
  double expected_sum = 0;
  uint64_t le_10 = 0;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kEach; ++i) {
      const int v = (i + t) % 200;
      expected_sum += v;
      if (v <= 10) ++le_10;
    }
  }
  EXPECT_EQ(metric.histogram.sample_sum, expected_sum);
  EXPECT_EQ(metric.histogram.bucket[1].cumulative_count, le_10);
}

TEST(AtomicHistogramTest, FamilyKeepsOneHistogramPerLabelSetInOrder) {
  AtomicHistogramFamily family("loopserve_x_seconds", "help text");
  std::vector<prometheus::MetricFamily> collected;
  family.Collect(&collected);
  EXPECT_TRUE(collected.empty()) << "a family without histograms is left out";

  AtomicHistogram& b = family.Add({{"model", "b"}}, {1.0});
  AtomicHistogram& a = family.Add({{"model", "a"}}, {1.0});
  EXPECT_EQ(&family.Add({{"model", "b"}}, {1.0}), &b) << "the same labels give the same histogram";
  a.Observe(0.5);
  b.Observe(2.0);
  family.Collect(&collected);
  ASSERT_EQ(collected.size(), 1u);
  EXPECT_EQ(collected[0].name, "loopserve_x_seconds");
  EXPECT_EQ(collected[0].help, "help text");
  EXPECT_EQ(collected[0].type, prometheus::MetricType::Histogram);
  ASSERT_EQ(collected[0].metric.size(), 2u);
  ASSERT_EQ(collected[0].metric[0].label.size(), 1u);
  EXPECT_EQ(collected[0].metric[0].label[0].value, "a");
  EXPECT_EQ(collected[0].metric[0].histogram.bucket[0].cumulative_count, 1u);
  EXPECT_EQ(collected[0].metric[1].label[0].value, "b");
  EXPECT_EQ(collected[0].metric[1].histogram.bucket[0].cumulative_count, 0u);
  EXPECT_EQ(collected[0].metric[1].histogram.bucket[1].cumulative_count, 1u);
}

}  // namespace
}  // namespace loopserve::server
