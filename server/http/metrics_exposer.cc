#include "server/http/metrics_exposer.h"

#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"

namespace loopserve::server {

absl::StatusOr<std::unique_ptr<MetricsExposer>> MetricsExposer::Start(
    const std::string& address, int port, std::shared_ptr<prometheus::Collectable> collectable,
    absl::Duration idle_timeout) {
  HttpServer::Options options;
  options.address = address;
  options.port = port;
  options.threads = kThreads;
  options.max_body_bytes = 64 << 10;  // a scrape has no body
  options.idle_timeout = idle_timeout;
  std::weak_ptr<prometheus::Collectable> weak = collectable;
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Start(options, [weak](HttpExchange* exchange) {
        if (exchange->path() != "/metrics") {
          exchange->Reply(404, {{"Content-Type", "text/plain"}}, "not found: try /metrics\n");
          return;
        }
        if (exchange->method() != "GET") {
          exchange->Reply(405, {{"Allow", "GET"}, {"Content-Type", "text/plain"}},
                          "/metrics answers GET\n");
          return;
        }
        std::shared_ptr<prometheus::Collectable> metrics = weak.lock();
        if (metrics == nullptr) {
          exchange->Reply(503, {{"Content-Type", "text/plain"}}, "the metrics are gone\n");
          return;
        }
        std::ostringstream text;
        prometheus::TextSerializer().Serialize(text, metrics->Collect());
        exchange->Reply(200, {{"Content-Type", "text/plain; version=0.0.4; charset=utf-8"}},
                        text.str());
      });
  if (!server.ok()) {
    return absl::Status(server.status().code(),
                        absl::StrCat("cannot serve metrics: ", server.status().message()));
  }
  return std::unique_ptr<MetricsExposer>(new MetricsExposer(*std::move(server)));
}

// Every scrape is answered on the event thread as it arrives: nothing to wait for.
MetricsExposer::~MetricsExposer() { server_->Shutdown(absl::Milliseconds(100)); }

}  // namespace loopserve::server
