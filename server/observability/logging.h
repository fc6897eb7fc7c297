#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

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

// Triton's logging extension: the settings readable and changeable while the server runs
// (GET/POST /v2/logging, gRPC LogSettings), by Triton's names:
//   log_info, log_warning, log_error (bool)   whether lines of that level are written
//   log_verbose_level (uint32)                 > 0: debug lines too
//   log_format (string)                        "default" (RFC 3339 time with microseconds) or
//                                              "ISO8601" (whole seconds)
//   log_file (string)                          "" = stderr; otherwise a plain file name inside
//                                              the folder SetLogDirectory named (appended to):
//                                              a client never picks a path of its own
// SetLogLevel sets the first four as the level implies.
using LogSettingValue = std::variant<bool, uint32_t, std::string>;
using LogSettingList = std::vector<std::pair<std::string, LogSettingValue>>;
// The current settings, in the order above.
LogSettingList CurrentLogSettings();
// Applies `changes` all or none: InvalidArgument for an unknown name, a value of the wrong type,
// an unknown format or a file name with a '/'; FailedPrecondition for a log_file without a log
// folder; Internal when the file cannot be opened.
absl::Status UpdateLogSettings(const LogSettingList& changes);
// The folder log_file names a file in ("" = log_file can only be ""). Call at start-up.
void SetLogDirectory(std::string dir);

// Routes protobuf's own log lines through Log: FATAL ones at error level, the others at debug
// level. Protobuf logs an ERROR line for every string field with invalid UTF-8 it parses, so any
// client could otherwise flood stderr with bytes it sends (the request itself is refused with
// INVALID_ARGUMENT). Process-wide; call once at start-up.
void RouteProtobufLogs();

}  // namespace loopserve::server
