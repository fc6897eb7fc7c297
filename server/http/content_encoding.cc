#include "server/http/content_encoding.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace loopserve::server {
namespace {

// One inflate pass with zlib's `window_bits` (31: gzip, 15: zlib, -15: raw deflate).
absl::StatusOr<std::string> Inflate(absl::string_view body, int window_bits, uint64_t max_bytes,
                                    size_t padding, bool* bad_header) {
  *bad_header = false;
  z_stream stream;
  std::memset(&stream, 0, sizeof(stream));
  if (inflateInit2(&stream, window_bits) != Z_OK) {
    return absl::InternalError("cannot start zlib's inflate");
  }
  std::string out;
  // A first guess for the inflated size (JSON tensors compress 3-10x), grown by doubling, never
  // past the limit.
  uint64_t capacity = std::min<uint64_t>(max_bytes, std::max<uint64_t>(body.size() * 4, 1 << 16));
  out.resize(capacity + padding);
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(body.data()));
  uint64_t produced = 0;
  int result = Z_OK;
  size_t consumed = 0;
  while (true) {
    // zlib counts in uInt: feed and drain at most 1 GiB per call.
    const size_t in_chunk = std::min<size_t>(body.size() - consumed, size_t{1} << 30);
    stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(body.data() + consumed));
    stream.avail_in = static_cast<uInt>(in_chunk);
    const uint64_t room = capacity - produced;
    if (room == 0) {
      if (capacity >= max_bytes) {
        // Full, and the stream has not ended: one more byte would pass the limit.
        inflateEnd(&stream);
        return absl::ResourceExhaustedError(absl::StrCat(
            "the request body inflates to more than ", max_bytes, " bytes (--max_message_bytes)"));
      }
      capacity = std::min<uint64_t>(max_bytes, capacity * 2);
      out.resize(capacity + padding);
      continue;
    }
    stream.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    stream.avail_out = static_cast<uInt>(std::min<uint64_t>(room, uint64_t{1} << 30));
    const uInt avail_out_before = stream.avail_out;
    result = inflate(&stream, Z_NO_FLUSH);
    produced += avail_out_before - stream.avail_out;
    consumed += in_chunk - stream.avail_in;
    if (result == Z_STREAM_END) break;
    if (result == Z_DATA_ERROR && produced == 0 && consumed <= 2) *bad_header = true;
    if (result != Z_OK && result != Z_BUF_ERROR) {
      inflateEnd(&stream);
      return absl::InvalidArgumentError(
          absl::StrCat("the request body is not valid ", window_bits == 31 ? "gzip" : "deflate",
                       " data (", stream.msg != nullptr ? stream.msg : "zlib error", ")"));
    }
    if (result == Z_BUF_ERROR && consumed == body.size() && stream.avail_out > 0) {
      inflateEnd(&stream);
      return absl::InvalidArgumentError(absl::StrCat("the request body's ",
                                                     window_bits == 31 ? "gzip" : "deflate",
                                                     " data ends before its stream does"));
    }
  }
  inflateEnd(&stream);
  out.resize(produced + padding);
  std::memset(out.data() + produced, 0, padding);
  out.resize(produced);
  out.reserve(produced + padding);  // keeps the padding allocated (never shrinks)
  return out;
}

}  // namespace

ContentEncoding ParseContentEncoding(const char* header) {
  if (header == nullptr) return ContentEncoding::kIdentity;
  const absl::string_view value = absl::StripAsciiWhitespace(header);
  if (value.empty() || absl::EqualsIgnoreCase(value, "identity")) return ContentEncoding::kIdentity;
  if (absl::EqualsIgnoreCase(value, "gzip") || absl::EqualsIgnoreCase(value, "x-gzip")) {
    return ContentEncoding::kGzip;
  }
  if (absl::EqualsIgnoreCase(value, "deflate")) return ContentEncoding::kDeflate;
  return ContentEncoding::kUnsupported;
}

absl::StatusOr<std::string> InflateBody(absl::string_view body, ContentEncoding encoding,
                                        uint64_t max_bytes, size_t padding) {
  bool bad_header = false;
  if (encoding == ContentEncoding::kGzip) {
    return Inflate(body, 31, max_bytes, padding, &bad_header);
  }
  absl::StatusOr<std::string> zlib = Inflate(body, 15, max_bytes, padding, &bad_header);
  if (zlib.ok() || !bad_header) return zlib;
  return Inflate(body, -15, max_bytes, padding, &bad_header);  // a raw deflate stream
}

}  // namespace loopserve::server
