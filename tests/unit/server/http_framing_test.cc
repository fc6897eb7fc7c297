// RequestFramer against RFC 9112's framing rules: what each request is handed on as (its
// canonical form, written out here by hand from the RFC's grammar), where requests end, and the
// status each malformed shape is refused with, whatever the reads the bytes arrive in.
#include "server/http/http_framing.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loopserve::server {
namespace {

struct Framed {
  std::string handed_on;
  int requests = 0;
  int status = 0;
  std::string message;
};

// Frames `stream` read `piece` bytes at a time (0: at once), as HttpServer does.
Framed Frame(const std::string& stream, size_t piece = 0) {
  RequestFramer framer(RequestFramer::Limits{});
  Framed framed;
  std::string held;
  for (size_t from = 0; from < stream.size() && framed.status == 0;) {
    const size_t bytes = piece == 0 ? stream.size() : std::min(piece, stream.size() - from);
    held.append(stream, from, bytes);
    from += bytes;
    while (!held.empty() && framed.status == 0) {
      if (const uint64_t due = framer.body_bytes_due(); due > 0) {
        const size_t pass = std::min<size_t>(due, held.size());
        framed.handed_on.append(held, 0, pass);
        held.erase(0, pass);
        if (framer.PassedBody(pass)) ++framed.requests;
        continue;
      }
      const RequestFramer::Step step = framer.Consume(held, &framed.handed_on);
      held.erase(0, step.consumed);
      framed.status = step.status;
      framed.message = step.message;
      if (step.request_ended) ++framed.requests;
    }
  }
  return framed;
}

TEST(RequestFramerTest, HeadIsHandedOnInCanonicalForm) {
  const Framed framed =
      Frame("\r\nGET /v2/models/m/ready?x=%20 HTTP/1.1\r\nHost:  localhost \r\nX-Empty:\r\n\r\n");
  EXPECT_EQ(framed.status, 0) << framed.message;
  EXPECT_EQ(framed.requests, 1);
  EXPECT_EQ(framed.handed_on,
            "GET /v2/models/m/ready?x=%20 HTTP/1.1\r\nHost: localhost\r\nX-Empty: \r\n\r\n");
}

TEST(RequestFramerTest, ContentLengthBodyEndsTheRequest) {
  for (size_t piece : {0, 1, 3}) {
    const Framed framed =
        Frame("POST /a HTTP/1.1\r\ncontent-length: 005\r\n\r\nhelloGET /b HTTP/1.0\r\n\r\n", piece);
    EXPECT_EQ(framed.status, 0) << framed.message;
    EXPECT_EQ(framed.requests, 2) << piece;
    EXPECT_EQ(framed.handed_on,
              "POST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET /b HTTP/1.0\r\n\r\n")
        << piece;
  }
}

TEST(RequestFramerTest, ChunkedBodyLosesExtensionsAndTrailers) {
  for (size_t piece : {0, 1, 2, 7}) {
    const Framed framed = Frame(
        "POST /a HTTP/1.1\r\nTransfer-Encoding: CHUNKED\r\n\r\n"
        "00a;ext=\"v\"\r\n0123456789\r\n1 ;x\r\n!\r\n000\r\nTrailer-A: b\r\n\r\n",
        piece);
    EXPECT_EQ(framed.status, 0) << framed.message;
    EXPECT_EQ(framed.requests, 1) << piece;
    EXPECT_EQ(framed.handed_on,
              "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
              "a\r\n0123456789\r\n1\r\n!\r\n0\r\n\r\n")
        << piece;
  }
}

TEST(RequestFramerTest, MalformedShapesAreRefusedWithTheirStatus) {
  const std::string get = "GET / HTTP/1.1\r\n";
  const std::vector<std::pair<std::string, int>> cases = {
      {get + "Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
      {get + "Transfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n", 400},
      {get + "Content-Length: 1\r\nContent-Length: 2\r\n\r\n", 400},
      {get + "Content-Length: +1\r\n\r\n", 400},
      {get + "Content-Length: 9223372036854775808\r\n\r\n", 400},
      {get + "Transfer-Encoding: xchunked\r\n\r\n", 400},
      {get + "Transfer-Encoding: gzip, chunked\r\n\r\n", 400},
      {"GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
      {get + "Transfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n", 400},
      {get + "Transfer-Encoding: chunked\r\n\r\n1000000000000000\r\n", 400},
      {get + "Transfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n", 400},
      {get + "Transfer-Encoding: chunked\r\n\r\n2 x\r\nab\r\n", 400},
      {get + "X: a\rb\r\n\r\n", 400},
      {get + "X : a\r\n\r\n", 400},
      {get + " X: a\r\n\r\n", 400},
      {get + "X: a\n\r\n", 400},
      {std::string("GET /a\0b HTTP/1.1\r\n\r\n", 21), 400},
      {"GET /a%zz HTTP/1.1\r\n\r\n", 400},
      {"GET /a%1 HTTP/1.1\r\n\r\n", 400},
      {"GET /a%0a HTTP/1.1\r\n\r\n", 400},
      {"GET /a#f HTTP/1.1\r\n\r\n", 400},
      {"GET * HTTP/1.1\r\n\r\n", 400},
      {"GET / HTTP/1.1 \r\n\r\n", 400},
      {"GET / http/1.1\r\n\r\n", 400},
      {"GET / HTTP/3.0\r\n\r\n", 505},
      {"BREW / HTTP/1.1\r\n\r\n", 501},
      {"TRACE / HTTP/1.1\r\n\r\n", 501},
      {"GET /" + std::string(8191, 'a') + " HTTP/1.1\r\n\r\n", 414},
      {get + "X: " + std::string(8192, 'v') + "\r\n\r\n", 431},
      {get + std::string(8192, 'k') + ": v\r\n\r\n", 431},
  };
  for (const auto& [request, status] : cases) {
    for (size_t piece : {0, 1, 5}) {
      const Framed framed = Frame(request, piece);
      EXPECT_EQ(framed.status, status) << piece << ": " << request.substr(0, 120);
      EXPECT_EQ(framed.requests, 0) << request.substr(0, 120);
    }
  }
}

TEST(RequestFramerTest, TheLongestTokensPass) {
  const Framed framed = Frame("GET /" + std::string(8190, 'a') +
                              " HTTP/1.1\r\nX: " + std::string(8191, 'v') + "\r\n\r\n");
  EXPECT_EQ(framed.status, 0) << framed.message;
  EXPECT_EQ(framed.requests, 1);
}

// A header section past the bounds is answered 431 only once it has ended, its bytes dropped as
// they come.
TEST(RequestFramerTest, OversizedHeadIsDroppedUntilItEnds) {
  RequestFramer framer(RequestFramer::Limits{});
  std::string out;
  EXPECT_EQ(framer.Consume("GET / HTTP/1.1\r\n", &out).status, 0);
  const std::string line = "X-Pad: " + std::string(1000, 'v') + "\r\n";
  for (int i = 0; i < 1000; ++i) {
    const RequestFramer::Step step = framer.Consume(line, &out);
    ASSERT_EQ(step.status, 0);
    ASSERT_EQ(step.consumed, line.size());
  }
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(framer.Consume("\r\n", &out).status, 431);
}

TEST(PercentDecodeTest, DecodesEachEscapeOnce) {
  EXPECT_EQ(PercentDecode("/v2/models/counter/versions/%31/ready"),
            "/v2/models/counter/versions/1/ready");
  EXPECT_EQ(PercentDecode("/a%2fb%2Fc"), "/a/b/c");
  EXPECT_EQ(PercentDecode("/%2531"), "/%31");
  EXPECT_EQ(PercentDecode("/a+b%"), "/a+b%");
  EXPECT_EQ(PercentDecode("/%zz%4"), "/%zz%4");
}

}  // namespace
}  // namespace loopserve::server
