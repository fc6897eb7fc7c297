#include "server/http/http_framing.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace loopserve::server {
namespace {

constexpr size_t kMaxChunkLine = 1024;
// Chunk sizes need at most this many significant hex digits (60 bits): libevhtp's parser adds
// them up in 64 bits without an overflow check.
constexpr int kMaxChunkSizeDigits = 15;

// A table of the bytes in `alnum` (letters and digits) and `others`.
struct ByteClass {
  constexpr ByteClass(const char* others) : in() {
    for (int c = '0'; c <= '9'; ++c) in[c] = true;
    for (int c = 'a'; c <= 'z'; ++c) in[c] = true;
    for (int c = 'A'; c <= 'Z'; ++c) in[c] = true;
    for (; *others != 0; ++others) in[static_cast<unsigned char>(*others)] = true;
  }
  bool in[256];
};

// RFC 9110 §5.6.2 tchar.
constexpr ByteClass kTokenChars("!#$%&'*+-.^_`|~");
// A byte of a request target: RFC 3986 pchar, '/', '?', and '%' of a pct-encoded triplet.
constexpr ByteClass kTargetChars("-._~!$&'()*+,;=:@/?%");

bool IsTokenChar(unsigned char c) { return kTokenChars.in[c]; }

bool IsToken(absl::string_view text) {
  if (text.empty()) return false;
  for (unsigned char c : text) {
    if (!IsTokenChar(c)) return false;
  }
  return true;
}

bool IsTargetChar(unsigned char c) { return kTargetChars.in[c]; }

// A field-value byte (RFC 9110 §5.5): VCHAR, obs-text, SP, HTAB.
bool IsFieldValueChar(unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7f); }

int HexValue(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

absl::string_view TrimWhitespace(absl::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

// For messages: the bytes of `text` that are safe to show inside a JSON string, the rest as
// \xNN, at most 64 of them.
std::string Printable(absl::string_view text) {
  std::string shown;
  for (unsigned char c : text.substr(0, 64)) {
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      shown.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&shown, "\\\\x", absl::Hex(c, absl::kZeroPad2));
    }
  }
  if (text.size() > 64) shown += "...";
  return shown;
}

}  // namespace

std::string PercentDecode(absl::string_view path) {
  std::string decoded;
  decoded.reserve(path.size());
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '%' && i + 2 < path.size() && HexValue(path[i + 1]) >= 0 &&
        HexValue(path[i + 2]) >= 0) {
      decoded.push_back(static_cast<char>(HexValue(path[i + 1]) * 16 + HexValue(path[i + 2])));
      i += 2;
    } else {
      decoded.push_back(path[i]);
    }
  }
  return decoded;
}

void RequestFramer::Reset() {
  state_ = State::kIdle;
  head_.clear();
  http10_ = false;
  headers_ = 0;
  header_bytes_ = 0;
  content_lengths_ = 0;
  content_length_ = 0;
  transfer_encodings_ = 0;
  chunked_ = false;
  discard_match_ = 0;
  trailer_bytes_ = 0;
  longest_field_ = 0;
  cr_ = false;
}

void RequestFramer::Refuse(int status, std::string message, Step* step) {
  state_ = State::kRefused;
  body_due_ = 0;
  step->status = status;
  step->message = std::move(message);
}

bool RequestFramer::PassedBody(uint64_t bytes) {
  body_due_ -= std::min(bytes, body_due_);
  if (body_due_ > 0) return false;
  if (chunked_) {
    state_ = State::kChunkDataEnd;
    return false;
  }
  Reset();
  return true;
}

