#include "server/status_util.h"

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace loopserve::server {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

std::string OutcomeLabel(absl::StatusCode code) {
  if (code == absl::StatusCode::kOk) return "success";
  return absl::AsciiStrToLower(absl::StatusCodeToString(code));
}

std::string QuoteUntrusted(absl::string_view text) {
  constexpr size_t kMaxBytes = 64;
  const bool cut = text.size() > kMaxBytes;
  return absl::StrCat("'", absl::CHexEscape(text.substr(0, kMaxBytes)), cut ? "'..." : "'");
}

}  // namespace loopserve::server
