#include "engine/base/status_macros.h"

#include "absl/strings/str_cat.h"

namespace loopserve {

absl::Status Annotate(const absl::Status& status, absl::string_view prefix) {
  if (status.ok()) return status;
  absl::Status annotated(status.code(), absl::StrCat(prefix, status.message()));
  status.ForEachPayload([&annotated](absl::string_view url, const absl::Cord& payload) {
    annotated.SetPayload(url, payload);
  });
  return annotated;
}

}  // namespace loopserve
