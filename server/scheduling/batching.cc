#include "server/scheduling/batching.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/tensor/dtype.h"
#include "engine/tensor/tensor.h"

namespace loopserve::server {
namespace {

// "output 'h_seq'", for the messages of a batch that cannot be split.
std::string OutputLabel(const ModelIo& io, int model_index) {
  for (const ModelIo::Tensor& t : io.outputs()) {
    if (t.model_index == model_index) return absl::StrCat("output '", t.name, "'");
  }
  return absl::StrCat("output #", model_index);
}

bool SameBytes(const engine::Tensor& a, const engine::Tensor& b) {
  return a.shape() == b.shape() && a.ByteSize() == b.ByteSize() &&
         (a.ByteSize() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.ByteSize()) == 0);
}

// Rows [begin, begin + count) along `axis` of `from`: a view into `from` when they are
// contiguous (nothing outside the axis before it), else copied into a new tensor.
engine::Tensor SliceAxis(const engine::Tensor& from, int axis, int64_t begin, int64_t count) {
  engine::Shape shape = from.shape();
  shape[axis] = count;
  const int64_t outer = from.shape().NumElements(0, axis);
  const int64_t inner = from.shape().NumElements(axis + 1, from.rank());
  const int64_t rows = from.shape()[axis];
  if (outer == 1 && from.dtype() != engine::DataType::kString) {
    const char* base = static_cast<const char*>(from.raw_data());
    return engine::Tensor::View(
        from.dtype(), shape,
        base + static_cast<size_t>(begin * inner) * engine::DataTypeSize(from.dtype()));
  }
  engine::Tensor out(from.dtype(), shape);
  if (from.dtype() == engine::DataType::kString) {
    const std::string* src = from.data<std::string>();
    std::string* dst = out.mutable_data<std::string>();
    for (int64_t o = 0; o < outer; ++o) {
      std::copy_n(src + (o * rows + begin) * inner, count * inner, dst + o * count * inner);
    }
    return out;
  }
  const size_t element = engine::DataTypeSize(from.dtype());
  const size_t chunk = static_cast<size_t>(count * inner) * element;
  const char* src = static_cast<const char*>(from.raw_data());
  char* dst = static_cast<char*>(out.mutable_raw_data());
  for (int64_t o = 0; o < outer && chunk > 0; ++o) {
    std::memcpy(dst + o * chunk, src + static_cast<size_t>((o * rows + begin) * inner) * element,
                chunk);
  }
  return out;
}

}  // namespace

std::optional<BatchingPolicy> BatchingPolicy::FromConfig(const inference::ModelConfig& config) {
  if (!config.has_dynamic_batching() || config.max_batch_size() <= 0) return std::nullopt;
  const inference::ModelDynamicBatching& batching = config.dynamic_batching();
  BatchingPolicy policy;
  policy.max_batch_size = config.max_batch_size();
  policy.preferred.assign(batching.preferred_batch_size().begin(),
                          batching.preferred_batch_size().end());
  std::sort(policy.preferred.begin(), policy.preferred.end());
  policy.max_queue_delay = absl::Microseconds(
      std::min<uint64_t>(batching.max_queue_delay_microseconds(), uint64_t{1} << 40));
  policy.preserve_ordering = batching.preserve_ordering();
  return policy;
}

BatchQueue::BatchQueue(BatchingPolicy policy, int max_collectors)
    : policy_(std::move(policy)),
      max_collectors_(policy_.preserve_ordering ? 1 : std::max(max_collectors, 1)) {}

int64_t BatchQueue::Share() const {
  const int64_t rows = pending_rows_ + running_rows_;
  return std::clamp<int64_t>((rows + max_collectors_ - 1) / max_collectors_, 1,
                             policy_.max_batch_size);
}

void BatchQueue::Push(ScheduledCall* call, absl::Time now) {
  call->enqueued_ = now;
  pending_.push_back(call);
  pending_rows_ += call->batch_size();
}

std::deque<ScheduledCall*> BatchQueue::TakeAll() {
  std::deque<ScheduledCall*> all;
  all.swap(pending_);
  pending_rows_ = 0;
  ++taken_;
  return all;
}

