#include "protocol/bytes.h"

namespace loopserve::protocol {

void AppendBytesElement(absl::string_view element, std::string* out) {
  const auto n = static_cast<uint32_t>(element.size());
  const char prefix[4] = {static_cast<char>(n & 0xff), static_cast<char>((n >> 8) & 0xff),
                          static_cast<char>((n >> 16) & 0xff), static_cast<char>(n >> 24)};
  out->append(prefix, 4);
  out->append(element.data(), element.size());
}

BytesElement ReadBytesElement(absl::string_view contents, size_t at) {
  BytesElement e;
  if (at > contents.size() || contents.size() - at < 4) {
    e.error = BytesElement::Error::kTruncatedLength;
    return e;
  }
  const auto* p = reinterpret_cast<const uint8_t*>(contents.data() + at);
  e.length = static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
             (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
  at += 4;
  if (e.length > contents.size() - at) {
    e.error = BytesElement::Error::kOverrun;
    return e;
  }
  e.value = contents.substr(at, e.length);
  e.next = at + e.length;
  return e;
}

}  // namespace loopserve::protocol
