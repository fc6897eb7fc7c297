#include "server/http/http_service.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "engine/base/status_macros.h"
#include "server/http/content_encoding.h"
#include "server/http/http_codec.h"
#include "server/observability/logging.h"
#include "server/observability/tracer.h"
#include "server/status_util.h"

namespace loopserve::server {
namespace {

using Headers = std::vector<std::pair<std::string, std::string>>;

const Headers& JsonType() {
  static const Headers* const headers = new Headers{{"Content-Type", "application/json"}};
  return *headers;
}

void ReplyError(HttpExchange* exchange, const absl::Status& status, Headers headers = {}) {
  headers.emplace_back("Content-Type", "application/json");
  exchange->Reply(HttpStatusFor(status.code()), std::move(headers), ErrorJson(status.message()));
}

void ReplyJson(HttpExchange* exchange, std::string json) {
  exchange->Reply(200, JsonType(), std::move(json));
}

// A ServerApi answer as JSON, or its error.
template <typename T>
void ReplyProto(HttpExchange* exchange, const absl::StatusOr<T>& answer) {
  if (!answer.ok()) return ReplyError(exchange, answer.status());
  ReplyJson(exchange, ProtoToJson(*answer));
}

// Server-sent events: each response is one event, `data: <JSON>` and a blank line.
std::string SseEvent(absl::string_view json) { return absl::StrCat("data: ", json, "\n\n"); }

const Headers& SseType() {
  static const Headers* const headers =
      new Headers{{"Content-Type", "text/event-stream"}, {"Cache-Control", "no-cache"}};
  return *headers;
}

// One POST .../infer or .../generate_stream: the InferenceCall the runner takes through the
// request path. Created on the event thread; Finish replies through the exchange (on whichever
// thread ran the request) and deletes the call.
//
// Streamed (generate_stream, or `stream_iterations: true` on /infer) the answer is a stream of
// server-sent events, as Triton's generate_stream answers: one per iteration (RespondIteration,
// on the worker running the Loop; the first one sends the headers), then the final response, or
// after the headers an error event {"error": ...}; an error before them is an ordinary error
// status. At most kStreamWindow events wait to be written to the socket; past that the Loop
// waits for the client to read.
class HttpInferCall final : public InferenceCall {
 public:
  // `inflated`: the body, inflated, when it came compressed (with HttpExchange::kBodyPadding
  // readable bytes past its end); none: the exchange's body.
  // `flat`: answer in Triton's flat generate form (the request came in it).
  HttpInferCall(HttpExchange* exchange, std::optional<std::string> inflated, bool flat)
      : InferenceCall(Protocol::kHttp, Polling::kAlways, exchange->received(),
                      absl::InfiniteFuture()),
        exchange_(exchange),
        flat_(flat),
        inflated_(std::move(inflated)),
        body_view_(inflated_.has_value() ? absl::string_view(*inflated_) : exchange->body()) {}

  // On the event thread: parses the body into `request` and submits it. The runner answers
  // every outcome through Finish, which deletes the call.
  void Start(InferenceRunner* runner, const RestRoute& route, const SharedMemoryManager* shm) {
    // One parser per event thread: its document must stay until Submit has bound the request.
    thread_local RestInferParser parser;
    request.model_name = route.model;
    request.model_version = route.version;
    // generate_stream streams iterations unless the request says `stream_iterations: false`.
    request.stream_iterations = route.action == "generate_stream";
    const std::string& endpoint = route.action;
    request.error = CatchExceptions(absl::StrCat(endpoint, ": "), [&] {
      RestSharedMemory refs;
      LS_RETURN_IF_ERROR(parser.Parse(endpoint, body_view_,
                                      exchange_->Header("Inference-Header-Content-Length"),
                                      &request, &outputs_, &refs));
      return BindSharedMemory(refs, *shm);
    });
    events_ = route.action == "generate_stream" || request.stream_iterations;
    if (request.error.ok()) {
      const char* sequence_header = exchange_->Header(kSequenceIdHeader);
      request.error = ApplySequenceIdHeader(sequence_header == nullptr
                                                ? std::nullopt
                                                : std::optional<absl::string_view>(sequence_header),
                                            &request);
    }
    if (request.error.ok() && events_) request.error = CheckNoBinaryOutputs();
    runner->Submit(this);
  }

