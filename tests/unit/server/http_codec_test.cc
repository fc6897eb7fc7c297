#include "server/http/http_codec.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/grpc_service.pb.h"
#include "proto/model_config.pb.h"
#include "server/http/http_server.h"
#include "tests/unit/server/test_util.h"

namespace loopserve::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The body as HttpExchange hands it over: padded for simdjson.
class Body {
 public:
  explicit Body(std::string text) : text_(std::move(text)) {
    text_.reserve(text_.size() + HttpExchange::kBodyPadding);
  }
  absl::string_view view() const { return text_; }

 private:
  std::string text_;
};

class HttpCodecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testing::PassthroughModel();
    ASSERT_NE(model_, nullptr);
  }

  // Parses `body` and binds it to the passthrough model (x FP32 [-1,2], y INT64 [3], b BOOL []).
  absl::StatusOr<DecodedRequest> ParseAndBind(const Body& body, const char* header_length,
                                              RestOutputs* outputs = nullptr) {
    RestOutputs ignored;
    request_ = InferenceRequest();
    absl::Status parsed =
        parser_.Parse("infer", body.view(), header_length, &request_, outputs ? outputs : &ignored);
    if (!parsed.ok()) return parsed;
    return BindRequest(request_, *model_);
  }

  std::shared_ptr<const engine::Model> model_;
  RestInferParser parser_;
  InferenceRequest request_;
};

constexpr char kJsonInputs[] =
    R"({"id": "r1", "inputs": [
      {"name": "x", "datatype": "FP32", "shape": [2, 2], "data": [[1.5, -2], [3e2, 4]]},
      {"name": "y", "datatype": "INT64", "shape": [3], "data": [9223372036854775807, -1, 0]},
      {"name": "b", "datatype": "BOOL", "shape": [], "data": [true]}]})";

TEST_F(HttpCodecTest, NestedJsonDataDecodesRowMajor) {
  const Body body(kJsonInputs);
  auto decoded = ParseAndBind(body, nullptr);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(request_.id, "r1");
  const engine::Tensor& x = decoded->inputs[0].tensor();
  EXPECT_THAT(std::vector<float>(x.span<float>().begin(), x.span<float>().end()),
              ElementsAre(1.5f, -2.f, 300.f, 4.f));
  const engine::Tensor& y = decoded->inputs[1].tensor();
  EXPECT_THAT(std::vector<int64_t>(y.span<int64_t>().begin(), y.span<int64_t>().end()),
              ElementsAre(INT64_MAX, -1, 0));
  EXPECT_TRUE(decoded->inputs[2].tensor().span<bool>()[0]);
}

TEST_F(HttpCodecTest, BinaryInputsFollowTheJsonHeader) {
  const std::string header =
      R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2],
          "parameters": {"binary_data_size": 8}},
         {"name": "y", "datatype": "INT64", "shape": [3], "data": [1, 2, 3]},
         {"name": "b", "datatype": "BOOL", "shape": [], "parameters": {"binary_data_size": 1}}],
         "parameters": {"binary_data_output": true},
         "outputs": [{"name": "y", "parameters": {"binary_data": false}}, {"name": "x"}]})";
  const float x[2] = {0.25f, -8.f};
  std::string text = header;
  text.append(reinterpret_cast<const char*>(x), sizeof(x));
  text.push_back('\1');
  const Body body(text);
  const std::string length = std::to_string(header.size());
  RestOutputs outputs;
  auto decoded = ParseAndBind(body, length.c_str(), &outputs);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  const engine::Tensor& tx = decoded->inputs[0].tensor();
  EXPECT_EQ(tx.span<float>()[0], 0.25f);
  EXPECT_EQ(tx.span<float>()[1], -8.f);
  EXPECT_TRUE(decoded->inputs[2].tensor().span<bool>()[0]);
  EXPECT_FALSE(outputs.Binary("y"));  // per-output override
  EXPECT_TRUE(outputs.Binary("x"));   // binary_data_output
  EXPECT_THAT(decoded->outputs, ElementsAre(1, 0));
}

