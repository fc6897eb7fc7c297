// The two HTTP server libraries Debian bookworm ships that loopserve could serve KServe v2 REST
// with, measured on what the REST port does: small requests over keep-alive connections. The
// measurement behind the choice of libevhtp (server/http/http_server.cc).
//
//   build/bin/http_library_bench [--requests=20000] [--rounds=3] [--idle=200]
//
// Each library serves POST /v2/models/m/infer with a fixed 140-byte JSON answer, in this process
// on 127.0.0.1:0: libevhtp with 2 event threads (the cores of the machine), civetweb with 64
// worker threads (the prometheus-cpp exposer's setup, which /metrics uses). The clients are
// threads with one keep-alive connection each, sending a 150-byte JSON body and reading the
// answer (raw sockets: the client is the same for both). Reported per library and client count:
// median and p99 latency over all requests of all rounds, and requests per second. Rounds
// alternate the libraries.
//
// Then `--idle` connections are opened to each server and left silent (the slow or idle clients
// of issue 11), and one more client times a request: an event loop does not notice them, a
// thread-per-connection server hands each a thread until its request timeout.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "civetweb.h"
#include "event2/thread.h"
#include "evhtp/evhtp.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr char kAnswer[] =
    "{\"model_name\":\"m\",\"model_version\":\"1\",\"outputs\":[{\"name\":\"y\",\"datatype\":"
    "\"FP32\",\"shape\":[2],\"data\":[1.5,2.5]}],\"id\":\"\",\"parameters\":{}}";
constexpr char kBody[] =
    "{\"inputs\":[{\"name\":\"M\",\"datatype\":\"INT64\",\"shape\":[],\"data\":[10]},{\"name\":"
    "\"h0\",\"datatype\":\"FP32\",\"shape\":[1,4],\"data\":[0.5,0.5,0.5,0.5]}],\"id\":\"a\"}";

// ---- libevhtp ----

class EvhtpServer {
 public:
  EvhtpServer() {
    evthread_use_pthreads();  // event_base_loopbreak from another thread
    base_ = event_base_new();
    htp_ = evhtp_new(base_, nullptr);
    evhtp_set_gencb(htp_, &EvhtpServer::Handle, nullptr);
    evhtp_use_threads_wexit(htp_, nullptr, nullptr, 2, nullptr);
    evhtp_bind_socket(htp_, "ipv4:127.0.0.1", 0, 1024);
    sockaddr_in addr{};
    socklen_t len = sizeof(addr);
    getsockname(evconnlistener_get_fd(htp_->server), reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    loop_ = std::thread([this] { event_base_loop(base_, 0); });
  }
  ~EvhtpServer() {
    event_base_loopbreak(base_);
    loop_.join();
    evhtp_unbind_socket(htp_);
    evhtp_free(htp_);
    event_base_free(base_);
  }
  int port() const { return port_; }

 private:
  static void Handle(evhtp_request_t* req, void*) {
    evbuffer_drain(req->buffer_in, evbuffer_get_length(req->buffer_in));
    evhtp_headers_add_header(req->headers_out,
                             evhtp_header_new("Content-Type", "application/json", 0, 0));
    evbuffer_add(req->buffer_out, kAnswer, sizeof(kAnswer) - 1);
    evhtp_send_reply(req, EVHTP_RES_OK);
  }
  event_base* base_;
  evhtp_t* htp_;
  int port_ = 0;
  std::thread loop_;
};

// ---- civetweb ----

class CivetServer {
 public:
  CivetServer() {
    const char* options[] = {"listening_ports",
                             "127.0.0.1:0",
                             "num_threads",
                             "64",
                             "enable_keep_alive",
                             "yes",
                             "request_timeout_ms",
                             "2000",
                             "tcp_nodelay",
                             "1",
                             nullptr};
    mg_callbacks callbacks{};
    ctx_ = mg_start(&callbacks, nullptr, options);
    mg_set_request_handler(ctx_, "/", &CivetServer::Handle, nullptr);
    mg_server_port ports[1];
    mg_get_server_ports(ctx_, 1, ports);
    port_ = ports[0].port;
  }
  ~CivetServer() { mg_stop(ctx_); }
  int port() const { return port_; }

