#include "server/http/http_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "event2/buffer.h"
#include "event2/bufferevent.h"
#include "event2/event.h"
#include "event2/listener.h"
#include "event2/thread.h"
#include "evhtp/evhtp.h"
#include "server/http/content_encoding.h"
#include "server/http/http_framing.h"
#include "server/observability/logging.h"

namespace loopserve::server {

// The framing of one connection's requests in front of libevhtp's parser (RequestFramer): the
// bytes read from the client wait in `held`; libevhtp gets one request at a time, in canonical
// form, and the next only once it has let go of the previous one (answered and written out).
struct ConnectionFraming {
  explicit ConnectionFraming(RequestFramer::Limits limits) : framer(limits), held(evbuffer_new()) {}
  ~ConnectionFraming() { evbuffer_free(held); }
  ConnectionFraming(const ConnectionFraming&) = delete;
  ConnectionFraming& operator=(const ConnectionFraming&) = delete;

  RequestFramer framer;
  evbuffer* held;            // read from the client, not yet handed to libevhtp
  bool waiting = false;      // libevhtp has a whole request: the next waits until it is done
  bool reading_off = false;  // reading stopped while `held` is full (waiting)
  bool closing = false;      // refused: the answer goes out, then the connection closes
  bool eof = false;          // the client sent all it will: close once its requests are answered
  size_t dropped = 0;        // bytes dropped while closing
};

// The connections of one event thread, so that Shutdown can close those still open (libevhtp
// keeps no list), with their framing. Only touched on that thread.
struct ThreadConnections {
  std::unordered_map<evhtp_connection_t*, std::unique_ptr<ConnectionFraming>> open;
};

// libevhtp's callbacks; all run on the event thread of the connection (OnRequest, the hooks,
// OnPostAccept) or its own thread (OnThreadInit/Exit).
struct HttpCallbacks {
  static void OnRequest(evhtp_request_t* request, void* arg);
  static evhtp_res OnHeader(evhtp_request_t* request, evhtp_header_t* header, void* arg);
  static evhtp_res OnHeaders(evhtp_request_t* request, evhtp_headers_t* headers, void* arg);
  static evhtp_res OnBody(evhtp_request_t* request, evbuffer* chunk, void* arg);
  static evhtp_res OnRequestFini(evhtp_request_t* request, void* arg);
  static evhtp_res OnPostAccept(evhtp_connection_t* connection, void* arg);
  static void OnRead(bufferevent* bev, void* connection);
  static void Pump(evhtp_connection_t* connection, ConnectionFraming* framing);
  static void RefuseAndClose(evhtp_connection_t* connection, ConnectionFraming* framing, int status,
                             const std::string& message);
  static void OnClosingRead(bufferevent* bev, void* connection);
  static void OnClosingWrite(bufferevent* bev, void* connection);
  static void OnBevEvent(bufferevent* bev, short events, void* connection);
  static evhtp_res OnConnectionFini(evhtp_connection_t* connection, void* arg);
  static void OnEvent(evhtp_connection_t* connection, short events, void* arg);
  static void OnThreadInit(evhtp_t* htp, evthr_t* thread, void* arg);
  static void OnThreadExit(evhtp_t* htp, evthr_t* thread, void* arg);
  static void CloseConnections(evthr_t* thread, void* arg, void* shared);
  static void Barrier(evthr_t* thread, void* arg, void* shared);
  static void SendDeferred(evthr_t* thread, void* arg, void* shared);
  static void FlushDeferred(evthr_t* thread, void* arg, void* shared);
};

namespace {

// libevhtp takes every hook as one generic function type and calls it with the hook's own
// arguments; the detour through void* keeps GCC's -Wcast-function-type quiet about that.
template <typename F>
evhtp_hook AsHook(F* function) {
  return reinterpret_cast<evhtp_hook>(reinterpret_cast<void*>(function));
}

// "ipv4:1.2.3.4" / "ipv6:::1" as evhtp_bind_socket wants them; names resolve as IPv4.
std::string BindAddress(const std::string& address) {
  std::string host = address;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.find(':') != std::string::npos) return "ipv6:" + host;
  if (host == "localhost") host = "127.0.0.1";
  return "ipv4:" + host;
}

// FailHandOffsForTesting's orders: how many hand-offs still fail, and whether their fallback does.
std::atomic<int> failing_hand_offs{0};
std::atomic<bool> failing_loop_hand_offs{false};

// A callback handed to an event thread through its event loop instead of its command pipe.
struct LoopHandOff {
  evthr_cb callback;
  evthr_t* thread;
  void* arg;
};

void RunLoopHandOff(evutil_socket_t, short, void* arg) {
  auto* hand_off = static_cast<LoopHandOff*>(arg);
  hand_off->callback(hand_off->thread, hand_off->arg, nullptr);
  delete hand_off;
}

// Whether the next hand-off is to fail (FailHandOffsForTesting): its command pipe, and its
// fallback through the event loop.
std::pair<bool, bool> TakeHandOffFailure() {
  for (int left = failing_hand_offs.load(); left > 0;) {
    if (failing_hand_offs.compare_exchange_weak(left, left - 1)) {
      return {true, failing_loop_hand_offs.load()};
    }
  }
  return {false, false};
}

// Has `thread` run `callback(thread, arg, nullptr)` from its event loop: a one-shot event, which
// wakes the loop through libevent's own notification (an eventfd: it does not fill up).
bool HandOffThroughLoop(evthr_t* thread, evthr_cb callback, void* arg) {
  auto* hand_off = new LoopHandOff{callback, thread, arg};
  const timeval now{0, 0};
  if (event_base_once(evthr_get_base(thread), -1, EV_TIMEOUT, &RunLoopHandOff, hand_off, &now) ==
      0) {
    return true;
  }
  delete hand_off;
  return false;
}

// How many headers `headers` has and how many bytes their names and values take.
std::pair<int, size_t> HeaderSizes(const evhtp_headers_t* headers) {
  int count = 0;
  size_t bytes = 0;
  const evhtp_header_t* header;
  TAILQ_FOREACH(header, headers, next) {
    ++count;
    bytes += header->klen + header->vlen;
  }
  return {count, bytes};
}

bool HeadersOverBounds(int count, size_t bytes) {
  return count > HttpServer::kMaxHeaders || bytes > HttpServer::kMaxHeaderBytes;
}

// Has libevhtp close the connection once the answer to `request` is out. (Its
// evhtp_request_set_keepalive(request, 0) does nothing: it only ever sets the flag.)
void CloseAfterReply(evhtp_request_t* request) {
  request->flags &= static_cast<uint16_t>(~EVHTP_REQ_FLAG_KEEPALIVE);
}

// The answer to a request refused before the handler: `status` and {"error": message}, and the
// connection closes once it is out.
void Refuse(evhtp_request_t* request, int status, const std::string& message) {
  evhtp_headers_add_header(request->headers_out,
                           evhtp_header_new("Content-Type", "application/json", 0, 0));
  const std::string body = absl::StrCat("{\"error\":\"", message, "\"}");
  evbuffer_add(request->buffer_out, body.data(), body.size());
  CloseAfterReply(request);
  evhtp_send_reply(request, static_cast<evhtp_res>(status));
}

// libevhtp's own read and event callbacks (the same for every connection), which OnRead and
// OnBevEvent call.
std::atomic<bufferevent_data_cb> evhtp_read{nullptr};
std::atomic<bufferevent_event_cb> evhtp_event{nullptr};

// While a connection waits for an answer, what its client sends on (pipelined requests) is read
// until this many bytes wait; then reading stops until the answer is out.
constexpr size_t kMaxHeldBytes = size_t{256} << 10;

// A refused connection drops what its client still sends, up to this many bytes, while its
// answer goes out and until the client closes (so that closing does not reset the connection
// before the client has read the answer); past them, or after kClosingTimeout, it closes.
constexpr size_t kMaxDroppedBytes = size_t{1} << 20;
constexpr timeval kClosingTimeout{5, 0};

const char* ReasonPhrase(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 413:
      return "Payload Too Large";
    case 414:
      return "URI Too Long";
    case 431:
      return "Request Header Fields Too Large";
    case 501:
      return "Not Implemented";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Error";
  }
}