TEST_F(HttpCodecTest, BadBodiesNameTheProblem) {
  struct Case {
    std::string body;
    const char* header_length;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"{", nullptr, "not valid JSON"},
      {"[1]", nullptr, "must be a JSON object, got an array"},
      {R"({"inputs": 3})", nullptr, "'inputs' must be an array"},
      {R"({"inputs": [{"datatype": "FP32"}]})", nullptr, "inputs[0] has no 'name'"},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 2], "data": [1, 2, 3]},
          {"name": "y", "datatype": "INT64", "shape": [3], "data": [1, 2, 3]},
          {"name": "b", "datatype": "BOOL", "shape": [], "data": [true]}]})",
       nullptr, "needs 4 elements, got 3"},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]},
          {"name": "y", "datatype": "INT64", "shape": [3], "data": [1, 2.5, 3]},
          {"name": "b", "datatype": "BOOL", "shape": [], "data": [true]}]})",
       nullptr, "element 1: a number is not an integer"},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]},
          {"name": "y", "datatype": "INT64", "shape": [3], "data": [1, 2, 9223372036854775808]},
          {"name": "b", "datatype": "BOOL", "shape": [], "data": [true]}]})",
       nullptr, "out of range"},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2],
          "parameters": {"binary_data_size": 9}}]})",
       "99999", "Inference-Header-Content-Length '99999' is not a byte count within the body"},
      {R"({"inputs": []})", "-1", "Inference-Header-Content-Length '-1'"},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1, 2],
          "parameters": {"binary_data_size": 8}}]})",
       nullptr, "both 'data' and parameters.binary_data_size"},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2]}]})", nullptr,
       "neither 'data' nor parameters.binary_data_size"},
      {R"({"inputs": [], "parameters": {"timeout": -5}})", nullptr,
       "'timeout' (microseconds) must be a non-negative integer, got -5"},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1, 1e999]}]})",
       nullptr, "not valid JSON (Problem while parsing a number; numbers must fit a 64-bit"},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2],
          "data": [1, 18446744073709551616]}]})",
       nullptr, "numbers must fit a 64-bit integer or a double"},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": )" +
           std::string(2000, '[') + "1" + std::string(2000, ']') + "}]}",
       nullptr, "too deep"},
      {R"({"inputs": [], "outputs": [{"name": "y", "parameters": {"classification": 2}}]})",
       nullptr, "classification"},
  };
  for (const Case& c : cases) {
    const Body body(c.body);
    auto decoded = ParseAndBind(body, c.header_length);
    ASSERT_FALSE(decoded.ok()) << c.body;
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument) << c.body;
    EXPECT_THAT(decoded.status().message(), HasSubstr(c.message)) << c.body;
  }
}

// Errors about the body as a whole name the endpoint it was sent to.
TEST_F(HttpCodecTest, BodyErrorsNameTheEndpoint) {
  for (const char* endpoint : {"infer", "generate_stream"}) {
    for (const char* text : {"{", "[1]", "{}"}) {
      const Body body(text);
      RestOutputs outputs;
      InferenceRequest request;
      const absl::Status status = parser_.Parse(endpoint, body.view(), nullptr, &request, &outputs);
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << text;
      EXPECT_THAT(std::string(status.message()),
                  ::testing::StartsWith(absl::StrCat(endpoint, ": ")))
          << text;
    }
  }
}

TEST_F(HttpCodecTest, BinarySizesMustAddUpToTheBody) {
  const std::string header =
      R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2],
          "parameters": {"binary_data_size": 8}}]})";
  const std::string length = std::to_string(header.size());
  for (size_t extra : {4u, 12u}) {  // too few bytes, then too many
    const Body body(header + std::string(extra, '\0'));
    RestOutputs outputs;
    InferenceRequest request;
    absl::Status status = parser_.Parse("infer", body.view(), length.c_str(), &request, &outputs);
    ASSERT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr(extra < 8 ? "runs past the end" : "add up to 8"));
  }
}

TEST_F(HttpCodecTest, ResponseCarriesJsonAndBinaryOutputs) {
  engine::Tensor x(engine::DataType::kFloat32, engine::Shape{1, 2});
  x.mutable_data<float>()[0] = 0.1f;
  x.mutable_data<float>()[1] = -3.f;
  engine::Tensor y(engine::DataType::kInt64, engine::Shape{3});
  for (int i = 0; i < 3; ++i) y.mutable_data<int64_t>()[i] = 10 * i - 7;
  engine::Tensor b(engine::DataType::kBool, engine::Shape{});
  b.mutable_data<bool>()[0] = false;
  std::vector<engine::Value> values;
  values.emplace_back(std::move(x));
  values.emplace_back(std::move(y));
  values.emplace_back(std::move(b));
  RestOutputs binary;
  binary.requested = {{"x", false}, {"y", true}};
  std::string body;
  size_t json_length = 0;
  ASSERT_TRUE(
      EncodeRestResponse(*model_, "m", "3", "id7", {0, 1, 2}, values, binary, &body, &json_length)
          .ok());
  ASSERT_EQ(body.size(), json_length + 3 * sizeof(int64_t));
  EXPECT_EQ(body.substr(0, json_length),
            R"({"model_name":"m","model_version":"3","id":"id7","outputs":[)"
            R"({"name":"x","datatype":"FP32","shape":[1,2],"data":[0.1,-3]},)"
            R"({"name":"y","datatype":"INT64","shape":[3],"parameters":{"binary_data_size":24}},)"
            R"({"name":"b","datatype":"BOOL","shape":[],"data":[false]}]})");
  int64_t raw[3];
  std::memcpy(raw, body.data() + json_length, sizeof(raw));
  EXPECT_THAT(raw, ElementsAre(-7, 3, 13));
}

