// HttpServer's hand-off of answers from other threads to the event threads (HttpExchange::Defer),
// over a real socket on 127.0.0.1: an answer whose event thread's command pipe stays full still
// reaches the client (through the thread's event loop), and one that cannot be handed over at all
// abandons the exchange honestly (the producer learns it, the exchange is freed, Shutdown does not
// wait for it).
#include "server/http/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loopserve::server {
namespace {

using ::testing::HasSubstr;

// A blocking client socket to 127.0.0.1:port whose reads give up after 10 s.
class Client {
 public:
  explicit Client(int port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
    const timeval timeout{10, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  }
  ~Client() { close(fd_); }

  bool connected() const { return connected_; }
  bool Send(const std::string& bytes) {
    return send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }
  // Ends the sending side (a half-close: the client has sent all it will).
  void ShutdownWrite() { shutdown(fd_, SHUT_WR); }
  // Reads until `text` has arrived (true), or the connection ends or a read times out (false).
  bool ReadUntil(const std::string& text) {
    while (received_.find(text) == std::string::npos) {
      if (!ReadSome()) return false;
    }
    return true;
  }
  // Reads until the server closes the connection: true, or false when a read times out first.
  bool ReadToEnd() {
    char buffer[4096];
    while (true) {
      const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
      if (n == 0) return true;
      if (n < 0) return errno == ECONNRESET;
      received_.append(buffer, static_cast<size_t>(n));
    }
  }
  const std::string& received() const { return received_; }

 private:
  bool ReadSome() {
    char buffer[4096];
    const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
    if (n <= 0) return false;
    received_.append(buffer, static_cast<size_t>(n));
    return true;
  }

  int fd_;
  bool connected_ = false;
  std::string received_;
};

constexpr char kRequest[] = "GET /answer HTTP/1.1\r\nHost: localhost\r\n\r\n";

// A server on one event thread whose handler hands every exchange to `answer`, run on its own
// thread (joined by the destructor).
class HandOffTest : public ::testing::Test {
 protected:
  void StartServer(std::function<void(HttpExchange*)> answer) {
    HttpServer::Options options;
    options.address = "127.0.0.1";
    options.threads = 1;
    auto server = HttpServer::Start(options, [this, answer](HttpExchange* exchange) {
      answerer_ = std::thread([answer, exchange] { answer(exchange); });
    });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  void TearDown() override {
    if (answerer_.joinable()) answerer_.join();
    HttpServer::FailHandOffsForTesting(0, false);
  }

  std::unique_ptr<HttpServer> server_;
  std::thread answerer_;
};

TEST_F(HandOffTest, AnswerGoesThroughTheEventLoopWhenTheCommandPipeStaysFull) {
  StartServer([](HttpExchange* exchange) {
    HttpServer::FailHandOffsForTesting(1, /*loop_too=*/false);
    exchange->Reply(200, {{"Content-Type", "text/plain"}}, "late answer");
  });
  Client client(server_->port());
  ASSERT_TRUE(client.connected());
  ASSERT_TRUE(client.Send(kRequest));
  EXPECT_TRUE(client.ReadUntil("late answer")) << client.received();
  EXPECT_THAT(client.received(), HasSubstr("HTTP/1.1 200"));
}

TEST_F(HandOffTest, StreamChunksGoThroughTheEventLoopWhenTheCommandPipeStaysFull) {
  absl::Notification first_read;
  StartServer([&first_read](HttpExchange* exchange) {
    exchange->StartChunks(200, {{"Content-Type", "text/event-stream"}});
    HttpServer::FailHandOffsForTesting(1, /*loop_too=*/false);
    EXPECT_TRUE(exchange->SendChunk("data: 1\n\n"));
    first_read.WaitForNotificationWithTimeout(absl::Seconds(20));
    exchange->EndChunks("data: 2\n\n");
  });
  Client client(server_->port());
  ASSERT_TRUE(client.Send(kRequest));
  EXPECT_TRUE(client.ReadUntil("data: 1")) << client.received();
  first_read.Notify();
  EXPECT_TRUE(client.ReadUntil("data: 2")) << client.received();
  EXPECT_TRUE(client.ReadUntil("\r\n0\r\n\r\n")) << client.received();  // the last chunk
}

TEST_F(HandOffTest, StreamWhoseChunkCannotBeHandedOverIsAbandonedAndFreed) {
  absl::Notification first_read;
  absl::Notification ended;
  StartServer([&](HttpExchange* exchange) {
    exchange->StartChunks(200, {{"Content-Type", "text/event-stream"}});
    EXPECT_TRUE(exchange->SendChunk("data: 1\n\n"));
    first_read.WaitForNotificationWithTimeout(absl::Seconds(20));
    EXPECT_FALSE(exchange->ClientGone());
    HttpServer::FailHandOffsForTesting(1, /*loop_too=*/true);
    // The producer learns at once that the stream is over (an SSE call then cancels its run).
    EXPECT_FALSE(exchange->SendChunk("data: 2\n\n"));
    EXPECT_TRUE(exchange->ClientGone());
    // A producer waiting for the client to read stops waiting.
    EXPECT_TRUE(exchange->AwaitChunkRoom(0, absl::Now() + absl::Seconds(20)));
    // Later chunks are refused without another try at the hand-off.
    const absl::Time before = absl::Now();
    EXPECT_FALSE(exchange->SendChunk("data: 3\n\n"));
    EXPECT_LT(absl::Now() - before, HttpServer::kHandOffPatience);
    exchange->EndChunks("data: 4\n\n");  // lets go of the exchange
    ended.Notify();
  });
  Client client(server_->port());
  ASSERT_TRUE(client.Send(kRequest));
  ASSERT_TRUE(client.ReadUntil("data: 1")) << client.received();
  first_read.Notify();
  ASSERT_TRUE(ended.WaitForNotificationWithTimeout(absl::Seconds(30)));
  // The abandoned exchange counts as answered: Shutdown's drain does not wait for it, and it
  // closes the connection (freeing the request; LeakSanitizer checks the exchange is freed).
  const absl::Time before = absl::Now();
  server_->Shutdown(absl::Seconds(30));
  EXPECT_LT(absl::Now() - before, absl::Seconds(10));
  EXPECT_TRUE(client.ReadToEnd());
  EXPECT_THAT(client.received(), ::testing::Not(HasSubstr("data: 2")));
  EXPECT_THAT(client.received(), ::testing::Not(HasSubstr("data: 4")));
}

TEST_F(HandOffTest, ReplyThatCannotBeHandedOverIsAbandonedAndFreed) {
  absl::Notification replied;
  StartServer([&replied](HttpExchange* exchange) {
    HttpServer::FailHandOffsForTesting(1, /*loop_too=*/true);
    exchange->Reply(200, {}, "never sent");
    replied.Notify();
  });
  Client client(server_->port());
  ASSERT_TRUE(client.Send(kRequest));
  ASSERT_TRUE(replied.WaitForNotificationWithTimeout(absl::Seconds(30)));
  const absl::Time before = absl::Now();
  server_->Shutdown(absl::Seconds(30));
  EXPECT_LT(absl::Now() - before, absl::Seconds(10));
  EXPECT_TRUE(client.ReadToEnd());
  EXPECT_THAT(client.received(), ::testing::Not(HasSubstr("never sent")));
}

// A server on one event thread that answers every request at once with 200 and
// "<method> <path> <body>".
class FramingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpServer::Options options;
    options.address = "127.0.0.1";
    options.threads = 1;
    auto server = HttpServer::Start(options, [](HttpExchange* exchange) {
      exchange->Reply(
          200, {{"Content-Type", "text/plain"}},
          exchange->method() + " " + exchange->path() + " " + std::string(exchange->body()));
    });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  // The server still serves a normal request on a new connection.
  void ExpectServing() {
    Client client(server_->port());
    ASSERT_TRUE(
        client.Send("GET /still/here HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"));
    EXPECT_TRUE(client.ReadToEnd());
    EXPECT_THAT(client.received(), HasSubstr("HTTP/1.1 200"));
    EXPECT_THAT(client.received(), HasSubstr("GET /still/here "));
  }

