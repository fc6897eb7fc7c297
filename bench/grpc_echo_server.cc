// A bare gRPC echo server: gRPC's own floor for bench/request_cost.py (issue 34).
//
//   build/bin/grpc_echo_server --metadata=FILE [--address=127.0.0.1] [--grpc_port=0]
//
// inference.GRPCInferenceService on gRPC's callback API with the generated (typed) handlers, the
// same gRPC and protobuf as loopserve, and nothing else: ModelInfer answers each input as an
// output of the same name, type, shape and raw bytes (the copy a protobuf response forces);
// ModelMetadata answers the ModelMetadataResponse in FILE (text format) whatever model is asked,
// so that `loopctl perf` drives this server exactly as it drives loopserve; ServerLive and
// ServerReady answer true. No engine, no worker, no metric: what is left of a request's cost is
// gRPC's (HTTP/2, the callback threads, protobuf), which loopserve's request path pays too.
//
// Prints "echo: grpc listening on ADDRESS:PORT" once bound; serves until SIGTERM/SIGINT.

#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/text_format.h"
#include "proto/grpc_service.grpc.pb.h"

ABSL_FLAG(std::string, address, "127.0.0.1", "Address to bind");
ABSL_FLAG(int, grpc_port, 0, "Port; 0 picks a free one");
ABSL_FLAG(std::string, metadata, "", "inference.ModelMetadataResponse in text format (required)");

namespace {

class EchoService final : public inference::GRPCInferenceService::CallbackService {
 public:
  explicit EchoService(inference::ModelMetadataResponse metadata)
      : metadata_(std::move(metadata)) {}

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const inference::ServerLiveRequest*,
                                       inference::ServerLiveResponse* response) override {
    response->set_live(true);
    return Done(context);
  }
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                        const inference::ServerReadyRequest*,
                                        inference::ServerReadyResponse* response) override {
    response->set_ready(true);
    return Done(context);
  }
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                          const inference::ModelMetadataRequest*,
                                          inference::ModelMetadataResponse* response) override {
    *response = metadata_;
    return Done(context);
  }
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override {
    response->set_model_name(request->model_name());
    response->set_id(request->id());
    for (int i = 0; i < request->inputs_size(); ++i) {
      inference::ModelInferResponse::InferOutputTensor* out = response->add_outputs();
      out->set_name(request->inputs(i).name());
      out->set_datatype(request->inputs(i).datatype());
      *out->mutable_shape() = request->inputs(i).shape();
      if (i < request->raw_input_contents_size()) {
        response->add_raw_output_contents(request->raw_input_contents(i));
      }
    }
    return Done(context);
  }

 private:
  static grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  const inference::ModelMetadataResponse metadata_;
};

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // As loopserve does (server/main.cc): gRPC's mutexes are absl's, and their deadlock detection
  // is not part of the floor.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  std::ifstream file(absl::GetFlag(FLAGS_metadata));
  std::stringstream text;
  text << file.rdbuf();
  inference::ModelMetadataResponse metadata;
  if (!file || !google::protobuf::TextFormat::ParseFromString(text.str(), &metadata)) {
    std::fprintf(stderr,
                 "grpc_echo_server: --metadata must name a ModelMetadataResponse in text "
                 "format\n");
    return 2;
  }
  // SIGTERM/SIGINT are waited for, not handled: blocked here, before gRPC starts its threads.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  EchoService service(std::move(metadata));
  grpc::ServerBuilder builder;
  int port = 0;
  const std::string address = absl::GetFlag(FLAGS_address);
  builder.AddListeningPort(address + ":" + std::to_string(absl::GetFlag(FLAGS_grpc_port)),
                           grpc::InsecureServerCredentials(), &port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "grpc_echo_server: cannot listen on %s\n", address.c_str());
    return 1;
  }
  std::printf("echo: grpc listening on %s:%d\n", address.c_str(), port);
  std::fflush(stdout);
  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  server->Shutdown();
  return 0;
}
