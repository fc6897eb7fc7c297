#include "server/observability/trace_settings.h"

#include <cstdint>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace loopserve::server {
namespace {

TraceSettingList Defaults() {
  return {{"trace_file", {""}},    {"trace_level", {"OFF"}}, {"trace_rate", {"1000"}},
          {"trace_count", {"-1"}}, {"log_frequency", {"0"}}, {"trace_mode", {"triton"}}};
}

struct TraceState {
  absl::Mutex mutex;
  TraceSettingList settings ABSL_GUARDED_BY(mutex) = Defaults();
};

TraceState& State() {
  static TraceState* const state = new TraceState();
  return *state;
}

}  // namespace

absl::StatusOr<TraceSettingList> UpdateTraceSettings(const TraceSettingList& changes) {
  TraceState& state = State();
  absl::MutexLock lock(&state.mutex);
  TraceSettingList next = state.settings;
  const TraceSettingList defaults = Defaults();
  for (const auto& [name, values] : changes) {
    size_t index = 0;
    while (index < next.size() && next[index].first != name) ++index;
    if (index == next.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown trace setting '", absl::CHexEscape(name.substr(0, 64)),
          "' (trace_file, trace_level, trace_rate, trace_count, log_frequency, trace_mode)"));
    }
    if (values.empty()) {
      next[index].second = defaults[index].second;
      continue;
    }
    if (name == "trace_level") {
      for (const std::string& level : values) {
        if (level != "OFF") {
          return absl::UnimplementedError(
              absl::StrCat("trace_level '", absl::CHexEscape(level.substr(0, 32)),
                           "': loopserve does not write traces yet; only OFF is accepted"));
        }
      }
    } else if (name == "trace_rate" || name == "trace_count" || name == "log_frequency") {
      int64_t number = 0;
      if (values.size() != 1 || !absl::SimpleAtoi(values[0], &number) ||
          (number < 0 && !(name == "trace_count" && number == -1))) {
        return absl::InvalidArgumentError(absl::StrCat("trace setting '", name,
                                                       "' must be one non-negative integer",
                                                       name == "trace_count" ? " (or -1)" : ""));
      }
    } else if (values.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat("trace setting '", name, "' takes one value"));
    }
    next[index].second = values;
  }
  state.settings = next;
  return next;
}

}  // namespace loopserve::server
