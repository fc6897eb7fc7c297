#pragma once

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace loopserve::server {

// The one conversion from absl::Status to grpc::Status. Canonical codes are numerically equal in
// both, so the code is kept and the message copied.
grpc::Status ToGrpcStatus(const absl::Status& status);

// The `outcome` label of loopserve_requests_total: "success" for OK, otherwise the canonical code
// name in lower case ("invalid_argument", "deadline_exceeded", ...).
std::string OutcomeLabel(absl::StatusCode code);

}  // namespace loopserve::server