RequestFramer::Step RequestFramer::Consume(absl::string_view input, std::string* out) {
  Step step;
  size_t i = 0;
  while (i < input.size() && body_due_ == 0 && state_ != State::kRefused && !step.request_ended) {
    if (state_ == State::kDiscardHead) {
      static constexpr char kEnd[] = "\r\n\r\n";
      const char c = input[i++];
      if (c == kEnd[discard_match_]) {
        if (++discard_match_ == 4) {
          Refuse(431,
                 absl::StrCat("the request has more than ", limits_.max_headers,
                              " headers, more than ", limits_.max_header_bytes,
                              " bytes of header names and values, or a header name or value "
                              "longer than ",
                              limits_.max_token, " bytes"),
                 &step);
        }
      } else {
        discard_match_ = c == '\r' ? 1 : 0;
      }
      continue;
    }
    if (state_ == State::kChunkDataEnd) {
      const char c = input[i++];
      if (!cr_ && c == '\r') {
        cr_ = true;
      } else if (cr_ && c == '\n') {
        cr_ = false;
        out->append("\r\n");
        state_ = State::kChunkSize;
      } else {
        Refuse(400, "chunk data is not followed by CRLF (chunk size and data disagree)", &step);
      }
      continue;
    }
    // A line: the bytes up to the next LF. A line too long for its place is refused (or, in the
    // head, dropped until the head ends) as soon as it is, whether or not its end has arrived, so
    // that how the bytes are split into reads never matters.
    const char* start = input.data() + i;
    const size_t left = input.size() - i;
    const auto* lf = static_cast<const char*>(std::memchr(start, '\n', left));
    const size_t take = lf == nullptr ? left : static_cast<size_t>(lf - start);
    // A line that arrived whole is read where it is; a part is kept until the rest comes.
    const bool whole = line_.empty() && lf != nullptr;
    if (!whole) line_.append(start, take);
    i += take;
    const absl::string_view line = whole ? absl::string_view(start, take) : line_;
    const bool cr = !line.empty() && line.back() == '\r';
    if (LineTooLong(line.size() - (cr ? 1 : 0))) {
      if (lf != nullptr) ++i;
      OnLineTooLong(cr ? (lf != nullptr ? 2 : 1) : 0, &step);
      line_.clear();
      continue;
    }
    if (lf == nullptr) break;
    ++i;  // the LF
    if (!cr) {
      Refuse(400, "a line of the request ends with a bare LF (lines end with CRLF)", &step);
      break;
    }
    OnLine(line.substr(0, line.size() - 1), out, &step);  // OnLine leaves line_ alone
    line_.clear();
  }
  step.consumed = i;
  return step;
}

bool RequestFramer::LineTooLong(size_t size) const {
  switch (state_) {
    case State::kIdle:
      return size > limits_.max_token + 64;  // the method and version beside the target
    case State::kHead:
      return header_bytes_ + size > limits_.max_header_bytes + 2 ||
             size > 2 * limits_.max_token + 2;
    case State::kChunkSize:
      return size > kMaxChunkLine;
    case State::kTrailers:
      return trailer_bytes_ + size > limits_.max_header_bytes + 2;
    default:
      return false;
  }
}

void RequestFramer::OnLineTooLong(size_t end_matched, Step* step) {
  switch (state_) {
    case State::kIdle:
      return Refuse(414,
                    absl::StrCat("the request target is longer than ", limits_.max_token, " bytes"),
                    step);
    case State::kHead:
      state_ = State::kDiscardHead;
      discard_match_ = end_matched;
      return;
    case State::kChunkSize:
      return Refuse(400, absl::StrCat("a chunk-size line is longer than ", kMaxChunkLine, " bytes"),
                    step);
    case State::kTrailers:
      return Refuse(
          431,
          absl::StrCat("the trailer fields take more than ", limits_.max_header_bytes, " bytes"),
          step);
    default:
      return;
  }
}

void RequestFramer::OnLine(absl::string_view line, std::string* out, Step* step) {
  switch (state_) {
    case State::kIdle:
      if (!line.empty()) OnRequestLine(line, step);  // empty lines before a request are skipped
      return;
    case State::kHead:
      if (line.empty()) return OnHeadEnd(out, step);
      OnHeaderLine(line, step);
      if (state_ == State::kHead &&
          (headers_ > limits_.max_headers || header_bytes_ > limits_.max_header_bytes ||
           longest_field_ > limits_.max_token)) {
        state_ = State::kDiscardHead;
        discard_match_ = 2;  // this line's CRLF
      }
      return;
    case State::kChunkSize:
      return OnChunkSizeLine(line, out, step);
    case State::kTrailers: {
      if (line.empty()) {
        out->append("0\r\n\r\n");
        Reset();
        step->request_ended = true;
        return;
      }
      trailer_bytes_ += line.size();
      const size_t colon = line.find(':');
      if (colon == absl::string_view::npos || !IsToken(line.substr(0, colon))) {
        return Refuse(400, absl::StrCat("malformed trailer field '", Printable(line), "'"), step);
      }
      for (unsigned char c : line.substr(colon + 1)) {
        if (!IsFieldValueChar(c)) {
          return Refuse(400, "a control byte in a trailer field", step);
        }
      }
      return;
    }
    default:
      return;
  }
}

