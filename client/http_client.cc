#include "client/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "google/protobuf/util/json_util.h"
#include "protocol/datatype.h"
#include "protocol/json_sink.h"
#include "rapidjson/writer.h"
#include "simdjson.h"

namespace loopserve::client {
namespace {

using simdjson::dom::element;

using JsonWriter = rapidjson::Writer<protocol::StringSink>;

size_t AppendBody(char* data, size_t size, size_t count, void* arg) {
  static_cast<std::string*>(arg)->append(data, size * count);
  return size * count;
}

size_t ReadHeader(char* data, size_t size, size_t count, void* arg) {
  const absl::string_view line(data, size * count);
  constexpr absl::string_view kName = "inference-header-content-length:";
  if (line.size() > kName.size() && absl::EqualsIgnoreCase(line.substr(0, kName.size()), kName)) {
    *static_cast<std::string*>(arg) =
        std::string(absl::StripAsciiWhitespace(line.substr(kName.size())));
  }
  return size * count;
}

// libcurl's progress callback: a non-zero answer aborts the transfer.
int CheckCancel(void* arg, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<CancelToken*>(arg)->cancelled() ? 1 : 0;
}

// Writes `count` elements of T from little-endian `bytes` as JSON values.
template <typename T>
void WriteValues(JsonWriter& w, const std::string& bytes) {
  const size_t n = bytes.size() / sizeof(T);
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
    if constexpr (std::is_same_v<T, bool>) {
      w.Bool(v);
    } else if constexpr (std::is_floating_point_v<T>) {
      w.Double(static_cast<double>(v));
    } else if constexpr (std::is_signed_v<T>) {
      w.Int64(static_cast<int64_t>(v));
    } else {
      w.Uint64(static_cast<uint64_t>(v));
    }
  }
}

absl::Status WriteData(JsonWriter& w, const Tensor& t) {
  w.StartArray();
  const bool written = protocol::VisitNumeric(protocol::ParseDatatype(t.datatype), [&](auto tag) {
    WriteValues<typename decltype(tag)::type>(w, t.bytes);
  });
  if (!written) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", t.name, "': ", t.datatype, " cannot be sent as JSON data"));
  }
  w.EndArray();
  return absl::OkStatus();
}

// JSON `data` (flat or nested) -> little-endian bytes of `datatype`.
template <typename T>
absl::Status AppendValues(const element& e, std::string* out) {
  if (e.is_array()) {
    simdjson::dom::array array;
    if (e.get_array().get(array) != simdjson::SUCCESS) return absl::InternalError("bad array");
    for (element child : array) {
      absl::Status s = AppendValues<T>(child, out);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  T v{};
  if constexpr (std::is_same_v<T, bool>) {
    if (e.get_bool().get(v) != simdjson::SUCCESS) return absl::InternalError("not a bool");
  } else if constexpr (std::is_floating_point_v<T>) {
    double d = 0;
    if (e.get_double().get(d) != simdjson::SUCCESS) return absl::InternalError("not a number");
    v = static_cast<T>(d);
  } else if constexpr (std::is_signed_v<T>) {
    int64_t i = 0;
    if (e.get_int64().get(i) != simdjson::SUCCESS) return absl::InternalError("not an integer");
    v = static_cast<T>(i);
  } else {
    uint64_t u = 0;
    if (e.get_uint64().get(u) != simdjson::SUCCESS) return absl::InternalError("not an integer");
    v = static_cast<T>(u);
  }
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
  return absl::OkStatus();
}

absl::Status DataToBytes(const element& data, const std::string& datatype, std::string* out) {
  absl::Status status = absl::InternalError(absl::StrCat("datatype ", datatype, " as JSON data"));
  protocol::VisitNumeric(protocol::ParseDatatype(datatype), [&](auto tag) {
    status = AppendValues<typename decltype(tag)::type>(data, out);
  });
  return status;
}

template <typename Message>
absl::StatusOr<Message> ParseProto(const std::string& json, absl::string_view what) {
  Message message;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  const auto status = google::protobuf::util::JsonStringToMessage(json, &message, options);
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat("malformed ", what, " response: ", status.ToString()));
  }
  return message;
}

// One input of the request's JSON header: its data inline, or (raw) only its binary size.
absl::Status WriteInput(JsonWriter& w, const Tensor& t, bool raw) {
  w.StartObject();
  w.Key("name");
  w.String(t.name.c_str());
  w.Key("datatype");
  w.String(t.datatype.c_str());
  w.Key("shape");
  w.StartArray();
  for (int64_t d : t.shape) w.Int64(d);
  w.EndArray();
  if (raw) {
    w.Key("parameters");
    w.StartObject();
    w.Key("binary_data_size");
    w.Uint64(t.bytes.size());
    w.EndObject();
  } else {
    w.Key("data");
    absl::Status written = WriteData(w, t);
    if (!written.ok()) return written;
  }
  w.EndObject();
  return absl::OkStatus();
}

