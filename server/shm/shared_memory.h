#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "engine/tensor/tensor.h"

namespace loopserve::server {

// Where a tensor lives in shared memory, as a request names it: Triton's parameters
// `shared_memory_region`, `shared_memory_offset` (from the region's start; default 0) and
// `shared_memory_byte_size`.
struct SharedMemoryRef {
  std::string region;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
};

// One registered POSIX shared-memory segment mapped into the server (shm_open + mmap). Immutable
// once made; unmapped when the last holder lets go (the manager and the requests that use it),
// so a region unregistered while a request reads or writes it stays mapped until that request
// ends.
class SharedMemoryRegion {
 public:
  ~SharedMemoryRegion();
  SharedMemoryRegion(const SharedMemoryRegion&) = delete;
  SharedMemoryRegion& operator=(const SharedMemoryRegion&) = delete;

  const std::string& name() const { return name_; }
  const std::string& key() const { return key_; }
  uint64_t offset() const { return offset_; }
  uint64_t byte_size() const { return byte_size_; }

 private:
  friend class SharedMemoryManager;
  SharedMemoryRegion() = default;

  std::string name_;
  std::string key_;
  uint64_t offset_ = 0;     // of the region in the segment
  uint64_t byte_size_ = 0;  // of the region
  int fd_ = -1;             // kept open to check the segment's size on every use
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  char* base_ = nullptr;  // the region's first byte (inside the mapping)
};

// Part of a registered region a request reads an input from or writes an output to. Holds the
// region (and so its mapping) for as long as it exists.
struct SharedMemoryView {
  std::shared_ptr<const SharedMemoryRegion> region;
  char* data = nullptr;
  size_t size = 0;
  absl::string_view bytes() const { return absl::string_view(data, size); }
};

// Triton's system shared-memory extension: the regions clients registered by name, each a part
// [offset, offset + byte_size) of a POSIX shared-memory object (`key`, as shm_open names it:
// "/name", no other slash). Every bound is checked: at registration against the segment's size,
// at each use against the region's and again against the segment's current size (a client that
// shrank its segment gets an error, not a read outside it). Segments owned by another user are
// refused. CUDA shared memory does not exist here (CPU-only server).
//
// Thread-safe; regions are shared with the requests using them (see SharedMemoryRegion).
class SharedMemoryManager {
 public:
  static constexpr size_t kMaxRegions = 4096;

  struct Status {
    std::string name;
    std::string key;
    uint64_t offset;
    uint64_t byte_size;
  };

  // ALREADY_EXISTS for a name in use; INVALID_ARGUMENT for an empty name, a malformed key, a
  // region past the segment's end; NOT_FOUND for a segment that does not exist;
  // PERMISSION_DENIED for one the server may not open or that another user owns;
  // RESOURCE_EXHAUSTED past kMaxRegions.
  absl::Status Register(const std::string& name, const std::string& key, uint64_t offset,
                        uint64_t byte_size);
  // Forgets `name` (every region when empty); requests using it keep it until they end. An
  // unknown name is not an error (as Triton: unregistering is idempotent).
  absl::Status Unregister(const std::string& name);
  // The regions (one, or all when `name` is empty), by name. NOT_FOUND for an unknown name.
  absl::StatusOr<std::vector<Status>> List(const std::string& name) const;

  // [ref.offset, ref.offset + ref.byte_size) of region ref.region, pinned. `what` names the tensor
  // in messages ("input 'x'"). NOT_FOUND for an unknown region; INVALID_ARGUMENT when it runs
  // past the region's end or past the segment's current end.
  absl::StatusOr<SharedMemoryView> Map(const SharedMemoryRef& ref, absl::string_view what) const;

 private:
  mutable absl::Mutex mutex_;
  std::map<std::string, std::shared_ptr<const SharedMemoryRegion>> regions_ ABSL_GUARDED_BY(mutex_);
};

// The shared memory one request uses, pinned from the request's start to its end: its inputs'
// bytes (which the request's raw inputs view) and the places its outputs go.
struct SharedMemoryBindings {
  std::vector<SharedMemoryView> inputs;
  std::vector<std::pair<std::string, SharedMemoryView>> outputs;  // output name, where it goes
  // Where output `name` goes, or nullptr when it goes in the response.
  const SharedMemoryView* Output(absl::string_view name) const {
    for (const auto& [output, view] : outputs) {
      if (output == name) return &view;
    }
    return nullptr;
  }
};

// Writes `tensor` into `view` in the raw encoding (BYTES: each element a 4-byte little-endian
// length and its bytes). INVALID_ARGUMENT, naming `what` and the region, when it does not fit.
// Returns the bytes written.
absl::StatusOr<size_t> WriteTensorToSharedMemory(const std::string& what,
                                                 const engine::Tensor& tensor,
                                                 const SharedMemoryView& view);

}  // namespace loopserve::server