 protected:
  absl::Status Respond(const LoadedModel& model, const std::vector<int>& outputs,
                       std::vector<engine::Value>& values) override {
    const RestStreamParameters final_response{-1, /*final_response=*/true};
    LS_RETURN_IF_ERROR(EncodeRestResponse(
        *model.model, model.name, model.version_string, request.id, outputs, values, outputs_,
        &body_, &json_length_, events_ ? &final_response : nullptr, &shm_));
    values.clear();
    if (flat_) {
      LS_ASSIGN_OR_RETURN(body_, InferToGenerateResponse(body_));
      json_length_ = body_.size();
      return absl::OkStatus();
    }
    for (int index : outputs) {
      const std::string& name = model.model->outputs()[index].name;
      binary_ |= shm_.Output(name) == nullptr && outputs_.Binary(name);
    }
    return absl::OkStatus();
  }

  bool CanStreamIterations() const override { return true; }

  absl::Status RespondIteration(const LoadedModel& model, int64_t iteration,
                                absl::Span<const engine::ScanSlice> slices) override {
    LS_RETURN_IF_ERROR(EncodeRestSlices(*model.model, model.name, model.version_string, request.id,
                                        iteration, slices, &event_json_));
    if (flat_) {
      LS_ASSIGN_OR_RETURN(event_json_, InferToGenerateResponse(event_json_));
    }
    if (!started_) {
      started_ = true;
      exchange_->StartChunks(200, SseType());
    } else {
      LS_RETURN_IF_ERROR(AwaitClient(
          [this](absl::Time until) { return exchange_->AwaitChunkRoom(kStreamWindow, until); },
          "the client was not reading the server-sent events"));
    }
    if (!exchange_->SendChunk(SseEvent(event_json_))) {
      // The connection's event thread could not take the event: the stream is abandoned, and
      // the run stops here rather than computing iterations nobody receives.
      return absl::UnavailableError(
          "HTTP: the server-sent event could not be handed to the connection's event thread");
    }
    return absl::OkStatus();
  }

  void Finish(const absl::Status& status) override {
    HttpExchange* exchange = exchange_;
    if (started_) {
      // The headers went out: the outcome is the last event (Triton sends errors as events too).
      exchange->EndChunks(SseEvent(status.ok() ? body_ : ErrorJson(status.message())));
    } else if (!status.ok()) {
      ReplyError(exchange, status);
    } else if (events_) {
      exchange->Reply(200, SseType(), SseEvent(body_));  // no iteration: one event
    } else if (!binary_) {
      exchange->Reply(200, JsonType(), std::move(body_));
    } else {
      exchange->Reply(200,
                      {{"Content-Type", "application/octet-stream"},
                       {"Inference-Header-Content-Length", absl::StrCat(json_length_)}},
                      std::move(body_));
    }
    delete this;
  }

  bool ClientGone() override { return exchange_->ClientGone(); }

 private:
  // Pins the shared memory the request names (its inputs' raw bytes view it).
  absl::Status BindSharedMemory(const RestSharedMemory& refs, const SharedMemoryManager& shm) {
    for (const auto& [index, ref] : refs.inputs) {
      InferenceRequest::Input& input = request.inputs[index];
      LS_ASSIGN_OR_RETURN(SharedMemoryView view,
                          shm.Map(ref, absl::StrCat("input ", QuoteUntrusted(input.name))));
      input.raw = view.bytes();
      shm_.inputs.push_back(std::move(view));
    }
    for (const auto& [name, ref] : refs.outputs) {
      LS_ASSIGN_OR_RETURN(SharedMemoryView view,
                          shm.Map(ref, absl::StrCat("output ", QuoteUntrusted(name))));
      shm_.outputs.emplace_back(name, std::move(view));
    }
    return absl::OkStatus();
  }

  // Server-sent events are text: every output goes as JSON.
  absl::Status CheckNoBinaryOutputs() const {
    bool binary = outputs_.binary_default;
    for (const auto& [name, output_binary] : outputs_.requested) binary |= output_binary;
    if (!binary) return absl::OkStatus();
    return absl::InvalidArgumentError(
        "binary data outputs (binary_data_output, outputs[].parameters.binary_data) cannot be "
        "sent as server-sent events; ask for JSON data when streaming");
  }

