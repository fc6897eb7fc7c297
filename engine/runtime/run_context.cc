#include "engine/runtime/run_context.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/cord.h"
#include "absl/types/optional.h"
#include "engine/runtime/dnnl_util.h"

namespace loopserve::engine {

namespace {
constexpr char kLimitPayloadUrl[] = "type.loopserve.dev/engine.LimitReason";
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

RunContext::~RunContext() { std::free(scratchpad_); }

dnnl::stream& RunContext::stream() {
  if (stream_ == nullptr) stream_ = std::make_unique<dnnl::stream>(CpuEngine());
  return *stream_;
}

void* RunContext::Scratchpad(size_t bytes) {
  if (bytes > scratchpad_bytes_) {
    std::free(scratchpad_);
    const size_t rounded = (bytes + 63) / 64 * 64;
    scratchpad_ = std::aligned_alloc(64, rounded);
    if (scratchpad_ == nullptr) throw std::bad_alloc();
    scratchpad_bytes_ = rounded;
  }
  return scratchpad_;
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