  std::unique_ptr<HttpServer> server_;
};

// A method libevhtp does not know used to reach the handler with a null name (SIGSEGV).
TEST_F(FramingTest, UnknownMethodIsAnswered501AndClosed) {
  Client client(server_->port());
  ASSERT_TRUE(client.Send("FOO /v2 HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  EXPECT_TRUE(client.ReadToEnd()) << client.received();  // the server closes
  EXPECT_THAT(client.received(), HasSubstr("HTTP/1.1 501"));
  ExpectServing();
}

// `request` on its own connection: the answer, read until the server closes (which it must).
std::string AnswerAndClose(int port, const std::string& request) {
  Client client(port);
  EXPECT_TRUE(client.Send(request));
  EXPECT_TRUE(client.ReadToEnd()) << "the server did not close: " << client.received();
  return client.received();
}

// Smuggling shapes (RFC 9112 §6.3): the length of each is ambiguous, so it is refused with 400
// and the connection closed, and the bytes after it never become a request.
TEST_F(FramingTest, AmbiguousLengthsAreRefusedAndClosed) {
  const std::string smuggled = "GET /smuggled HTTP/1.1\r\nHost: localhost\r\n\r\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"CL.TE", "Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
      {"TE.CL", "Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n5c\r\n"},
      {"two differing Content-Length", "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello"},
      {"two equal Content-Length", "Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello"},
      {"Content-Length list", "Content-Length: 5, 5\r\n\r\nhello"},
      {"Content-Length 2^64", "Content-Length: 18446744073709551616\r\n\r\n"},
      {"Transfer-Encoding: xchunked", "Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n"},
      {"Transfer-Encoding: chunked, identity",
       "Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n"},
      {"two Transfer-Encoding",
       "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
      {"chunk size 2^64-1", "Transfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nx\r\n"},
      {"chunk size not hex", "Transfer-Encoding: chunked\r\n\r\n-1\r\nx\r\n"},
      {"chunk data longer than its size",
       "Transfer-Encoding: chunked\r\n\r\n1\r\nxyz\r\n0\r\n\r\n"},
      {"whitespace before the colon", "Content-Length : 5\r\n\r\nhello"},
      {"obs-fold", "X-A: 1\r\n  folded\r\n\r\n"},
      {"bare LF", "X-A: 1\n\r\n"},
      {"NUL in a header value", std::string("X-A: a\0b\r\n\r\n", 12)},
  };
  for (const auto& [what, rest] : cases) {
    const std::string answer = AnswerAndClose(
        server_->port(), "POST /x HTTP/1.1\r\nHost: localhost\r\n" + rest + smuggled);
    EXPECT_THAT(answer, ::testing::StartsWith("HTTP/1.1 400")) << what << ": " << answer;
    EXPECT_THAT(answer, HasSubstr("{\"error\":")) << what;
    EXPECT_THAT(answer, ::testing::Not(HasSubstr("/smuggled"))) << what;
  }
  ExpectServing();
}

TEST_F(FramingTest, MalformedRequestLinesAreRefusedAndClosed) {
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"NUL in the path", std::string("GET /v2/he\0alth HTTP/1.1\r\n\r\n", 28), "400"},
      {"tab in the path", "GET /a\tb HTTP/1.1\r\n\r\n", "400"},
      {"malformed %zz", "GET /v2/models/%zz/ready HTTP/1.1\r\n\r\n", "400"},
      {"truncated %3", "GET /v2/%3 HTTP/1.1\r\n\r\n", "400"},
      {"percent-encoded NUL", "GET /v2/a%00b HTTP/1.1\r\n\r\n", "400"},
      {"not origin-form", "GET http://x/v2 HTTP/1.1\r\n\r\n", "400"},
      {"two spaces", "GET  /v2 HTTP/1.1\r\n\r\n", "400"},
      {"no version", "GET /v2\r\n\r\n", "400"},
      {"HTTP/2.0", "GET /v2 HTTP/2.0\r\n\r\n", "505"},
      {"HTTP/1.2x", "GET /v2 HTTP/1.2x\r\n\r\n", "400"},
      {"unknown method", "FOO /v2 HTTP/1.1\r\n\r\n", "501"},
      {"CONNECT", "CONNECT /v2 HTTP/1.1\r\n\r\n", "501"},
      {"method not a token", "G(T /v2 HTTP/1.1\r\n\r\n", "400"},
      {"a 20 KB path", "GET /" + std::string(20000, 'a') + " HTTP/1.1\r\n\r\n", "414"},
      {"a 100 KB header", "GET /v2 HTTP/1.1\r\nX-Big: " + std::string(100000, 'v') + "\r\n\r\n",
       "431"},
      {"101 headers",
       [] {
         std::string request = "GET /v2 HTTP/1.1\r\n";
         for (int i = 0; i < 101; ++i) request += "X-" + std::to_string(i) + ": y\r\n";
         return request + "\r\n";
       }(),
       "431"},
  };
  for (const auto& [what, request, status] : cases) {
    const std::string answer = AnswerAndClose(server_->port(), request);
    EXPECT_THAT(answer, ::testing::StartsWith("HTTP/1.1 " + status)) << what << ": " << answer;
    EXPECT_THAT(answer, HasSubstr("Connection: close")) << what;
  }
  ExpectServing();
}

TEST_F(FramingTest, PercentEscapesAreDecodedOnce) {
  const std::string answer = AnswerAndClose(
      server_->port(),
      "GET /v2/models/counter/versions/%31/ready HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(answer, HasSubstr("HTTP/1.1 200"));
  EXPECT_THAT(answer, ::testing::EndsWith("GET /v2/models/counter/versions/1/ready "));
}

TEST_F(FramingTest, ChunkedBodyWithExtensionsAndTrailersIsDecoded) {
  const std::string answer =
      AnswerAndClose(server_->port(),
                     "POST /c HTTP/1.1\r\nConnection: close\r\nTransfer-Encoding: Chunked\r\n\r\n"
                     "5;name=value\r\nhello\r\n6 ; x\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n");
  EXPECT_THAT(answer, HasSubstr("HTTP/1.1 200"));
  EXPECT_THAT(answer, ::testing::EndsWith("POST /c hello world"));
}

// Requests sent in one write are each answered, in order.
TEST_F(FramingTest, PipelinedRequestsAreEachAnsweredInOrder) {
  {
    Client client(server_->port());
    ASSERT_TRUE(client.Send("GET /one HTTP/1.1\r\n\r\nGET /two HTTP/1.1\r\n\r\n"));
    ASSERT_TRUE(client.ReadUntil("GET /two ")) << client.received();
    EXPECT_LT(client.received().find("GET /one "), client.received().find("GET /two "));
  }
  std::string requests;
  for (int i = 0; i < 50; ++i) {
    const std::string body = "body" + std::to_string(i);
    requests += "POST /infer/" + std::to_string(i) +
                " HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  }
  requests += "GET /last HTTP/1.1\r\nConnection: close\r\n\r\n";
  const std::string answer = AnswerAndClose(server_->port(), requests);
  size_t at = 0;
  for (int i = 0; i < 50; ++i) {
    const std::string expected = "POST /infer/" + std::to_string(i) + " body" + std::to_string(i);
    const size_t found = answer.find(expected, at);
    ASSERT_NE(found, std::string::npos) << i << ": " << answer.substr(at, 300);
    at = found + expected.size();
  }
  EXPECT_NE(answer.find("GET /last ", at), std::string::npos);
}

// A client that sends its requests and half-closes still gets every answer, then the close
// (libevhtp alone closed at the EOF, dropping the requests not yet answered).
TEST_F(FramingTest, PipelinedRequestsBeforeAHalfCloseAreAllAnswered) {
  for (int trial = 0; trial < 5; ++trial) {
    Client client(server_->port());
    ASSERT_TRUE(
        client.Send("GET /one HTTP/1.1\r\n\r\nGET /two HTTP/1.1\r\n\r\n"
                    "POST /three HTTP/1.1\r\nContent-Length: 1\r\n\r\n3"));
    client.ShutdownWrite();
    EXPECT_TRUE(client.ReadToEnd()) << client.received();
    EXPECT_THAT(client.received(), HasSubstr("GET /one "));
    EXPECT_THAT(client.received(), HasSubstr("GET /two "));
    EXPECT_THAT(client.received(), ::testing::EndsWith("POST /three 3")) << trial;
  }
}

// While an answer waits, a client pipelining on is read only up to a bound (then reading stops
// until the answer is out), and every request is still answered, in order, afterwards.
TEST(FramingBoundTest, PipelinedFloodWhileAnAnswerWaitsIsReadInTurn) {
  absl::Notification release;
  std::thread answerer;
  HttpServer::Options options;
  options.address = "127.0.0.1";
  options.threads = 1;
  auto server = HttpServer::Start(options, [&](HttpExchange* exchange) {
    if (exchange->path() == "/first") {
      answerer = std::thread([exchange, &release] {
        release.WaitForNotificationWithTimeout(absl::Seconds(30));
        exchange->Reply(200, {}, "first answered");
      });
      return;
    }
    exchange->Reply(200, {}, exchange->path());
  });
  ASSERT_TRUE(server.ok()) << server.status();
  Client client((*server)->port());
  std::string flood = "GET /first HTTP/1.1\r\n\r\n";
  constexpr int kRequests = 6000;  // ~330 KB: past the 256 KiB a waiting connection reads
  for (int i = 0; i < kRequests; ++i) {
    flood += "GET /r" + std::to_string(i) + " HTTP/1.1\r\nX-Pad: abcdefghijklmnop\r\n\r\n";
  }
  flood += "GET /last HTTP/1.1\r\nConnection: close\r\n\r\n";
  ASSERT_GT(flood.size(), size_t{256} << 10);
  ASSERT_TRUE(client.Send(flood));
  release.Notify();
  EXPECT_TRUE(client.ReadToEnd());
  answerer.join();
  const std::string& answers = client.received();
  EXPECT_NE(answers.find("first answered"), std::string::npos);
  size_t at = 0;
  for (int i = 0; i < kRequests; i += 500) {
    const size_t found = answers.find("/r" + std::to_string(i), at);
    ASSERT_NE(found, std::string::npos) << i;
    at = found;
  }
  EXPECT_TRUE(absl::EndsWith(answers, "/last"));
  int count = 0;
  for (size_t p = answers.find("HTTP/1.1 200"); p != std::string::npos;
       p = answers.find("HTTP/1.1 200", p + 1)) {
    ++count;
  }
  EXPECT_EQ(count, kRequests + 2);
}

// A request trickled a byte at a time is framed as when sent at once.
TEST_F(FramingTest, RequestSplitIntoSingleBytesIsAnswered) {
  Client client(server_->port());
  const std::string request =
      "POST /v2/x%2Fy HTTP/1.1\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
      "3\r\nabc\r\n0\r\n\r\n";
  for (char c : request) ASSERT_TRUE(client.Send(std::string(1, c)));
  EXPECT_TRUE(client.ReadToEnd());
  EXPECT_THAT(client.received(), HasSubstr("HTTP/1.1 200"));
  EXPECT_THAT(client.received(), ::testing::EndsWith("POST /v2/x/y abc"));
}

}  // namespace
}  // namespace loopserve::server
