#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

// BYTES tensors in the protocol's raw layout (raw_input_contents, Triton's binary-data extension):
// each element as a 4-byte little-endian length, then that many bytes.
namespace loopserve::protocol {

// Appends `element` with its length prefix to `out`. The caller keeps elements under 4 GiB.
void AppendBytesElement(absl::string_view element, std::string* out);

// One step of reading BYTES contents: the element that starts at `at`.
struct BytesElement {
  enum class Error { kNone, kTruncatedLength, kOverrun };
  Error error = Error::kNone;
  uint32_t length = 0;      // the prefix read (with kOverrun: the length that overran)
  absl::string_view value;  // the element's bytes (kNone)
  size_t next = 0;          // where the next element starts (kNone)
};

// Reads the element at offset `at` of `contents` (at < contents.size()): kTruncatedLength when
// fewer than 4 bytes are left for its length, kOverrun when the length runs past the end. The
// caller words the error for its protocol.
BytesElement ReadBytesElement(absl::string_view contents, size_t at);

}  // namespace loopserve::protocol
