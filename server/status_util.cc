#include "server/status_util.h"

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace loopserve::server {

std::string BoundMessage(absl::string_view message) {
  if (message.size() <= kMaxStatusMessageBytes) return std::string(message);
  const std::string tail = absl::StrCat(" ... (", message.size(), " bytes in all)");
  size_t keep = kMaxStatusMessageBytes - tail.size();
  // Never cut a UTF-8 sequence: back up over continuation bytes (10xxxxxx).
  while (keep > 0 && (static_cast<unsigned char>(message[keep]) & 0xC0) == 0x80) --keep;
  return absl::StrCat(message.substr(0, keep), tail);
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), BoundMessage(status.message()));
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
