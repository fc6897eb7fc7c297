#include "engine/tensor/tensor.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <new>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/tensor/memory_budget.h"

namespace loopserve::engine {
namespace {

constexpr size_t kAlignment = 64;
std::atomic<int64_t> g_allocations{0};

// Freed buffers of at least kMinBytes, kept (up to a byte limit) for the next tensor that needs
// about as much. glibc hands such sizes back to the kernel on free (they are mmapped), so without
// this every request that fills a large scan output pays a page fault per 4 KB of it, each
// zeroing the page and charging the memory cgroup: a third of the run time of the large_scan
// benchmark (32 MB output, perf). The cache holds blocks only while no tensor uses them; a request
// that needs a large buffer takes the smallest cached one that fits without wasting more than
// half of it. Thread-safe; only large allocations touch its mutex.
class LargeBufferCache {
 public:
  // 256 KB, not glibc's first mmap threshold (128 KB): below this the heap serves a repeated
  // size without faults. A 1,024,000-byte buffer per run (rnn_b1_h128's hoisted projection and its
  // scan output) faulted 235 pages in per run at 1 MB.
  static constexpr size_t kMinBytes = size_t{256} << 10;

  static LargeBufferCache& Get() {
    static auto* cache = new LargeBufferCache();  // never destroyed: frees may come at exit
    return *cache;
  }

  // A cached block of at least `bytes` (and at most twice that), or null.
  void* Take(size_t bytes, size_t* capacity) {
    std::lock_guard<std::mutex> lock(mu_);
    size_t best = blocks_.size();
    for (size_t i = 0; i < blocks_.size(); ++i) {
      const size_t size = blocks_[i].size;
      if (size >= bytes && size / 2 <= bytes &&
          (best == blocks_.size() || size < blocks_[best].size)) {
        best = i;
      }
    }
    if (best == blocks_.size()) return nullptr;
    const Block block = blocks_[best];
    blocks_[best] = blocks_.back();
    blocks_.pop_back();
    cached_bytes_ -= block.size;
    *capacity = block.size;
    return block.data;
  }

  // Keeps `data` (capacity `size`) when it is large and fits under the limit; else frees it.
  void Give(void* data, size_t size) {
    if (size >= kMinBytes) {
      std::lock_guard<std::mutex> lock(mu_);
      if (cached_bytes_ + size <= limit_bytes_) {
        blocks_.push_back({data, size});
        cached_bytes_ += size;
        return;
      }
    }
    std::free(data);
  }

  void SetLimit(size_t bytes) {
    std::vector<Block> freed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      limit_bytes_ = bytes;
      while (cached_bytes_ > limit_bytes_) {
        freed.push_back(blocks_.back());
        cached_bytes_ -= blocks_.back().size;
        blocks_.pop_back();
      }
    }
    for (const Block& block : freed) std::free(block.data);
  }

  size_t cached_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return cached_bytes_;
  }

 private:
  struct Block {
    void* data;
    size_t size;
  };

  std::mutex mu_;
  std::vector<Block> blocks_;
  size_t cached_bytes_ = 0;
  size_t limit_bytes_ = kDefaultTensorBufferCacheBytes;
};

// An owned buffer of at least `bytes` bytes (64-byte aligned, at least one line so data() is never
// null for an owned tensor); `*capacity` receives its usable size. Charges the thread's budget
// (if any) before anything is allocated; `*charged` tells whether it did.
void* AllocateBuffer(size_t bytes, size_t* capacity, bool* charged) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  MemoryBudget* budget = CurrentMemoryBudget();
  // Round up so aligned_alloc's size rule holds (a size near SIZE_MAX cannot be rounded).
  if (bytes > std::numeric_limits<size_t>::max() - kAlignment) throw std::bad_alloc();
  const size_t rounded = std::max(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  if (budget != nullptr) budget->Charge(rounded);  // throws past the budget
  *charged = budget != nullptr;
  if (bytes >= LargeBufferCache::kMinBytes) {
    size_t cached = 0;
    if (void* data = LargeBufferCache::Get().Take(bytes, &cached)) {
      // A cached block may be up to twice the request: charge what it really holds.
      if (budget != nullptr && cached > rounded) {
        try {
          budget->Charge(cached - rounded);
        } catch (...) {
          LargeBufferCache::Get().Give(data, cached);
          budget->Credit(rounded);
          throw;
        }
      }
      *capacity = cached;
      return data;
    }
  }
  void* data = std::aligned_alloc(kAlignment, rounded);
  if (data == nullptr) {
    if (budget != nullptr) budget->Credit(rounded);
    throw std::bad_alloc();
  }
  *capacity = rounded;
  return data;
}

