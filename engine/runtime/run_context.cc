#include "engine/runtime/run_context.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/cord.h"
#include "absl/types/optional.h"

namespace loopserve::engine {

namespace {
constexpr char kLimitPayloadUrl[] = "type.loopserve.dev/engine.LimitReason";

uint64_t NextRunId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

absl::Status LimitExceededError(LimitReason reason, absl::string_view message) {
  absl::Status status = absl::ResourceExhaustedError(message);
  status.SetPayload(kLimitPayloadUrl, absl::Cord(std::string(1, static_cast<char>(reason))));
  return status;
}

LimitReason GetLimitReason(const absl::Status& status) {
  const absl::optional<absl::Cord> payload = status.GetPayload(kLimitPayloadUrl);
  if (!payload.has_value() || payload->size() != 1) return LimitReason::kNone;
  const auto reason = static_cast<LimitReason>((*payload)[0]);
  return reason == LimitReason::kIterationCap || reason == LimitReason::kOutputBytes ||
                 reason == LimitReason::kMemory
             ? reason
             : LimitReason::kNone;
}

RunContext::RunContext(const RunOptions& options)
    : options_(options),
      id_(NextRunId()),
      has_deadline_(options.deadline != absl::InfiniteFuture()),
      memory_budget_(options.max_memory_bytes) {
  if (has_deadline_) {
    // Converted once, so the per-iteration check compares integers. Far-future deadlines
    // saturate instead of overflowing.
    const absl::Duration left = options.deadline - absl::Now();
    constexpr int64_t kMaxNanos = int64_t{1} << 62;
    const int64_t left_ns = left >= absl::Nanoseconds(kMaxNanos) ? kMaxNanos
                            : left <= absl::Nanoseconds(-kMaxNanos)
                                ? -kMaxNanos
                                : absl::ToInt64Nanoseconds(left);
    deadline_ns_ = CoarseMonotonicNanos() + left_ns;
  }
}

RunContext::~RunContext() = default;

int RunContext::NewResourceSlot() {
  static std::atomic<int> next{0};
  const int slot = next.fetch_add(1);
  if (slot >= kMaxResources) {
    std::fprintf(stderr, "loopserve: more than %d RunResource types; raise kMaxResources\n",
                 kMaxResources);
    std::abort();
  }
  return slot;
}

bool InterruptPacer::Check() {
  status_ = context_.CheckInterrupted();
  return status_.ok();
}

bool InterruptPacer::Copy(void* dst, const void* src, size_t bytes) {
  auto* out = static_cast<char*>(dst);
  const auto* in = static_cast<const char*>(src);
  while (bytes > 0) {
    const size_t piece = std::min(bytes, kChunkBytes);
    std::memcpy(out, in, piece);
    out += piece;
    in += piece;
    bytes -= piece;
    if (!Produced(piece)) return false;
  }
  return true;
}

absl::Status RunContext::CancelledError() const {
  return absl::CancelledError("the request was cancelled");
}

absl::Status RunContext::DeadlineError() const {
  return absl::DeadlineExceededError("the request's deadline passed while the model was running");
}

}  // namespace loopserve::engine
