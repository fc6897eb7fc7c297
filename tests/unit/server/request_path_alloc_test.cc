// The server path's allocations per request in steady state (issue 34): a ModelInfer request
// taken the way the gRPC adapter takes it -- its bytes parsed (ParseInferRequest), translated
// (ToInferenceRequest), submitted to the InferenceRunner (admission, binding, the inline run on
// this thread, metrics) over the real engine running a Loop model, and answered by the response
// serializer (SerializeInferResponse) -- with every operator new of the process counted (this
// binary links tests/unit/engine/operator_new_counter.cc). gRPC's own buffers (gpr_malloc) are
// not operator new and are not counted.
//
// A new call object per request, parsing into a fresh message on an arena whose first block is
// part of the call, as the adapter's call does (the adapter's `new` of the call itself is not
// counted; raw contents longer than 15 bytes would add one buffer each). The test fails when a
// change adds an allocation to the path: kBudget names each one left.

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "google/protobuf/arena.h"
#include "gtest/gtest.h"
#include "server/grpc/tensor_codec.h"
#include "server/observability/metrics.h"
#include "server/repository/model_repository.h"
#include "server/runner/inference_runner.h"
#include "server/scheduling/worker_pool.h"
#include "tests/unit/engine/operator_new_counter.h"
#include "tests/unit/server/test_util.h"

namespace loopserve::server {
namespace {

// operator new calls per request left on the path (found with a breakpoint on operator new),
// each named: ToInferenceRequest's InferenceRequest::inputs; BindRequest's DecodedRequest::inputs
// (the vector Model::Run takes by value) and DecodedRequest::outputs; Model::Run's vector of
// outputs; gRPC's slice for the response bytes (grpc_slice_malloc, with operator new[]: the
// buffer gRPC sends and frees). Before issue 34's changes: 8 (also the model label built for
// every run, BindRequest's vector<bool> and a std::vector per input shape).
constexpr double kBudget = 5;

// A gRPC ModelInfer call without gRPC: parses `bytes` like InferenceService's call does and
// serializes its answer with SerializeInferResponse into a grpc::ByteBuffer.
class FakeGrpcCall final : public InferenceCall {
 public:
  FakeGrpcCall()
      : InferenceCall(Protocol::kGrpc, Polling::kWhileInline, absl::Now(), absl::InfiniteFuture()),
        arena_(ArenaOn(arena_block_, sizeof(arena_block_))),
        message_(google::protobuf::Arena::CreateMessage<inference::ModelInferRequest>(&arena_)) {}

  absl::Status Start(InferenceRunner& runner, grpc::ByteBuffer& bytes) {
    absl::Status parsed = ParseInferRequest(bytes, "ModelInfer", message_);
    if (!parsed.ok()) return parsed;
    request.error = ToInferenceRequest(*message_, &request);
    runner.Submit(this);
    // A version's first run goes to a worker (no recent run time yet); later ones run here.
    if (!finished_.WaitForNotificationWithTimeout(absl::Seconds(20))) {
      return absl::DeadlineExceededError("the call was not answered");
    }
    return status_;
  }
  const grpc::ByteBuffer& response() const { return response_; }

 protected:
  absl::Status Respond(const LoadedModel& model, const std::vector<int>& outputs,
                       std::vector<engine::Value>& values) override {
    return SerializeInferResponse(model.name, model.version_string, message_->id(), *model.model,
                                  outputs, values, &response_);
  }
  void Finish(const absl::Status& status) override {
    status_ = status;
    finished_.Notify();
  }

