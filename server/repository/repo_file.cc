#include "server/repository/repo_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"

namespace loopserve::server {
namespace {

// realpath(3); empty (errno set) when it fails.
std::string RealPath(const std::string& path) {
  std::unique_ptr<char, decltype(&free)> resolved(realpath(path.c_str(), nullptr), &free);
  return resolved == nullptr ? std::string() : std::string(resolved.get());
}

bool Inside(const std::string& resolved_folder, const std::string& resolved_path) {
  if (resolved_folder == "/") return true;
  return resolved_path.size() > resolved_folder.size() &&
         resolved_path.compare(0, resolved_folder.size(), resolved_folder) == 0 &&
         resolved_path[resolved_folder.size()] == '/';
}

const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "something else";
}

absl::Status NotRegular(absl::string_view role, mode_t mode) {
  return absl::InvalidArgumentError(
      absl::StrCat(role, " is ", KindOf(mode), ", not a regular file"));
}

absl::Status Leaves(absl::string_view role) {
  return absl::InvalidArgumentError(absl::StrCat(
      role,
      " resolves outside its model folder (a symlink leaving the repository is not followed)"));
}

absl::Status TooLarge(absl::string_view role, uint64_t size, uint64_t max_bytes) {
  return absl::InvalidArgumentError(
      absl::StrCat(role, " has ", size, " bytes, more than the limit of ", max_bytes));
}

// The resolved path of `path`, checked: something is there, it stays inside `folder` (unless
// `folder` is empty) and it is a regular file.
absl::StatusOr<std::string> Resolve(const std::string& folder, const std::string& path,
                                    absl::string_view role) {
  struct stat link;
  if (lstat(path.c_str(), &link) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      return absl::NotFoundError(absl::StrCat(role, " does not exist"));
    }
    return absl::InvalidArgumentError(absl::StrCat(role, " cannot be read: ", strerror(errno)));
  }
  const std::string resolved = RealPath(path);
  if (resolved.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(role, " cannot be resolved (a broken symlink?): ", strerror(errno)));
  }
  if (!folder.empty()) {
    const std::string resolved_folder = RealPath(folder);
    if (resolved_folder.empty() || !Inside(resolved_folder, resolved)) return Leaves(role);
  }
  struct stat target;
  if (stat(resolved.c_str(), &target) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(role, " cannot be read: ", strerror(errno)));
  }
  if (!S_ISREG(target.st_mode)) return NotRegular(role, target.st_mode);
  return resolved;
}

}  // namespace

RepositoryFile::RepositoryFile(RepositoryFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), size_(other.size_), role_(std::move(other.role_)) {}

RepositoryFile& RepositoryFile::operator=(RepositoryFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
    role_ = std::move(other.role_);
  }
  return *this;
}

RepositoryFile::~RepositoryFile() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<std::string> RepositoryFile::Read(uint64_t max_bytes) const {
  if (size_ > max_bytes) return TooLarge(role_, size_, max_bytes);
  std::string data(static_cast<size_t>(size_), '\0');
  size_t at = 0;
  for (;;) {
    if (at == data.size()) {
      // The file may have grown since the open: read one byte past the cap to see it.
      if (data.size() > max_bytes) return TooLarge(role_, data.size(), max_bytes);
      const uint64_t past_cap = max_bytes < UINT64_MAX ? max_bytes + 1 : max_bytes;
      data.resize(std::min<uint64_t>(past_cap, std::max<size_t>(at * 2, 4096)));
    }
    const ssize_t n = pread(fd_, data.data() + at, data.size() - at, static_cast<off_t>(at));
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InvalidArgumentError(absl::StrCat(role_, " cannot be read: ", strerror(errno)));
    }
    if (n == 0) break;
    at += static_cast<size_t>(n);
  }
  if (at > max_bytes) return TooLarge(role_, at, max_bytes);
  data.resize(at);
  return data;
}