// The request's JSON header, appended to `body`. Returns the inputs' binary bytes (raw mode).
absl::StatusOr<size_t> WriteInferHeader(const std::vector<Tensor>& inputs,
                                        const std::vector<std::string>& outputs,
                                        const InferOptions& options, absl::Time deadline,
                                        std::string& body) {
  protocol::StringSink out{&body};
  JsonWriter w(out);
  w.StartObject();
  if (!options.request_id.empty()) {
    w.Key("id");
    w.String(options.request_id.c_str());
  }
  const bool raw = options.contents == ContentsMode::kRaw;
  w.Key("parameters");
  w.StartObject();
  w.Key("binary_data_output");
  w.Bool(raw);
  if (options.sequence_id != 0 || !options.sequence_string_id.empty()) {
    w.Key("sequence_id");
    if (options.sequence_string_id.empty()) {
      w.Uint64(options.sequence_id);
    } else {
      w.String(options.sequence_string_id.c_str());
    }
    w.Key("sequence_start");
    w.Bool(options.sequence_start);
    w.Key("sequence_end");
    w.Bool(options.sequence_end);
  }
  if (deadline != absl::InfiniteFuture()) {
    w.Key("timeout");
    w.Int64(std::max<int64_t>(1, absl::ToInt64Microseconds(deadline - absl::Now())));
  }
  w.EndObject();
  w.Key("inputs");
  w.StartArray();
  size_t binary_bytes = 0;
  for (const Tensor& t : inputs) {
    absl::Status valid = t.Validate();
    if (!valid.ok()) return valid;
    absl::Status written = WriteInput(w, t, raw);
    if (!written.ok()) return written;
    if (raw) binary_bytes += t.bytes.size();
  }
  w.EndArray();
  if (!outputs.empty()) {
    w.Key("outputs");
    w.StartArray();
    for (const std::string& name : outputs) {
      w.StartObject();
      w.Key("name");
      w.String(name.c_str());
      w.EndObject();
    }
    w.EndArray();
  }
  w.EndObject();
  return binary_bytes;
}

absl::Status Malformed(absl::string_view model, absl::string_view why) {
  return absl::InternalError(absl::StrCat("model '", model, "': malformed response: ", why));
}

// One element of the response's "outputs": its data inline, or the next `binary_data_size`
// bytes of `blob` from `at` (which it advances).
absl::StatusOr<Tensor> ParseOutput(absl::string_view model, element o, absl::string_view blob,
                                   size_t& at) {
  Tensor t;
  std::string_view name, datatype;
  simdjson::dom::array shape;
  if (o["name"].get_string().get(name) != simdjson::SUCCESS ||
      o["datatype"].get_string().get(datatype) != simdjson::SUCCESS ||
      o["shape"].get_array().get(shape) != simdjson::SUCCESS) {
    return Malformed(model, "an output lacks name, datatype or shape");
  }
  t.name = name;
  t.datatype = datatype;
  for (element d : shape) {
    int64_t dim = 0;
    if (d.get_int64().get(dim) != simdjson::SUCCESS) {
      return Malformed(model, "a dim is not an integer");
    }
    t.shape.push_back(dim);
  }
  uint64_t size = 0;
  element data;
  if (o["parameters"]["binary_data_size"].get_uint64().get(size) == simdjson::SUCCESS) {
    if (size > blob.size() - at) return Malformed(model, "binary data runs past the body");
    t.bytes.assign(blob.data() + at, size);
    at += size;
  } else if (o["data"].get(data) == simdjson::SUCCESS) {
    absl::Status s = DataToBytes(data, t.datatype, &t.bytes);
    if (!s.ok()) return Malformed(model, absl::StrCat("output '", t.name, "': ", s.message()));
  } else {
    return Malformed(model, absl::StrCat("output '", t.name, "' has neither data nor binary data"));
  }
  absl::Status valid = t.Validate();
  if (!valid.ok()) return Malformed(model, valid.message());
  return t;
}

