// The hostile-config suite (issue 26, parts 3, 5 and 6): the real loopserve against a repository
// whose files a careless operator or a hostile model author made (a config.pbtxt symlinked to a
// secret, a directory or a FIFO where a config or a warm-up file should be, 150,000 dims), an OVMS
// config.json nested 100,000 deep, and undecodable bytes sent to every gRPC method. Each case
// checks the contract: the server starts (no hang), the other models serve, every reason is
// bounded and shows no byte of a file outside the repository, and each RPC answers
// INVALID_ARGUMENT with a message.

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "proto/grpc_service.grpc.pb.h"
#include "tests/integration/raw_grpc.h"
#include "tests/integration/server_process.h"
#include "tests/integration/test_util.h"

namespace loopserve::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kSecret[] = "TOPSECRET";
constexpr size_t kMaxReasonBytes = 2048;  // server/status_util.h kMaxStatusMessageBytes

std::string Repository() {
  const std::string root = MakeScratchDir("hostile_config_repo");
  fs::copy(std::string(LOOPSERVE_HOSTILE_DIR) + "/repo/counter", root + "/counter",
           fs::copy_options::recursive);
  return root;
}

void Write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

// A copy of `root`'s counter (inputs M: INT64 scalar, start: INT64 [1]) as `into`/`name`.
void CounterCopy(const std::string& root, const std::string& into, const std::string& name) {
  fs::create_directories(into + "/" + name + "/1");
  fs::copy_file(root + "/counter/1/model.onnx", into + "/" + name + "/1/model.onnx");
}

void MakeFifo(const std::string& path) {
  fs::create_directories(fs::path(path).parent_path());
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0) << path;
}

std::unique_ptr<inference::GRPCInferenceService::Stub> Stub(const ServerProcess& server) {
  return inference::GRPCInferenceService::NewStub(
      grpc::CreateChannel(server.grpc_address(), grpc::InsecureChannelCredentials()));
}

absl::StatusOr<std::unique_ptr<ServerProcess>> Start(const std::string& repository,
                                                     std::vector<std::string> flags) {
  ServerProcess::Options options;
  options.binary = LoopserveBinary();
  options.model_repository = repository;
  options.extra_flags = std::move(flags);
  options.startup_timeout = absl::Seconds(60);
  return ServerProcess::Start(options);
}

// ModelReady for `name` over gRPC: the answer, or the call's error.
absl::StatusOr<bool> ModelIsReady(inference::GRPCInferenceService::Stub& stub,
                                  const std::string& name) {
  grpc::ClientContext context;
  inference::ModelReadyRequest request;
  request.set_name(name);
  inference::ModelReadyResponse response;
  const grpc::Status status = stub.ModelReady(&context, request, &response);
  if (!status.ok()) {
    return absl::UnknownError(
        absl::StrCat("ModelReady: gRPC code ", status.error_code(), ": ", status.error_message()));
  }
  return response.ready();
}

