#include "server/observability/otlp_exporter.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "protocol/json_sink.h"
#include "rapidjson/writer.h"
#include "server/observability/logging.h"

namespace loopserve::server {
namespace {

using Writer = rapidjson::Writer<protocol::StringSink>;

void String(Writer& w, absl::string_view s) {
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
}

// OTLP's JSON encoding: 64-bit integers as decimal strings, ids as lowercase hex.
void Nanos(Writer& w, const char* key, int64_t ns) {
  w.Key(key);
  String(w, absl::StrCat(ns));
}

void Attribute(Writer& w, absl::string_view key, absl::string_view value) {
  w.StartObject();
  w.Key("key");
  String(w, key);
  w.Key("value");
  w.StartObject();
  w.Key("stringValue");
  String(w, value);
  w.EndObject();
  w.EndObject();
}

void Attribute(Writer& w, absl::string_view key, int64_t value) {
  w.StartObject();
  w.Key("key");
  String(w, key);
  w.Key("value");
  w.StartObject();
  w.Key("intValue");
  String(w, absl::StrCat(value));
  w.EndObject();
  w.EndObject();
}

// A random id of `bytes` bytes (OTLP's trace and span ids), as hex.
std::string Hex(std::mt19937_64& gen, int bytes) {
  std::string hex;
  for (int k = 0; k < bytes; k += 8) absl::StrAppend(&hex, absl::Hex(gen(), absl::kZeroPad16));
  return hex.substr(0, static_cast<size_t>(bytes) * 2);
}

// The start of one span object; the caller adds attributes/events and ends it.
void StartSpan(Writer& w, const std::string& trace_id, const std::string& span_id,
               const std::string& parent, absl::string_view name, int64_t start, int64_t end) {
  w.StartObject();
  w.Key("traceId");
  String(w, trace_id);
  w.Key("spanId");
  String(w, span_id);
  if (!parent.empty()) {
    w.Key("parentSpanId");
    String(w, parent);
  }
  w.Key("name");
  String(w, name);
  w.Key("kind");
  w.Int(parent.empty() ? 2 : 1);  // SPAN_KIND_SERVER, SPAN_KIND_INTERNAL
  Nanos(w, "startTimeUnixNano", start);
  Nanos(w, "endTimeUnixNano", end);
}

// Waits for `events` on `fd` until `deadline`; false on timeout or error.
bool WaitFor(int fd, short events, absl::Time deadline) {
  while (true) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return false;
    pollfd p{};
    p.fd = fd;
    p.events = events;
    const int n = poll(&p, 1, static_cast<int>(ms));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<OtlpExporter>> OtlpExporter::Create(absl::string_view url) {
  constexpr absl::string_view kScheme = "http://";
  if (!absl::StartsWithIgnoreCase(url, kScheme)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the OTLP collector URL must start with http:// (OTLP/HTTP, no TLS): '",
                     absl::CHexEscape(url.substr(0, 128)), "'"));
  }
  absl::string_view rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  const std::string path =
      slash == absl::string_view::npos ? "/v1/traces" : std::string(rest.substr(slash));
  absl::string_view authority = rest.substr(0, slash);
  std::string host(authority);
  std::string port = "80";
  const size_t colon = authority.rfind(':');
  if (colon != absl::string_view::npos && authority.find(']') == absl::string_view::npos) {
    host = std::string(authority.substr(0, colon));
    port = std::string(authority.substr(colon + 1));
  }
  int number = 0;
  if (host.empty() || !absl::SimpleAtoi(port, &number) || number <= 0 || number > 65535 ||
      path.find_first_of(" \r\n") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad OTLP collector URL '", absl::CHexEscape(url.substr(0, 128)), "'"));
  }
  return std::unique_ptr<OtlpExporter>(new OtlpExporter(host, port, path));
}

OtlpExporter::OtlpExporter(std::string host, std::string port, std::string path)
    : host_(std::move(host)), port_(std::move(port)), path_(std::move(path)) {
  thread_ = std::thread([this] { Run(); });
}

OtlpExporter::~OtlpExporter() {
  {
    absl::MutexLock lock(&mutex_);
    stop_ = true;
  }
  thread_.join();
}

void OtlpExporter::Export(std::unique_ptr<RequestTrace> trace) {
  absl::MutexLock lock(&mutex_);
  if (pending_.size() >= kMaxPending) {
    ++dropped_;
    return;
  }
  pending_.push_back(std::move(trace));
}

void OtlpExporter::Flush() {
  absl::MutexLock lock(&mutex_);
  flush_ = true;
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return (pending_.empty() && !sending_) || stop_;
  };
  mutex_.AwaitWithTimeout(absl::Condition(&done), kTimeout * 2);
  flush_ = false;
}

void OtlpExporter::Run() {
  absl::MutexLock lock(&mutex_);
  auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return stop_ || flush_ || pending_.size() >= kMaxBatch;
  };
  while (true) {
    mutex_.AwaitWithTimeout(absl::Condition(&wake), kInterval);
    if (pending_.empty()) {
      if (stop_) return;
      continue;
    }
    std::vector<std::unique_ptr<RequestTrace>> batch;
    const size_t n = std::min(pending_.size(), kMaxBatch);
    batch.reserve(n);
    for (size_t k = 0; k < n; ++k) batch.push_back(std::move(pending_[k]));
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(n));
    const uint64_t dropped = dropped_;
    dropped_ = 0;
    sending_ = true;
    mutex_.Unlock();
    const absl::Status status = Post(ToOtlpJson(batch));
    batch.clear();
    mutex_.Lock();
    sending_ = false;
    const absl::Time now = absl::Now();
    if ((!status.ok() || dropped > 0) && now - last_warning_ >= absl::Minutes(1)) {
      last_warning_ = now;
      LogWarning(absl::StrCat(
          "OTLP trace export to ", host_, ":", port_, path_, ": ",
          status.ok() ? "sent" : status.message(),
          dropped > 0 ? absl::StrCat("; ", dropped, " traces dropped (queue full)") : ""));
    }
  }
}