absl::StatusOr<RepositoryFile> OpenRepositoryFile(const std::string& folder,
                                                  const std::string& path, absl::string_view role) {
  LS_ASSIGN_OR_RETURN(const std::string resolved, Resolve(folder, path, role));
  // O_NOFOLLOW: the resolved path has no symlink, unless one was swapped in since. O_NONBLOCK: a
  // FIFO swapped in is not waited on (fstat then refuses it).
  const int fd = open(resolved.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    return absl::InvalidArgumentError(absl::StrCat(role, " cannot be opened: ", strerror(errno)));
  }
  RepositoryFile file(fd, 0, std::string(role));
  struct stat opened;
  if (fstat(fd, &opened) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(role, " cannot be read: ", strerror(errno)));
  }
  if (!S_ISREG(opened.st_mode)) return NotRegular(role, opened.st_mode);
  if (!folder.empty()) {
    // What the descriptor is, whatever happened to the path: still inside?
    char target[PATH_MAX];
    const std::string link = absl::StrCat("/proc/self/fd/", fd);
    const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
    if (n > 0) {
      const std::string resolved_folder = RealPath(folder);
      if (resolved_folder.empty() ||
          !Inside(resolved_folder, std::string(target, static_cast<size_t>(n)))) {
        return Leaves(role);
      }
    }
  }
  // Reads block from here on (a regular file never makes them wait).
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  file.size_ = static_cast<uint64_t>(opened.st_size);
  return file;
}

absl::StatusOr<std::string> ReadRepositoryFile(const std::string& folder, const std::string& path,
                                               uint64_t max_bytes, absl::string_view role) {
  LS_ASSIGN_OR_RETURN(const RepositoryFile file, OpenRepositoryFile(folder, path, role));
  return file.Read(max_bytes);
}

absl::Status CheckRepositoryFile(const std::string& folder, const std::string& path,
                                 absl::string_view role) {
  return Resolve(folder, path, role).status();
}

absl::Status CheckRepositoryFolder(const std::string& root, const std::string& folder,
                                   absl::string_view role) {
  const std::string resolved_root = RealPath(root);
  const std::string resolved = RealPath(folder);
  if (resolved_root.empty() || resolved.empty()) {
    return absl::NotFoundError(absl::StrCat(role, " does not exist"));
  }
  if (!Inside(resolved_root, resolved)) {
    return absl::InvalidArgumentError(absl::StrCat(
        role, " resolves outside the model repository (a symlink leaving it is not followed)"));
  }
  struct stat target;
  if (stat(resolved.c_str(), &target) != 0 || !S_ISDIR(target.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(role, " is not a directory"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadOperatorFile(const std::string& path, uint64_t max_bytes,
                                             absl::string_view role) {
  return ReadRepositoryFile(/*folder=*/"", path, max_bytes, role);
}

absl::Status CheckConfigNesting(absl::string_view text, ConfigSyntax syntax, absl::string_view role,
                                int max_depth) {
  const bool proto = syntax == ConfigSyntax::kProtobufText;
  int depth = 0;
  int line = 1;
  char quote = 0;  // the open string's quote character
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') ++line;
    if (quote != 0) {
      if (c == '\\') {
        if (++i < text.size() && text[i] == '\n') ++line;  // skip the escaped character
      } else if (c == quote || (proto && c == '\n')) {
        quote = 0;
      }
      continue;
    }
    if (c == '"' || (proto && c == '\'')) {
      quote = c;
    } else if (proto && c == '#') {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
    } else if (c == '{' || c == '[' || (proto && c == '<')) {
      if (++depth > max_depth) {
        return absl::InvalidArgumentError(
            absl::StrCat(role, ": line ", line, ": nested deeper than ", max_depth, " levels"));
      }
    } else if (c == '}' || c == ']' || (proto && c == '>')) {
      if (depth > 0) --depth;  // unbalanced: the parser says so
    }
  }
  return absl::OkStatus();
}

bool IsValidModelName(absl::string_view name) {
  if (name.empty() || name.size() > 255 || name.front() == '.') return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') {
      return false;
    }
  }
  return true;
}

}  // namespace loopserve::server