// The bytes a tensor of `shape` needs, or SIZE_MAX when a dim is negative or the element count
// passes kMaxElements (a kernel computed an absurd shape from hostile input; the allocation then
// fails as out of memory instead of wrapping around to a small buffer).
size_t CheckedByteSize(const Shape& shape, DataType dtype) {
  int64_t n = 1;
  for (int64_t d : shape.dims()) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n) || n > kMaxElements) {
      return std::numeric_limits<size_t>::max();
    }
  }
  return static_cast<size_t>(n) * DataTypeSize(dtype);
}

}  // namespace

int64_t TensorAllocationCount() { return g_allocations.load(std::memory_order_relaxed); }

void SetTensorBufferCacheBytes(size_t bytes) { LargeBufferCache::Get().SetLimit(bytes); }

size_t TensorBufferCachedBytes() { return LargeBufferCache::Get().cached_bytes(); }

Tensor::Tensor(DataType dtype, Shape shape) { Resize(dtype, shape); }

Tensor::~Tensor() { Release(); }

Tensor::Tensor(Tensor&& other) noexcept
    : dtype_(other.dtype_),
      shape_(std::move(other.shape_)),
      data_(other.data_),
      capacity_(other.capacity_),
      owned_(other.owned_),
      charged_(other.charged_),
      strings_(other.strings_) {
  other.dtype_ = DataType::kUndefined;
  other.data_ = nullptr;
  other.capacity_ = 0;
  other.owned_ = false;
  other.charged_ = false;
  other.strings_ = 0;
}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this != &other) {
    Release();
    dtype_ = other.dtype_;
    shape_ = std::move(other.shape_);
    data_ = other.data_;
    capacity_ = other.capacity_;
    owned_ = other.owned_;
    charged_ = other.charged_;
    strings_ = other.strings_;
    other.dtype_ = DataType::kUndefined;
    other.data_ = nullptr;
    other.capacity_ = 0;
    other.owned_ = false;
    other.charged_ = false;
    other.strings_ = 0;
  }
  return *this;
}

Tensor Tensor::View(DataType dtype, Shape shape, const void* data) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.data_ = const_cast<void*>(data);
  t.owned_ = false;
  return t;
}

Tensor Tensor::ViewOf(const Tensor& other) { return View(other.dtype_, other.shape_, other.data_); }

void Tensor::Release() {
  if (strings_ > 0) DestroyStrings(0);
  if (owned_ && data_ != nullptr) {
    if (charged_) {
      if (MemoryBudget* budget = CurrentMemoryBudget()) budget->Credit(capacity_);
    }
    LargeBufferCache::Get().Give(data_, capacity_);
  }
  data_ = nullptr;
  capacity_ = 0;
  owned_ = false;
  charged_ = false;
}

void Tensor::DestroyStrings(int64_t keep) {
  auto* strings = static_cast<std::string*>(data_);
  for (int64_t i = keep; i < strings_; ++i) strings[i].~basic_string();
  strings_ = std::min(strings_, keep);
}

void Tensor::ConstructStrings(int64_t count) {
  auto* strings = static_cast<std::string*>(data_);
  for (int64_t i = strings_; i < count; ++i) new (&strings[i]) std::string();
  strings_ = std::max(strings_, count);
}

void Tensor::Resize(DataType dtype, const Shape& shape) {
  if (strings_ > 0) DestroyStrings(0);
  dtype_ = dtype;
  if (shape_ != shape) shape_ = shape;  // kernels mostly refill a tensor with its own shape
  const size_t bytes = CheckedByteSize(shape_, dtype_);
  if (!owned_ || bytes > capacity_) {
    // Growing: each allocation of a buffer above glibc's mmap threshold faults its pages in again
    // (gpt_b4_h128's K/V Concat: a fifth of its time in the kernel, perf).
    const size_t want =
        owned_ && capacity_ > 0 && bytes < (std::numeric_limits<size_t>::max() >> 2)
            ? std::max(bytes, std::min(capacity_ + capacity_ / 2, bytes + bytes / 2))
            : bytes;
    Release();
    data_ = AllocateBuffer(want, &capacity_, &charged_);
    owned_ = true;
  }
  if (dtype == DataType::kString) ConstructStrings(NumElements());
}

