#include "server/repository/load_override.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "proto/model_config.pb.h"
#include "server/status_util.h"

namespace loopserve::server {
namespace fs = std::filesystem;

absl::StatusOr<std::string> ConfigJsonToText(absl::string_view json) {
  inference::ModelConfig config;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &config, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the config override is not a ModelConfig in JSON: ", status.ToString()));
  }
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(config, &text)) {
    return absl::InternalError("cannot print the config override");
  }
  return text;
}

absl::Status WriteLoadFiles(const std::string& dir,
                            const std::vector<std::pair<std::string, std::string>>& files) {
  uint64_t total = 0;
  std::set<std::string> seen;
  for (const auto& [path, contents] : files) {
    const std::string what = absl::StrCat("file:", QuoteUntrusted(path));
    if (path.empty() || path.front() == '/') {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": a file path is relative to the model's folder (file:1/model.onnx)"));
    }
    for (absl::string_view part : absl::StrSplit(path, '/')) {
      if (part.empty() || part == "." || part == ".." ||
          part.find('\0') != absl::string_view::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": a file path may not have empty, '.' or '..' parts"));
      }
    }
    if (!seen.insert(path).second) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": the same file twice"));
    }
    total += contents.size();
    if (total > kMaxLoadFilesBytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the files of a load request may hold at most ", kMaxLoadFilesBytes, " bytes"));
    }
  }
  // A path that is also a folder of another ("1" and "1/model.onnx"), in either order.
  for (const std::string& path : seen) {
    for (size_t slash = path.find('/'); slash != std::string::npos;
         slash = path.find('/', slash + 1)) {
      if (seen.count(path.substr(0, slash)) > 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("file:", QuoteUntrusted(path.substr(0, slash)),
                         ": a file of the request and a folder of ", QuoteUntrusted(path)));
      }
    }
  }
  if (mkdir(dir.c_str(), 0700) != 0) {
    return absl::InternalError(
        absl::StrCat("failed to poll from model repository: cannot make "
                     "the model's private folder: ",
                     std::strerror(errno)));
  }
  for (const auto& [path, contents] : files) {
    const std::string what = absl::StrCat("file:", QuoteUntrusted(path));
    // The folders on the way, made here (so none is a link someone else placed).
    std::vector<std::string> parts = absl::StrSplit(path, '/');
    std::string at = dir;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      at = absl::StrCat(at, "/", parts[i]);
      if (mkdir(at.c_str(), 0700) != 0 && errno != EEXIST) {
        return absl::InternalError(absl::StrCat("failed to poll from model repository: ", what,
                                                ": ", std::strerror(errno)));
      }
      struct stat st;
      if (lstat(at.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": a folder of its path is a file of the request"));
      }
    }
    at = absl::StrCat(at, "/", parts.back());
    const int fd = open(at.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
      return absl::InternalError(
          absl::StrCat("failed to poll from model repository: ", what, ": ", std::strerror(errno)));
    }
    size_t written = 0;
    while (written < contents.size()) {
      const ssize_t n = write(fd, contents.data() + written, contents.size() - written);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int error = errno;
        close(fd);
        return absl::InternalError(absl::StrCat("failed to poll from model repository: ", what,
                                                ": ", std::strerror(error)));
      }
      written += static_cast<size_t>(n);
    }
    close(fd);
  }
  return absl::OkStatus();
}

}  // namespace loopserve::server
