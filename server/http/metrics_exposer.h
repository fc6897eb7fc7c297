#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "prometheus/collectable.h"
#include "server/http/http_server.h"

namespace loopserve::server {

// Serves a collectable (a registry, or Metrics::collectable()) at http://<address>:<port>/metrics
// in Prometheus' text format (GET; other paths 404, other methods 405), on an HttpServer
// (libevhtp) of kThreads event thread plus its accepting thread: a scrape takes a fraction of a
// millisecond, and idle or slow clients cost a socket, never a thread, so however many
// connections are open a scrape is answered at once. A connection idle for `idle_timeout` is
// closed. Owns the HTTP server; the collectable is held weakly (a scrape after it is gone answers
// 503), so keep it alive. Thread-safe.
class MetricsExposer {
 public:
  static constexpr int kThreads = 1;
  // Longer than Prometheus' scrape interval (15 s by default), so a scraper's keep-alive
  // connection is reused.
  static constexpr absl::Duration kIdleTimeout = absl::Seconds(30);

  // Binds `address`:`port` (port 0 picks a free port). Unavailable with a clean message when the
  // port is taken or the address is invalid.
  static absl::StatusOr<std::unique_ptr<MetricsExposer>> Start(
      const std::string& address, int port, std::shared_ptr<prometheus::Collectable> collectable,
      absl::Duration idle_timeout = kIdleTimeout);

  ~MetricsExposer();

  int port() const { return server_->port(); }

 private:
  explicit MetricsExposer(std::unique_ptr<HttpServer> server) : server_(std::move(server)) {}

  std::unique_ptr<HttpServer> server_;
};

}  // namespace loopserve::server
