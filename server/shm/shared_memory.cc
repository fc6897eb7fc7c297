#include "server/shm/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/runner/infer_request.h"
#include "server/status_util.h"

namespace loopserve::server {
namespace {

// A key as shm_open takes it and nothing that could name another file: "/" and then at least one
// character, none of them '/' or NUL, not "." or "..".
bool IsValidKey(absl::string_view key) {
  if (key.size() < 2 || key.size() > 255 || key[0] != '/') return false;
  const absl::string_view rest = key.substr(1);
  if (rest == "." || rest == "..") return false;
  for (char c : rest) {
    if (c == '/' || c == '\0') return false;
  }
  return true;
}

// The segment's current size, or an error naming the region.
absl::StatusOr<uint64_t> SegmentSize(int fd, absl::string_view name) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return absl::InternalError(absl::StrCat("shared memory region ", QuoteUntrusted(name),
                                            ": cannot stat its segment: ", std::strerror(errno)));
  }
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace

SharedMemoryRegion::~SharedMemoryRegion() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_size_);
  if (fd_ >= 0) close(fd_);
}

absl::Status SharedMemoryManager::Register(const std::string& name, const std::string& key,
                                           uint64_t offset, uint64_t byte_size) {
  if (name.empty()) {
    return absl::InvalidArgumentError("a shared memory region needs a name");
  }
  if (!IsValidKey(key)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory region ", QuoteUntrusted(name), ": key ", QuoteUntrusted(key),
                     " is not a POSIX shared memory name ('/' followed by a name without '/')"));
  }
  {
    absl::MutexLock lock(&mutex_);
    if (regions_.count(name) > 0) {
      return absl::AlreadyExistsError(
          absl::StrCat("shared memory region ", QuoteUntrusted(name), " already in manager"));
    }
    if (regions_.size() >= kMaxRegions) {
      return absl::ResourceExhaustedError(
          absl::StrCat("at most ", kMaxRegions, " shared memory regions can be registered"));
    }
  }
  auto region = std::unique_ptr<SharedMemoryRegion>(new SharedMemoryRegion());
  region->name_ = name;
  region->key_ = key;
  region->offset_ = offset;
  region->byte_size_ = byte_size;
  // glibc's shm_open adds O_NOFOLLOW: a symbolic link in /dev/shm is not followed.
  region->fd_ = shm_open(key.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (region->fd_ < 0) {
    const int error = errno;
    const std::string what =
        absl::StrCat("Unable to open shared memory region: ", QuoteUntrusted(key), " (",
                     std::strerror(error), ")");
    if (error == ENOENT) return absl::NotFoundError(what);
    if (error == EACCES || error == EPERM || error == ELOOP) {
      return absl::PermissionDeniedError(what);
    }
    return absl::InvalidArgumentError(what);
  }
  struct stat st;
  if (fstat(region->fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory key ", QuoteUntrusted(key), " is not a shared memory segment"));
  }
  if (st.st_uid != geteuid()) {
    return absl::PermissionDeniedError(absl::StrCat("shared memory key ", QuoteUntrusted(key),
                                                    " belongs to user ", st.st_uid,
                                                    ", not to the server's user ", geteuid()));
  }
  const uint64_t segment = static_cast<uint64_t>(st.st_size);
  if (offset > segment || byte_size > segment - offset) {
    return absl::InvalidArgumentError(absl::StrCat("shared memory region ", QuoteUntrusted(name),
                                                   ": offset ", offset, " + byte_size ", byte_size,
                                                   " runs past the end of segment ",
                                                   QuoteUntrusted(key), " (", segment, " bytes)"));
  }
  if (byte_size > 0) {
    // Map from the page holding `offset`.
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const uint64_t start = offset / page * page;
    region->mapping_size_ = static_cast<size_t>(offset + byte_size - start);
    void* mapping = mmap(nullptr, region->mapping_size_, PROT_READ | PROT_WRITE, MAP_SHARED,
                         region->fd_, static_cast<off_t>(start));
    if (mapping == MAP_FAILED) {
      return absl::ResourceExhaustedError(absl::StrCat("shared memory region ",
                                                       QuoteUntrusted(name),
                                                       ": cannot map it: ", std::strerror(errno)));
    }
    region->mapping_ = mapping;
    region->base_ = static_cast<char*>(mapping) + (offset - start);
  }
  absl::MutexLock lock(&mutex_);
  if (!regions_.emplace(name, std::move(region)).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("shared memory region ", QuoteUntrusted(name), " already in manager"));
  }
  return absl::OkStatus();
}

