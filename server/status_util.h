#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace loopserve::server {

// The one conversion from absl::Status to grpc::Status. Canonical codes are numerically equal in
// both, so the code is kept and the message copied.
grpc::Status ToGrpcStatus(const absl::Status& status);

// The `outcome` label of loopserve_requests_total: "success" for OK, otherwise the canonical code
// name in lower case ("invalid_argument", "deadline_exceeded", ...).
std::string OutcomeLabel(absl::StatusCode code);

// `text` from a client (a model name, a version) made safe to put into an error message or a log
// line: single-quoted, C-escaped (so it never breaks a log line) and cut to 64 bytes.
std::string QuoteUntrusted(absl::string_view text);

}  // namespace loopserve::server
