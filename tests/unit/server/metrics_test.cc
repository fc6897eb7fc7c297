#include "server/observability/metrics.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/http/metrics_exposer.h"
#include "tests/unit/server/test_util.h"

namespace loopserve::server {
namespace {

using ::testing::HasSubstr;

using testing::HttpRequest;

std::string HttpGet(int port, const std::string& path) { return HttpRequest(port, "GET", path); }

TEST(MetricsTest, ExpositionHasEveryName) {
  Metrics metrics;
  std::shared_ptr<ModelVersionMetrics> version =
      metrics.ForModelVersion("rnn", 3, {"loop_outer", "loop_inner"});
  version->RecordRequest(Protocol::kGrpc, absl::StatusCode::kOk, absl::Milliseconds(3));
  version->RecordRequest(Protocol::kGrpc, absl::StatusCode::kInvalidArgument,
                         absl::Microseconds(20));
  version->RecordRequest(Protocol::kHttp, absl::StatusCode::kOk, absl::Milliseconds(1));
  version->RecordRequest(Protocol::kHttp, absl::StatusCode::kOk, absl::Milliseconds(2));
  version->RecordQueue(absl::Microseconds(5));
  version->RecordCompute(absl::Milliseconds(2));
  version->OnLoopFinished(0, 12, absl::Microseconds(120));
  version->OnLoopFinished(1, 0, absl::ZeroDuration());
  version->OnLoopFinished(7, 1, absl::ZeroDuration());  // out of range: ignored
  metrics.RecordLimitHit(engine::LimitReason::kIterationCap);
  metrics.RecordLimitHit(engine::LimitReason::kNone);  // no limit: not counted
  // Engine limits are recognised by their payload, not their code: a bare ResourceExhausted (an
  // out-of-memory, say) is not counted, nor is an error that is no limit at all.
  metrics.RecordLoopLimitHit(absl::StatusCode::kResourceExhausted);
  metrics.RecordLoopLimitHit(absl::StatusCode::kInvalidArgument);
  metrics.SetModelReady("rnn", 3, true);
  metrics.inflight_requests().Increment();
  metrics.queue_depth().Set(0);

  const std::string text = metrics.Serialize();
  for (const char* name :
       {"loopserve_requests_total", "loopserve_request_duration_seconds_bucket",
        "loopserve_queue_duration_seconds_count", "loopserve_compute_duration_seconds_sum",
        "loopserve_loop_iterations_bucket", "loopserve_loop_iteration_duration_seconds_bucket",
        "loopserve_loop_limit_hits_total", "loopserve_inflight_requests", "loopserve_queue_depth",
        "loopserve_model_ready"}) {
    EXPECT_THAT(text, HasSubstr(name)) << name;
  }
  EXPECT_THAT(text, HasSubstr("loopserve_requests_total{model=\"rnn\",outcome=\"success\","
                              "protocol=\"grpc\",version=\"3\"} 1"));
  EXPECT_THAT(text, HasSubstr("loopserve_requests_total{model=\"rnn\",outcome=\"success\","
                              "protocol=\"http\",version=\"3\"} 2"));
  EXPECT_THAT(text, HasSubstr("outcome=\"invalid_argument\",protocol=\"grpc\",version=\"3\"} 1"));
  EXPECT_THAT(text, HasSubstr("outcome=\"invalid_argument\",protocol=\"http\",version=\"3\"} 0"));
  EXPECT_THAT(text, HasSubstr("outcome=\"deadline_exceeded\",protocol=\"grpc\",version=\"3\"} 0"));
  EXPECT_THAT(text, HasSubstr("loopserve_request_duration_seconds_count{model=\"rnn\","
                              "protocol=\"http\",version=\"3\"} 2"));
  EXPECT_THAT(text, HasSubstr("loopserve_request_duration_seconds_sum{model=\"rnn\","
                              "protocol=\"http\",version=\"3\"} 0.003"));
  EXPECT_THAT(text, HasSubstr("loopserve_loop_iterations_count{loop=\"loop_outer\",model=\"rnn\","
                              "version=\"3\"} 1"));
  EXPECT_THAT(text, HasSubstr("loopserve_loop_iterations_sum{loop=\"loop_outer\",model=\"rnn\","
                              "version=\"3\"} 12"));
  EXPECT_THAT(text, HasSubstr("loopserve_loop_limit_hits_total{reason=\"iteration_cap\"} 1"));
  EXPECT_THAT(text, HasSubstr("loopserve_loop_limit_hits_total{reason=\"deadline\"} 0"));
  EXPECT_THAT(text, HasSubstr("loopserve_model_ready{model=\"rnn\",version=\"3\"} 1"));
  EXPECT_THAT(text, HasSubstr("loopserve_inflight_requests 1"));
}

TEST(MetricsTest, ProcessLoadAndLimitMetricsAndStatistics) {
  Metrics metrics;
  std::shared_ptr<ModelVersionMetrics> version = metrics.ForModelVersion("rnn", 1, {"loop"});
  metrics.RecordModelLoad("rnn", 1, /*ok=*/true, absl::Milliseconds(250));
  metrics.RecordModelLoad("rnn", 2, /*ok=*/false, absl::Milliseconds(1));
  metrics.RecordLimitHit(engine::LimitReason::kOutputBytes);
  version->RecordRequest(Protocol::kGrpc, absl::StatusCode::kOk, absl::Milliseconds(4));
  version->RecordQueue(absl::Microseconds(10));
  version->RecordComputeInput(absl::Microseconds(1));
  version->RecordCompute(absl::Milliseconds(3));
  version->RecordComputeOutput(absl::Microseconds(2));
  version->RecordInferences(1);
  // Two executions: one alone, one merged batch of 5 inferences.
  version->RecordExecution(1);
  version->RecordExecution(5);
  version->OnLoopFinished(0, 100, absl::Microseconds(500));
  version->OnLoopFinished(0, 50, absl::Microseconds(250));

  const std::string text = metrics.Serialize();
  EXPECT_THAT(text,
              HasSubstr("loopserve_model_load_duration_seconds{model=\"rnn\",version=\"1\"} 0.25"));
  EXPECT_THAT(text, HasSubstr("loopserve_model_loads_total{outcome=\"failure\"} 1"));
  EXPECT_THAT(text, HasSubstr("loopserve_loop_limit_hits_total{reason=\"output_bytes\"} 1"));
  EXPECT_THAT(text, HasSubstr("loopserve_executions_total{model=\"rnn\",version=\"1\"} 2"));
  EXPECT_THAT(text, HasSubstr("loopserve_inferences_total{model=\"rnn\",version=\"1\"} 1"));
  EXPECT_THAT(text, HasSubstr("loopserve_batch_size_sum{model=\"rnn\",version=\"1\"} 6"));
  EXPECT_THAT(text,
              HasSubstr("loopserve_batch_size_bucket{model=\"rnn\",version=\"1\",le=\"4\"} 1"));
  for (const char* name : {"process_resident_memory_bytes", "process_cpu_seconds_total",
                           "process_open_fds", "process_start_time_seconds"}) {
    EXPECT_THAT(text, HasSubstr(std::string("\n") + name + " ")) << name;
  }

  const ModelVersionStatistics stats = version->Statistics();
  EXPECT_EQ(stats.inference_count, 1u);
  EXPECT_EQ(stats.execution_count, 2u);
  EXPECT_EQ(stats.success.ns, 4000000u);
  EXPECT_EQ(stats.queue.count, 1u);
  EXPECT_EQ(stats.compute_input.ns, 1000u);
  EXPECT_EQ(stats.compute_infer.ns, 3000000u);
  EXPECT_EQ(stats.compute_output.ns, 2000u);
  ASSERT_EQ(stats.loops.size(), 1u);
  EXPECT_EQ(stats.loops[0].name, "loop");
  EXPECT_EQ(stats.loops[0].execution.count, 2u);
  EXPECT_EQ(stats.loops[0].execution.ns, 750000u);
  EXPECT_EQ(stats.loops[0].iterations, 150u);
}

TEST(MetricsTest, BucketsSpanMicrosecondsToMinutesAndOneToAMillionIterations) {
  const auto durations = Metrics::DurationBuckets();
  EXPECT_DOUBLE_EQ(durations.front(), 1e-6);
  EXPECT_GE(durations.back(), 60.0);
  const auto iterations = Metrics::IterationBuckets();
  EXPECT_DOUBLE_EQ(iterations[0], 1);
  EXPECT_DOUBLE_EQ(iterations[1], 2);
  EXPECT_DOUBLE_EQ(iterations[2], 5);
  EXPECT_DOUBLE_EQ(iterations[3], 10);
  EXPECT_DOUBLE_EQ(iterations.back(), 1e6);
}

TEST(MetricsExposerTest, ServesMetricsAndReportsABusyPort) {
  Metrics metrics;
  metrics.SetModelReady("m", 1, true);
  absl::StatusOr<std::unique_ptr<MetricsExposer>> exposer =
      MetricsExposer::Start("127.0.0.1", 0, metrics.registry());
  ASSERT_TRUE(exposer.ok()) << exposer.status();
  const int port = (*exposer)->port();
  ASSERT_GT(port, 0);
  const std::string response = HttpGet(port, "/metrics");
  EXPECT_THAT(response, HasSubstr("200 OK"));
  EXPECT_THAT(response, HasSubstr("loopserve_model_ready{model=\"m\",version=\"1\"} 1"));

  absl::StatusOr<std::unique_ptr<MetricsExposer>> second =
      MetricsExposer::Start("127.0.0.1", port, metrics.registry());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
}

// Threads of this process (/proc/self/task).
int ThreadCount() {
  int count = 0;
  if (DIR* tasks = opendir("/proc/self/task")) {
    while (dirent* entry = readdir(tasks)) count += entry->d_name[0] != '.';
    closedir(tasks);
  }
  return count;
}

// Anyone who can reach the port may open connections and send nothing. With 100 such connections
// open, a scrape still answers at once, the exposer runs on its event thread and accepting thread
// alone (civetweb, before, held one thread per connection and ran 128), and the idle connections
// are dropped after the idle timeout.
TEST(MetricsExposerTest, IdleConnectionsDoNotBlockAScrapeNorTakeThreads) {
  Metrics metrics;
  const int threads_before = ThreadCount();
  absl::StatusOr<std::unique_ptr<MetricsExposer>> exposer =
      MetricsExposer::Start("127.0.0.1", 0, metrics.registry(), absl::Seconds(1));
  ASSERT_TRUE(exposer.ok()) << exposer.status();
  const int port = (*exposer)->port();
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::vector<int> idle;
  for (int i = 0; i < 100; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    idle.push_back(fd);
  }
  absl::SleepFor(absl::Milliseconds(100));  // let the server accept them
  const absl::Time start = absl::Now();
  const std::string response = HttpGet(port, "/metrics");
  const absl::Duration took = absl::Now() - start;
  EXPECT_THAT(response, HasSubstr("200 OK"));
  EXPECT_THAT(response, HasSubstr("text/plain; version=0.0.4"));
  EXPECT_LT(took, absl::Seconds(1));
  const int exposer_threads = ThreadCount() - threads_before;
  EXPECT_LE(exposer_threads, MetricsExposer::kThreads + 1);
  std::printf("scrape with 100 idle connections open: %.1f ms; the exposer's threads: %d\n",
              absl::ToDoubleMilliseconds(took), exposer_threads);
  // The server closes an idle connection after its idle timeout: read() then sees EOF.
  char byte;
  timeval wait{10, 0};
  setsockopt(idle[0], SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
  EXPECT_EQ(read(idle[0], &byte, 1), 0);
  for (int fd : idle) close(fd);
}

TEST(MetricsExposerTest, AnswersOnlyGetMetrics) {
  Metrics metrics;
  absl::StatusOr<std::unique_ptr<MetricsExposer>> exposer =
      MetricsExposer::Start("127.0.0.1", 0, metrics.registry());
  ASSERT_TRUE(exposer.ok()) << exposer.status();
  EXPECT_THAT(HttpGet((*exposer)->port(), "/"), HasSubstr("404"));
  EXPECT_THAT(HttpGet((*exposer)->port(), "/metrics/x"), HasSubstr("404"));
  EXPECT_THAT(HttpRequest((*exposer)->port(), "POST", "/metrics"), HasSubstr("405"));
}

}  // namespace
}  // namespace loopserve::server
