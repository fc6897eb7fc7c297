// A real Prometheus (Debian's /usr/bin/prometheus) scraping a running loopserve on loopback:
// after Loop requests with known trip counts, PromQL over the loop iteration histogram returns
// exactly those counts. Both processes are children of the test and are stopped by it.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/server_process.h"
#include "tests/integration/test_util.h"

namespace loopserve::testing {
namespace {

// A port the kernel considers free right now (bound and released); Prometheus cannot report the
// port it picked for :0, so it gets one chosen here.
absl::StatusOr<int> PickFreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return absl::InternalError("bind 127.0.0.1:0 failed");
  }
  close(fd);
  return ntohs(addr.sin_port);
}

// Debian's prometheus as a child process, scraping `target` every second, its TSDB and log in a
// scratch directory. The destructor sends SIGTERM, waits up to 20 s, then SIGKILLs.
class PrometheusProcess {
 public:
  static absl::StatusOr<std::unique_ptr<PrometheusProcess>> Start(const std::string& target) {
    std::unique_ptr<PrometheusProcess> p(new PrometheusProcess());
    const std::string dir = MakeScratchDir("prometheus");
    const std::string config = dir + "/prometheus.yml";
    std::ofstream(config) << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                          << "scrape_configs:\n  - job_name: loopserve\n    static_configs:\n"
                          << "      - targets: ['" << target << "']\n";
    absl::StatusOr<int> port = PickFreePort();
    if (!port.ok()) return port.status();
    p->port_ = *port;
    p->log_path_ = dir + "/prometheus.log";
    const std::vector<std::string> args = {
        LOOPSERVE_PROMETHEUS_BINARY, "--config.file=" + config,
        "--storage.tsdb.path=" + dir + "/tsdb",
        absl::StrCat("--web.listen-address=127.0.0.1:", p->port_), "--log.level=warn"};
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const int log_fd = open(p->log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) return absl::InternalError("cannot create " + p->log_path_);
    p->pid_ = fork();
    if (p->pid_ == 0) {
      dup2(log_fd, STDOUT_FILENO);
      dup2(log_fd, STDERR_FILENO);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(log_fd);
    if (p->pid_ < 0) return absl::InternalError("fork failed");
    return p;
  }

  ~PrometheusProcess() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (waitpid(pid_, nullptr, WNOHANG) == 0) {
      if (absl::Now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

  int port() const { return port_; }
  bool running() const { return waitpid(pid_, nullptr, WNOHANG) == 0; }
  std::string log() const {
    std::ifstream in(log_path_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  // Runs an instant PromQL query; the value of its single result, NotFound when the result is
  // empty, FailedPrecondition when Prometheus rejects it (the error in the message).
  absl::StatusOr<double> QueryValue(const std::string& promql) const {
    absl::StatusOr<HttpResponse> r = HttpGet(port_, "/api/v1/query?query=" + UrlEncode(promql));
    if (!r.ok()) return r.status();
    if (r->body.find("\"status\":\"success\"") == std::string::npos) {
      return absl::FailedPreconditionError(absl::StrCat(promql, ": ", r->body));
    }
    // {"status":"success","data":{"resultType":"vector","result":[{"metric":{..},
    //  "value":[1700000000.123,"6"]}]}}
    const size_t value = r->body.find("\"value\":[");
    if (value == std::string::npos) return absl::NotFoundError(promql + ": empty result");
    const size_t open = r->body.find(",\"", value);
    const size_t close = open == std::string::npos ? open : r->body.find('"', open + 2);
    double v;
    if (close == std::string::npos ||
        !absl::SimpleAtod(r->body.substr(open + 2, close - open - 2), &v)) {
      return absl::InternalError(absl::StrCat(promql, ": unexpected answer ", r->body));
    }
    return v;
  }

  // Polls QueryValue every 200 ms until it equals `want` or `timeout` passes; returns the last
  // value or error.
  absl::StatusOr<double> WaitForValue(const std::string& promql, double want,
                                      absl::Duration timeout) const {
    const absl::Time deadline = absl::Now() + timeout;
    absl::StatusOr<double> v = QueryValue(promql);
    while ((!v.ok() || *v != want) && absl::Now() < deadline && running()) {
      absl::SleepFor(absl::Milliseconds(200));
      v = QueryValue(promql);
    }
    return v;
  }

 private:
  PrometheusProcess() = default;

  static std::string UrlEncode(const std::string& s) {
    std::string out;
    for (unsigned char c : s) {
      if (isalnum(c) || c == '_' || c == '.' || c == '-' || c == '~') {
        out += static_cast<char>(c);
      } else {
        char buf[4];
        std::snprintf(buf, sizeof(buf), "%%%02X", c);
        out += buf;
      }
    }
    return out;
  }

  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_path_;
};

TEST(PrometheusTest, PromQlReturnsLoopIterationHistogram) {
  ServerProcess::Options options;
  options.binary = LoopserveBinary();
  options.model_repository = TestModelRepository();
  auto server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = client::Client::Create((*server)->grpc_address());
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->WaitForReady(absl::Seconds(60)).ok());

  // counter runs its Loop M times: 4 executions of 5 iterations and 2 of 50 (120 in all).
  for (int64_t m : {5, 5, 5, 5, 50, 50}) {
    auto r = (*client)->Infer("counter", {client::MakeTensor<int64_t>("M", {}, {m}),
                                          client::MakeTensor<int64_t>("start", {1}, {0})});
    ASSERT_TRUE(r.ok()) << r.status();
  }

  auto prometheus = PrometheusProcess::Start(absl::StrCat("127.0.0.1:", (*server)->metrics_port()));
  ASSERT_TRUE(prometheus.ok()) << prometheus.status();
  const PrometheusProcess& prom = **prometheus;
  const absl::Duration timeout = absl::Seconds(30);

  // The first successful scrape: Prometheus is up and reaches loopserve.
  auto up = prom.WaitForValue("up{job=\"loopserve\"}", 1, timeout);
  ASSERT_TRUE(up.ok() && *up == 1)
      << (up.ok() ? absl::StrCat(*up) : up.status().ToString()) << "\nprometheus log:\n"
      << prom.log();

  auto count =
      prom.WaitForValue("sum(loopserve_loop_iterations_count{model=\"counter\"})", 6, timeout);
  ASSERT_TRUE(count.ok()) << count.status() << "\n" << prom.log();
  EXPECT_EQ(*count, 6);
  auto sum = prom.QueryValue("sum(loopserve_loop_iterations_sum{model=\"counter\"})");
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(*sum, 120);
  // Buckets 1, 2, 5, 10, 20, 50, ...: four executions in le="5", all six in le="50".
  auto le5 = prom.QueryValue("sum(loopserve_loop_iterations_bucket{model=\"counter\",le=\"5\"})");
  ASSERT_TRUE(le5.ok()) << le5.status();
  EXPECT_EQ(*le5, 4);
  auto le50 = prom.QueryValue("sum(loopserve_loop_iterations_bucket{model=\"counter\",le=\"50\"})");
  ASSERT_TRUE(le50.ok()) << le50.status();
  EXPECT_EQ(*le50, 6);
  // The median falls in the (2, 5] bucket, the p90 in (20, 50].
  auto p50 = prom.QueryValue(
      "histogram_quantile(0.5, sum by (le) (loopserve_loop_iterations_bucket{model=\"counter\"}))");
  ASSERT_TRUE(p50.ok()) << p50.status();
  EXPECT_GT(*p50, 2);
  EXPECT_LE(*p50, 5);
  auto p90 = prom.QueryValue(
      "histogram_quantile(0.9, sum by (le) (loopserve_loop_iterations_bucket{model=\"counter\"}))");
  ASSERT_TRUE(p90.ok()) << p90.status();
  EXPECT_GT(*p90, 20);
  EXPECT_LE(*p90, 50);
  // The per-iteration time histogram has one observation per execution as well.
  auto per_iteration =
      prom.QueryValue("sum(loopserve_loop_iteration_duration_seconds_count{model=\"counter\"})");
  ASSERT_TRUE(per_iteration.ok()) << per_iteration.status();
  EXPECT_EQ(*per_iteration, 6);
  auto successes =
      prom.QueryValue("sum(loopserve_requests_total{model=\"counter\",outcome=\"success\"})");
  ASSERT_TRUE(successes.ok()) << successes.status();
  EXPECT_EQ(*successes, 6);
  // A malformed query is rejected, so the checks above really went through the PromQL engine.
  EXPECT_TRUE(absl::IsFailedPrecondition(prom.QueryValue("sum(").status()));
}

// loopctl perf's concurrency sweep against the server: every level reports p50/p90/p99, and the
// requests it says it sent (measured + warmup) are exactly what Prometheus scraped.
TEST(PrometheusTest, PerfSweepRequestsMatchPrometheus) {
  ServerProcess::Options options;
  options.binary = LoopserveBinary();
  options.model_repository = TestModelRepository();
  auto server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto prometheus = PrometheusProcess::Start(absl::StrCat("127.0.0.1:", (*server)->metrics_port()));
  ASSERT_TRUE(prometheus.ok()) << prometheus.status();

  auto perf = RunCommand({LoopctlBinary(), "--addr=" + (*server)->grpc_address(), "perf", "rnn",
                          "--input=M:INT64::8", "--shape=h0:2,4", "--concurrency_range=1:3:2",
                          "--duration=0.5", "--warmup=3"});
  ASSERT_TRUE(perf.ok()) << perf.status();
  ASSERT_EQ(perf->exit_code, 0) << perf->err;
  EXPECT_THAT(perf->out, ::testing::HasSubstr("concurrency 1,"));
  EXPECT_THAT(perf->out, ::testing::HasSubstr("concurrency 3,"));
  EXPECT_THAT(perf->out,
              ::testing::HasSubstr("concurrency   infer/s    p50 us    p90 us    p99 us"));
  // One JSON line per level: {"model":"rnn","requests":N,"concurrency":C,...,"p99_us":...}.
  int64_t sent = 3;  // warmup
  int levels = 0;
  for (absl::string_view line : absl::StrSplit(perf->out, '\n')) {
    if (!absl::StartsWith(line, "{\"model\":\"rnn\",\"requests\":")) continue;
    EXPECT_THAT(std::string(line), ::testing::HasSubstr("\"p99_us\":"));
    int64_t n = 0;
    absl::string_view rest = line.substr(line.find("\"requests\":") + 11);
    ASSERT_TRUE(absl::SimpleAtoi(rest.substr(0, rest.find(',')), &n)) << line;
    EXPECT_GT(n, 0);
    sent += n;
    ++levels;
  }
  EXPECT_EQ(levels, 2) << perf->out;

  auto counted =
      (*prometheus)
          ->WaitForValue("sum(loopserve_requests_total{model=\"rnn\",outcome=\"success\"})", sent,
                         absl::Seconds(30));
  ASSERT_TRUE(counted.ok()) << counted.status() << "\n" << (*prometheus)->log();
  EXPECT_EQ(*counted, sent);
}

}  // namespace
}  // namespace loopserve::testing