 private:
  static google::protobuf::ArenaOptions ArenaOn(char* block, size_t size) {
    google::protobuf::ArenaOptions options;
    options.initial_block = block;
    options.initial_block_size = size;
    return options;
  }
  alignas(16) char arena_block_[2048];
  google::protobuf::Arena arena_;
  inference::ModelInferRequest* const message_;  // the parsed request, on arena_
  grpc::ByteBuffer response_;
  absl::Status status_;
  absl::Notification finished_;
};

grpc::ByteBuffer Serialized(const inference::ModelInferRequest& request) {
  grpc::ByteBuffer bytes;
  bool own = false;
  EXPECT_TRUE(
      grpc::SerializationTraits<inference::ModelInferRequest>::Serialize(request, &bytes, &own)
          .ok());
  return bytes;
}

TEST(RequestPathAllocationTest, SteadyStateRequestsStayWithinTheBudget) {
  testing::TempDir root;
  std::filesystem::create_directories(root.path() + "/counter/1");
  std::filesystem::copy_file(std::string(LOOPSERVE_SERVER_TEST_MODELS) + "/counter.onnx",
                             root.path() + "/counter/1/model.onnx");
  Metrics metrics;
  ModelRegistry::Options registry_options;
  registry_options.root = root.path();
  registry_options.metrics = &metrics;
  ModelRegistry registry(std::move(registry_options));
  ASSERT_TRUE(registry.LoadAll().ok());
  WorkerPool pool(1, 4);
  InferenceRunner::Options runner_options;
  runner_options.inline_run_limit = absl::Hours(1);  // every run on this thread, as a short one
  InferenceRunner runner(&registry, &pool, metrics, runner_options);

  // counter: y = x + M (a Loop of M iterations adding 1).
  inference::ModelInferRequest request;
  request.set_model_name("counter");
  request.set_id("r");
  auto* m = request.add_inputs();
  m->set_name("M");
  m->set_datatype("INT64");
  const int64_t trips = 3;
  request.add_raw_input_contents(std::string(reinterpret_cast<const char*>(&trips), 8));
  auto* x = request.add_inputs();
  x->set_name("x");
  x->set_datatype("FP32");
  x->add_shape(2);
  const float xs[2] = {1.5f, -4.f};
  request.add_raw_input_contents(std::string(reinterpret_cast<const char*>(xs), 8));

  int64_t last_news = 0;
  auto run_once = [&]() -> absl::Status {
    grpc::ByteBuffer bytes = Serialized(request);  // gRPC's buffer (gpr_malloc: not counted)
    const int64_t before = OperatorNewCount();
    absl::Status status;
    int64_t news = 0;
    {
      FakeGrpcCall call;
      status = call.Start(runner, bytes);
      if (status.ok()) {
        inference::ModelInferResponse response;  // checked outside the count
        news = OperatorNewCount() - before;
        std::vector<grpc::Slice> slices;
        EXPECT_TRUE(const_cast<grpc::ByteBuffer&>(call.response()).Dump(&slices).ok());
        std::string flat;
        for (const grpc::Slice& s : slices)
          flat.append(reinterpret_cast<const char*>(s.begin()), s.size());
        EXPECT_TRUE(response.ParseFromString(flat));
        EXPECT_EQ(response.outputs_size(), 1);
        EXPECT_EQ(response.raw_output_contents_size(), 1);
        if (response.raw_output_contents_size() == 1) {
          float ys[2];
          std::memcpy(ys, response.raw_output_contents(0).data(), 8);
          EXPECT_EQ(ys[0], 4.5f);  // 1.5 + 3
          EXPECT_EQ(ys[1], -1.f);  // -4 + 3
        }
        EXPECT_EQ(response.id(), "r");
      }
    }
    last_news = news;
    return status;
  };
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(run_once().ok());  // warm: frames, metrics handles
  int64_t total = 0;
  constexpr int kRequests = 200;
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(run_once().ok());
    total += last_news;
  }
  const double per_request = static_cast<double>(total) / kRequests;
  std::printf("operator new per request on the server path: %.2f\n", per_request);
  EXPECT_LE(per_request, kBudget) << "an allocation was added to the request path";
  EXPECT_GE(pool.ran_here(), kRequests);  // the measured requests ran on this thread
}

}  // namespace
}  // namespace loopserve::server
