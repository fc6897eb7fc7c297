#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace loopserve::server {

// Triton's trace extension, settings only (GET/POST /v2/trace/setting, gRPC TraceSetting):
// trace_level, trace_rate, trace_count, log_frequency, trace_file, trace_mode, each a list of
// strings as Triton's messages carry them. loopserve writes no traces yet: the settings read as
// Triton's defaults with trace_level OFF, and asking for a level other than OFF is UNIMPLEMENTED
// (so a client learns it at once instead of waiting for a file that never comes). Other
// settings are stored and read back. Process-wide; thread-safe.
using TraceSettingList = std::vector<std::pair<std::string, std::vector<std::string>>>;

// Applies `changes` (all or none; an empty value list restores the default) and returns every
// setting. InvalidArgument for an unknown name or a value that is not a number where one is
// expected; Unimplemented for a trace_level other than OFF.
absl::StatusOr<TraceSettingList> UpdateTraceSettings(const TraceSettingList& changes);

}  // namespace loopserve::server
