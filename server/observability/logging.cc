#include "server/observability/logging.h"

#include <atomic>
#include <cstdio>
#include <optional>
#include <string>
#include <type_traits>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "google/protobuf/stubs/logging.h"
#include "server/status_util.h"

namespace loopserve::server {
namespace {

// Which levels are written (bit per LogLevel), and the line format (false: default).
std::atomic<unsigned> g_enabled{0b1110};
std::atomic<uint32_t> g_verbose{0};
std::atomic<bool> g_iso8601{false};

// Where lines go: stderr, or the log_file; the file name and the folder it lives in. Never
// destroyed (threads may log while the process exits).
struct LogOutput {
  absl::Mutex mutex;
  std::FILE* file ABSL_GUARDED_BY(mutex) = nullptr;
  std::string file_name ABSL_GUARDED_BY(mutex);
  std::string dir ABSL_GUARDED_BY(mutex);
};
LogOutput& Output() {
  static LogOutput* const output = new LogOutput();
  return *output;
}

char LevelLetter(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return 'D';
    case LogLevel::kInfo:
      return 'I';
    case LogLevel::kWarning:
      return 'W';
    case LogLevel::kError:
      return 'E';
  }
  return '?';
}

void ProtobufLog(google::protobuf::LogLevel level, const char* filename, int line,
                 const std::string& message) {
  Log(level == google::protobuf::LOGLEVEL_FATAL ? LogLevel::kError : LogLevel::kDebug,
      absl::StrCat("protobuf: ", absl::StripTrailingAsciiWhitespace(message), " (", filename, ":",
                   line, ")"));
}

}  // namespace

void RouteProtobufLogs() { google::protobuf::SetLogHandler(&ProtobufLog); }

absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "debug") return LogLevel::kDebug;
  if (lower == "info") return LogLevel::kInfo;
  if (lower == "warning") return LogLevel::kWarning;
  if (lower == "error") return LogLevel::kError;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown log level '", name, "' (expected debug, info, warning or error)"));
}

void SetLogLevel(LogLevel level) {
  unsigned enabled = 0;
  for (int l = static_cast<int>(level); l <= static_cast<int>(LogLevel::kError); ++l) {
    enabled |= 1u << l;
  }
  g_enabled.store(enabled);
  g_verbose.store(level == LogLevel::kDebug ? 1 : 0);
}

bool LogEnabled(LogLevel level) {
  return (g_enabled.load(std::memory_order_relaxed) >> static_cast<int>(level)) & 1u;
}

void Log(LogLevel level, absl::string_view message) {
  if (!LogEnabled(level)) return;
  const char* format =
      g_iso8601.load(std::memory_order_relaxed) ? "%Y-%m-%dT%H:%M:%SZ" : "%Y-%m-%dT%H:%M:%E6SZ";
  // One fwrite of the whole line: stdio locks the stream per call, so lines never interleave.
  const std::string line =
      absl::StrCat(absl::FormatTime(format, absl::Now(), absl::UTCTimeZone()), " ",
                   std::string(1, LevelLetter(level)), " ", message, "\n");
  LogOutput& output = Output();
  absl::MutexLock lock(&output.mutex);
  std::FILE* out = output.file != nullptr ? output.file : stderr;
  std::fwrite(line.data(), 1, line.size(), out);
  std::fflush(out);
}

LogSettingList CurrentLogSettings() {
  LogSettingList settings;
  settings.emplace_back("log_info", LogEnabled(LogLevel::kInfo));
  settings.emplace_back("log_warning", LogEnabled(LogLevel::kWarning));
  settings.emplace_back("log_error", LogEnabled(LogLevel::kError));
  settings.emplace_back("log_verbose_level", g_verbose.load());
  settings.emplace_back("log_format", std::string(g_iso8601.load() ? "ISO8601" : "default"));
  LogOutput& output = Output();
  absl::MutexLock lock(&output.mutex);
  settings.emplace_back("log_file", output.file_name);
  return settings;
}

void SetLogDirectory(std::string dir) {
  LogOutput& output = Output();
  absl::MutexLock lock(&output.mutex);
  output.dir = std::move(dir);
}

absl::Status UpdateLogSettings(const LogSettingList& changes) {
  unsigned enabled = g_enabled.load();
  uint32_t verbose = g_verbose.load();
  bool iso8601 = g_iso8601.load();
  std::optional<std::string> file;
  for (const auto& change : changes) {
    // Named references, not a structured binding: the lambda below captures them.
    const auto& name = change.first;
    const auto& value = change.second;
    auto want = [&](auto* out, const char* type) -> absl::Status {
      using T = std::remove_pointer_t<decltype(out)>;
      if (!std::holds_alternative<T>(value)) {
        return absl::InvalidArgumentError(absl::StrCat("log setting '", name, "' must be ", type));
      }
      *out = std::get<T>(value);
      return absl::OkStatus();
    };
    absl::Status status;
    if (name == "log_info" || name == "log_warning" || name == "log_error") {
      bool on = false;
      status = want(&on, "a bool");
      const int bit = static_cast<int>(name == "log_info"      ? LogLevel::kInfo
                                       : name == "log_warning" ? LogLevel::kWarning
                                                               : LogLevel::kError);
      enabled = on ? enabled | (1u << bit) : enabled & ~(1u << bit);
    } else if (name == "log_verbose_level") {
      status = want(&verbose, "an unsigned integer");
    } else if (name == "log_format") {
      std::string format;
      status = want(&format, "a string");
      if (status.ok() && format != "default" && format != "ISO8601") {
        return absl::InvalidArgumentError(
            absl::StrCat("log_format must be 'default' or 'ISO8601', not '",
                         absl::CHexEscape(format.substr(0, 64)), "'"));
      }
      iso8601 = format == "ISO8601";
    } else if (name == "log_file") {
      std::string f;
      status = want(&f, "a string");
      if (status.ok() && (f.find('/') != std::string::npos || f == "." || f == ".." ||
                          f.find('\0') != std::string::npos || f.size() > 255)) {
        return absl::InvalidArgumentError(
            "log_file must be a plain file name (it is created in the server's --log_dir)");
      }
      file = std::move(f);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown log setting '", absl::CHexEscape(name.substr(0, 64)),
          "' (log_file, log_info, log_warning, log_error, log_verbose_level, log_format)"));
    }
    if (!status.ok()) return status;
  }
  if (file.has_value()) {
    LogOutput& output = Output();
    absl::MutexLock lock(&output.mutex);
    if (!file->empty() && output.dir.empty()) {
      return absl::FailedPreconditionError(
          "log_file can be set only when the server runs with --log_dir (the folder it goes in)");
    }
    std::FILE* opened = nullptr;
    if (!file->empty()) {
      const std::string path = absl::StrCat(output.dir, "/", *file);
      opened = std::fopen(path.c_str(), "ae");
      if (opened == nullptr) {
        return absl::InternalError(
            absl::StrCat("cannot open log_file ", QuoteUntrusted(*file), " in --log_dir"));
      }
    }
    if (output.file != nullptr) std::fclose(output.file);
    output.file = opened;
    output.file_name = *file;
  }
  if (verbose > 0) enabled |= 1u << static_cast<int>(LogLevel::kDebug);
  if (verbose == 0) enabled &= ~(1u << static_cast<int>(LogLevel::kDebug));
  g_enabled.store(enabled);
  g_verbose.store(verbose);
  g_iso8601.store(iso8601);
  return absl::OkStatus();
}

}  // namespace loopserve::server
