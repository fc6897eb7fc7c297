#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/http/content_encoding.h"

struct evhtp_request;
struct evhtp;
struct evthr;
struct event_base;

namespace loopserve::server {

class HttpServer;

// One HTTP request and its answer. Created by the HttpServer on one of its event threads, handed
// to the handler, and answered exactly once with Reply, from that thread or any other; the
// exchange is freed by the server after the reply is sent (or after the client went away), so
// nothing may use it after Reply. Reply may come long after the handler returned: the connection
// waits (it reads no further request meanwhile, so keep-alive clients get their answers in
// order).
//
// Thread-safety: the request accessors are for the handler's thread until Reply; ClientGone may
// be called from any thread until Reply.
class HttpExchange {
 public:
  const std::string& method() const { return method_; }
  // The path as sent, percent-escapes undone, without the query string.
  const std::string& path() const { return path_; }
  // The value of header `name` (case-insensitive), or nullptr.
  const char* Header(const char* name) const;
  // The body, whole. Its storage has kBodyPadding readable bytes past the end (for SIMD parsers)
  // and stays valid, at a fixed address, until Reply.
  absl::string_view body() const { return body_; }
  absl::Time received() const { return received_; }
  static constexpr size_t kBodyPadding = 64;

  // Whether the client has closed its side of the connection (or the connection is gone): polls
  // the socket without reading. Any thread, until Reply.
  bool ClientGone() const;

  // Answers the request. `headers` are extra response headers (Content-Length is added). A body of
  // kCompressFrom bytes or more goes out gzip- or deflate-compressed when the request's
  // Accept-Encoding asks for it (Content-Encoding and Vary added), unless `headers` already
  // name a Content-Encoding.
  static constexpr size_t kCompressFrom = 1024;
  void Reply(int status, std::vector<std::pair<std::string, std::string>> headers,
             std::string body);

  // Answers with a body sent piece by piece as it is produced (chunked transfer encoding; a
  // server-sent event stream), instead of Reply: StartChunks once (the status and headers go out
  // with the first chunk), SendChunk any number of times, EndChunks once, which ends the exchange
  // as Reply does. From a thread other than the event thread while the handler runs; one thread
  // at a time, in that order. The chunks move to the connection's event thread, which writes
  // them; once the client is gone they are dropped. SendChunk is false once the chunks can no
  // longer reach the event thread (a hand-off failed, see Defer; ClientGone is then true too):
  // the producer stops and ends the exchange with EndChunks, which then only lets go of it.
  void StartChunks(int status, std::vector<std::pair<std::string, std::string>> headers);
  bool SendChunk(std::string chunk);
  void EndChunks(std::string last_chunk);
  // Waits until fewer than `limit` of the chunks given to SendChunk are waiting to be written to
  // the socket (handed to the event thread or in libevent's output buffer: a client that does
  // not read keeps them there), or the client is gone: true; false once `until` passed first.
  bool AwaitChunkRoom(int limit, absl::Time until);

 private:
  friend class HttpServer;
  friend struct HttpCallbacks;
  // The chunks of a chunked answer not yet written out, shared with libevent's buffers, which
  // may let go of them after the exchange is gone.
  struct ChunkWindow {
    absl::Mutex mutex;
    int unwritten ABSL_GUARDED_BY(mutex) = 0;
    bool closed ABSL_GUARDED_BY(mutex) = false;  // the request is gone
  };
  HttpExchange() = default;
  // On the connection's thread: sends the reply if the request still exists, then lets go.
  void SendReply();
  // On the connection's thread: writes the chunks handed over so far (and the headers first,
  // the end last), or drops them when the request is gone.
  void FlushChunks();
  // Hands `callback` (an evthr callback taking this exchange) to the connection's thread: through
  // the thread's command pipe, or, when that stays full for HttpServer::kHandOffPatience (the
  // thread is busy, e.g. parsing a huge body, while many answers wait for it), through its event
  // loop (event_base_once, woken by libevent's own notification). False when neither takes it, or
  // once Shutdown's drain is over (the threads and their requests are going): the exchange is
  // then abandoned (ClientGone true, SendChunk false) and the caller lets go of it without
  // touching the request, whose paused connection Shutdown closes.
  bool Defer(void (*callback)(evthr* thread, void* exchange, void* shared));
  // Drops the chunks handed over (the client or the event threads are gone); at the end, lets
  // go of the exchange.
  void DropChunks();
  // One of the two owners (evhtp's request, the handler) is done; the last frees the exchange.
  // Any thread.
  void Release();