// A 200 response: the JSON header (the first `header_length` bytes of `body`, or all of it when
// the header is absent), then the binary outputs back to back.
absl::StatusOr<InferResult> ParseInferResponse(absl::string_view model, const std::string& body,
                                               const std::string& header_length_text) {
  size_t header_length = body.size();
  if (!header_length_text.empty() &&
      (!absl::SimpleAtoi(header_length_text, &header_length) || header_length > body.size())) {
    return Malformed(model, "bad Inference-Header-Content-Length");
  }
  const absl::string_view blob = absl::string_view(body).substr(header_length);
  simdjson::dom::parser parser;
  element root;
  if (parser.parse(body.data(), header_length).get(root) != simdjson::SUCCESS) {
    return Malformed(model, "not JSON");
  }
  InferResult result;
  std::string_view text;
  if (root["model_name"].get_string().get(text) == simdjson::SUCCESS) result.model_name = text;
  if (root["model_version"].get_string().get(text) == simdjson::SUCCESS) {
    result.model_version = text;
  }
  if (root["id"].get_string().get(text) == simdjson::SUCCESS) result.id = text;
  simdjson::dom::array list;
  if (root["outputs"].get_array().get(list) != simdjson::SUCCESS) {
    return Malformed(model, "no outputs");
  }
  size_t at = 0;
  for (element o : list) {
    absl::StatusOr<Tensor> t = ParseOutput(model, o, blob, at);
    if (!t.ok()) return t.status();
    result.outputs.push_back(*std::move(t));
  }
  if (at != blob.size()) return Malformed(model, "binary outputs do not add up to the body");
  return result;
}

}  // namespace

absl::StatusCode CodeForHttpStatus(long status) {
  switch (status) {
    case 200:
      return absl::StatusCode::kOk;
    case 400:
    case 415:
      return absl::StatusCode::kInvalidArgument;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 404:
      return absl::StatusCode::kNotFound;
    case 405:
    case 501:
      return absl::StatusCode::kUnimplemented;
    case 409:
      return absl::StatusCode::kAborted;
    case 413:
    case 429:
      return absl::StatusCode::kResourceExhausted;
    case 499:
      return absl::StatusCode::kCancelled;
    case 503:
      return absl::StatusCode::kUnavailable;
    case 504:
      return absl::StatusCode::kDeadlineExceeded;
    default:
      return status >= 500 ? absl::StatusCode::kInternal : absl::StatusCode::kUnknown;
  }
}

HttpClient::HttpClient(absl::string_view address) : base_url_(absl::StrCat("http://", address)) {
  static std::once_flag init;
  std::call_once(init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

HttpClient::~HttpClient() {
  absl::MutexLock lock(&mu_);
  for (void* handle : idle_) curl_easy_cleanup(static_cast<CURL*>(handle));
}

absl::StatusOr<HttpClient::Response> HttpClient::Send(const char* method, const std::string& path,
                                                      const std::string& body,
                                                      const std::vector<std::string>& headers,
                                                      absl::Time deadline,
                                                      const InferOptions* options) {
  CURL* curl = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (!idle_.empty()) {
      curl = static_cast<CURL*>(idle_.back());
      idle_.pop_back();
    }
  }
  if (curl == nullptr) curl = curl_easy_init();
  if (curl == nullptr) return absl::InternalError("libcurl: cannot create a handle");
  curl_easy_reset(curl);  // keeps the connection cache
  Response response;
  const std::string url = base_url_ + path;
  curl_slist* list = nullptr;
  for (const std::string& h : headers) list = curl_slist_append(list, h.c_str());
  list = curl_slist_append(list, "Expect:");  // no 100-continue round trip for large bodies
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
  if (std::strcmp(method, "POST") == 0) {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  }
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &AppendBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &response.body);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &ReadHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &response.header_length);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_TCP_NODELAY, 1L);
  if (deadline != absl::InfiniteFuture()) {
    const int64_t ms = std::max<int64_t>(1, absl::ToInt64Milliseconds(deadline - absl::Now()));
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(ms));
  }
  if (options != nullptr && options->cancel != nullptr) {
    curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, &CheckCancel);
    curl_easy_setopt(curl, CURLOPT_XFERINFODATA, options->cancel);
  }
  const CURLcode code = curl_easy_perform(curl);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  curl_slist_free_all(list);
  {
    absl::MutexLock lock(&mu_);
    idle_.push_back(curl);
  }
  switch (code) {
    case CURLE_OK:
      return response;
    case CURLE_OPERATION_TIMEDOUT:
      return absl::DeadlineExceededError(absl::StrCat(method, " ", url, ": deadline exceeded"));
    case CURLE_ABORTED_BY_CALLBACK:
      return absl::CancelledError(absl::StrCat(method, " ", url, ": cancelled"));
    default:
      return absl::UnavailableError(absl::StrCat(method, " ", url, ": ", curl_easy_strerror(code)));
  }
}