void BatchQueue::Sweep(absl::Time now, std::vector<ScheduledCall*>& expired) {
  const size_t before = pending_.size();
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (now >= (*it)->deadline() || (*it)->cancelled()) {
      pending_rows_ -= (*it)->batch_size();
      expired.push_back(*it);
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  if (pending_.size() != before) ++taken_;
}

BatchQueue::Verdict BatchQueue::Look(Gathering& g, absl::Time now, absl::Duration recent_run,
                                     const MergeRule& rule) {
  // What was scanned holds while no call left the queue (taken by another collector, or swept).
  if (taken_ != g.scanned_at_) g.scanned_ = 0;
  g.scanned_at_ = taken_;
  if (pending_.empty()) return {Step::kIdle};
  if (g.scanned_ == 0) {
    ScheduledCall* head = pending_.front();
    g.members_.assign(1, head);
    g.size_ = head->batch_size();
    g.earliest_deadline_ = head->deadline();
    g.full_ = g.size_ >= policy_.max_batch_size || !rule.Mergeable(*head);
    g.scanned_ = 1;
  }
  const ScheduledCall& head = *g.members_.front();
  for (; g.scanned_ < pending_.size() && !g.full_; ++g.scanned_) {
    ScheduledCall* call = pending_[g.scanned_];
    g.earliest_deadline_ = std::min(g.earliest_deadline_, call->deadline());
    if (!rule.CanMerge(head, *call)) {
      if (policy_.preserve_ordering) g.full_ = true;  // no call is skipped: this batch is done
      continue;
    }
    if (g.size_ + call->batch_size() > policy_.max_batch_size) {
      g.full_ = true;
      break;
    }
    g.members_.push_back(call);
    g.size_ += call->batch_size();
    g.full_ = g.size_ >= policy_.max_batch_size;
  }
  g.preferred_ = !g.full_ && !policy_.preferred.empty() && policy_.preferred.front() <= g.size_;
  g.share_ = Share();
  // While another batch of the version runs, a batch gathers up to its share for as long as a
  // run takes (at least max_queue_delay): sent sooner, it would hold the requests that came
  // back in the meantime, one or two, while the other batch holds all the rest.
  absl::Duration gather = policy_.max_queue_delay;
  if (running_rows_ > 0 && recent_run != absl::InfiniteDuration()) {
    gather = std::max(gather, std::min(recent_run, kMaxGather));
  }
  const absl::Time due = std::min(head.enqueued() + gather, g.earliest_deadline_);
  // Sent when full, at a preferred size, at once for a lone client (the version is quiet),
  // with its share of the version's requests, or when the oldest call waited `gather` (or the
  // earliest deadline comes).
  if (g.full_ || g.preferred_ || Quiet(now) || g.size_ >= g.share_ || now >= due || flush_) {
    return {Step::kSend};
  }
  return {Step::kWait, due};
}

bool BatchQueue::Take(Gathering& g, absl::Time now, std::vector<ScheduledCall*>& batch,
                      std::vector<ScheduledCall*>& expired) {
  // At most the share (a preferred size first: the largest one the calls make, in arrival
  // order); the rest is left for the next collector.
  int64_t limit = g.share_;
  for (auto p = policy_.preferred.rbegin(); g.preferred_ && p != policy_.preferred.rend(); ++p) {
    if (*p <= g.size_) {
      limit = std::min(limit, *p);
      break;
    }
  }
  std::vector<ScheduledCall*>& members = g.members_;
  {
    int64_t kept = 0;
    size_t n = 0;
    while (n < members.size() && kept + members[n]->batch_size() <= limit) {
      kept += members[n++]->batch_size();
    }
    members.resize(std::max<size_t>(n, 1));
  }
  // The members leave the queue (one pass); a call found expired or cancelled now is answered
  // alone instead.
  size_t member = 0, kept = 0;
  int64_t rows = 0;
  const size_t first = batch.size();
  for (size_t i = 0; i < pending_.size(); ++i) {
    ScheduledCall* call = pending_[i];
    const bool in_batch = member < members.size() && members[member] == call;
    member += in_batch ? 1 : 0;
    if (now >= call->deadline() || call->cancelled()) {
      pending_rows_ -= call->batch_size();
      expired.push_back(call);
    } else if (in_batch) {
      batch.push_back(call);
      rows += call->batch_size();
    } else {
      pending_[kept++] = call;
    }
  }
  pending_.resize(kept);
  ++taken_;
  if (batch.size() == first) {  // every member left: start again with what is queued
    g.scanned_ = 0;
    return false;
  }
  pending_rows_ -= rows;
  running_rows_ += rows;
  return true;
}

int64_t BatchSize(const ModelIo& io, const std::vector<engine::Value>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (io.InputBatchAxis(static_cast<int>(i)) != 0 || !inputs[i].is_tensor()) continue;
    const engine::Tensor& tensor = inputs[i].tensor();
    if (tensor.rank() > 0) return tensor.dim(0);
  }
  return 1;
}