  HttpServer* server_ = nullptr;
  evhtp_request* request_ = nullptr;  // null once evhtp has freed it
  evthr* thread_ = nullptr;           // the connection's event thread
  std::thread::id thread_id_;
  std::atomic<int> fd_{-1};             // the connection's socket; -1 once evhtp freed the request
  std::atomic<bool> broken_{false};     // a write to the client failed or timed out
  std::atomic<bool> abandoned_{false};  // a hand-off to the event thread failed (Defer)
  std::string method_;
  std::string path_;
  ContentEncoding response_encoding_ = ContentEncoding::kIdentity;  // from Accept-Encoding
  std::string body_storage_;
  absl::string_view body_;
  absl::Time received_;
  bool in_handler_ = false;           // the handler is still running (event thread only)
  bool answered_in_handler_ = false;  // Reply ran inside the handler (event thread only)
  bool paused_ = false;               // the connection was paused to wait for the reply
  bool sent_ = false;                 // the reply went to libevhtp (event thread only)
  std::atomic<int> owners_{2};        // evhtp's request + the handler
  int status_ = 0;
  std::vector<std::pair<std::string, std::string>> reply_headers_;
  std::string reply_body_;
  // A chunked answer.
  std::shared_ptr<ChunkWindow> window_;  // set by StartChunks
  absl::Mutex chunks_mutex_;
  std::vector<std::string> chunks_ ABSL_GUARDED_BY(chunks_mutex_);  // not yet on the event thread
  bool flush_scheduled_ ABSL_GUARDED_BY(chunks_mutex_) = false;
  bool end_ ABSL_GUARDED_BY(chunks_mutex_) = false;  // EndChunks ran
  bool chunks_started_ = false;                      // the headers went out (event thread only)
};

// An HTTP/1.1 server on libevhtp (libevent): one accepting thread and `threads` event threads,
// each serving many connections, so idle or slow clients cost a socket and a few buffers but
// never hold a thread. Keep-alive connections are served request after request; a connection
// idle for Options::idle_timeout (or whose client does not read its answer for as long) is
// closed. Request
// bodies are read whole before the handler runs; a body larger than `max_body_bytes` never
// reaches the handler and is answered 413 with {"error": ...}: after reading and dropping it as it
// arrives (the connection is kept), or at once when its Content-Length declares more than twice
// the limit (at least the limit + 64 MiB; the connection then closes). Every request is framed by
// RFC 9112 before libevhtp's parser sees it (RequestFramer, http_framing.h: ambiguous or malformed
// framing is answered 400, 414, 431, 501 or 505 and the connection closed; headers are bounded by
// kMaxHeaders and kMaxHeaderBytes); a connection's requests are handled one at a time, so
// pipelined requests are answered in order, and a client that half-closes after them still gets
// every answer. Memory stays bounded. TLS (and mutual TLS) with PEM files, as for gRPC.
//
// The handler runs on an event thread for every request and must not block: it answers at once
// (Reply on the event thread) or hands the exchange to another thread that replies later.
//
// Thread-safe. Shutdown (also from the destructor) stops accepting, waits up to `drain` for the
// exchanges in flight to be answered, then closes every connection and joins the threads; the
// handler must not be called into afterwards. Owns its threads and libevent state.
class HttpServer {
 public:
  using Handler = std::function<void(HttpExchange* exchange)>;
  static constexpr absl::Duration kIdleTimeout = absl::Seconds(60);
  struct Options {
    std::string address = "0.0.0.0";
    int port = 0;  // 0 = pick a free port
    int threads = 2;
    uint64_t max_body_bytes = uint64_t{1} << 30;
    // How long a connection may stay idle (or leave its answer unread) before it is closed.
    absl::Duration idle_timeout = kIdleTimeout;
    // TLS: PEM files; both or neither. With client_ca, clients must present a certificate it
    // signed.
    std::string tls_cert;
    std::string tls_key;
    std::string tls_client_ca;
  };
  // A request with more headers, or more bytes of header names and values, is answered 431
  // once its headers are in (the headers past the bound are dropped as they arrive) and never
  // reaches the handler; the connection then closes.
  static constexpr int kMaxHeaders = 100;
  static constexpr size_t kMaxHeaderBytes = size_t{64} << 10;
  // How long a hand-off to an event thread waits for room in the thread's command pipe before it
  // goes through the thread's event loop instead (HttpExchange::Defer).
  static constexpr absl::Duration kHandOffPatience = absl::Seconds(1);

  // Testing only: the next `count` hand-offs to an event thread find its command pipe full for
  // all of kHandOffPatience; with `loop_too`, their fallback through the event loop fails too.
  static void FailHandOffsForTesting(int count, bool loop_too);

  // Binds and starts serving. Unavailable when the address cannot be bound, InvalidArgument for
  // unusable TLS files.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const Options& options, Handler handler);
  ~HttpServer();

  int port() const { return port_; }
  void Shutdown(absl::Duration drain);

 private:
  friend class HttpExchange;
  friend struct HttpCallbacks;  // libevhtp's callbacks (http_server.cc)
  explicit HttpServer(Handler handler) : handler_(std::move(handler)) {}
  void ExchangeDone();

  const Handler handler_;
  uint64_t max_body_bytes_ = 0;
  event_base* base_ = nullptr;  // the accepting thread's
  evhtp* htp_ = nullptr;
  std::thread loop_;  // runs base_
  int port_ = 0;
  absl::Mutex mutex_;
  // Handed to the handler and not yet answered, or answered but not yet written out.
  int exchanges_ ABSL_GUARDED_BY(mutex_) = 0;
  bool stopped_ ABSL_GUARDED_BY(mutex_) = false;
  bool threads_stopped_ ABSL_GUARDED_BY(mutex_) = false;
  std::vector<evthr*> threads_ ABSL_GUARDED_BY(mutex_);  // libevhtp's event threads
};

// HTTP status for an absl::Status code: the mapping Google APIs document for gRPC codes
// (google.rpc.Code): INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE 400; NOT_FOUND 404;
// RESOURCE_EXHAUSTED 429; UNAVAILABLE 503; DEADLINE_EXCEEDED 504; CANCELLED 499;
// UNIMPLEMENTED 501; ALREADY_EXISTS, ABORTED 409; PERMISSION_DENIED 403; UNAUTHENTICATED 401;
// others 500.
int HttpStatusFor(absl::StatusCode code);

}  // namespace loopserve::server