void Tensor::ResizeKeepingData(const Shape& shape, size_t reserve_bytes) {
  const size_t old_bytes = ByteSize();
  const int64_t old_elements = NumElements();
  shape_ = shape;
  const size_t need = std::max(CheckedByteSize(shape_, dtype_), reserve_bytes);
  const bool strings = dtype_ == DataType::kString;
  if (owned_ && need <= capacity_) {
    if (strings) {
      DestroyStrings(NumElements());
      ConstructStrings(NumElements());
    }
    return;
  }
  size_t capacity = 0;
  bool charged = false;
  void* data = AllocateBuffer(need, &capacity, &charged);
  if (strings) {
    // Strings are objects: moved into the new buffer, not copied as bytes.
    const int64_t keep = std::min(old_elements, NumElements());
    auto* from = static_cast<std::string*>(data_);
    auto* to = static_cast<std::string*>(data);
    for (int64_t i = 0; i < keep; ++i) new (&to[i]) std::string(std::move(from[i]));
    for (int64_t i = keep; i < NumElements(); ++i) new (&to[i]) std::string();
    Release();
    strings_ = NumElements();
  } else {
    const size_t keep = std::min(old_bytes, ByteSize());
    if (keep > 0) std::memcpy(data, data_, keep);
    Release();
  }
  data_ = data;
  capacity_ = capacity;
  owned_ = true;
  charged_ = charged;
}

void Tensor::CopyFrom(const Tensor& other) {
  if (this == &other) return;
  Resize(other.dtype_, other.shape_);
  if (dtype_ == DataType::kString) {
    CopyElements(dtype_, other.data_, 0, data_, 0, NumElements());
  } else if (other.ByteSize() > 0) {
    std::memcpy(data_, other.data_, other.ByteSize());
  }
}

void CopyElements(DataType dtype, const void* src, int64_t src_offset, void* dst,
                  int64_t dst_offset, int64_t count) {
  if (count <= 0) return;
  if (dtype == DataType::kString) {
    const std::string* from = static_cast<const std::string*>(src) + src_offset;
    std::string* to = static_cast<std::string*>(dst) + dst_offset;
    for (int64_t i = 0; i < count; ++i) to[i] = from[i];
    return;
  }
  const size_t size = DataTypeSize(dtype);
  std::memcpy(static_cast<char*>(dst) + dst_offset * size,
              static_cast<const char*>(src) + src_offset * size, count * size);
}

int64_t Tensor::ScalarAsInt64() const {
  switch (dtype_) {
    case DataType::kBool:
      return data<bool>()[0] ? 1 : 0;
    case DataType::kInt8:
      return data<int8_t>()[0];
    case DataType::kUint8:
      return data<uint8_t>()[0];
    case DataType::kInt16:
      return data<int16_t>()[0];
    case DataType::kUint16:
      return data<uint16_t>()[0];
    case DataType::kInt32:
      return data<int32_t>()[0];
    case DataType::kUint32:
      return data<uint32_t>()[0];
    case DataType::kInt64:
      return data<int64_t>()[0];
    case DataType::kUint64:
      return static_cast<int64_t>(data<uint64_t>()[0]);
    case DataType::kFloat32:
      return static_cast<int64_t>(data<float>()[0]);
    case DataType::kFloat64:
      return static_cast<int64_t>(data<double>()[0]);
    default:
      return 0;
  }
}

bool Tensor::ScalarAsBool() const {
  if (dtype_ == DataType::kBool || DataTypeSize(dtype_) == 1) {
    return data<uint8_t>()[0] != 0;
  }
  return ScalarAsInt64() != 0;
}

std::string Tensor::DebugString(int max_elements) const {
  std::string out = absl::StrCat(DataTypeName(dtype_), shape_.ToString(), "{");
  const int64_t n = std::min<int64_t>(NumElements(), max_elements);
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0) out += ", ";
    if (dtype_ == DataType::kString) {
      absl::StrAppend(&out, "\"", data<std::string>()[i], "\"");
      continue;
    }
    const bool printed = DispatchNumericOrBool(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T v = data<T>()[i];
      if constexpr (std::is_same_v<T, bool>) {
        out += v ? "true" : "false";
      } else if constexpr (sizeof(T) == 1) {
        absl::StrAppend(&out, static_cast<int>(v));
      } else {
        absl::StrAppend(&out, v);
      }
    });
    if (!printed) out += "?";
  }
  if (NumElements() > n) out += ", ...";
  out += "}";
  return out;
}

}  // namespace loopserve::engine
