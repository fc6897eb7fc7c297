#include "server/status_util.h"

#include "absl/strings/ascii.h"

namespace loopserve::server {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

std::string OutcomeLabel(absl::StatusCode code) {
  if (code == absl::StatusCode::kOk) return "success";
  return absl::AsciiStrToLower(absl::StatusCodeToString(code));
}

}  // namespace loopserve::server