 private:
  static int Handle(mg_connection* conn, void*) {
    char buf[4096];
    while (mg_read(conn, buf, sizeof(buf)) > 0) {
    }
    // One write: headers and body in separate segments would meet the client's delayed ACK.
    const std::string reply =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
        std::to_string(sizeof(kAnswer) - 1) + "\r\nConnection: keep-alive\r\n\r\n" + kAnswer;
    mg_write(conn, reply.data(), reply.size());
    return 200;
  }
  mg_context* ctx_;
  int port_ = 0;
};

// ---- client ----

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// Sends one request and reads its answer; false on any error.
bool RoundTrip(int fd, const std::string& request, std::string* scratch) {
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) != ssize_t(request.size())) {
    return false;
  }
  scratch->clear();
  size_t header_end = std::string::npos, content_length = 0;
  char buf[4096];
  while (true) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    scratch->append(buf, n);
    if (header_end == std::string::npos) {
      header_end = scratch->find("\r\n\r\n");
      if (header_end == std::string::npos) continue;
      const size_t cl = scratch->find("Content-Length: ");
      if (cl == std::string::npos || cl > header_end) return false;
      content_length = std::strtoul(scratch->c_str() + cl + 16, nullptr, 10);
    }
    if (scratch->size() >= header_end + 4 + content_length) return true;
  }
}

struct Result {
  std::vector<double> us;
  double seconds = 0;
};

Result Drive(int port, int clients, int requests) {
  const std::string request =
      "POST /v2/models/m/infer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(sizeof(kBody) - 1) + "\r\n\r\n" + kBody;
  std::vector<std::vector<double>> per(clients);
  std::atomic<int> next{0};
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      const int fd = Connect(port);
      std::string scratch;
      while (next.fetch_add(1) < requests) {
        const auto t0 = Clock::now();
        if (!RoundTrip(fd, request, &scratch)) {
          std::fprintf(stderr, "request failed\n");
          std::exit(1);
        }
        per[c].push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      }
      close(fd);
    });
  }
  for (auto& t : threads) t.join();
  Result r;
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (auto& p : per) r.us.insert(r.us.end(), p.begin(), p.end());
  return r;
}

double Pct(std::vector<double>& v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p / 100 * v.size()))];
}

}  // namespace

int main(int argc, char** argv) {
  int requests = 20000, rounds = 3, idle = 200;
  for (int i = 1; i < argc; ++i) {
    if (std::sscanf(argv[i], "--requests=%d", &requests) == 1) continue;
    if (std::sscanf(argv[i], "--rounds=%d", &rounds) == 1) continue;
    if (std::sscanf(argv[i], "--idle=%d", &idle) == 1) continue;
    std::fprintf(stderr, "usage: http_library_bench [--requests=N] [--rounds=R] [--idle=K]\n");
    return 2;
  }
  EvhtpServer evhtp;
  CivetServer civet;
  struct Lib {
    const char* name;
    int port;
  };
  const Lib libs[] = {{"libevhtp", evhtp.port()}, {"civetweb", civet.port()}};
  std::printf("%-9s %7s %10s %10s %10s\n", "library", "clients", "p50 us", "p99 us", "req/s");
  for (int clients : {1, 8}) {
    Result all[2];
    for (int r = 0; r < rounds; ++r) {
      for (int l = 0; l < 2; ++l) {
        Result one = Drive(libs[l].port, clients, requests);
        all[l].us.insert(all[l].us.end(), one.us.begin(), one.us.end());
        all[l].seconds += one.seconds;
      }
    }
    for (int l = 0; l < 2; ++l) {
      const double rps = all[l].us.size() / all[l].seconds;
      std::printf("%-9s %7d %10.1f %10.1f %10.0f\n", libs[l].name, clients, Pct(all[l].us, 50),
                  Pct(all[l].us, 99), rps);
      std::fflush(stdout);
    }
  }
  for (const Lib& lib : libs) {
    std::vector<int> silent;
    for (int i = 0; i < idle; ++i) silent.push_back(Connect(lib.port));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    Result r = Drive(lib.port, 1, 1);
    std::printf("%-9s with %d idle connections: one request took %.1f ms\n", lib.name, idle,
                r.us[0] / 1000);
    std::fflush(stdout);
    for (int fd : silent) close(fd);
  }
  return 0;
}
