#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loopserve::server {

// A minimal process-wide logger (Abseil 20220623 has no absl/log). Each call writes exactly one
// line to stderr: "<RFC3339 UTC time> <I|W|E|D> <message>". Thread-safe: lines from concurrent
// callers never interleave. Messages below the current level are dropped.
enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Parses "debug", "info", "warning" or "error" (for the --log_level flag).
absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name);

void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);

void Log(LogLevel level, absl::string_view message);
inline void LogDebug(absl::string_view message) { Log(LogLevel::kDebug, message); }
inline void LogInfo(absl::string_view message) { Log(LogLevel::kInfo, message); }
inline void LogWarning(absl::string_view message) { Log(LogLevel::kWarning, message); }
inline void LogError(absl::string_view message) { Log(LogLevel::kError, message); }

// Routes protobuf's own log lines through Log: FATAL ones at error level, the others at debug
// level. Protobuf logs an ERROR line for every string field with invalid UTF-8 it parses, so any
// client could otherwise flood stderr with bytes it sends (the request itself is refused with
// INVALID_ARGUMENT). Process-wide; call once at start-up.
void RouteProtobufLogs();

}  // namespace loopserve::server