absl::Status SharedMemoryManager::Unregister(const std::string& name) {
  std::map<std::string, std::shared_ptr<const SharedMemoryRegion>> gone;  // unmapped unlocked
  absl::MutexLock lock(&mutex_);
  if (name.empty()) {
    gone.swap(regions_);
  } else if (auto it = regions_.find(name); it != regions_.end()) {
    gone.emplace(it->first, std::move(it->second));
    regions_.erase(it);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SharedMemoryManager::Status>> SharedMemoryManager::List(
    const std::string& name) const {
  std::vector<Status> out;
  absl::MutexLock lock(&mutex_);
  for (const auto& [region_name, region] : regions_) {
    if (!name.empty() && region_name != name) continue;
    out.push_back(Status{region->name(), region->key(), region->offset(), region->byte_size()});
  }
  if (!name.empty() && out.empty()) {
    return absl::NotFoundError(
        absl::StrCat("Unable to find system shared memory region: ", QuoteUntrusted(name)));
  }
  return out;
}

absl::StatusOr<SharedMemoryView> SharedMemoryManager::Map(const SharedMemoryRef& ref,
                                                          absl::string_view what) const {
  SharedMemoryView view;
  {
    absl::MutexLock lock(&mutex_);
    auto it = regions_.find(ref.region);
    if (it == regions_.end()) {
      return absl::NotFoundError(absl::StrCat(
          what, ": Unable to find shared memory region: ", QuoteUntrusted(ref.region)));
    }
    view.region = it->second;
  }
  const SharedMemoryRegion& region = *view.region;
  if (ref.offset > region.byte_size() || ref.byte_size > region.byte_size() - ref.offset) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": shared_memory_offset ", ref.offset, " + shared_memory_byte_size ",
                     ref.byte_size, " runs past the end of shared memory region ",
                     QuoteUntrusted(ref.region), " (", region.byte_size(), " bytes)"));
  }
  // The client may have shrunk its segment since it registered it: touching the pages past the
  // new end would fault (SIGBUS).
  absl::StatusOr<uint64_t> segment = SegmentSize(region.fd_, ref.region);
  if (!segment.ok()) return segment.status();
  if (*segment < region.offset() + ref.offset + ref.byte_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": shared memory region ", QuoteUntrusted(ref.region),
                     " now ends past its segment ", QuoteUntrusted(region.key()), " (", *segment,
                     " bytes; it was truncated after registration)"));
  }
  view.data = region.base_ == nullptr ? nullptr : region.base_ + ref.offset;
  view.size = static_cast<size_t>(ref.byte_size);
  return view;
}

absl::StatusOr<size_t> WriteTensorToSharedMemory(const std::string& what,
                                                 const engine::Tensor& tensor,
                                                 const SharedMemoryView& view) {
  const size_t size = RawTensorSize(tensor);
  if (size > view.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory size specified with the request for ", what, " (", view.size,
                     " bytes) should be at least ", size, " bytes to hold the results (region ",
                     QuoteUntrusted(view.region->name()), ")"));
  }
  if (size == 0) return size;
  if (tensor.dtype() == engine::DataType::kString) {
    std::string bytes;
    bytes.reserve(size);
    absl::Status appended = AppendRawTensor(what, tensor, &bytes);
    if (!appended.ok()) return appended;
    std::memcpy(view.data, bytes.data(), bytes.size());
  } else {
    std::memcpy(view.data, tensor.raw_data(), size);
  }
  return size;
}

}  // namespace loopserve::server
