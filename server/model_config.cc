#include "server/model_config.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace loopserve::server {
namespace {

// Collects the text parser's errors instead of letting protobuf log them to stderr.
class ErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    errors_.push_back(absl::StrCat(line + 1, ":", column + 1, ": ", message));
  }
  void AddWarning(int line, int column, const std::string& message) override {}
  std::string Joined() const { return absl::StrJoin(errors_, "; "); }

 private:
  std::vector<std::string> errors_;
};

}  // namespace

absl::StatusOr<loopserve::ModelConfig> ParseModelConfig(absl::string_view text,
                                                        absl::string_view model_name) {
  loopserve::ModelConfig config;
  ErrorCollector errors;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), &config)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", model_name, "': config.pbtxt: ", errors.Joined()));
  }
  const std::string what = absl::StrCat("model '", model_name, "': config.pbtxt: ");
  if (!config.name().empty() && config.name() != model_name) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "name '", config.name(), "' differs from the folder name"));
  }
  if (config.max_loop_iterations() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, "max_loop_iterations must be >= 0"));
  }
  if (config.max_output_bytes() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, "max_output_bytes must be >= 0"));
  }
  if (config.max_request_memory_bytes() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, "max_request_memory_bytes must be >= 0"));
  }
  if (config.version_policy().has_specific()) {
    for (int64_t v : config.version_policy().specific().versions()) {
      if (v <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, "version_policy.specific lists version ", v, "; versions are positive"));
      }
    }
  }
  return config;
}

absl::StatusOr<loopserve::ModelConfig> ReadModelConfig(const std::string& model_dir,
                                                       absl::string_view model_name) {
  const std::filesystem::path path = std::filesystem::path(model_dir) / "config.pbtxt";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return loopserve::ModelConfig();
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxModelConfigBytes) {
    return absl::InvalidArgumentError(absl::StrCat("model '", model_name, "': config.pbtxt has ",
                                                   size, " bytes, more than the limit of ",
                                                   kMaxModelConfigBytes));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", model_name, "': config.pbtxt cannot be read"));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return ParseModelConfig(text.str(), model_name);
}

}  // namespace loopserve::server
