#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/observability/tracer.h"

namespace loopserve::server {

// Exports traces (trace_mode "opentelemetry") to an OpenTelemetry collector over OTLP/HTTP with
// the JSON encoding (POST of an ExportTraceServiceRequest, Content-Type application/json), as
// Triton's `--trace-config opentelemetry,url=...` does with protobuf. Per traced request:
//   "InferRequest"   REQUEST_START .. REQUEST_END; Triton's activities as its events; attributes
//                    model_name, model_version, trace_id (our trace id), request_id
//   "compute"        its child, COMPUTE_START .. COMPUTE_END
//   "loop_iteration" at LOOP_ITERATIONS, children of "compute", one per iteration; attributes
//                    loop, iteration
// A thread of its own batches them (up to kMaxBatch traces per POST, sent at least every
// kInterval) so a request never waits for the collector; at most kMaxPending traces wait, later
// ones are dropped (counted in the log). A collector that fails or does not answer within
// kTimeout loses that batch, with one warning a minute. Plain http:// only. Thread-safe.
class OtlpExporter : public TraceExporter {
 public:
  static constexpr size_t kMaxBatch = 256;
  static constexpr size_t kMaxPending = 4096;
  static constexpr absl::Duration kInterval = absl::Milliseconds(500);
  static constexpr absl::Duration kTimeout = absl::Seconds(5);

  // `url`: http://host[:port][/path] (port 80, path /v1/traces by default). InvalidArgument for
  // anything else.
  static absl::StatusOr<std::unique_ptr<OtlpExporter>> Create(absl::string_view url);
  ~OtlpExporter() override;  // sends what is pending (bounded by kTimeout), stops the thread

  void Export(std::unique_ptr<RequestTrace> trace) override;
  void Flush() override;

  // The ExportTraceServiceRequest JSON body for `traces` (service.name "loopserve").
  static std::string ToOtlpJson(absl::Span<const std::unique_ptr<RequestTrace>> traces);

 private:
  OtlpExporter(std::string host, std::string port, std::string path);
  void Run();
  // POSTs `body`; OK on a 2xx answer.
  absl::Status Post(const std::string& body) const;

  const std::string host_;
  const std::string port_;
  const std::string path_;
  absl::Mutex mutex_;
  std::vector<std::unique_ptr<RequestTrace>> pending_ ABSL_GUARDED_BY(mutex_);
  bool sending_ ABSL_GUARDED_BY(mutex_) = false;  // a batch is being posted
  bool flush_ ABSL_GUARDED_BY(mutex_) = false;    // send now
  bool stop_ ABSL_GUARDED_BY(mutex_) = false;
  uint64_t dropped_ ABSL_GUARDED_BY(mutex_) = 0;
  absl::Time last_warning_ ABSL_GUARDED_BY(mutex_) = absl::InfinitePast();
  std::thread thread_;
};

}  // namespace loopserve::server