// Runs `append`, which adds to a bufferevent's input buffer: libevent freezes the end of that
// buffer for everyone but its own reader.
template <typename F>
void AppendToInput(evbuffer* input, F append) {
  evbuffer_unfreeze(input, /*at_front=*/0);
  append();
  evbuffer_freeze(input, /*at_front=*/0);
}

ConnectionFraming* FramingOf(evhtp_connection_t* connection) {
  auto* open = static_cast<ThreadConnections*>(evthr_get_aux(connection->thread));
  if (open == nullptr) return nullptr;
  const auto found = open->open.find(connection);
  return found == open->open.end() ? nullptr : found->second.get();
}

// Declared body sizes above this are refused before their body is read.
uint64_t EarlyRejectAbove(uint64_t max_body_bytes) {
  return max_body_bytes + std::max<uint64_t>(max_body_bytes, uint64_t{64} << 20);
}

}  // namespace

// ---- HttpExchange ----

const char* HttpExchange::Header(const char* name) const {
  return request_ == nullptr ? nullptr : evhtp_header_find(request_->headers_in, name);
}

bool HttpExchange::ClientGone() const {
  const int fd = fd_.load(std::memory_order_relaxed);
  if (fd < 0 || broken_.load(std::memory_order_relaxed)) return true;
  pollfd p{};
  p.fd = fd;
  p.events = POLLRDHUP;
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

void HttpExchange::Reply(int status, std::vector<std::pair<std::string, std::string>> headers,
                         std::string body) {
  if (response_encoding_ != ContentEncoding::kIdentity) {
    const bool encoded = std::any_of(headers.begin(), headers.end(), [](const auto& header) {
      return absl::EqualsIgnoreCase(header.first, "Content-Encoding");
    });
    if (!encoded && body.size() >= kCompressFrom) {
      absl::StatusOr<std::string> packed = DeflateBody(body, response_encoding_);
      if (packed.ok()) {  // else the body goes out as it is
        body = *std::move(packed);
        headers.emplace_back("Content-Encoding",
                             response_encoding_ == ContentEncoding::kGzip ? "gzip" : "deflate");
      }
    }
    headers.emplace_back("Vary", "Accept-Encoding");
  }
  status_ = status;
  reply_headers_ = std::move(headers);
  reply_body_ = std::move(body);
  if (std::this_thread::get_id() == thread_id_ && in_handler_) {
    answered_in_handler_ = true;  // OnRequest sends it
    return;
  }
  if (!Defer(&HttpCallbacks::SendDeferred)) {
    server_->ExchangeDone();
    Release();
  }
}

bool HttpExchange::Defer(void (*callback)(evthr_t*, void*, void*)) {
  HttpServer* server = server_;
  const auto [fail_pipe, fail_loop] = TakeHandOffFailure();
  const absl::Time give_up = absl::Now() + HttpServer::kHandOffPatience;
  bool handed = false;
  while (true) {
    {
      // Held while handing over, not while waiting: an event thread finishing an exchange
      // (ExchangeDone) takes it too, and must go on draining its pipe meanwhile.
      absl::MutexLock lock(&server->mutex_);
      // Past the shutdown's drain the event threads are stopping (or gone) with their
      // connections: the answer is dropped without touching the request, not this thread's.
      if (server->threads_stopped_) break;
      // evthr_defer writes to the thread's socket pair, full while the thread is busy and many
      // callbacks wait for it.
      if (!fail_pipe && evthr_defer(thread_, callback, this) == EVTHR_RES_OK) {
        handed = true;
        break;
      }
      if (absl::Now() >= give_up) {
        LogError("HTTP: an event thread's command pipe stayed full; handing over through its loop");
        handed = !fail_loop && HandOffThroughLoop(thread_, callback, this);
        if (!handed) {
          LogError("HTTP: cannot hand an answer to its event thread; the exchange is abandoned");
        }
        break;
      }
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
  if (!handed) {
    // Whatever produces the answer stops (ClientGone), and no further chunk is taken.
    abandoned_.store(true);
    broken_.store(true);
    if (window_ != nullptr) {
      absl::MutexLock lock(&window_->mutex);
      window_->closed = true;
    }
  }
  return handed;
}

void HttpExchange::DropChunks() {
  std::vector<std::string> chunks;
  bool end;
  {
    absl::MutexLock lock(&chunks_mutex_);
    chunks.swap(chunks_);
    end = end_;
    flush_scheduled_ = false;
  }
  {
    absl::MutexLock lock(&window_->mutex);
    window_->unwritten -= static_cast<int>(chunks.size());
    window_->closed = true;
  }
  if (end) {
    server_->ExchangeDone();
    Release();
  }
}

void HttpExchange::StartChunks(int status,
                               std::vector<std::pair<std::string, std::string>> headers) {
  status_ = status;
  reply_headers_ = std::move(headers);
  window_ = std::make_shared<ChunkWindow>();
}

bool HttpExchange::SendChunk(std::string chunk) {
  if (abandoned_.load()) return false;
  {
    absl::MutexLock lock(&window_->mutex);
    ++window_->unwritten;
  }
  bool schedule;
  {
    absl::MutexLock lock(&chunks_mutex_);
    chunks_.push_back(std::move(chunk));
    schedule = !flush_scheduled_;
    flush_scheduled_ = true;
  }
  if (schedule && !Defer(&HttpCallbacks::FlushDeferred)) {
    DropChunks();
    return false;
  }
  return true;
}

void HttpExchange::EndChunks(std::string last_chunk) {
  if (abandoned_.load()) {
    // No flush is on its way (the last hand-off failed): only let go.
    {
      absl::MutexLock lock(&chunks_mutex_);
      end_ = true;
    }
    return DropChunks();
  }
  if (!last_chunk.empty()) {
    absl::MutexLock lock(&window_->mutex);
    ++window_->unwritten;
  }
  bool schedule;
  {
    absl::MutexLock lock(&chunks_mutex_);
    if (!last_chunk.empty()) chunks_.push_back(std::move(last_chunk));
    end_ = true;
    schedule = !flush_scheduled_;
    flush_scheduled_ = true;
  }
  if (schedule && !Defer(&HttpCallbacks::FlushDeferred)) DropChunks();
}

bool HttpExchange::AwaitChunkRoom(int limit, absl::Time until) {
  ChunkWindow& window = *window_;
  absl::MutexLock lock(&window.mutex);
  auto room = [&window, limit]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(window.mutex) {
    return window.unwritten < limit || window.closed;
  };
  return window.mutex.AwaitWithDeadline(absl::Condition(&room), until);
}

namespace {

// A chunk in libevent's output buffer, which frees it once written (or dropped).
struct HeldChunk {
  std::string bytes;
  std::shared_ptr<void> window;  // an HttpExchange::ChunkWindow
};

}  // namespace

void HttpExchange::FlushChunks() {
  if (request_ == nullptr) return DropChunks();  // the client is gone
  std::vector<std::string> chunks;
  bool end;
  {
    absl::MutexLock lock(&chunks_mutex_);
    chunks.swap(chunks_);
    end = end_;
    flush_scheduled_ = false;
  }
  evhtp_request_t* request = request_;
  if (!chunks_started_) {
    chunks_started_ = true;
    for (auto& [name, value] : reply_headers_) {
      evhtp_headers_add_header(request->headers_out,
                               evhtp_header_new(name.c_str(), value.c_str(), 1, 1));
    }
    evhtp_send_reply_chunk_start(request, static_cast<evhtp_res>(status_));
    // Each chunk goes out as it comes: without this, Nagle's algorithm holds a small chunk until
    // the client acknowledges the previous one, which a client delaying its ACKs sends 40 ms
    // later (measured: a 200-event stream on a kept-alive connection took 44 ms instead of 3).
    const int on = 1;
    setsockopt(request->conn->sock, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
    // The connection stays paused (it reads no further request until the end); some libevhtp
    // versions stop writing when they pause.
    bufferevent_enable(request->conn->bev, EV_WRITE);
  }
  if (!chunks.empty()) {
    evbuffer* piece = evbuffer_new();
    for (std::string& chunk : chunks) {
      // Moved into the output buffer without a copy; released (and counted as written) once
      // libevent has written it to the socket or dropped it with the connection.
      auto* held = new HeldChunk{std::move(chunk), window_};
      evbuffer_add_reference(
          piece, held->bytes.data(), held->bytes.size(),
          [](const void*, size_t, void* arg) {
            auto* held = static_cast<HeldChunk*>(arg);
            auto* window = static_cast<ChunkWindow*>(held->window.get());
            {
              absl::MutexLock lock(&window->mutex);
              --window->unwritten;
            }
            delete held;
          },
          held);
      evhtp_send_reply_chunk(request, piece);  // an empty chunk stays and is freed below
    }
    evbuffer_free(piece);
  }
  if (end) {
    // Back to the state Reply leaves a paused connection in (libevhtp's pause stops writing):
    // resuming clears the pause at once but resumes writing only later, so a write completing in
    // between would let libevhtp finish the request early, and the resume's own write callback
    // would then find no request and close the kept-alive connection (measured: 1 in ~100
    // streams on a reused connection).
    if (paused_) bufferevent_disable(request->conn->bev, EV_WRITE);
    evhtp_send_reply_chunk_end(request);
    if (paused_) evhtp_request_resume(request);
    sent_ = true;  // done once libevhtp lets go of the request (OnRequestFini)
    Release();
  }
}

void HttpExchange::SendReply() {
  HttpServer* server = server_;
  if (request_ != nullptr) {
    evhtp_request_t* request = request_;
    for (auto& [name, value] : reply_headers_) {
      evhtp_headers_add_header(request->headers_out,
                               evhtp_header_new(name.c_str(), value.c_str(), 1, 1));
    }
    if (!reply_body_.empty()) {
      // The body moves into the evbuffer without a copy; libevent frees it once sent.
      auto* body = new std::string(std::move(reply_body_));
      evbuffer_add_reference(
          request->buffer_out, body->data(), body->size(),
          [](const void*, size_t, void* arg) { delete static_cast<std::string*>(arg); }, body);
    }
    if (paused_) evhtp_request_resume(request);
    evhtp_send_reply(request, static_cast<evhtp_res>(status_));
    // Done once libevhtp has written the answer and lets go of the request (OnRequestFini), so
    // that Shutdown does not close a connection with an answer still in its output buffer.
    sent_ = true;
  } else {
    server->ExchangeDone();
  }
  Release();
}

void HttpExchange::Release() {
  if (owners_.fetch_sub(1) == 1) delete this;
}

// ---- callbacks ----

void HttpCallbacks::OnRequest(evhtp_request_t* request, void* arg) {
  auto* server = static_cast<HttpServer*>(arg);
  auto* exchange = new HttpExchange();
  exchange->server_ = server;
  exchange->request_ = request;
  exchange->thread_ = request->conn->thread;
  exchange->thread_id_ = std::this_thread::get_id();
  exchange->fd_.store(request->conn->sock, std::memory_order_relaxed);
  exchange->received_ = absl::Now();
  evhtp_request_set_hook(request, evhtp_hook_on_request_fini, AsHook(&OnRequestFini), exchange);

  switch (request->method) {
    case htp_method_GET:
      exchange->method_ = "GET";
      break;
    case htp_method_POST:
      exchange->method_ = "POST";
      break;
    case htp_method_HEAD:
      exchange->method_ = "HEAD";
      break;
    default: {
      // Null for a method libevhtp does not know (htp_method_UNKNOWN).
      const char* name = htparser_get_methodstr_m(request->method);
      if (name != nullptr) exchange->method_ = name;
      break;
    }
  }
  if (request->uri != nullptr && request->uri->path != nullptr &&
      request->uri->path->full != nullptr) {
    // (evhtp_unescape_string decodes in place without ending the shorter result: "%31/ready"
    // came out as "1/readydy".)
    exchange->path_ = PercentDecode(request->uri->path->full);
  }
  // Read here, on the event thread: the request's headers are not the replying thread's to read.
  exchange->response_encoding_ =
      ParseAcceptEncoding(evhtp_header_find(request->headers_in, "Accept-Encoding"));
  // The body, contiguous and padded (simdjson reads up to 64 bytes past the end).
  const size_t length = evbuffer_get_length(request->buffer_in);
  exchange->body_storage_.reserve(length + HttpExchange::kBodyPadding);
  exchange->body_storage_.resize(length);
  if (length > 0) evbuffer_remove(request->buffer_in, exchange->body_storage_.data(), length);
  exchange->body_ = exchange->body_storage_;

  {
    absl::MutexLock lock(&server->mutex_);
    ++server->exchanges_;
  }
  exchange->in_handler_ = true;
  if (exchange->method_.empty()) {
    CloseAfterReply(request);
    exchange->Reply(501, {{"Content-Type", "application/json"}},
                    "{\"error\":\"the request method is not implemented\"}");
  } else if (request->conn->body_bytes_read > server->max_body_bytes_) {
    exchange->Reply(
        413, {{"Content-Type", "application/json"}},
        absl::StrCat("{\"error\":\"the request body of ", request->conn->body_bytes_read,
                     " bytes exceeds the server's limit of ", server->max_body_bytes_,
                     " bytes (--max_message_bytes)\"}"));
  } else {
    server->handler_(exchange);
  }
  exchange->in_handler_ = false;
  // Not status_: another thread may have replied already, and its SendDeferred is on its way.
  if (exchange->answered_in_handler_) {
    exchange->SendReply();  // answered inside the handler
  } else {
    exchange->paused_ = true;  // another thread answers; read nothing further meanwhile
    evhtp_request_pause(request);
  }
}

evhtp_res HttpCallbacks::OnHeader(evhtp_request_t* request, evhtp_header_t* header, void* arg) {
  // `header` is the last of headers_in. Past the bounds, the first header over them stays (it
  // marks the request for OnHeaders) and every later one is dropped as it arrives, so a client
  // streaming headers without end costs no memory.
  const auto [count, bytes] = HeaderSizes(request->headers_in);
  if (HeadersOverBounds(count - 1, bytes - header->klen - header->vlen)) {
    evhtp_header_rm_and_free(request->headers_in, header);
  }
  return EVHTP_RES_OK;
}

evhtp_res HttpCallbacks::OnHeaders(evhtp_request_t* request, evhtp_headers_t* headers, void* arg) {
  auto* server = static_cast<HttpServer*>(arg);
  if (const auto [count, bytes] = HeaderSizes(headers); HeadersOverBounds(count, bytes)) {
    // Answered once the request is in (its body, if any, is bounded as any other's): an answer
    // written before that would leave libevhtp waiting for the request's end, never closing.
    request->cb = [](evhtp_request_t* request, void*) {
      Refuse(request, 431,
             absl::StrCat("the request has more than ", HttpServer::kMaxHeaders,
                          " headers or more than ", HttpServer::kMaxHeaderBytes,
                          " bytes of header names and values"));
    };
    return EVHTP_RES_OK;
  }
  const char* length_text = evhtp_header_find(headers, "Content-Length");
  uint64_t length = 0;
  if (length_text == nullptr || !absl::SimpleAtoi(length_text, &length) ||
      length <= EarlyRejectAbove(server->max_body_bytes_)) {
    return EVHTP_RES_OK;  // a body just over the limit is read and dropped, then answered 413
  }
  // A declared body far over the limit (a client that may never send it) is answered at once,
  // before any of it is read, and the connection closes once the answer is out; what the client
  // still sends is read and dropped (OnBody), and the request never reaches the handler. A client
  // still sending when the connection closes may see a reset instead of the answer, which is why
  // a body only somewhat over the limit takes the slower, clean path.
  request->cb = [](evhtp_request_t*, void*) {};
  Refuse(request, 413,
         absl::StrCat("the request body of ", length,
                      " bytes (Content-Length) exceeds the server's limit of ",
                      server->max_body_bytes_, " bytes (--max_message_bytes)"));
  return EVHTP_RES_OK;
}

evhtp_res HttpCallbacks::OnBody(evhtp_request_t* request, evbuffer* chunk, void* arg) {
  auto* server = static_cast<HttpServer*>(arg);
  // body_bytes_read counts what came before this chunk. Past the limit the body is read and
  // dropped, so OnRequest can answer 413 on a connection still in step with the client.
  if (request->conn->body_bytes_read + evbuffer_get_length(chunk) > server->max_body_bytes_) {
    evbuffer_drain(chunk, evbuffer_get_length(chunk));
    evbuffer_drain(request->buffer_in, evbuffer_get_length(request->buffer_in));
  }
  return EVHTP_RES_OK;
}

evhtp_res HttpCallbacks::OnRequestFini(evhtp_request_t* request, void* arg) {
  auto* exchange = static_cast<HttpExchange*>(arg);
  exchange->request_ = nullptr;
  exchange->fd_.store(-1, std::memory_order_relaxed);
  if (exchange->chunks_started_) {
    absl::MutexLock lock(&exchange->window_->mutex);
    exchange->window_->closed = true;  // a chunk writer waiting for room stops waiting
  }
  if (exchange->sent_) exchange->server_->ExchangeDone();
  exchange->Release();
  // The connection's next request may be waiting in its framing already (pipelined): OnRead runs
  // again once libevhtp has let go of this one (deferred: it still uses the connection now; when
  // the connection is being freed, libevent drops the callback). Otherwise the next read finds
  // libevhtp done.
  ConnectionFraming* framing = request->conn == nullptr ? nullptr : FramingOf(request->conn);
  if (framing != nullptr && (evbuffer_get_length(framing->held) > 0 || framing->eof) &&
      request->conn->bev != nullptr) {
    bufferevent_trigger(request->conn->bev, EV_READ,
                        BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
  }
  return EVHTP_RES_OK;
}

void HttpCallbacks::OnRead(bufferevent* bev, void* arg) {
  auto* connection = static_cast<evhtp_connection_t*>(arg);
  ConnectionFraming* framing = FramingOf(connection);
  evbuffer* input = bufferevent_get_input(bev);
  if (framing == nullptr) {  // the thread is exiting
    evbuffer_drain(input, evbuffer_get_length(input));
    return;
  }
  // What libevhtp has not parsed yet (it stops at a pause) stays; the rest waits for the framer.
  evbuffer_add_buffer(framing->held, input);
  if (framing->waiting && evbuffer_get_length(framing->held) > kMaxHeldBytes) {
    framing->reading_off = true;
    bufferevent_disable(bev, EV_READ);
  }
  Pump(connection, framing);
}

void HttpCallbacks::Pump(evhtp_connection_t* connection, ConnectionFraming* framing) {
  bufferevent* bev = connection->bev;
  evbuffer* input = bufferevent_get_input(bev);
  auto* open = static_cast<ThreadConnections*>(evthr_get_aux(connection->thread));
  std::string canonical;
  while (true) {
    if (framing->waiting) {
      // libevhtp lets go of a request (request == null) once its answer is written out; the
      // request's fini hook then has OnRead run again (OnRequestFini).
      if (connection->request != nullptr) return;
      framing->waiting = false;
      if (framing->reading_off) {
        framing->reading_off = false;
        bufferevent_enable(bev, EV_READ);
      }
    }
    const size_t available = evbuffer_get_length(framing->held);
    if (available == 0) {
      // A client that half-closed after its requests: all answered (libevhtp lets go of a request
      // once its answer is written out), so the connection closes.
      if (framing->eof && !framing->waiting) evhtp_connection_free(connection);
      return;
    }
    bool ended = false;
    if (const uint64_t due = framing->framer.body_bytes_due(); due > 0) {
      // Body bytes move on without a copy.
      const size_t bytes = static_cast<size_t>(std::min<uint64_t>(due, available));
      AppendToInput(input, [&] { evbuffer_remove_buffer(framing->held, input, bytes); });
      ended = framing->framer.PassedBody(bytes);
    } else {
      evbuffer_iovec first{};
      if (evbuffer_peek(framing->held, -1, nullptr, &first, 1) < 1 || first.iov_len == 0) return;
      canonical.clear();
      RequestFramer::Step step = framing->framer.Consume(
          absl::string_view(static_cast<const char*>(first.iov_base), first.iov_len), &canonical);
      evbuffer_drain(framing->held, step.consumed);
      if (step.status != 0) {
        // libevhtp may hold the start of this request (a chunked one): it never sees its end.
        return RefuseAndClose(connection, framing, step.status, step.message);
      }
      AppendToInput(input, [&] { evbuffer_add(input, canonical.data(), canonical.size()); });
      ended = step.request_ended;
    }
    // libevhtp parses what it has got once a request is whole or the bytes read so far are used
    // up (a head and the body that came with it in one go).
    if ((ended || evbuffer_get_length(framing->held) == 0) && evbuffer_get_length(input) > 0) {
      evhtp_read.load()(bev, connection);
      // libevhtp frees the connection on a parse error or after its early 413.
      if (open == nullptr || open->open.find(connection) == open->open.end()) return;
    }
    if (ended) framing->waiting = true;
  }
}

void HttpCallbacks::RefuseAndClose(evhtp_connection_t* connection, ConnectionFraming* framing,
                                   int status, const std::string& message) {
  framing->closing = true;
  evbuffer_drain(framing->held, evbuffer_get_length(framing->held));
  bufferevent* bev = connection->bev;
  evbuffer* input = bufferevent_get_input(bev);
  evbuffer_drain(input, evbuffer_get_length(input));
  const std::string body = absl::StrCat("{\"error\":\"", message, "\"}");
  const std::string answer = absl::StrCat(
      "HTTP/1.1 ", status, " ", ReasonPhrase(status),
      "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: ", body.size(),
      "\r\n\r\n", body);
  // From here on the connection is ours: libevhtp's read and write callbacks no longer run (its
  // event callback still frees the connection on EOF, an error or the timeout).
  bufferevent_data_cb read = nullptr;
  bufferevent_data_cb write = nullptr;
  bufferevent_event_cb event = nullptr;
  void* callback_arg = nullptr;
  bufferevent_getcb(bev, &read, &write, &event, &callback_arg);
  bufferevent_setcb(bev, &OnClosingRead, &OnClosingWrite, event, connection);
  bufferevent_set_timeouts(bev, &kClosingTimeout, &kClosingTimeout);
  bufferevent_write(bev, answer.data(), answer.size());
  bufferevent_enable(bev, EV_READ | EV_WRITE);
}

void HttpCallbacks::OnBevEvent(bufferevent* bev, short events, void* arg) {
  const int error = errno;
  auto* connection = static_cast<evhtp_connection_t*>(arg);
  ConnectionFraming* framing = FramingOf(connection);
  // The client half-closed (sent all it will) with requests still to answer: libevhtp would close
  // at once and drop them (pipelined requests, then shutdown(SHUT_WR)); they are answered in order
  // first (Pump closes after the last). libevhtp takes EAGAIN as no EOF at all.
  if (events == (BEV_EVENT_EOF | BEV_EVENT_READING) && error != EAGAIN && framing != nullptr &&
      !framing->closing &&
      (evbuffer_get_length(framing->held) > 0 ||
       (framing->waiting && connection->request != nullptr))) {
    framing->eof = true;
    return;
  }
  errno = error;
  evhtp_event.load()(bev, events, arg);
}

void HttpCallbacks::OnClosingRead(bufferevent* bev, void* arg) {
  auto* connection = static_cast<evhtp_connection_t*>(arg);
  evbuffer* input = bufferevent_get_input(bev);
  const size_t length = evbuffer_get_length(input);
  evbuffer_drain(input, length);
  ConnectionFraming* framing = FramingOf(connection);
  if (framing == nullptr || (framing->dropped += length) > kMaxDroppedBytes) {
    evhtp_connection_free(connection);
  }
}

void HttpCallbacks::OnClosingWrite(bufferevent* bev, void* arg) {
  if (evbuffer_get_length(bufferevent_get_output(bev)) > 0) return;
  auto* connection = static_cast<evhtp_connection_t*>(arg);
  // The answer is out: end our side (the client reads the answer, then EOF) and wait for the
  // client to close, dropping what it still sends. Over TLS, close at once.
  if (connection->ssl != nullptr) {
    evhtp_connection_free(connection);
    return;
  }
  shutdown(connection->sock, SHUT_WR);
}

evhtp_res HttpCallbacks::OnPostAccept(evhtp_connection_t* connection, void* arg) {
  // libevhtp's parser gets a connection's bytes only through the connection's RequestFramer
  // (OnRead, Pump): whole, validated request heads in canonical form, one request at a time.
  // (libevhtp 1.2.18 alone misparses a request line that arrives in more than one read, drops
  // pipelined requests and lets ambiguous framing through: issue 26.)
  bufferevent_data_cb read = nullptr;
  bufferevent_data_cb write = nullptr;
  bufferevent_event_cb event = nullptr;
  void* callback_arg = nullptr;
  bufferevent_getcb(connection->bev, &read, &write, &event, &callback_arg);
  if (read != nullptr && read != &OnRead) {
    evhtp_read.store(read);
    if (event != nullptr && event != &OnBevEvent) evhtp_event.store(event);
    bufferevent_setcb(connection->bev, &OnRead, write, event != nullptr ? &OnBevEvent : nullptr,
                      callback_arg);
  }
  auto* open = static_cast<ThreadConnections*>(evthr_get_aux(connection->thread));
  if (open != nullptr) {
    RequestFramer::Limits limits;
    limits.max_headers = HttpServer::kMaxHeaders;
    limits.max_header_bytes = HttpServer::kMaxHeaderBytes;
    open->open.emplace(connection, std::make_unique<ConnectionFraming>(limits));
  }
  evhtp_connection_set_hook(connection, evhtp_hook_on_header, AsHook(&OnHeader), arg);
  evhtp_connection_set_hook(connection, evhtp_hook_on_headers, AsHook(&OnHeaders), arg);
  evhtp_connection_set_hook(connection, evhtp_hook_on_read, AsHook(&OnBody), arg);
  evhtp_connection_set_hook(connection, evhtp_hook_on_connection_fini, AsHook(&OnConnectionFini),
                            open);
  evhtp_connection_set_hook(connection, evhtp_hook_on_event, AsHook(&OnEvent), nullptr);
  return EVHTP_RES_OK;
}

void HttpCallbacks::OnEvent(evhtp_connection_t* connection, short events, void* arg) {
  // A write that failed or timed out (the idle timeout: the client read nothing for as long) on a
  // paused connection, which libevhtp frees only once resumed: the exchange learns that its
  // client is gone (a chunked answer otherwise waits for room forever). EOF is left to
  // ClientGone's poll (libevhtp reports a spurious one now and then).
  if ((events & (BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)) == 0) return;
  evhtp_request_t* request = connection->request;
  evhtp_hooks_t* hooks = request == nullptr ? nullptr : evhtp_request_get_hooks(request);
  if (hooks == nullptr || hooks->on_request_fini != reinterpret_cast<evhtp_hook_request_fini_cb>(
                                                        reinterpret_cast<void*>(&OnRequestFini))) {
    return;
  }
  auto* exchange = static_cast<HttpExchange*>(hooks->on_request_fini_arg);
  exchange->broken_.store(true, std::memory_order_relaxed);
  if (exchange->chunks_started_) {
    absl::MutexLock lock(&exchange->window_->mutex);
    exchange->window_->closed = true;
  }
}

evhtp_res HttpCallbacks::OnConnectionFini(evhtp_connection_t* connection, void* arg) {
  if (arg != nullptr) static_cast<ThreadConnections*>(arg)->open.erase(connection);
  return EVHTP_RES_OK;
}

void HttpCallbacks::OnThreadInit(evhtp_t* htp, evthr_t* thread, void* arg) {
  evthr_set_aux(thread, new ThreadConnections());
  auto* server = static_cast<HttpServer*>(arg);
  absl::MutexLock lock(&server->mutex_);
  server->threads_.push_back(thread);
}

void HttpCallbacks::CloseConnections(evthr_t* thread, void* arg, void* shared) {
  auto* open = static_cast<ThreadConnections*>(evthr_get_aux(thread));
  if (open == nullptr) return;
  // Each close runs OnConnectionFini, which edits the set. libevent finishes freeing a
  // bufferevent (and an SSL one's SSL object) in callbacks of the thread's loop, which is why
  // Shutdown has this run while the loop still turns: closed after it stopped (OnThreadExit),
  // a connection's bufferevent was now and then never freed (LeakSanitizer at exit).
  std::vector<evhtp_connection_t*> connections;
  for (const auto& [connection, framing] : open->open) connections.push_back(connection);
  for (evhtp_connection_t* connection : connections) evhtp_connection_free(connection);
}

void HttpCallbacks::Barrier(evthr_t* thread, void* arg, void* shared) {}

void HttpCallbacks::OnThreadExit(evhtp_t* htp, evthr_t* thread, void* arg) {
  auto* open = static_cast<ThreadConnections*>(evthr_get_aux(thread));
  if (open == nullptr) return;
  CloseConnections(thread, nullptr, nullptr);  // none left unless a command could not be sent
  evthr_set_aux(thread, nullptr);
  delete open;
}

void HttpCallbacks::SendDeferred(evthr_t* thread, void* arg, void* shared) {
  static_cast<HttpExchange*>(arg)->SendReply();
}

void HttpCallbacks::FlushDeferred(evthr_t* thread, void* arg, void* shared) {
  static_cast<HttpExchange*>(arg)->FlushChunks();
}

// ---- HttpServer ----

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const Options& options,
                                                              Handler handler) {
  static std::once_flag libevent_threads;
  std::call_once(libevent_threads, [] { evthread_use_pthreads(); });
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }

  std::unique_ptr<HttpServer> server(new HttpServer(std::move(handler)));
  server->max_body_bytes_ = options.max_body_bytes;
  server->base_ = event_base_new();
  server->htp_ = server->base_ == nullptr ? nullptr : evhtp_new(server->base_, nullptr);
  if (server->htp_ == nullptr) return absl::InternalError("HTTP: cannot create the event loop");
  evhtp_t* htp = server->htp_;
  const timeval idle = absl::ToTimeval(options.idle_timeout);
  evhtp_set_timeouts(htp, &idle, &idle);
  if (!options.tls_cert.empty()) {
    evhtp_ssl_cfg_t ssl{};
    std::string cert = options.tls_cert, key = options.tls_key, ca = options.tls_client_ca;
    ssl.pemfile = cert.data();
    ssl.privfile = key.data();
    if (!ca.empty()) {
      ssl.cafile = ca.data();
      ssl.verify_peer = SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
      ssl.verify_depth = 4;
    }
    ssl.ssl_opts = SSL_OP_NO_SSLv2 | SSL_OP_NO_SSLv3 | SSL_OP_NO_TLSv1 | SSL_OP_NO_TLSv1_1;
    ssl.scache_type = evhtp_ssl_scache_type_disabled;
    if (evhtp_ssl_init(htp, &ssl) != 0) {
      return absl::InvalidArgumentError(
          "HTTP: cannot set up TLS with --tls_cert/--tls_key/--tls_client_ca");
    }
  }
  evhtp_set_gencb(htp, &HttpCallbacks::OnRequest, server.get());
  evhtp_set_post_accept_cb(htp, &HttpCallbacks::OnPostAccept, server.get());
  evhtp_use_threads_wexit(htp, &HttpCallbacks::OnThreadInit, &HttpCallbacks::OnThreadExit,
                          std::max(1, options.threads), server.get());
  if (evhtp_bind_socket(htp, BindAddress(options.address).c_str(),
                        static_cast<uint16_t>(options.port), /*backlog=*/1024) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen for HTTP on ", options.address, ":",
                                               options.port, " (address in use or invalid)"));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  if (getsockname(evconnlistener_get_fd(htp->server), reinterpret_cast<sockaddr*>(&bound),
                  &length) != 0) {
    return absl::InternalError("HTTP: cannot read the bound port");
  }
  server->port_ =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  event_base* base = server->base_;
  server->loop_ = std::thread([base] { event_base_loop(base, EVLOOP_NO_EXIT_ON_EMPTY); });
  return server;
}

void HttpServer::ExchangeDone() {
  absl::MutexLock lock(&mutex_);
  --exchanges_;
}

void HttpServer::Shutdown(absl::Duration drain) {
  {
    absl::MutexLock lock(&mutex_);
    if (stopped_) return;
    stopped_ = true;
  }
  if (htp_ == nullptr) {
    if (base_ != nullptr) event_base_free(base_);
    base_ = nullptr;
    return;
  }
  if (loop_.joinable()) {
    event_base_loopbreak(base_);  // stop accepting
    loop_.join();
  }
  {
    // Let the answers in flight reach their event threads and be written out.
    absl::MutexLock lock(&mutex_);
    auto answered = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return exchanges_ == 0; };
    mutex_.AwaitWithTimeout(absl::Condition(&answered), drain);
  }
  std::vector<evthr*> threads;
  {
    absl::MutexLock lock(&mutex_);
    threads_stopped_ = true;  // later replies are dropped instead of deferred
    threads = threads_;
  }
  // Each event thread runs the replies deferred to it, then closes its connections, then turns
  // its loop once more (a thread reads one command per turn) so that libevent's deferred frees
  // run before the stop command evhtp_free sends.
  for (evthr* thread : threads) {
    for (auto* command : {&HttpCallbacks::CloseConnections, &HttpCallbacks::Barrier}) {
      for (int attempt = 0; evthr_defer(thread, command, nullptr) != EVTHR_RES_OK; ++attempt) {
        if (attempt == 1000) break;  // OnThreadExit closes them, later
        absl::SleepFor(absl::Milliseconds(1));
      }
    }
  }
  // Stops the event threads and frees the listener.
  evhtp_unbind_socket(htp_);
  evhtp_free(htp_);
  htp_ = nullptr;
  event_base_free(base_);
  base_ = nullptr;
}

HttpServer::~HttpServer() { Shutdown(absl::Seconds(1)); }

void HttpServer::FailHandOffsForTesting(int count, bool loop_too) {
  failing_loop_hand_offs.store(loop_too);
  failing_hand_offs.store(count);
}

int HttpStatusFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kCancelled:
      return 499;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

}  // namespace loopserve::server
