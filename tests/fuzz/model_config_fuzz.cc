// Fuzz target: config.pbtxt text -> ParseModelConfig (the text-format parser and its checks).

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "server/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)loopserve::server::ParseModelConfig(
      absl::string_view(reinterpret_cast<const char*>(data), size), "m");
  return 0;
}
