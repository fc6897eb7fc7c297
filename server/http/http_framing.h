#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace loopserve::server {

// RFC 9112 message framing for the requests of one HTTP/1.1 connection: splits the bytes the
// client sends into requests, validates each request's head (request line and header fields)
// completely and its chunked framing as it arrives, and hands on each request in a canonical form
// that libevhtp's lenient parser cannot misread (HttpServer puts it in front of that parser: one
// request at a time, the next only once the previous is answered, so pipelined requests are
// answered each, in order). Refused, with the connection then closed:
// - a method that is not a token, a request target that is not origin-form (absolute path and
//   query of RFC 3986 characters, every '%' followed by two hex digits, no percent-encoded
//   control byte in the path), NUL or any other control byte in the request line, a version
//   other than HTTP/1.0 or HTTP/1.1 (505 for HTTP/2 and later): 400;
// - a recognized method the server does not implement (anything but GET, HEAD, POST, PUT,
//   DELETE, OPTIONS, PATCH): 501;
// - a request target longer than Limits::max_token: 414;
// - a header line that is not `token ":" OWS value OWS` (whitespace before the colon, obs-fold,
//   control bytes in the value), a Content-Length that is not a decimal number below 2^63, more
//   than one Content-Length, Content-Length together with Transfer-Encoding, any transfer coding
//   but exactly `chunked` (and Transfer-Encoding at all in HTTP/1.0): 400;
// - more than Limits::max_headers header fields, more than Limits::max_header_bytes bytes of
//   names and values, or a name or value longer than Limits::max_token: 431, once the head ended
//   (the bytes past the bound are dropped as they arrive, so a client streaming headers without end
//   costs no memory);
// - a chunk size that is not hexadecimal or needs more than 60 bits, a chunk line longer than
//   1 KiB, chunk data not followed by CRLF, a malformed trailer field: 400.
// Lines end with CRLF (a bare CR or LF is refused); empty lines before a request line are skipped.
//
// The canonical form: the request line as sent; each header field as `name: value` with the
// whitespace around the value removed; Content-Length as a plain number; a chunked body as chunks
// without extensions, ending with "0\r\n\r\n" (trailer fields are validated and dropped). Body
// bytes pass through untouched (Consume reports them, the caller moves them without a copy).
//
// Not thread-safe: one per connection, used on the connection's thread.
class RequestFramer {
 public:
  struct Limits {
    // The longest request target, header name and header value: 8191 bytes, what libevhtp's
    // parser takes in one token (it drops the connection without an answer past that).
    size_t max_token = 8191;
    int max_headers = 100;
    size_t max_header_bytes = size_t{64} << 10;  // names and values
  };

  // What Consume did with the bytes it was given.
  struct Step {
    size_t consumed = 0;  // the bytes of the input used up (their canonical form is in `out`)
    bool request_ended = false;  // the request's last byte is in `out`: stop until it is answered
    int status = 0;              // non-zero: refuse the request with this status and close
    std::string message;         // why (for the {"error": ...} answer)
  };

  explicit RequestFramer(Limits limits) : limits_(limits) {}

  // Body bytes that come next and pass through as they are (Content-Length body, chunk data):
  // the caller hands on up to this many bytes of what follows itself and reports them to
  // PassedBody, which is true when they ended the request. While it is non-zero Consume takes
  // nothing.
  uint64_t body_bytes_due() const { return body_due_; }
  bool PassedBody(uint64_t bytes);

  // Reads `input` (the next bytes from the client, not yet consumed) until it is used up, a
  // request ends, body bytes are due, or the request is refused; appends the canonical form of
  // what it read to `out`. After a refusal the framer takes nothing more.
  Step Consume(absl::string_view input, std::string* out);

 private:
  enum class State {
    kIdle,          // before a request line (skipping empty lines)
    kHead,          // header lines
    kDiscardHead,   // past the header bounds: dropping bytes until the head ends (431)
    kChunkSize,     // a chunk-size line
    kChunkDataEnd,  // the CRLF after chunk data
    kTrailers,      // trailer lines after the last chunk
    kRefused,
  };
  // Handles one complete line (without its CRLF); may set `step`'s refusal or end.
  void OnLine(absl::string_view line, std::string* out, Step* step);
  // Whether a line of `size` bytes (without its CRLF) is past the bound of the current state.
  bool LineTooLong(size_t size) const;
  // Refuses a line past its bound, or drops the head from there on; `end_matched`: how much of
  // "\r\n\r\n" the line's end already gave.
  void OnLineTooLong(size_t end_matched, Step* step);
  void OnRequestLine(absl::string_view line, Step* step);
  void OnHeaderLine(absl::string_view line, Step* step);
  void OnHeadEnd(std::string* out, Step* step);
  void OnChunkSizeLine(absl::string_view line, std::string* out, Step* step);
  void Refuse(int status, std::string message, Step* step);
  void Reset();  // for the next request

  const Limits limits_;
  State state_ = State::kIdle;
  std::string line_;  // the line being read
  bool cr_ = false;   // kChunkDataEnd: its CR has arrived
  uint64_t body_due_ = 0;
  bool chunked_ = false;
  // The request being read.
  std::string head_;  // canonical head so far
  bool http10_ = false;
  int headers_ = 0;
  size_t header_bytes_ = 0;
  int content_lengths_ = 0;
  uint64_t content_length_ = 0;
  int transfer_encodings_ = 0;
  size_t discard_match_ = 0;  // kDiscardHead: how much of "\r\n\r\n" was seen last
  size_t trailer_bytes_ = 0;
  size_t longest_field_ = 0;
};

// Undoes the percent-escapes of a request path ("%31" -> "1"); a '%' not followed by two hex
// digits stays as it is ('+' is not a space in a path).
std::string PercentDecode(absl::string_view path);

}  // namespace loopserve::server
