#include "server/http/content_encoding.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

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

ContentEncoding ParseAcceptEncoding(const char* header) {
  if (header == nullptr) return ContentEncoding::kIdentity;
  double gzip = -1, deflate = -1, any = -1;  // -1: not named
  for (absl::string_view item : absl::StrSplit(header, ',')) {
    std::vector<absl::string_view> parts = absl::StrSplit(item, ';');
    const absl::string_view coding = absl::StripAsciiWhitespace(parts[0]);
    double q = 1;
    for (size_t k = 1; k < parts.size(); ++k) {
      const absl::string_view param = absl::StripAsciiWhitespace(parts[k]);
      if (absl::StartsWithIgnoreCase(param, "q=") && !absl::SimpleAtod(param.substr(2), &q)) q = 0;
    }
    if (absl::EqualsIgnoreCase(coding, "gzip") || absl::EqualsIgnoreCase(coding, "x-gzip")) {
      gzip = q;
    } else if (absl::EqualsIgnoreCase(coding, "deflate")) {
      deflate = q;
    } else if (coding == "*") {
      any = q;
    }
  }
  if (gzip < 0) gzip = any;
  if (deflate < 0) deflate = any;
  if (gzip > 0 && gzip >= deflate) return ContentEncoding::kGzip;
  if (deflate > 0) return ContentEncoding::kDeflate;
  return ContentEncoding::kIdentity;
}

absl::StatusOr<std::string> DeflateBody(absl::string_view body, ContentEncoding encoding) {
  z_stream stream;
  std::memset(&stream, 0, sizeof(stream));
  const int window_bits = encoding == ContentEncoding::kGzip ? 31 : 15;
  if (deflateInit2(&stream, Z_BEST_SPEED, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return absl::InternalError("cannot start zlib's deflate");
  }
  std::string out;
  out.resize(deflateBound(&stream, static_cast<uLong>(std::min<size_t>(body.size(), 1u << 30))) +
             64);
  size_t consumed = 0;
  size_t produced = 0;
  int result = Z_OK;
  while (result != Z_STREAM_END) {
    // zlib counts in uInt: at most 1 GiB in and out per call.
    const size_t in_chunk = std::min<size_t>(body.size() - consumed, size_t{1} << 30);
    stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(body.data() + consumed));
    stream.avail_in = static_cast<uInt>(in_chunk);
    if (out.size() - produced < (1u << 16)) out.resize(out.size() * 2);
    const size_t room = std::min<size_t>(out.size() - produced, size_t{1} << 30);
    stream.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    stream.avail_out = static_cast<uInt>(room);
    const bool last = consumed + in_chunk == body.size();
    result = deflate(&stream, last ? Z_FINISH : Z_NO_FLUSH);
    if (result == Z_STREAM_ERROR) {
      deflateEnd(&stream);
      return absl::InternalError("zlib's deflate failed");
    }
    consumed += in_chunk - stream.avail_in;
    produced += room - stream.avail_out;
  }
  deflateEnd(&stream);
  out.resize(produced);
  return out;
}

}  // namespace loopserve::server
