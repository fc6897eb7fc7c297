#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loopserve::server {

// A request body's Content-Encoding (RFC 9110 8.4) as the REST adapter takes it.
enum class ContentEncoding { kIdentity, kGzip, kDeflate, kUnsupported };

// The encoding a Content-Encoding header names: absent or "identity" is kIdentity; "gzip" or
// "x-gzip" kGzip; "deflate" kDeflate (case-insensitive, surrounding blanks ignored); anything
// else (a list of codings, br, zstd) kUnsupported.
ContentEncoding ParseContentEncoding(const char* header);

// Inflates `body` (gzip: RFC 1952; deflate: the zlib format of RFC 1950, or a raw RFC 1951
// stream, which some clients send) into a string whose `padding` bytes past its size are
// readable (the JSON parser's SIMD padding; the returned size excludes them). Never holds more
// than `max_bytes` of output: a body that inflates past it (a zip bomb) is RESOURCE_EXHAUSTED
// naming the limit, after at most max_bytes of output were allocated. InvalidArgument for data
// that is not in the encoding, or is cut short.
absl::StatusOr<std::string> InflateBody(absl::string_view body, ContentEncoding encoding,
                                        uint64_t max_bytes, size_t padding);

// The response encoding an Accept-Encoding header (RFC 9110 12.5.3) asks for: kGzip when it
// accepts gzip (or x-gzip, or "*"), else kDeflate when it accepts deflate, else kIdentity (also
// for nullptr). A coding with q=0 is refused; other q-values only rank gzip against deflate.
ContentEncoding ParseAcceptEncoding(const char* header);

// Compresses a response body as `encoding` (kGzip: RFC 1952; kDeflate: the zlib format of
// RFC 1950, what HTTP's "deflate" names) at zlib's fastest level: a response is compressed on
// the thread that answers the request, so speed counts more than the last few percent.
absl::StatusOr<std::string> DeflateBody(absl::string_view body, ContentEncoding encoding);

}  // namespace loopserve::server
