#pragma once

namespace loopserve::server {

// Reported by ServerMetadata.
inline constexpr char kServerName[] = "loopserve";
inline constexpr char kServerVersion[] = "0.1.0";

}  // namespace loopserve::server