TEST(HostileConfigTest, HostileRepositoryFilesAreRefusedUnreadAndTheOthersServe) {
  const std::string root = Repository();
  const std::string outside = MakeScratchDir("hostile_config_outside");
  Write(outside + "/secret", absl::StrCat(kSecret, ": 1\n"));
  // A config.pbtxt symlinked to a file outside (its first line would have been echoed).
  CounterCopy(root, root, "leak");
  fs::create_symlink(outside + "/secret", root + "/leak/config.pbtxt");
  // A directory, and a FIFO, as config.pbtxt (the FIFO hung start-up until SIGTERM).
  CounterCopy(root, root, "dirconf");
  fs::create_directories(root + "/dirconf/config.pbtxt");
  CounterCopy(root, root, "fifoconf");
  MakeFifo(root + "/fifoconf/config.pbtxt");
  // A warm-up input_data_file that is a FIFO.
  CounterCopy(root, root, "fifowarm");
  Write(root + "/fifowarm/config.pbtxt",
        "model_warmup [ { name: \"w\" inputs [ { key: \"M\" value: { data_type: TYPE_INT64 "
        "zero_data: true } }, { key: \"start\" value: { data_type: TYPE_INT64 dims: [ 1 ] "
        "input_data_file: \"start.bin\" } } ] } ]");
  MakeFifo(root + "/fifowarm/warmup/start.bin");
  // A model folder linked from outside the repository.
  CounterCopy(root, outside, "elsewhere");
  fs::create_directory_symlink(outside + "/elsewhere", root + "/escaped");
  // An input with 150,000 dims (a 300 KB reason before).
  CounterCopy(root, root, "dims");
  std::string dims;
  for (int i = 0; i < 150000; ++i) absl::StrAppend(&dims, i == 0 ? "" : ",", "1");
  Write(root + "/dims/config.pbtxt",
        absl::StrCat("input [ { name: \"start\" data_type: TYPE_INT64 dims: [ ", dims, " ] } ]"));

  const absl::Time start = absl::Now();
  auto server = Start(root, {"--model_control_mode=none"});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(60));
  auto stub = Stub(**server);

  grpc::ClientContext context;
  inference::RepositoryIndexResponse index;
  ASSERT_TRUE(stub->RepositoryIndex(&context, {}, &index).ok());
  std::map<std::string, std::string> reasons;
  for (const auto& model : index.models()) {
    EXPECT_LE(model.reason().size(), kMaxReasonBytes) << model.name();
    EXPECT_THAT(model.reason(),
                AllOf(Not(HasSubstr(kSecret)), Not(HasSubstr(outside)), Not(HasSubstr(root))))
        << model.name();
    reasons[model.name()] += model.reason() + "\n";
  }
  EXPECT_THAT(reasons["counter"], Not(HasSubstr("config")));
  EXPECT_THAT(reasons["leak"], HasSubstr("config.pbtxt resolves outside its model folder"));
  EXPECT_THAT(reasons["dirconf"], HasSubstr("config.pbtxt is a directory, not a regular file"));
  EXPECT_THAT(reasons["fifoconf"], HasSubstr("config.pbtxt is a FIFO, not a regular file"));
  EXPECT_THAT(reasons["fifowarm"],
              HasSubstr("input_data_file warmup/start.bin is a FIFO, not a regular file"));
  EXPECT_THAT(reasons["escaped"], HasSubstr("its folder resolves outside the model repository"));
  EXPECT_THAT(reasons["dims"], AllOf(HasSubstr("input 'start'"), HasSubstr("150000 dims")));
  EXPECT_THAT((*server)->log(), Not(HasSubstr(kSecret)));

  // The good model serves.
  const absl::StatusOr<bool> ready = ModelIsReady(*stub, "counter");
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_TRUE(*ready);
}

TEST(HostileConfigTest, DeeplyNestedConfigJsonIsRejectedAtOnce) {
  const std::string dir = MakeScratchDir("hostile_config_json");
  const int depth = 100000;
  Write(dir + "/config.json", absl::StrCat("{\"model_config_list\": ", std::string(depth, '['),
                                           std::string(depth, ']'), "}"));
  const absl::Time start = absl::Now();
  auto server = Start("", {"--config_path=" + dir + "/config.json"});
  // The server refuses to start, saying why; protobuf's parser took more than 10 s here and did
  // not heed SIGTERM meanwhile.
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(std::string(server.status().message()),
              HasSubstr("config.json: line 1: nested deeper than 32 levels"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
}

TEST(HostileConfigTest, UndecodableBytesGetInvalidArgumentOnEveryMethod) {
  auto server = Start(Repository(), {"--model_control_mode=explicit", "--load_model=counter"});
  ASSERT_TRUE(server.ok()) << server.status();
  grpc::GenericStub generic(
      grpc::CreateChannel((*server)->grpc_address(), grpc::InsecureChannelCredentials()));
  const std::vector<std::string> methods = {
      "ServerLive",          "ServerReady",           "ModelReady",      "ServerMetadata",
      "ModelMetadata",       "ModelConfig",           "ModelStatistics", "RepositoryIndex",
      "RepositoryModelLoad", "RepositoryModelUnload", "ModelInfer"};
  for (const std::string& method : methods) {
    for (const std::string& bytes :
         {std::string("\xff\xff\xff\xff", 4), std::string("\x0a\xff\xff\xff\xff\x0f", 6)}) {
      const grpc::Status status = RawUnaryCall(generic, method, bytes);
      EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method;
      EXPECT_THAT(status.error_message(),
                  HasSubstr(absl::StrCat(method, ": the request (", bytes.size(),
                                         " bytes) is not a valid inference.", method, "Request")))
          << method;
    }
  }
  // The server is fine, and the well-formed calls still work (the unload above did not happen).
  auto stub = Stub(**server);
  const absl::StatusOr<bool> ready = ModelIsReady(*stub, "counter");
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_TRUE(*ready);
  grpc::ClientContext unload_context;
  inference::RepositoryModelUnloadRequest unload;
  unload.set_model_name("counter");
  inference::RepositoryModelUnloadResponse unloaded;
  EXPECT_TRUE(stub->RepositoryModelUnload(&unload_context, unload, &unloaded).ok());
}

}  // namespace
}  // namespace loopserve::testing
