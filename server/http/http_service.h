#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/http/http_server.h"
#include "server/runner/inference_runner.h"
#include "server/server_api.h"

namespace loopserve::server {

// A REST request's path parsed: /v2/models/{model}[/versions/{version}][/{action}] and the rest
// of the table below.
struct RestRoute {
  std::string model;
  std::string version;
  // "", "live", "ready", "infer", "generate", "generate_stream", "config", "stats", "load",
  // "unload", "index", "shm_..." / "cudashm_..." (shared memory; `model` is the region)
  std::string action;
  std::string method;  // the method the route takes, "" when the path names nothing
};

// Parses the path of a KServe v2 / Triton request (percent-escapes undone, no query string);
// method "" for an unknown path. Never fails otherwise: the handler validates what it names.
RestRoute ParseRestRoute(absl::string_view path);

// The REST adapter: KServe v2 (Open Inference Protocol) over HTTP/1.1 on an HttpServer, over the
// protocol-free InferenceRunner (POST .../infer) and ServerApi (everything else). Its own
// concerns are HTTP's: routing, JSON and Triton's binary tensor data extension (http_codec.h),
// status codes, and noticing a client that closed its connection.
//
//   GET  /v2/health/live, /v2/health/ready                 200, or 503 when not ready
//   GET  /v2                                               server metadata
//   GET  /v2/models/{m}[/versions/{v}]                     model metadata
//   GET  /v2/models/{m}[/versions/{v}]/ready               200, 503 not ready, 404 unknown
//   GET  /v2/models/{m}[/versions/{v}]/config              Triton: the complete model config
//   GET  /v2/models[/{m}[/versions/{v}]]/stats             Triton: statistics
//   POST /v2/models/{m}[/versions/{v}]/infer               inference (JSON or JSON + binary)
//   POST /v2/models/{m}[/versions/{v}]/generate            Triton: one response (no events)
//   POST /v2/models/{m}[/versions/{v}]/generate_stream     Triton: server-sent events, one per
//                                                          Loop iteration, then the final one
//   generate and generate_stream also take Triton's flat body ({"<input>": value, ...,
//   "parameters": {...}}) and then answer flat ({"model_name", ..., "<output>": value}).
//   POST /v2/repository/index                              Triton: [{name, version, state, ...}]
//   POST /v2/repository/models/{m}/load, .../unload        Triton: explicit model control
//   GET  /v2/systemsharedmemory[/region/{r}]/status         Triton: system shared memory
//   POST /v2/systemsharedmemory/region/{r}/register         {"key", "offset", "byte_size"}
//   POST /v2/systemsharedmemory[/region/{r}]/unregister
//   .../v2/cudasharedmemory/...                            501: CPU-only (empty status)
//
// `stream_iterations` (default true on generate_stream; asked for on /infer) answers
// text/event-stream: one `data: {json}` event per iteration of the model's top-level Loop (the
// KServe v2 response form with that iteration's scan slices, parameters iteration and
// triton_final_response: false), then the final response (triton_final_response: true); an error
// after the headers is the last event, data: {"error": ...}. At most
// InferenceCall::kStreamWindow events wait unwritten; past that the Loop waits for the client.
//
// Errors are {"error": "<the same message gRPC would give>"} with the status HttpStatusFor maps
// the canonical code to (400 bad request, 404 unknown model, 429 queue full or a request limit,
// 503 not ready or shutting down, 504 deadline, 413 body over --max_message_bytes); an unknown
// path 404, a known path with the wrong method 405 (with Allow), a Content-Encoding other than
// gzip, deflate or identity 415. gzip and deflate bodies are inflated (zlib) up to the body limit
// first: past it 413, corrupt data 400.
//
// Thread-safe. Borrows the runner and the API, which must outlive it. Shutdown (also from the
// destructor) closes the port after the answers in flight went out.
class HttpService {
 public:
  static absl::StatusOr<std::unique_ptr<HttpService>> Start(const HttpServer::Options& options,
                                                            InferenceRunner* runner,
                                                            ServerApi* api);
  ~HttpService();

  int port() const { return server_->port(); }
  void Shutdown(absl::Duration drain);

 private:
  HttpService(InferenceRunner* runner, ServerApi* api, uint64_t max_body_bytes)
      : runner_(runner), api_(api), max_body_bytes_(max_body_bytes) {}
  void Handle(HttpExchange* exchange);
  // /v2/systemsharedmemory/... and /v2/cudasharedmemory/... (route.model: the region's name).
  void HandleSharedMemory(HttpExchange* exchange, const RestRoute& route, absl::string_view body);

  InferenceRunner* const runner_;
  ServerApi* const api_;
  const uint64_t max_body_bytes_;  // also the most a compressed body may inflate to
  std::unique_ptr<HttpServer> server_;
};

}  // namespace loopserve::server