  HttpExchange* const exchange_;               // answered in Finish; the body stays until then
  const bool flat_;                            // Triton's flat generate response
  const std::optional<std::string> inflated_;  // a compressed body inflated (inputs view it)
  const absl::string_view body_view_;
  RestOutputs outputs_;
  SharedMemoryBindings shm_;  // pinned until the call is deleted
  std::string body_;
  size_t json_length_ = 0;
  bool binary_ = false;  // some output is binary data (even of 0 bytes): the header tells the split
  bool events_ = false;  // answered as server-sent events
  bool started_ = false;    // the event stream's headers are on their way
  std::string event_json_;  // the iteration's response, reused from iteration to iteration
};

}  // namespace

RestRoute ParseRestRoute(absl::string_view path) {
  std::vector<std::string> parts = absl::StrSplit(path, '/', absl::SkipEmpty());
  RestRoute route;
  const size_t n = parts.size();
  if (n == 0 || parts[0] != "v2") return route;
  if (n == 1) {
    route.method = "GET";  // server metadata
    return route;
  }
  if (parts[1] == "health" && n == 3 && (parts[2] == "live" || parts[2] == "ready")) {
    route.action = parts[2];
    route.method = "GET";
    return route;
  }
  if ((parts[1] == "logging" && n == 2) ||
      (parts[1] == "trace" && n == 3 && parts[2] == "setting")) {
    // Triton's logging and trace extensions: GET reads, POST sets.
    route.action = parts[1];
    route.method = "GET";
    return route;
  }
  if (parts[1] == "systemsharedmemory" || parts[1] == "cudasharedmemory") {
    // /v2/<kind>/status, /v2/<kind>/unregister, /v2/<kind>/region/{name}/{status|register|
    // unregister}
    route.action = parts[1] == "systemsharedmemory" ? "shm_" : "cudashm_";
    if (n == 3 && (parts[2] == "status" || parts[2] == "unregister")) {
      route.action += parts[2];
    } else if (n == 5 && parts[2] == "region" &&
               (parts[4] == "status" || parts[4] == "register" || parts[4] == "unregister")) {
      route.model = parts[3];  // the region's name
      route.action += parts[4];
    } else {
      route.action.clear();
      return route;
    }
    route.method = absl::EndsWith(route.action, "status") ? "GET" : "POST";
    return route;
  }
  if (parts[1] == "repository") {
    if (n == 3 && parts[2] == "index") {
      route.action = "index";
      route.method = "POST";
    } else if (n == 5 && parts[2] == "models" && (parts[4] == "load" || parts[4] == "unload")) {
      route.model = parts[3];
      route.action = parts[4];
      route.method = "POST";
    }
    return route;
  }
  if (parts[1] != "models") return route;
  if (n == 3 && parts[2] == "stats") {  // every model's statistics
    route.action = "stats";
    route.method = "GET";
    return route;
  }
  if (n < 3) return route;
  route.model = parts[2];
  if (n == 5 && parts[3] == "trace" && parts[4] == "setting") {
    route.action = "trace";  // a model's trace settings (Tracer::Update)
    route.method = "GET";
    return route;
  }
  size_t next = 3;
  if (n >= 5 && parts[3] == "versions") {
    route.version = parts[4];
    next = 5;
  }
  if (next == n) {
    route.method = "GET";  // model metadata
  } else if (next + 1 == n) {
    route.action = parts[next];
    if (route.action == "ready" || route.action == "config" || route.action == "stats") {
      route.method = "GET";
    } else if (route.action == "infer" || route.action == "generate" ||
               route.action == "generate_stream") {
      route.method = "POST";
    }
  }
  return route;
}

absl::StatusOr<std::unique_ptr<HttpService>> HttpService::Start(const HttpServer::Options& options,
                                                                InferenceRunner* runner,
                                                                ServerApi* api) {
  std::unique_ptr<HttpService> service(new HttpService(runner, api, options.max_body_bytes));
  HttpService* self = service.get();
  LS_ASSIGN_OR_RETURN(service->server_, HttpServer::Start(options, [self](HttpExchange* exchange) {
                        const absl::Status status = CatchExceptions("HTTP: ", [&] {
                          self->Handle(exchange);
                          return absl::OkStatus();
                        });
                        if (!status.ok()) {
                          LogError(status.ToString());
                          ReplyError(exchange, status);
                        }
                      }));
  return service;
}

HttpService::~HttpService() { Shutdown(absl::Seconds(1)); }

void HttpService::Shutdown(absl::Duration drain) {
  if (server_ != nullptr) server_->Shutdown(drain);
}

void HttpService::Handle(HttpExchange* exchange) {
  const RestRoute route = ParseRestRoute(exchange->path());
  if (route.method.empty()) {
    return ReplyError(exchange, absl::NotFoundError(absl::StrCat(
                                    "no KServe v2 endpoint at ", QuoteUntrusted(exchange->path()),
                                    " (see GET /v2/health/ready, /v2/models/{model}/infer, ...)")));
  }
  const std::string& method = exchange->method();
  if (method != route.method &&
      !((route.action == "logging" || route.action == "trace") && method == "POST")) {
    exchange->Reply(
        405, {{"Allow", route.method}, {"Content-Type", "application/json"}},
        ErrorJson(absl::StrCat(QuoteUntrusted(method), " is not allowed on ",
                               QuoteUntrusted(exchange->path()), "; use ", route.method)));
    return;
  }
  const char* encoding_header = exchange->Header("Content-Encoding");
  const ContentEncoding encoding = ParseContentEncoding(encoding_header);
  if (encoding == ContentEncoding::kUnsupported) {
    exchange->Reply(
        415, {{"Content-Type", "application/json"}, {"Accept-Encoding", "gzip, deflate"}},
        ErrorJson(absl::StrCat("Content-Encoding ", QuoteUntrusted(encoding_header),
                               " is not supported; send the body as gzip, deflate or identity")));
    return;
  }
  // A compressed body, inflated up to the body limit (a zip bomb is a 413, not an allocation).
  std::optional<std::string> inflated;
  absl::string_view body = exchange->body();
  if (encoding != ContentEncoding::kIdentity) {
    absl::StatusOr<std::string> plain =
        InflateBody(body, encoding, max_body_bytes_, HttpExchange::kBodyPadding);
    if (!plain.ok()) {
      const int code = absl::IsResourceExhausted(plain.status()) ? 413 : 400;
      exchange->Reply(code, {{"Content-Type", "application/json"}},
                      ErrorJson(plain.status().message()));
      return;
    }
    inflated = *std::move(plain);
    body = *inflated;
  }
  const std::string& a = route.action;
  if (a == "trace") {
    Tracer& tracer = Tracer::Global();
    absl::StatusOr<TraceSettingList> settings = tracer.Update(route.model, {});
    if (method == "POST") {
      absl::StatusOr<TraceSettingList> changes = ParseTraceSettingsBody(body);
      settings = changes.ok() ? tracer.Update(route.model, *changes) : changes.status();
    }
    if (!settings.ok()) return ReplyError(exchange, settings.status());
    ReplyJson(exchange, TraceSettingsJson(*settings));
  } else if (a == "logging") {
    if (method == "POST") {
      absl::StatusOr<LogSettingList> changes = ParseLogSettingsBody(body);
      if (!changes.ok()) return ReplyError(exchange, changes.status());
      const absl::Status updated = UpdateLogSettings(*changes);
      if (!updated.ok()) return ReplyError(exchange, updated);
    }
    ReplyJson(exchange, LogSettingsJson(CurrentLogSettings()));
  } else if (absl::StartsWith(a, "shm_") || absl::StartsWith(a, "cudashm_")) {
    HandleSharedMemory(exchange, route, body);
  } else if (a == "infer" || a == "generate" || a == "generate_stream") {
    // Triton's flat generate body: rewritten into the KServe form, typed by the model's metadata.
    bool flat = false;
    if (a != "infer" && IsFlatGenerateBody(body)) {
      absl::StatusOr<inference::ModelMetadataResponse> metadata =
          api_->ModelMetadata(route.model, route.version);
      if (!metadata.ok()) return ReplyError(exchange, metadata.status());
      absl::StatusOr<std::string> rewritten = GenerateToInferBody(body, *metadata);
      if (!rewritten.ok()) return ReplyError(exchange, rewritten.status());
      const size_t size = rewritten->size();
      rewritten->append(HttpExchange::kBodyPadding, '\0');  // the JSON parser's padding
      rewritten->resize(size);
      inflated = *std::move(rewritten);
      flat = true;
    }
    (new HttpInferCall(exchange, std::move(inflated), flat))
        ->Start(runner_, route, api_->shared_memory());
  } else if (a == "live") {
    ReplyJson(exchange, "{\"live\":true}");
  } else if (route.model.empty() && a == "ready") {
    absl::Status ready = api_->CheckReady();
    if (ready.ok()) return ReplyJson(exchange, "{\"ready\":true}");
    ReplyError(exchange, ready);
  } else if (a == "ready") {
    absl::StatusOr<bool> ready = api_->ModelReady(route.model, route.version);
    if (!ready.ok()) return ReplyError(exchange, ready.status());
    if (*ready) return ReplyJson(exchange, "{\"ready\":true}");
    std::string what = absl::StrCat("model ", QuoteUntrusted(route.model));
    if (!route.version.empty()) absl::StrAppend(&what, " version ", QuoteUntrusted(route.version));
    ReplyError(exchange, absl::UnavailableError(absl::StrCat(what, " is not ready")));
  } else if (a == "config") {
    ReplyProto(exchange, api_->ModelConfig(route.model, route.version));
  } else if (a == "stats") {
    ReplyProto(exchange, api_->ModelStatistics(route.model, route.version));
  } else if (a == "index") {
    absl::StatusOr<bool> ready = ParseIndexBody(body);
    if (!ready.ok()) return ReplyError(exchange, ready.status());
    const inference::RepositoryIndexResponse index = api_->RepositoryIndex(*ready);
    std::vector<std::string> models;
    for (const auto& model : index.models()) models.push_back(ProtoToJson(model));
    ReplyJson(exchange, absl::StrCat("[", absl::StrJoin(models, ","), "]"));
  } else if (a == "load" || a == "unload") {
    const std::string rpc = a == "load" ? "RepositoryModelLoad" : "RepositoryModelUnload";
    auto done = [exchange](const absl::Status& result) {
      if (result.ok()) return exchange->Reply(200, JsonType(), "{}");
      ReplyError(exchange, result);
    };
    absl::Status scheduled;
    if (a == "load") {
      absl::StatusOr<LoadParameters> parameters = ParseLoadBody(body);
      scheduled = parameters.ok()
                      ? api_->Load(rpc, "", route.model, *std::move(parameters), std::move(done))
                      : parameters.status();
    } else {
      scheduled = api_->Unload(rpc, "", route.model, std::move(done));
    }
    if (!scheduled.ok()) ReplyError(exchange, scheduled);
  } else if (route.model.empty()) {
    ReplyJson(exchange, ProtoToJson(api_->ServerMetadata()));
  } else {
    ReplyProto(exchange, api_->ModelMetadata(route.model, route.version));
  }
}

}  // namespace loopserve::server

