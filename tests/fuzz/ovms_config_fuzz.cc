// Fuzz target: OpenVINO Model Server config.json text -> ParseOvmsConfig (the nesting check,
// simdjson into a protobuf Struct, then the schema checks and base paths).

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "server/repository/ovms_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)loopserve::server::ParseOvmsConfig(
      absl::string_view(reinterpret_cast<const char*>(data), size), "/nonexistent/models");
  return 0;
}