bool Mergeable(const ModelIo& io, const std::vector<engine::Value>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    const engine::Value& value = inputs[i];
    if (value.is_none()) continue;
    if (!value.is_tensor() || value.tensor().dtype() == engine::DataType::kString) return false;
    if (io.InputBatchAxis(static_cast<int>(i)) == 0 && value.tensor().rank() == 0) return false;
  }
  return true;
}

bool CanMerge(const ModelIo& io, const std::vector<engine::Value>& first,
              const std::vector<engine::Value>& other) {
  if (first.size() != other.size()) return false;
  for (size_t i = 0; i < first.size(); ++i) {
    const engine::Value& a = first[i];
    const engine::Value& b = other[i];
    if (a.is_none() || b.is_none()) {
      if (a.is_none() != b.is_none()) return false;
      continue;
    }
    const engine::Tensor& x = a.tensor();
    const engine::Tensor& y = b.tensor();
    if (x.dtype() != y.dtype() || x.rank() != y.rank()) return false;
    if (io.InputBatchAxis(static_cast<int>(i)) != 0) {
      if (!SameBytes(x, y)) return false;
      continue;
    }
    for (int d = 1; d < x.rank(); ++d) {
      if (x.dim(d) != y.dim(d)) return false;
    }
  }
  return true;
}

std::vector<engine::Value> MergeInputs(const ModelIo& io,
                                       absl::Span<std::vector<engine::Value>* const> requests) {
  std::vector<engine::Value>& first = *requests[0];
  std::vector<engine::Value> merged(first.size());
  for (size_t i = 0; i < first.size(); ++i) {
    if (first[i].is_none()) continue;
    if (io.InputBatchAxis(static_cast<int>(i)) != 0) {
      merged[i] = std::move(first[i]);
      continue;
    }
    const engine::Tensor& head = first[i].tensor();
    engine::Shape shape = head.shape();
    shape[0] = 0;
    for (std::vector<engine::Value>* request : requests) {
      shape[0] += (*request)[i].tensor().dim(0);
    }
    engine::Tensor out(head.dtype(), shape);
    char* dst = static_cast<char*>(out.mutable_raw_data());
    for (std::vector<engine::Value>* request : requests) {
      const engine::Tensor& part = (*request)[i].tensor();
      if (part.ByteSize() > 0) std::memcpy(dst, part.raw_data(), part.ByteSize());
      dst += part.ByteSize();
    }
    merged[i] = engine::Value(std::move(out));
  }
  return merged;
}

absl::StatusOr<std::vector<std::vector<engine::Value>>> SplitOutputs(
    const ModelIo& io, const std::vector<engine::Value>& outputs,
    absl::Span<const int64_t> batch_sizes) {
  int64_t total = 0;
  for (int64_t size : batch_sizes) total += size;
  std::vector<std::vector<engine::Value>> split(batch_sizes.size());
  for (std::vector<engine::Value>& request : split) request.resize(outputs.size());
  for (size_t j = 0; j < outputs.size(); ++j) {
    const int axis = io.OutputBatchAxis(static_cast<int>(j));
    if (!outputs[j].is_tensor() || axis < 0) {
      return absl::InternalError(
          absl::StrCat(OutputLabel(io, static_cast<int>(j)),
                       " has no batch axis, so a merged batch cannot be split"));
    }
    const engine::Tensor& tensor = outputs[j].tensor();
    if (axis >= tensor.rank() || tensor.dim(axis) != total) {
      return absl::InternalError(absl::StrCat(
          OutputLabel(io, static_cast<int>(j)), ": shape ", tensor.shape().ToString(),
          " has no batch dim of ", total, " at axis ", axis, " for a merged batch of ",
          batch_sizes.size(), " requests (check parameters '", kOutputBatchAxesParameter, "')"));
    }
    int64_t begin = 0;
    for (size_t k = 0; k < batch_sizes.size(); ++k) {
      split[k][j] = engine::Value(SliceAxis(tensor, axis, begin, batch_sizes[k]));
      begin += batch_sizes[k];
    }
  }
  return split;
}

}  // namespace loopserve::server