namespace loopserve::server {

void HttpService::HandleSharedMemory(HttpExchange* exchange, const RestRoute& route,
                                     absl::string_view body) {
  SharedMemoryManager* shm = api_->shared_memory();
  const std::string& a = route.action;
  const std::string& name = route.model;
  if (absl::StartsWith(a, "cudashm_")) {
    // Nothing to list or unregister without GPUs; registering is unsupported.
    if (name.empty() && a == "cudashm_status") return ReplyJson(exchange, "[]");
    if (name.empty() && a == "cudashm_unregister") return ReplyJson(exchange, "{}");
    return ReplyError(exchange, ServerApi::CudaSharedMemoryUnsupported());
  }
  if (a == "shm_status") {
    absl::StatusOr<std::vector<SharedMemoryManager::Status>> regions = shm->List(name);
    if (!regions.ok()) return ReplyError(exchange, regions.status());
    std::vector<std::string> entries;
    for (const SharedMemoryManager::Status& region : *regions) {
      inference::SystemSharedMemoryStatusResponse::RegionStatus status;
      status.set_name(region.name);
      status.set_key(region.key);
      status.set_offset(region.offset);
      status.set_byte_size(region.byte_size);
      entries.push_back(ProtoToJson(status));
    }
    return ReplyJson(exchange, absl::StrCat("[", absl::StrJoin(entries, ","), "]"));
  }
  if (a == "shm_unregister") {
    const absl::Status status = shm->Unregister(name);
    if (!status.ok()) return ReplyError(exchange, status);
    return ReplyJson(exchange, "{}");
  }
  // shm_register: {"key": "/name", "offset": N, "byte_size": N}
  absl::StatusOr<SharedMemoryRegistration> registration = ParseSharedMemoryRegisterBody(body);
  if (!registration.ok()) return ReplyError(exchange, registration.status());
  const absl::Status status =
      shm->Register(name, registration->key, registration->offset, registration->byte_size);
  if (!status.ok()) return ReplyError(exchange, status);
  ReplyJson(exchange, "{}");
}

}  // namespace loopserve::server