absl::Status OtlpExporter::Post(const std::string& body) const {
  const absl::Time deadline = absl::Now() + kTimeout;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host_.c_str(), port_.c_str(), &hints, &found) != 0 || found == nullptr) {
    return absl::UnavailableError("cannot resolve the collector's host");
  }
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 &&
        !(errno == EINPROGRESS && WaitFor(fd, POLLOUT, deadline))) {
      close(fd);
      fd = -1;
      continue;
    }
    int error = 0;
    socklen_t length = sizeof(error);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) return absl::UnavailableError("cannot connect to the collector");
  const std::string request =
      absl::StrCat("POST ", path_, " HTTP/1.1\r\nHost: ", host_, ":", port_,
                   "\r\nContent-Type: application/json\r\nContent-Length: ", body.size(),
                   "\r\nConnection: close\r\n\r\n", body);
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!WaitFor(fd, POLLOUT, deadline)) break;
    } else {
      break;
    }
  }
  std::string answer;
  char buffer[512];
  while (sent == request.size() && answer.find("\r\n") == std::string::npos &&
         answer.size() < 4096) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n > 0) {
      answer.append(buffer, static_cast<size_t>(n));
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!WaitFor(fd, POLLIN, deadline)) break;
    } else {
      break;
    }
  }
  close(fd);
  if (sent < request.size()) return absl::UnavailableError("the collector did not take the batch");
  // "HTTP/1.1 200 OK"
  const size_t space = answer.find(' ');
  if (space == std::string::npos || space + 2 >= answer.size() || answer[space + 1] != '2') {
    return absl::UnavailableError(absl::StrCat(
        "the collector answered '",
        absl::CHexEscape(answer.substr(0, std::min<size_t>(answer.find('\r'), 64))), "'"));
  }
  return absl::OkStatus();
}

std::string OtlpExporter::ToOtlpJson(absl::Span<const std::unique_ptr<RequestTrace>> traces) {
  thread_local std::mt19937_64 gen(std::random_device{}());
  std::string json;
  protocol::StringSink sink{&json};
  Writer w(sink);
  w.StartObject();
  w.Key("resourceSpans");
  w.StartArray();
  w.StartObject();
  w.Key("resource");
  w.StartObject();
  w.Key("attributes");
  w.StartArray();
  Attribute(w, "service.name", "loopserve");
  w.EndArray();
  w.EndObject();
  w.Key("scopeSpans");
  w.StartArray();
  w.StartObject();
  w.Key("scope");
  w.StartObject();
  w.Key("name");
  String(w, "loopserve");
  w.EndObject();
  w.Key("spans");
  w.StartArray();
  using A = RequestTrace;
  for (const std::unique_ptr<RequestTrace>& trace : traces) {
    const std::string trace_id = Hex(gen, 16);
    const std::string request_span = Hex(gen, 8);
    StartSpan(w, trace_id, request_span, "", "InferRequest", trace->ns(A::kRequestStart),
              trace->ns(A::kRequestEnd));
    w.Key("attributes");
    w.StartArray();
    Attribute(w, "model_name", trace->model_name());
    Attribute(w, "model_version", trace->model_version());
    Attribute(w, "trace_id", static_cast<int64_t>(trace->id()));
    if (!trace->request_id().empty()) Attribute(w, "request_id", trace->request_id());
    w.EndArray();
    w.Key("events");
    w.StartArray();
    for (int a = 0; a < A::kActivities; ++a) {
      if (trace->ns(static_cast<A::Activity>(a)) == 0) continue;
      w.StartObject();
      Nanos(w, "timeUnixNano", trace->ns(static_cast<A::Activity>(a)));
      w.Key("name");
      String(w, A::ActivityName(static_cast<A::Activity>(a)));
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
    if (trace->ns(A::kComputeStart) == 0) continue;  // refused before it ran
    const std::string compute_span = Hex(gen, 8);
    const int64_t compute_end =
        trace->ns(A::kComputeEnd) != 0 ? trace->ns(A::kComputeEnd) : trace->ns(A::kRequestEnd);
    StartSpan(w, trace_id, compute_span, request_span, "compute", trace->ns(A::kComputeStart),
              compute_end);
    w.EndObject();
    for (const RequestTrace::Span& span : trace->spans()) {
      StartSpan(w, trace_id, Hex(gen, 8), compute_span, "loop_iteration", span.start_ns,
                span.end_ns);
      w.Key("attributes");
      w.StartArray();
      Attribute(w, "loop", trace->LoopName(span.loop));
      Attribute(w, "iteration", span.iteration);
      w.EndArray();
      w.EndObject();
    }
  }
  w.EndArray();
  w.EndObject();
  w.EndArray();
  w.EndObject();
  w.EndArray();
  w.EndObject();
  return json;
}

}  // namespace loopserve::server