void RequestFramer::OnRequestLine(absl::string_view line, Step* step) {
  for (unsigned char c : line) {
    if (c < 0x20 || c == 0x7f) {
      return Refuse(400,
                    absl::StrCat("a control byte (\\\\x", absl::Hex(c, absl::kZeroPad2),
                                 ") in the request line"),
                    step);
    }
  }
  const size_t first = line.find(' ');
  const size_t second = first == absl::string_view::npos ? first : line.find(' ', first + 1);
  if (second == absl::string_view::npos || line.find(' ', second + 1) != absl::string_view::npos) {
    return Refuse(400,
                  absl::StrCat("malformed request line '", Printable(line),
                               "' (expected: METHOD SP TARGET SP HTTP/1.1)"),
                  step);
  }
  const absl::string_view method = line.substr(0, first);
  const absl::string_view target = line.substr(first + 1, second - first - 1);
  const absl::string_view version = line.substr(second + 1);
  if (!IsToken(method)) {
    return Refuse(400, absl::StrCat("malformed method '", Printable(method), "'"), step);
  }
  if (version == "HTTP/1.1") {
    http10_ = false;
  } else if (version == "HTTP/1.0") {
    http10_ = true;
  } else if (version.size() == 8 && absl::StartsWith(version, "HTTP/") &&
             absl::ascii_isdigit(version[5]) && version[6] == '.' &&
             absl::ascii_isdigit(version[7]) && version[5] >= '2') {
    return Refuse(505, absl::StrCat("HTTP version '", version, "' is not supported"), step);
  } else {
    return Refuse(400, absl::StrCat("malformed HTTP version '", Printable(version), "'"), step);
  }
  if (target.size() > limits_.max_token) {
    return Refuse(
        414, absl::StrCat("the request target is longer than ", limits_.max_token, " bytes"), step);
  }
  if (target.empty() || target.front() != '/') {
    return Refuse(400,
                  absl::StrCat("the request target '", Printable(target),
                               "' is not an absolute path (origin-form)"),
                  step);
  }
  bool in_query = false;
  for (size_t i = 0; i < target.size(); ++i) {
    const unsigned char c = target[i];
    if (!IsTargetChar(c)) {
      return Refuse(400,
                    absl::StrCat("the request target has a byte not allowed in a URI (\\\\x",
                                 absl::Hex(c, absl::kZeroPad2), ")"),
                    step);
    }
    if (c == '?') in_query = true;
    if (c != '%') continue;
    if (i + 2 >= target.size() || HexValue(target[i + 1]) < 0 || HexValue(target[i + 2]) < 0) {
      return Refuse(400,
                    absl::StrCat("malformed percent-encoding in the request target at '",
                                 Printable(target.substr(i, 3)), "' (a '%' takes two hex digits)"),
                    step);
    }
    const int decoded = HexValue(target[i + 1]) * 16 + HexValue(target[i + 2]);
    if (!in_query && (decoded < 0x20 || decoded == 0x7f)) {
      return Refuse(400, "a percent-encoded control byte in the request path", step);
    }
    i += 2;
  }
  if (method != "GET" && method != "HEAD" && method != "POST" && method != "PUT" &&
      method != "DELETE" && method != "OPTIONS" && method != "PATCH") {
    return Refuse(501, absl::StrCat("the method '", Printable(method), "' is not implemented"),
                  step);
  }
  head_.assign(line.data(), line.size());
  head_ += "\r\n";
  state_ = State::kHead;
}