absl::StatusOr<HttpClient::Response> HttpClient::Call(const char* method, const std::string& path,
                                                      const std::string& body) {
  absl::StatusOr<Response> response = Send(method, path, body, {"Content-Type: application/json"},
                                           absl::Now() + absl::Seconds(30), nullptr);
  if (!response.ok() || response->status == 200) return response;
  return ErrorOf(*response);
}

absl::Status HttpClient::ErrorOf(const Response& response) {
  // {"error": "..."}: the server's message, under the code its HTTP status stands for.
  std::string message = response.body;
  simdjson::dom::parser parser;
  element root;
  std::string_view text;
  if (parser.parse(response.body).get(root) == simdjson::SUCCESS &&
      root["error"].get_string().get(text) == simdjson::SUCCESS) {
    message = std::string(text);
  }
  return absl::Status(CodeForHttpStatus(response.status),
                      message.empty() ? absl::StrCat("HTTP ", response.status) : message);
}

std::string HttpClient::ModelPath(absl::string_view model, absl::string_view version) const {
  std::string path = absl::StrCat("/v2/models/", model);
  if (!version.empty()) absl::StrAppend(&path, "/versions/", version);
  return path;
}

absl::StatusOr<bool> HttpClient::Probe(const std::string& path) {
  absl::StatusOr<Response> r = Send("GET", path, "", {}, absl::Now() + absl::Seconds(30), nullptr);
  if (!r.ok()) return r.status();
  if (r->status == 503) return false;  // answered: not ready (or shutting down)
  if (r->status == 200) return true;
  return ErrorOf(*r);
}

absl::StatusOr<bool> HttpClient::ServerLive() { return Probe("/v2/health/live"); }

absl::StatusOr<bool> HttpClient::ServerReady() { return Probe("/v2/health/ready"); }

absl::StatusOr<bool> HttpClient::ModelReady(absl::string_view model, absl::string_view version) {
  return Probe(ModelPath(model, version) + "/ready");
}

absl::StatusOr<inference::ServerMetadataResponse> HttpClient::ServerMetadata() {
  absl::StatusOr<Response> r = Call("GET", "/v2");
  if (!r.ok()) return r.status();
  return ParseProto<inference::ServerMetadataResponse>(r->body, "server metadata");
}

absl::StatusOr<inference::ModelMetadataResponse> HttpClient::ModelMetadata(
    absl::string_view model, absl::string_view version) {
  absl::StatusOr<Response> r = Call("GET", ModelPath(model, version));
  if (!r.ok()) return r.status();
  return ParseProto<inference::ModelMetadataResponse>(r->body, "model metadata");
}

absl::StatusOr<inference::ModelConfig> HttpClient::ModelConfig(absl::string_view model,
                                                               absl::string_view version) {
  absl::StatusOr<Response> r = Call("GET", ModelPath(model, version) + "/config");
  if (!r.ok()) return r.status();
  return ParseProto<inference::ModelConfig>(r->body, "model config");
}

absl::StatusOr<InferResult> HttpClient::Infer(absl::string_view model,
                                              const std::vector<Tensor>& inputs,
                                              const std::vector<std::string>& outputs,
                                              const InferOptions& options) {
  absl::Time deadline = options.deadline;
  if (options.timeout != absl::InfiniteDuration()) {
    deadline = std::min(deadline, absl::Now() + options.timeout);
  }
  if (options.cancel != nullptr && options.cancel->cancelled()) {
    return absl::CancelledError("call cancelled before it started");
  }
  // The JSON header, then the raw inputs' bytes.
  std::string body;
  absl::StatusOr<size_t> binary_bytes = WriteInferHeader(inputs, outputs, options, deadline, body);
  if (!binary_bytes.ok()) return binary_bytes.status();
  const size_t json_length = body.size();
  std::vector<std::string> headers = {"Content-Type: application/json"};
  if (options.contents == ContentsMode::kRaw) {
    body.reserve(json_length + *binary_bytes);
    for (const Tensor& t : inputs) body += t.bytes;
    headers = {"Content-Type: application/octet-stream",
               absl::StrCat("Inference-Header-Content-Length: ", json_length)};
  }
  std::string path = ModelPath(model, options.model_version) + "/infer";
  absl::StatusOr<Response> response = Send("POST", path, body, headers, deadline, &options);
  if (!response.ok()) return response.status();
  if (response->status != 200) return ErrorOf(*response);
  return ParseInferResponse(model, response->body, response->header_length);
}

}  // namespace loopserve::client
