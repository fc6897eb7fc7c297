// The Open Inference Protocol surface of a real loopserve process: liveness, readiness, metadata,
// grpc.health.v1, request validation (each bad request names the offending tensor and leaves the
// server serving), and concurrent requests.

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/server_fixture.h"
#include "tests/integration/test_util.h"

namespace loopserve::testing {
namespace {

using ::testing::HasSubstr;

std::string Shape(const google::protobuf::RepeatedField<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

class ProtocolTest : public LoopserveTest {
 protected:
  // A valid identity_dtypes request: every input [1, 3], raw contents.
  inference::ModelInferRequest ValidRequest() {
    auto c = LoadExpectedCase("identity_dtypes", "expected");
    EXPECT_TRUE(c.ok()) << c.status();
    inference::ModelInferRequest request;
    request.set_model_name("identity_dtypes");
    for (client::Tensor t : c->inputs) {
      t.shape = {1, 3};
      t.bytes.resize(3 * client::DataTypeSize(t.datatype));
      EXPECT_TRUE(client::AddInput(t, client::ContentsMode::kRaw, &request).ok());
    }
    return request;
  }

  int InputIndex(const inference::ModelInferRequest& request, const std::string& name) {
    for (int i = 0; i < request.inputs_size(); ++i) {
      if (request.inputs(i).name() == name) return i;
    }
    ADD_FAILURE() << "no input " << name;
    return 0;
  }

  // Sends `request`, expects `code` and a message that mentions `needle`.
  void ExpectError(const inference::ModelInferRequest& request, absl::StatusCode code,
                   const std::string& needle) {
    client::InferOptions options;
    options.timeout = absl::Seconds(30);
    auto response = client().InferRaw(request, options);
    ASSERT_FALSE(response.ok()) << "request was accepted";
    EXPECT_EQ(response.status().code(), code) << response.status();
    EXPECT_THAT(std::string(response.status().message()), HasSubstr(needle));
  }
};

TEST_F(ProtocolTest, ServerLiveAndReady) {
  auto live = client().ServerLive();
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_TRUE(*live);
  auto ready = client().ServerReady();
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_TRUE(*ready);
}

TEST_F(ProtocolTest, EveryModelIsReady) {
  for (const char* model :
       {"counter", "rnn", "greedy_decoder", "endless", "nested", "identity_dtypes", "add_scalar"}) {
    auto ready = client().ModelReady(model);
    ASSERT_TRUE(ready.ok()) << model << ": " << ready.status();
    EXPECT_TRUE(*ready) << model << "\nlog:\n" << server().log();
  }
}

TEST_F(ProtocolTest, UnknownModelIsNotReady) {
  auto ready = client().ModelReady("no_such_model");
  if (ready.ok()) {
    EXPECT_FALSE(*ready);
  } else {
    EXPECT_EQ(ready.status().code(), absl::StatusCode::kNotFound) << ready.status();
  }
}

TEST_F(ProtocolTest, ServerMetadata) {
  auto md = client().ServerMetadata();
  ASSERT_TRUE(md.ok()) << md.status();
  EXPECT_FALSE(md->name().empty());
  EXPECT_FALSE(md->version().empty());
}

TEST_F(ProtocolTest, ModelMetadataDescribesInputsAndOutputs) {
  auto md = client().ModelMetadata("rnn");
  ASSERT_TRUE(md.ok()) << md.status();
  EXPECT_EQ(md->name(), "rnn");
  EXPECT_THAT(std::vector<std::string>(md->versions().begin(), md->versions().end()),
              ::testing::Contains("1"));
  EXPECT_EQ(md->platform(), "onnxruntime_onnx");
  ASSERT_EQ(md->inputs_size(), 2);
  EXPECT_EQ(md->inputs(0).name(), "M");
  EXPECT_EQ(md->inputs(0).datatype(), "INT64");
  EXPECT_EQ(Shape(md->inputs(0).shape()), "[]");
  EXPECT_EQ(md->inputs(1).name(), "h0");
  EXPECT_EQ(md->inputs(1).datatype(), "FP32");
  EXPECT_EQ(Shape(md->inputs(1).shape()), "[-1,4]");
  ASSERT_EQ(md->outputs_size(), 2);
  EXPECT_EQ(md->outputs(0).name(), "h_final");
  EXPECT_EQ(Shape(md->outputs(0).shape()), "[-1,4]");
  EXPECT_EQ(md->outputs(1).name(), "h_seq");
  EXPECT_EQ(md->outputs(1).datatype(), "FP32");
  EXPECT_EQ(Shape(md->outputs(1).shape()), "[-1,-1,4]");
}

TEST_F(ProtocolTest, ModelMetadataListsEveryDatatype) {
  auto md = client().ModelMetadata("identity_dtypes");
  ASSERT_TRUE(md.ok()) << md.status();
  std::vector<std::string> datatypes;
  for (const auto& input : md->inputs()) datatypes.push_back(input.datatype());
  EXPECT_EQ(absl::StrJoin(datatypes, ","),
            "FP32,INT64,BOOL,INT32,FP64,UINT8,INT8,INT16,UINT16,UINT32,UINT64");
}

TEST_F(ProtocolTest, ModelMetadataOfUnknownModelIsNotFound) {
  auto md = client().ModelMetadata("no_such_model");
  ASSERT_FALSE(md.ok());
  EXPECT_EQ(md.status().code(), absl::StatusCode::kNotFound) << md.status();
  EXPECT_THAT(std::string(md.status().message()), HasSubstr("no_such_model"));
}

TEST_F(ProtocolTest, HealthCheckServing) {
  auto status = client().HealthCheck();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(ProtocolTest, RequestIdIsEchoedAndOutputsCanBeSelected) {
  auto c = LoadExpectedCase("rnn", "expected");
  ASSERT_TRUE(c.ok()) << c.status();
  client::InferOptions options;
  options.request_id = "req-42";
  options.timeout = absl::Seconds(30);
  auto result = client().Infer("rnn", c->inputs, {"h_final"}, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->id, "req-42");
  ASSERT_EQ(result->outputs.size(), 1u);
  EXPECT_EQ(CompareTensors(c->outputs[0], result->outputs[0]), "");
}

TEST_F(ProtocolTest, ExplicitVersion) {
  auto c = LoadExpectedCase("counter", "expected");
  ASSERT_TRUE(c.ok()) << c.status();
  client::InferOptions options;
  options.model_version = "1";
  auto result = client().Infer("counter", c->inputs, {}, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->model_version, "1");
}

TEST_F(ProtocolTest, ConcurrentRequestsAllCorrect) {
  auto c = LoadExpectedCase("rnn", "expected");
  ASSERT_TRUE(c.ok()) << c.status();
  constexpr int kThreads = 8, kPerThread = 25;
  std::atomic<int> good{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) {
        client::InferOptions options;
        options.timeout = absl::Seconds(60);
        auto result = client().Infer("rnn", c->inputs, {}, options);
        // RESOURCE_EXHAUSTED (queue full) would be legitimate under load; the default queue of
        // 64 holds all 8 concurrent requests, so every request must succeed here.
        if (result.ok() && result->outputs.size() == 2 &&
            CompareTensors(c->outputs[0], *result->Find("h_final")).empty() &&
            CompareTensors(c->outputs[1], *result->Find("h_seq")).empty()) {
          good.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(good.load(), kThreads * kPerThread);
}

// --- Bad requests: each is rejected, names what was wrong, and the server keeps serving (the
// fixture's TearDown checks ServerLive after every test).

TEST_F(ProtocolTest, ValidRequestIsAccepted) {
  auto response = client().InferRaw(ValidRequest());
  ASSERT_TRUE(response.ok()) << response.status();
  // identity_dtypes echoes one output per fixed-size datatype: FP32, FP64, INT8/16/32/64,
  // UINT8/16/32/64, BOOL.
  EXPECT_EQ(response->outputs_size(), 11);
}

TEST_F(ProtocolTest, UnknownModelIsNotFound) {
  auto request = ValidRequest();
  request.set_model_name("no_such_model");
  ExpectError(request, absl::StatusCode::kNotFound, "no_such_model");
}

TEST_F(ProtocolTest, UnknownVersionIsNotFound) {
  auto request = ValidRequest();
  request.set_model_version("7");
  ExpectError(request, absl::StatusCode::kNotFound, "7");
}

TEST_F(ProtocolTest, WrongDatatypeIsInvalid) {
  auto request = ValidRequest();
  // INT32 has FP32's element size, so only the datatype check can catch it.
  request.mutable_inputs(InputIndex(request, "in_fp32"))->set_datatype("INT32");
  ExpectError(request, absl::StatusCode::kInvalidArgument, "in_fp32");
}

TEST_F(ProtocolTest, UnknownDatatypeIsInvalid) {
  auto request = ValidRequest();
  request.mutable_inputs(InputIndex(request, "in_fp32"))->set_datatype("FP8");
  ExpectError(request, absl::StatusCode::kInvalidArgument, "in_fp32");
}

TEST_F(ProtocolTest, ShortRawContentsIsInvalid) {
  auto request = ValidRequest();
  std::string* raw = request.mutable_raw_input_contents(InputIndex(request, "in_int64"));
  raw->pop_back();
  ExpectError(request, absl::StatusCode::kInvalidArgument, "in_int64");
}

TEST_F(ProtocolTest, ShapeAndByteCountMismatchIsInvalid) {
  auto request = ValidRequest();
  auto* input = request.mutable_inputs(InputIndex(request, "in_fp64"));
  input->set_shape(0, 2);  // [2, 3] needs 48 bytes; 24 are sent
  ExpectError(request, absl::StatusCode::kInvalidArgument, "in_fp64");
}

TEST_F(ProtocolTest, MissingRawContentsEntryIsInvalid) {
  auto request = ValidRequest();
  request.mutable_raw_input_contents()->RemoveLast();
  client::InferOptions options;
  auto response = client().InferRaw(request, options);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument) << response.status();
}

TEST_F(ProtocolTest, TypedContentsCountMismatchIsInvalid) {
  auto c = LoadExpectedCase("identity_dtypes", "expected");
  ASSERT_TRUE(c.ok()) << c.status();
  inference::ModelInferRequest request;
  request.set_model_name("identity_dtypes");
  for (const client::Tensor& t : c->inputs) {
    ASSERT_TRUE(client::AddInput(t, client::ContentsMode::kTyped, &request).ok());
  }
  request.mutable_inputs(InputIndex(request, "in_int32"))
      ->mutable_contents()
      ->mutable_int_contents()
      ->RemoveLast();
  ExpectError(request, absl::StatusCode::kInvalidArgument, "in_int32");
}

TEST_F(ProtocolTest, MixedRawAndTypedIsInvalid) {
  auto request = ValidRequest();
  request.mutable_inputs(InputIndex(request, "in_fp32"))
      ->mutable_contents()
      ->add_fp32_contents(1.0f);
  client::InferOptions options;
  auto response = client().InferRaw(request, options);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument) << response.status();
}

TEST_F(ProtocolTest, MissingInputIsInvalid) {
  auto request = ValidRequest();
  const int i = InputIndex(request, "in_bool");
  request.mutable_inputs()->DeleteSubrange(i, 1);
  request.mutable_raw_input_contents()->DeleteSubrange(i, 1);
  ExpectError(request, absl::StatusCode::kInvalidArgument, "in_bool");
}

TEST_F(ProtocolTest, UnknownInputIsInvalid) {
  auto request = ValidRequest();
  auto* extra = request.add_inputs();
  extra->set_name("in_nope");
  extra->set_datatype("FP32");
  extra->add_shape(1);
  request.add_raw_input_contents(std::string(4, '\0'));
  ExpectError(request, absl::StatusCode::kInvalidArgument, "in_nope");
}

TEST_F(ProtocolTest, NegativeDimIsInvalid) {
  auto request = ValidRequest();
  request.mutable_inputs(InputIndex(request, "in_int32"))->set_shape(0, -1);
  ExpectError(request, absl::StatusCode::kInvalidArgument, "in_int32");
}

TEST_F(ProtocolTest, WrongFixedDimIsInvalid) {
  auto request = ValidRequest();
  const int i = InputIndex(request, "in_uint8");
  request.mutable_inputs(i)->set_shape(1, 4);  // the model declares [N, 3]
  request.mutable_raw_input_contents(i)->resize(4);
  ExpectError(request, absl::StatusCode::kInvalidArgument, "in_uint8");
}

TEST_F(ProtocolTest, WrongRankIsInvalid) {
  auto request = ValidRequest();
  auto* input = request.mutable_inputs(InputIndex(request, "in_int8"));
  input->clear_shape();
  input->add_shape(3);
  ExpectError(request, absl::StatusCode::kInvalidArgument, "in_int8");
}

// ONNX Runtime's leniency, which clients rely on (Silero VAD's packages send the scalar `sr` as
// [1]): counter declares M as a scalar and start as [1]; M sent as [1] and start as a scalar gives
// the numpy-computed answer. Other one-element shapes stay errors.
TEST_F(ProtocolTest, ScalarAndVectorOfOneAreInterchangeable) {
  auto expected = LoadExpectedCase("counter", "expected");
  ASSERT_TRUE(expected.ok()) << expected.status();
  std::vector<client::Tensor> inputs = expected->inputs;
  ASSERT_EQ(inputs.size(), 2u);
  ASSERT_EQ(inputs[0].name, "M");
  ASSERT_TRUE(inputs[0].shape.empty());
  ASSERT_EQ(inputs[1].shape, std::vector<int64_t>({1}));
  inputs[0].shape = {1};
  inputs[1].shape = {};
  for (client::ContentsMode mode : {client::ContentsMode::kRaw, client::ContentsMode::kTyped}) {
    client::InferOptions options;
    options.timeout = absl::Seconds(30);
    options.contents = mode;
    auto result = client().Infer("counter", inputs, {}, options);
    ASSERT_TRUE(result.ok()) << result.status() << "\nlog:\n" << server().log();
    ASSERT_EQ(result->outputs.size(), expected->outputs.size());
    for (const client::Tensor& want : expected->outputs) {
      const client::Tensor* got = result->Find(want.name);
      ASSERT_NE(got, nullptr) << "no output '" << want.name << "'";
      EXPECT_EQ(CompareTensors(want, *got), "");
    }
  }
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{1, 1}, {1, 1, 1}}) {
    std::vector<client::Tensor> wrong = inputs;
    wrong[0].shape = shape;
    inference::ModelInferRequest request;
    request.set_model_name("counter");
    for (const client::Tensor& t : wrong) {
      ASSERT_TRUE(client::AddInput(t, client::ContentsMode::kRaw, &request).ok());
    }
    ExpectError(request, absl::StatusCode::kInvalidArgument, "input 'M': shape");
  }
}

TEST_F(ProtocolTest, UnknownRequestedOutputIsInvalid) {
  auto request = ValidRequest();
  request.add_outputs()->set_name("out_nope");
  ExpectError(request, absl::StatusCode::kInvalidArgument, "out_nope");
}

}  // namespace
}  // namespace loopserve::testing
