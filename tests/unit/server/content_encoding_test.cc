#include "server/http/content_encoding.h"

#include <zlib.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loopserve::server {
namespace {

using ::testing::HasSubstr;

// `text` compressed by zlib itself (the reference): window_bits 31 gzip, 15 zlib, -15 raw.
std::string Compress(const std::string& text, int window_bits) {
  z_stream stream = {};
  EXPECT_EQ(
      deflateInit2(&stream, Z_BEST_COMPRESSION, Z_DEFLATED, window_bits, 9, Z_DEFAULT_STRATEGY),
      Z_OK);
  std::string out(deflateBound(&stream, text.size()) + 64, '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  stream.avail_in = static_cast<uInt>(text.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&stream, Z_FINISH), Z_STREAM_END);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

TEST(ContentEncodingTest, ParsesTheHeader) {
  EXPECT_EQ(ParseContentEncoding(nullptr), ContentEncoding::kIdentity);
  EXPECT_EQ(ParseContentEncoding(" identity "), ContentEncoding::kIdentity);
  EXPECT_EQ(ParseContentEncoding("GZIP"), ContentEncoding::kGzip);
  EXPECT_EQ(ParseContentEncoding("x-gzip"), ContentEncoding::kGzip);
  EXPECT_EQ(ParseContentEncoding("deflate"), ContentEncoding::kDeflate);
  EXPECT_EQ(ParseContentEncoding("br"), ContentEncoding::kUnsupported);
  EXPECT_EQ(ParseContentEncoding("gzip, deflate"), ContentEncoding::kUnsupported);
}

TEST(ContentEncodingTest, InflatesGzipZlibAndRawDeflate) {
  std::string text;
  for (int i = 0; i < 100000; ++i) text += std::to_string(i % 977) + ",";
  for (auto [encoding, bits] :
       {std::pair{ContentEncoding::kGzip, 31}, std::pair{ContentEncoding::kDeflate, 15},
        std::pair{ContentEncoding::kDeflate, -15}}) {
    auto plain = InflateBody(Compress(text, bits), encoding, 1 << 30, 64);
    ASSERT_TRUE(plain.ok()) << bits << ": " << plain.status();
    EXPECT_EQ(*plain, text) << bits;
    EXPECT_GE(plain->capacity(), plain->size() + 64) << "the parser's padding";
  }
}

TEST(ContentEncodingTest, AZipBombStopsAtTheLimit) {
  // 256 MiB of zeros compress to ~256 KB: inflated only up to the 1 MiB limit.
  const std::string bomb = Compress(std::string(size_t{256} << 20, '\0'), 31);
  ASSERT_LT(bomb.size(), size_t{1} << 20);
  auto plain = InflateBody(bomb, ContentEncoding::kGzip, 1 << 20, 64);
  EXPECT_EQ(plain.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(plain.status().message(), HasSubstr("inflates to more than 1048576 bytes"));
  // Exactly at the limit is fine.
  auto exact =
      InflateBody(Compress(std::string(1 << 20, 'a'), 31), ContentEncoding::kGzip, 1 << 20, 64);
  ASSERT_TRUE(exact.ok()) << exact.status();
  EXPECT_EQ(exact->size(), size_t{1} << 20);
}

TEST(ContentEncodingTest, CorruptOrCutDataIsInvalid) {
  const std::string gzip = Compress("{\"inputs\": []}", 31);
  EXPECT_EQ(InflateBody("not gzip at all", ContentEncoding::kGzip, 1 << 20, 64).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(InflateBody(gzip.substr(0, gzip.size() / 2), ContentEncoding::kGzip, 1 << 20, 64)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(InflateBody("", ContentEncoding::kDeflate, 1 << 20, 64).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(InflateBody("\xff\xff\xff\xff", ContentEncoding::kDeflate, 1 << 20, 64).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Response compression: the Accept-Encoding header picks the coding.
TEST(ContentEncodingTest, AcceptEncodingPicksTheResponseCoding) {
  EXPECT_EQ(ParseAcceptEncoding(nullptr), ContentEncoding::kIdentity);
  EXPECT_EQ(ParseAcceptEncoding(""), ContentEncoding::kIdentity);
  EXPECT_EQ(ParseAcceptEncoding("identity"), ContentEncoding::kIdentity);
  EXPECT_EQ(ParseAcceptEncoding("br"), ContentEncoding::kIdentity);
  EXPECT_EQ(ParseAcceptEncoding("gzip"), ContentEncoding::kGzip);
  EXPECT_EQ(ParseAcceptEncoding("deflate"), ContentEncoding::kDeflate);
  EXPECT_EQ(ParseAcceptEncoding("gzip, deflate, br"), ContentEncoding::kGzip);
  EXPECT_EQ(ParseAcceptEncoding("deflate, X-GZIP"), ContentEncoding::kGzip);
  EXPECT_EQ(ParseAcceptEncoding("gzip;q=0.2, deflate;q=0.8"), ContentEncoding::kDeflate);
  EXPECT_EQ(ParseAcceptEncoding("gzip;q=0, deflate"), ContentEncoding::kDeflate);
  EXPECT_EQ(ParseAcceptEncoding("gzip; q=0"), ContentEncoding::kIdentity);
  EXPECT_EQ(ParseAcceptEncoding("*"), ContentEncoding::kGzip);
  EXPECT_EQ(ParseAcceptEncoding("*;q=0"), ContentEncoding::kIdentity);
  EXPECT_EQ(ParseAcceptEncoding("gzip;q=oops"), ContentEncoding::kIdentity);
}

// What DeflateBody writes, zlib's own inflate (the reference decoder) reads back unchanged.
TEST(ContentEncodingTest, DeflatedBodiesInflateWithZlib) {
  std::string text;
  for (int k = 0; k < 20000; ++k) text += std::to_string(k * 7919 % 1000) + ",";
  for (const auto& [encoding, window_bits] :
       {std::pair{ContentEncoding::kGzip, 31}, std::pair{ContentEncoding::kDeflate, 15}}) {
    for (const std::string& body : {text, std::string(), std::string("x")}) {
      absl::StatusOr<std::string> packed = DeflateBody(body, encoding);
      ASSERT_TRUE(packed.ok()) << packed.status();
      z_stream stream = {};
      ASSERT_EQ(inflateInit2(&stream, window_bits), Z_OK);
      std::string out(body.size() + 16, '\0');
      stream.next_in = reinterpret_cast<Bytef*>(packed->data());
      stream.avail_in = static_cast<uInt>(packed->size());
      stream.next_out = reinterpret_cast<Bytef*>(out.data());
      stream.avail_out = static_cast<uInt>(out.size());
      EXPECT_EQ(inflate(&stream, Z_FINISH), Z_STREAM_END);
      out.resize(stream.total_out);
      inflateEnd(&stream);
      EXPECT_EQ(out, body);
    }
    EXPECT_LT(DeflateBody(text, encoding)->size(), text.size() / 2);
  }
}

}  // namespace
}  // namespace loopserve::server
