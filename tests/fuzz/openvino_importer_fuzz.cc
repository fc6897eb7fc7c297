// Fuzz target: OpenVINO IR -> import -> compile (Model::LoadOpenVino) -> one run on zeros.
// Input layout: a 4-byte little-endian length L, then L bytes of .xml, then the .bin bytes (what
// make_seeds.py packs from the OpenVINO test cases). See README.md.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/strings/string_view.h"
#include "engine/engine.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t xml_size = 0;
  std::memcpy(&xml_size, data, 4);
  const absl::string_view rest(reinterpret_cast<const char*>(data) + 4, size - 4);
  if (xml_size > rest.size()) return 0;
  auto model = loopserve::engine::Model::LoadOpenVino(
      rest.substr(0, xml_size), rest.substr(xml_size), loopserve::fuzz::LoadLimits());
  if (model.ok()) loopserve::fuzz::RunOnZeros(**model);
  return 0;
}