void RequestFramer::OnHeaderLine(absl::string_view line, Step* step) {
  if (line.front() == ' ' || line.front() == '\t') {
    return Refuse(400, "a header line starts with whitespace (obsolete line folding)", step);
  }
  const size_t colon = line.find(':');
  const absl::string_view name = colon == absl::string_view::npos ? line : line.substr(0, colon);
  if (colon == absl::string_view::npos || !IsToken(name)) {
    return Refuse(400,
                  absl::StrCat("malformed header field '", Printable(name),
                               "' (a token, then ':' with no whitespace before it)"),
                  step);
  }
  const absl::string_view value = TrimWhitespace(line.substr(colon + 1));
  for (unsigned char c : value) {
    if (!IsFieldValueChar(c)) {
      return Refuse(400,
                    absl::StrCat("a control byte (\\\\x", absl::Hex(c, absl::kZeroPad2),
                                 ") in the value of header '", Printable(name), "'"),
                    step);
    }
  }
  ++headers_;
  header_bytes_ += name.size() + value.size();
  longest_field_ = std::max({longest_field_, name.size(), value.size()});
  if (absl::EqualsIgnoreCase(name, "Content-Length")) {
    if (++content_lengths_ > 1) {
      return Refuse(400, "more than one Content-Length header", step);
    }
    uint64_t length = 0;
    const bool digits =
        !value.empty() && value.size() <= 19 &&
        std::all_of(value.begin(), value.end(), [](char c) { return absl::ascii_isdigit(c); });
    if (!digits || !absl::SimpleAtoi(value, &length) || length >= (uint64_t{1} << 63)) {
      return Refuse(400,
                    absl::StrCat("Content-Length '", Printable(value),
                                 "' is not a byte count (decimal digits, below 2^63)"),
                    step);
    }
    content_length_ = length;
    absl::StrAppend(&head_, "Content-Length: ", length, "\r\n");
    return;
  }
  if (absl::EqualsIgnoreCase(name, "Transfer-Encoding")) {
    if (++transfer_encodings_ > 1) {
      return Refuse(400, "more than one Transfer-Encoding header", step);
    }
    if (!absl::EqualsIgnoreCase(value, "chunked")) {
      return Refuse(400,
                    absl::StrCat("Transfer-Encoding '", Printable(value),
                                 "' is not supported (only 'chunked')"),
                    step);
    }
    chunked_ = true;
    head_ += "Transfer-Encoding: chunked\r\n";
    return;
  }
  absl::StrAppend(&head_, name, ": ", value, "\r\n");
}

void RequestFramer::OnHeadEnd(std::string* out, Step* step) {
  if (content_lengths_ > 0 && transfer_encodings_ > 0) {
    return Refuse(400,
                  "the request has both Content-Length and Transfer-Encoding (its length is "
                  "ambiguous)",
                  step);
  }
  if (transfer_encodings_ > 0 && http10_) {
    return Refuse(400, "Transfer-Encoding in an HTTP/1.0 request", step);
  }
  out->append(head_);
  out->append("\r\n");
  if (chunked_) {
    state_ = State::kChunkSize;
  } else if (content_length_ > 0) {
    body_due_ = content_length_;  // PassedBody ends the request
  } else {
    Reset();
    step->request_ended = true;
  }
}

void RequestFramer::OnChunkSizeLine(absl::string_view line, std::string* out, Step* step) {
  uint64_t size = 0;
  size_t i = 0;
  int significant = 0;
  for (; i < line.size() && HexValue(line[i]) >= 0; ++i) {
    if (significant > 0 || HexValue(line[i]) > 0) ++significant;
    if (significant > kMaxChunkSizeDigits) {
      return Refuse(400, "a chunk size past 2^60 bytes (overflow)", step);
    }
    size = size * 16 + static_cast<uint64_t>(HexValue(line[i]));
  }
  if (i == 0) {
    return Refuse(400, absl::StrCat("malformed chunk size '", Printable(line), "'"), step);
  }
  // chunk-ext: BWS ";" ..., ignored.
  const absl::string_view rest = TrimWhitespace(line.substr(i));
  if (!rest.empty() && rest.front() != ';') {
    return Refuse(400, absl::StrCat("malformed chunk size '", Printable(line), "'"), step);
  }
  for (unsigned char c : rest) {
    if (!IsFieldValueChar(c)) return Refuse(400, "a control byte in a chunk extension", step);
  }
  if (size == 0) {
    state_ = State::kTrailers;
    return;
  }
  absl::StrAppend(out, absl::Hex(size), "\r\n");
  body_due_ = size;
}

}  // namespace loopserve::server