// Server-sent events: an iteration's slices (JSON data only, with the iteration parameters), and
// the final response marked as Triton marks the last response of a decoupled request.
TEST_F(HttpCodecTest, StreamedResponsesCarryTheirParameters) {
  engine::Tensor y(engine::DataType::kInt64, engine::Shape{3});
  for (int i = 0; i < 3; ++i) y.mutable_data<int64_t>()[i] = 5 - i;
  engine::Tensor x(engine::DataType::kFloat32, engine::Shape{2});
  x.mutable_data<float>()[0] = 0.5f;
  x.mutable_data<float>()[1] = -1.f;
  const engine::ScanSlice slices[] = {{1, &y}, {0, &x}};  // response order, not model order
  std::string json;
  ASSERT_TRUE(EncodeRestSlices(*model_, "m", "2", "", 17, slices, &json).ok());
  EXPECT_EQ(json, R"({"model_name":"m","model_version":"2","parameters":)"
                  R"({"iteration":17,"triton_final_response":false},"outputs":[)"
                  R"({"name":"y","datatype":"INT64","shape":[3],"data":[5,4,3]},)"
                  R"({"name":"x","datatype":"FP32","shape":[2],"data":[0.5,-1]}]})");

  std::vector<engine::Value> values;
  values.emplace_back(engine::Tensor(engine::DataType::kFloat32, engine::Shape{0, 2}));
  values.emplace_back(std::move(y));
  const RestStreamParameters final_response{-1, true};
  std::string body;
  size_t json_length = 0;
  ASSERT_TRUE(EncodeRestResponse(*model_, "m", "2", "r", {1}, values, RestOutputs(), &body,
                                 &json_length, &final_response)
                  .ok());
  EXPECT_EQ(body, R"({"model_name":"m","model_version":"2","id":"r","parameters":)"
                  R"({"triton_final_response":true},"outputs":[)"
                  R"({"name":"y","datatype":"INT64","shape":[3],"data":[5,4,3]}]})");
  EXPECT_EQ(json_length, body.size());
}

// An element type JSON has no form for (FP16) is refused as JSON data, naming the output and the
// way out, in a response and in a streamed iteration alike.
TEST_F(HttpCodecTest, AnOutputWithoutAJsonFormNamesItselfAndAsksForBinaryData) {
  engine::Tensor half(engine::DataType::kFloat16, engine::Shape{1, 2});
  std::memset(half.mutable_raw_data(), 0, half.ByteSize());
  const engine::ScanSlice slices[] = {{0, &half}};
  std::string json;
  const absl::Status streamed = EncodeRestSlices(*model_, "m", "1", "", 0, slices, &json);
  EXPECT_EQ(streamed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(streamed.message()), HasSubstr("output 'x': datatype FP16"));
  EXPECT_THAT(std::string(streamed.message()), HasSubstr("binary_data"));

  std::vector<engine::Value> values;
  values.emplace_back(std::move(half));
  std::string body;
  size_t json_length = 0;
  const absl::Status answered =
      EncodeRestResponse(*model_, "m", "1", "r", {0}, values, RestOutputs(), &body, &json_length);
  EXPECT_EQ(answered.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(answered.message()), HasSubstr("output 'x': datatype FP16"));
}

TEST(ProtoToJsonTest, PrintsAsTritonDoes) {
  inference::ModelMetadataResponse metadata;
  metadata.set_name("rnn");
  auto* m = metadata.add_inputs();
  m->set_name("M");
  m->set_datatype("INT64");  // a scalar: "shape": []
  auto* h = metadata.add_inputs();
  h->set_name("h0");
  h->set_datatype("FP32");
  h->add_shape(-1);
  h->add_shape(4);
  EXPECT_EQ(ProtoToJson(metadata),
            R"({"name":"rnn","versions":[],"platform":"","inputs":[)"
            R"({"name":"M","datatype":"INT64","shape":[]},)"
            R"({"name":"h0","datatype":"FP32","shape":[-1,4]}],"outputs":[]})");

  inference::ModelConfig config;
  config.set_name("c");
  config.set_max_batch_size(8);
  auto* input = config.add_input();
  input->set_name("x");
  input->set_data_type(inference::TYPE_INT64);
  input->add_dims(int64_t{1} << 40);  // 64-bit integers stay numbers
  (*config.mutable_parameters())["k"].set_string_value("v");
  const std::string json = ProtoToJson(config);
  EXPECT_THAT(json, HasSubstr(R"("max_batch_size":8)"));
  EXPECT_THAT(json, HasSubstr(R"("data_type":"TYPE_INT64")"));
  EXPECT_THAT(json, HasSubstr(R"("dims":[1099511627776])"));
  EXPECT_THAT(json, HasSubstr(R"("parameters":{"k":{"string_value":"v"}})"));
}

TEST(ErrorJsonTest, EscapesTheMessage) {
  EXPECT_EQ(ErrorJson("model 'a\"b' not\nfound"), R"({"error":"model 'a\"b' not\nfound"})");
}

TEST(HttpStatusForTest, MapsCanonicalCodes) {
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kOk), 200);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kDeadlineExceeded), 504);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kCancelled), 499);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kInternal), 500);
}

}  // namespace
}  // namespace loopserve::server
