#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/tensor/dtype.h"
#include "engine/tensor/shape.h"

namespace loopserve::engine {

// A dense, row-major tensor: element type, shape and a buffer.
//
// The buffer is either owned (64-byte aligned, with a capacity that Resize reuses, so a tensor that
// is refilled with the same or a smaller size never allocates again) or a read-only view of memory
// owned by someone else (a plan's constant, a request's input bytes, a parent frame's slot); the
// owner must outlive the view. Writing through a view is a bug: Resize turns a view into an owned
// buffer first. Move-only; copies are explicit (CopyFrom). Not thread-safe.
//
// Owned buffers are charged to the allocating thread's MemoryBudget (memory_budget.h); an
// allocation past it throws MemoryBudgetExceeded, one that the system refuses std::bad_alloc.
//
// A kString tensor's owned buffer holds constructed std::string objects (empty after Resize); the
// tensor copies them element by element (CopyFrom, ResizeKeepingData) and destroys them when the
// buffer is released or resized. Its bytes must never be copied raw.
class Tensor {
 public:
  Tensor() = default;
  // An owned tensor of the given type and shape; contents uninitialised.
  Tensor(DataType dtype, Shape shape);
  ~Tensor();

  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(Tensor&& other) noexcept;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  // Exchanges type, shape and buffer (a Loop's carried values change hands every iteration: this
  // is three moves' work without their releases).
  friend void swap(Tensor& a, Tensor& b) noexcept {
    using std::swap;
    swap(a.dtype_, b.dtype_);
    swap(a.shape_, b.shape_);
    swap(a.data_, b.data_);
    swap(a.capacity_, b.capacity_);
    swap(a.owned_, b.owned_);
    swap(a.charged_, b.charged_);
    swap(a.strings_, b.strings_);
  }

  // A view of `data` (not owned; must outlive the tensor and every tensor viewing it).
  static Tensor View(DataType dtype, Shape shape, const void* data);
  // A view of another tensor's data (same type and shape).
  static Tensor ViewOf(const Tensor& other);

  DataType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t NumElements() const { return shape_.NumElements(); }
  size_t ByteSize() const { return static_cast<size_t>(NumElements()) * DataTypeSize(dtype_); }
  bool is_view() const { return !owned_ && data_ != nullptr; }
  bool defined() const { return dtype_ != DataType::kUndefined; }

  const void* raw_data() const { return data_; }
  // Writable data. The tensor must own its buffer (call Resize first).
  void* mutable_raw_data() { return data_; }

  template <typename T>
  const T* data() const {
    return static_cast<const T*>(data_);
  }
  template <typename T>
  T* mutable_data() {
    return static_cast<T*>(data_);
  }
  template <typename T>
  absl::Span<const T> span() const {
    return absl::Span<const T>(data<T>(), static_cast<size_t>(NumElements()));
  }

  // Sets type and shape, keeping the owned buffer when its capacity suffices and allocating an
  // owned one otherwise (also when the tensor was a view). Contents are unspecified afterwards
  // (empty strings for kString). An owned buffer that grows gets up to half again as much
  // capacity (never more than 1.5x the new size), so a slot that grows a little every Loop
  // iteration (a KV cache's Concat) allocates O(log n) times instead of every time.
  void Resize(DataType dtype, const Shape& shape);

  // Sets the shape (same dtype), keeping the first min(old, new) elements and making sure the
  // owned capacity is at least max(new size, reserve_bytes). For buffers that grow by appending
  // (Loop concatenation outputs): callers pass a geometric reserve so appends are amortised O(1).
  // kString: elements past the old size are empty strings.
  void ResizeKeepingData(const Shape& shape, size_t reserve_bytes);

  // Changes the shape without touching the data; the element count must not change.
  void Reshape(const Shape& shape) { shape_ = shape; }

  // Makes this an owned deep copy of `other` (reusing capacity).
  void CopyFrom(const Tensor& other);

  // Bytes allocated by this tensor (0 for a view).
  size_t capacity() const { return owned_ ? capacity_ : 0; }

  // Reads element 0 as int64 / bool whatever the integer or bool type; for trip counts, conditions
  // and other scalar-ish inputs. The tensor must have at least one element.
  int64_t ScalarAsInt64() const;
  bool ScalarAsBool() const;

  std::string DebugString(int max_elements = 16) const;  // "float32[2,3]{1, 2, ...}"

 private:
  void Release();
  // kString: destroys the constructed strings from index `keep` on / constructs empty ones up to
  // `count` in the owned buffer.
  void DestroyStrings(int64_t keep);
  void ConstructStrings(int64_t count);

  DataType dtype_ = DataType::kUndefined;
  Shape shape_;
  void* data_ = nullptr;
  size_t capacity_ = 0;
  bool owned_ = false;
  bool charged_ = false;  // the buffer was charged to the allocating thread's MemoryBudget
  int64_t strings_ = 0;   // std::string objects constructed in the owned buffer
};

// Copies `count` elements from `src` (element offset `src_offset`) to `dst` (`dst_offset`), both
// of element type `dtype`: a memcpy, or string assignment for kString. For the kernels that move
// elements of any type, strings included.
void CopyElements(DataType dtype, const void* src, int64_t src_offset, void* dst,
                  int64_t dst_offset, int64_t count);

// Total bytes ever allocated by Tensor buffers in this process; tests use it to prove that steady
// state loop iterations do not allocate.
int64_t TensorAllocationCount();

// Freed tensor buffers of 256 KB or more are kept for reuse, up to this many bytes in all (default
// kDefaultTensorBufferCacheBytes), so a request that fills a large output does not fault in fresh
// pages from the kernel every time. 0 turns the cache off (and frees what it holds). Thread-safe.
inline constexpr size_t kDefaultTensorBufferCacheBytes = size_t{64} << 20;
void SetTensorBufferCacheBytes(size_t bytes);
// Bytes the cache holds now.
size_t TensorBufferCachedBytes();

}  // namespace loopserve::engine
