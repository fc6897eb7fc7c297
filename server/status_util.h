#pragma once

#include <exception>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace loopserve::server {

// Longest error message a client receives; longer ones are cut (BoundMessage).
inline constexpr size_t kMaxStatusMessageBytes = 2048;

// `message` when it has at most kMaxStatusMessageBytes bytes; otherwise its beginning (cut at a
// UTF-8 character boundary) and " ... (N bytes in all)", kMaxStatusMessageBytes bytes at most.
std::string BoundMessage(absl::string_view message);

// The one conversion from absl::Status to grpc::Status. Canonical codes are numerically equal in
// both, so the code is kept and the message copied, bounded by BoundMessage.
grpc::Status ToGrpcStatus(const absl::Status& status);

// The `outcome` label of loopserve_requests_total: "success" for OK, otherwise the canonical code
// name in lower case ("invalid_argument", "deadline_exceeded", ...).
std::string OutcomeLabel(absl::StatusCode code);

// Runs `body` (returning absl::Status) and turns a C++ exception that escapes it into INTERNAL,
// its message prefixed by `context` ("ModelInfer: "): the one place exceptions stop on the
// request paths (third-party code throws: oneDNN, protobuf, the JSON and HTTP libraries).
template <typename Body>
absl::Status CatchExceptions(absl::string_view context, Body&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(context, e.what()));
  } catch (...) {
    return absl::InternalError(absl::StrCat(context, "unknown exception"));
  }
}

// `text` from a client (a model name, a version) made safe to put into an error message or a log
// line: single-quoted, C-escaped (so it never breaks a log line) and cut to 64 bytes.
std::string QuoteUntrusted(absl::string_view text);

}  // namespace loopserve::server
