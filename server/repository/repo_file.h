#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loopserve::server {

// Opening the files of a model repository (config.pbtxt, model files, warm-up data, the model
// folders an OVMS config.json lists) so that neither a careless operator nor whoever can write a
// model folder can make the server read something else.
//
// The rule: a file is read only when
//   - its fully resolved path (every symlink followed, realpath(3)) lies inside the resolved
//     `folder` it belongs to (the model's folder; for OVMS entries the base_path). Symlinks that
//     stay inside are followed (a version folder may link to another, a config.pbtxt to a shared
//     one in the same model folder); one that leaves is refused without being opened;
//   - it is a regular file: a directory, FIFO, socket or device is refused from its stat, before
//     any open (opening a FIFO would block until a writer appears, a device may act on open);
//   - it is no larger than the caller's cap, checked on the open descriptor before reading.
// The file is opened with O_NOFOLLOW | O_NONBLOCK on the resolved path, checked again on the
// descriptor (fstat: regular; /proc/self/fd: still inside), so a symlink swapped in between the
// check and the open is caught rather than followed.
//
// Resolve-and-check rather than openat(O_NOFOLLOW) per component: the latter would also refuse
// symlinks inside the repository, which repositories use (a version linking to a shared model
// file), and the descriptor re-check closes the race that resolving alone would leave.
//
// Messages never show a server path nor a byte of the file: they name the file by its `role`
// ("config.pbtxt", "input_data_file warmup/x.bin") and say what is wrong. Stateless; thread-safe.

// An open regular file of a repository; closes its descriptor on destruction. Move-only.
class RepositoryFile {
 public:
  RepositoryFile(RepositoryFile&& other) noexcept;
  RepositoryFile& operator=(RepositoryFile&& other) noexcept;
  RepositoryFile(const RepositoryFile&) = delete;
  RepositoryFile& operator=(const RepositoryFile&) = delete;
  ~RepositoryFile();

  uint64_t size() const { return size_; }  // at open

  // The whole file; InvalidArgument naming `role` when it holds more than `max_bytes` (also when
  // it grew past them since the open) or cannot be read.
  absl::StatusOr<std::string> Read(uint64_t max_bytes) const;

 private:
  friend absl::StatusOr<RepositoryFile> OpenRepositoryFile(const std::string& folder,
                                                           const std::string& path,
                                                           absl::string_view role);
  RepositoryFile(int fd, uint64_t size, std::string role)
      : fd_(fd), size_(size), role_(std::move(role)) {}

  int fd_ = -1;
  uint64_t size_ = 0;
  std::string role_;
};

// Opens `path`, which must resolve inside `folder`, as above. NotFound when nothing is at `path`
// (not even a dangling symlink); InvalidArgument for a path that leaves `folder`, a dangling
// symlink, or anything but a regular file; the errors of open(2) as InvalidArgument.
absl::StatusOr<RepositoryFile> OpenRepositoryFile(const std::string& folder,
                                                  const std::string& path, absl::string_view role);

// OpenRepositoryFile, then Read(max_bytes).
absl::StatusOr<std::string> ReadRepositoryFile(const std::string& folder, const std::string& path,
                                               uint64_t max_bytes, absl::string_view role);

// Checks `path` as OpenRepositoryFile does without reading it (for files another component opens
// by path: the engine reads model files itself).
absl::Status CheckRepositoryFile(const std::string& folder, const std::string& path,
                                 absl::string_view role);

// A model folder of a repository must resolve to a directory inside the resolved `root`
// (a model folder linked from elsewhere leaves the repository). InvalidArgument naming `role`.
absl::Status CheckRepositoryFolder(const std::string& root, const std::string& folder,
                                   absl::string_view role);

// A file given by the operator on the command line (--config_path): no containment, but a
// regular file (a FIFO never blocks the reader), at most `max_bytes`. NotFound when absent.
absl::StatusOr<std::string> ReadOperatorFile(const std::string& path, uint64_t max_bytes,
                                             absl::string_view role);

// ---- Bounded parse cost ----

// Deepest nesting of objects, arrays or messages a config file may have. Real configs nest a
// handful of levels (config.json: 5, config.pbtxt: 6); parsers recurse per level.
inline constexpr int kMaxConfigNesting = 32;

enum class ConfigSyntax { kJson, kProtobufText };

// One linear pass over `text`, before it is parsed: InvalidArgument naming `role` and the line
// when brackets ({ [, and < for protobuf text) nest deeper than `max_depth` outside strings (and,
// for protobuf text, '#' comments). It checks depth only; the parser reports every other error.
absl::Status CheckConfigNesting(absl::string_view text, ConfigSyntax syntax, absl::string_view role,
                                int max_depth = kMaxConfigNesting);

// A model name is one path component: non-empty, at most 255 bytes, not starting with '.', and
// made of letters, digits, '_', '-' and '.' only. So a name can never leave the repository root.
bool IsValidModelName(absl::string_view name);

}  // namespace loopserve::server
