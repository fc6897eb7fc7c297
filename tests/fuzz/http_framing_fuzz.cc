// Fuzz target: the HTTP transport's connection handling, as HttpServer drives it (http_server.cc,
// HttpCallbacks::Pump): the raw bytes a client sends on one connection, split into reads at
// pseudo-random points, through RequestFramer, and each request it hands on through libevhtp's
// own parser (htparser, which HttpServer's libevhtp runs on them). Checks, beside the sanitizers:
// - the split does not matter: the bytes handed on, the request ends and the refusal are those of
//   the same bytes read at once (a request line or chunk split across reads was libevhtp's bug);
// - the canonical form is a fixed point: framed again, it comes out the same, refused nowhere;
// - libevhtp's parser agrees on every boundary: each request handed on is exactly one message to
//   it, read whole without an error (otherwise a request could smuggle another past the framer,
//   or the server would drop a connection without an answer), with the body length we framed.
//
// Input: 8 bytes that seed the split points, then the bytes the client sends. Seeds: make_seeds.py
// writes smuggling (CL.TE, TE.CL, duplicate lengths, obfuscated codings, overflowing chunk sizes),
// pipelining, chunked and malformed shapes. See README.md.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "evhtp/parser.h"
#include "server/http/http_framing.h"

namespace {

using loopserve::server::RequestFramer;

// What the server does with a connection's bytes.
struct Transcript {
  std::string handed_on;             // the bytes libevhtp's parser gets, in order
  std::vector<size_t> ends;          // offsets in handed_on where a request ended
  std::vector<uint64_t> body_sizes;  // the body bytes of each request (CL body, chunk data)
  int status = 0;                    // a refusal
  // The bytes of the requests that ended (what is handed on of a request refused half-way, or
  // not complete yet, depends on the reads and never reaches a handler).
  absl::string_view complete() const {
    return absl::string_view(handed_on).substr(0, ends.empty() ? 0 : ends.back());
  }
  bool operator==(const Transcript& other) const {
    return complete() == other.complete() && ends == other.ends && body_sizes == other.body_sizes &&
           status == other.status;
  }
};

RequestFramer::Limits TestLimits() {
  RequestFramer::Limits limits;
  limits.max_headers = 100;
  limits.max_header_bytes = 64 << 10;
  return limits;
}

// Frames `stream` read in pieces ending at `cuts` (ascending; the end of the stream is implied),
// as Pump does: body bytes pass through, everything else goes through Consume, one read's bytes at
// a time (a libevent buffer's first chain).
Transcript Frame(absl::string_view stream, const std::vector<size_t>& cuts) {
  RequestFramer framer(TestLimits());
  Transcript transcript;
  uint64_t body = 0;
  size_t from = 0;  // the bytes before it have been used up
  size_t cut = 0;
  // The reads: the bytes up to each cut arrive together (the end of the stream is the last cut).
  for (size_t read = 0; read <= cuts.size() && transcript.status == 0; ++read) {
    const size_t to = read < cuts.size() ? std::max(cuts[read], cut) : stream.size();
    cut = to;
    while (from < to && transcript.status == 0) {
      const absl::string_view held = stream.substr(from, to - from);
      if (const uint64_t due = framer.body_bytes_due(); due > 0) {
        const size_t bytes = static_cast<size_t>(std::min<uint64_t>(due, held.size()));
        transcript.handed_on.append(held.data(), bytes);
        from += bytes;
        body += bytes;
        if (framer.PassedBody(bytes)) {
          transcript.ends.push_back(transcript.handed_on.size());
          transcript.body_sizes.push_back(body);
          body = 0;
        }
        continue;
      }
      const size_t before = transcript.handed_on.size();
      const RequestFramer::Step step = framer.Consume(held, &transcript.handed_on);
      if (step.consumed == 0 && step.status == 0) std::abort();  // no progress on bytes
      if (step.consumed > held.size()) std::abort();
      from += step.consumed;
      if (step.status != 0) {
        if (step.status < 400 || step.status > 505 || step.message.empty()) std::abort();
        transcript.handed_on.resize(before);
        transcript.status = step.status;
        break;
      }
      if (step.request_ended) {
        transcript.ends.push_back(transcript.handed_on.size());
        transcript.body_sizes.push_back(body);
        body = 0;
      }
    }
  }
  return transcript;
}

// libevhtp's parser over one request handed on.
struct ParserCount {
  int messages = 0;
  uint64_t body = 0;
};

int OnMessageComplete(htparser* parser) {
  ++static_cast<ParserCount*>(htparser_get_userdata(parser))->messages;
  return 0;
}

int OnBody(htparser* parser, const char*, size_t length) {
  static_cast<ParserCount*>(htparser_get_userdata(parser))->body += length;
  return 0;
}

void CheckWithLibevhtp(const Transcript& transcript) {
  static htparser* parser = htparser_new();
  htparse_hooks hooks{};
  hooks.on_msg_complete = &OnMessageComplete;
  hooks.body = &OnBody;
  size_t begin = 0;
  for (size_t i = 0; i < transcript.ends.size(); ++i) {
    const size_t end = transcript.ends[i];
    ParserCount count;
    htparser_init(parser, htp_type_request);  // as libevhtp does for each request
    htparser_set_userdata(parser, &count);
    const size_t read =
        htparser_run(parser, &hooks, transcript.handed_on.data() + begin, end - begin);
    if (htparser_get_error(parser) != htparse_error_none || read != end - begin ||
        count.messages != 1 || count.body != transcript.body_sizes[i]) {
      std::fprintf(stderr,
                   "libevhtp disagrees on request %zu (%s, read %zu of %zu, %d messages, body %llu "
                   "vs %llu):\n%.*s\n",
                   i, htparser_get_strerror(parser), read, end - begin, count.messages,
                   static_cast<unsigned long long>(count.body),
                   static_cast<unsigned long long>(transcript.body_sizes[i]),
                   static_cast<int>(std::min<size_t>(end - begin, 2000)),
                   transcript.handed_on.data() + begin);
      std::abort();
    }
    begin = end;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  uint64_t seed;
  std::memcpy(&seed, data, 8);
  const absl::string_view stream(reinterpret_cast<const char*>(data) + 8, size - 8);

  // Reads of 1 to 2^k bytes (k from the seed), at points from a small PRNG.
  std::vector<size_t> cuts;
  const uint64_t span = uint64_t{1} << (seed & 7);
  uint64_t state = seed | 1;
  for (size_t at = 0; at < stream.size();) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    at += 1 + state % span;
    if (at < stream.size()) cuts.push_back(at);
  }

  const Transcript whole = Frame(stream, {});
  const Transcript split = Frame(stream, cuts);
  if (!(whole == split)) {
    std::fprintf(stderr, "the split changed the framing (status %d vs %d, %zu vs %zu requests)\n",
                 whole.status, split.status, whole.ends.size(), split.ends.size());
    std::abort();
  }
  CheckWithLibevhtp(whole);

  // The canonical form of the requests that ended, framed again: the same, refused nowhere.
  if (!whole.ends.empty()) {
    const absl::string_view canonical = whole.complete();
    const Transcript again = Frame(canonical, {});
    if (again.status != 0 || again.complete() != canonical || again.ends != whole.ends ||
        again.body_sizes != whole.body_sizes) {
      std::fprintf(stderr, "the canonical form is not a fixed point (status %d)\n", again.status);
      std::abort();
    }
  }
  return 0;
}
