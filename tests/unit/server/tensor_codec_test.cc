#include "server/grpc/tensor_codec.h"

#include <cstring>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/server/test_util.h"

namespace loopserve::server {
namespace {

using ::testing::HasSubstr;
using Request = inference::ModelInferRequest;

template <typename T>
std::string Bytes(std::initializer_list<T> values) {
  std::string bytes(values.size() * sizeof(T), '\0');
  std::memcpy(bytes.data(), values.begin(), bytes.size());
  return bytes;
}

class TensorCodecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testing::PassthroughModel();
    ASSERT_NE(model_, nullptr);
  }

  // A valid raw request: x [2,2] FP32, y [3] INT64, b [] BOOL.
  static Request RawRequest() {
    Request request;
    request.set_model_name("m");
    auto* x = request.add_inputs();
    x->set_name("x");
    x->set_datatype("FP32");
    x->add_shape(2);
    x->add_shape(2);
    auto* y = request.add_inputs();
    y->set_name("y");
    y->set_datatype("INT64");
    y->add_shape(3);
    auto* b = request.add_inputs();
    b->set_name("b");
    b->set_datatype("BOOL");
    request.add_raw_input_contents(Bytes<float>({1, 2, 3, 4}));
    request.add_raw_input_contents(Bytes<int64_t>({5, 6, 7}));
    request.add_raw_input_contents(std::string(1, '\1'));
    return request;
  }

  // The same request with typed contents.
  static Request TypedRequest() {
    Request request = RawRequest();
    request.clear_raw_input_contents();
    for (float v : {1.f, 2.f, 3.f, 4.f})
      request.mutable_inputs(0)->mutable_contents()->add_fp32_contents(v);
    for (int64_t v : {5, 6, 7})
      request.mutable_inputs(1)->mutable_contents()->add_int64_contents(v);
    request.mutable_inputs(2)->mutable_contents()->add_bool_contents(true);
    return request;
  }

  void ExpectInvalid(const Request& request, const std::string& substring) {
    absl::StatusOr<DecodedRequest> decoded = DecodeInferRequest(request, *model_);
    ASSERT_FALSE(decoded.ok()) << "expected an error containing: " << substring;
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument) << decoded.status();
    EXPECT_THAT(std::string(decoded.status().message()), HasSubstr(substring));
  }

  std::shared_ptr<const engine::Model> model_;
};

TEST_F(TensorCodecTest, DecodesRawInputsInModelOrder) {
  Request request = RawRequest();
  // Send them out of model order: the decoder reorders by name.
  request.mutable_inputs()->SwapElements(0, 2);
  request.mutable_raw_input_contents()->SwapElements(0, 2);
  absl::StatusOr<DecodedRequest> decoded = DecodeInferRequest(request, *model_);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->inputs.size(), 3u);
  const engine::Tensor& x = decoded->inputs[0].tensor();
  EXPECT_EQ(x.dtype(), engine::DataType::kFloat32);
  EXPECT_EQ(x.shape(), engine::Shape({2, 2}));
  EXPECT_EQ(x.data<float>()[3], 4.f);
  EXPECT_EQ(decoded->inputs[1].tensor().data<int64_t>()[2], 7);
  EXPECT_TRUE(decoded->inputs[2].tensor().data<bool>()[0]);
  EXPECT_EQ(decoded->outputs, (std::vector<int>{0, 1, 2}));
}

TEST_F(TensorCodecTest, AlignedRawInputIsAZeroCopyView) {
  Request request = RawRequest();
  absl::StatusOr<DecodedRequest> decoded = DecodeInferRequest(request, *model_);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  const engine::Tensor& x = decoded->inputs[0].tensor();
  if (reinterpret_cast<uintptr_t>(request.raw_input_contents(0).data()) % sizeof(float) == 0) {
    EXPECT_TRUE(x.is_view());
    EXPECT_EQ(x.raw_data(), request.raw_input_contents(0).data());
  }
}

TEST_F(TensorCodecTest, DecodesTypedInputs) {
  absl::StatusOr<DecodedRequest> decoded = DecodeInferRequest(TypedRequest(), *model_);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->inputs[0].tensor().data<float>()[1], 2.f);
  EXPECT_EQ(decoded->inputs[1].tensor().data<int64_t>()[0], 5);
  EXPECT_TRUE(decoded->inputs[2].tensor().data<bool>()[0]);
}

TEST_F(TensorCodecTest, DecodesEmptyTensors) {
  Request request = RawRequest();
  request.mutable_inputs(0)->set_shape(0, 0);
  request.set_raw_input_contents(0, "");
  absl::StatusOr<DecodedRequest> decoded = DecodeInferRequest(request, *model_);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->inputs[0].tensor().NumElements(), 0);
}

TEST_F(TensorCodecTest, HonoursRequestedOutputs) {
  Request request = RawRequest();
  request.add_outputs()->set_name("b");
  request.add_outputs()->set_name("x");
  absl::StatusOr<DecodedRequest> decoded = DecodeInferRequest(request, *model_);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->outputs, (std::vector<int>{2, 0}));
}

TEST_F(TensorCodecTest, RejectsMissingInput) {
  for (Request request : {RawRequest(), TypedRequest()}) {
    request.mutable_inputs()->RemoveLast();
    if (request.raw_input_contents_size() > 0) request.mutable_raw_input_contents()->RemoveLast();
    ExpectInvalid(request, "input 'b': missing");
  }
}

TEST_F(TensorCodecTest, RejectsUnknownInput) {
  for (Request request : {RawRequest(), TypedRequest()}) {
    request.mutable_inputs(1)->set_name("nope");
    ExpectInvalid(request, "input 'nope': the model has no such input");
  }
}

TEST_F(TensorCodecTest, RejectsRepeatedInput) {
  for (Request request : {RawRequest(), TypedRequest()}) {
    request.mutable_inputs(1)->set_name("x");
    ExpectInvalid(request, "input 'x': given more than once");
  }
}

TEST_F(TensorCodecTest, RejectsWrongDatatype) {
  for (Request request : {RawRequest(), TypedRequest()}) {
    request.mutable_inputs(0)->set_datatype("FP64");
    ExpectInvalid(request, "input 'x': datatype FP64 does not match the model's FP32");
  }
}

TEST_F(TensorCodecTest, RejectsUnknownDatatype) {
  for (Request request : {RawRequest(), TypedRequest()}) {
    request.mutable_inputs(0)->set_datatype("FLOAT32");
    ExpectInvalid(request, "input 'x': unknown datatype 'FLOAT32'");
  }
  Request request = RawRequest();
  request.mutable_inputs(0)->set_datatype("BYTES");
  ExpectInvalid(request, "input 'x': datatype BYTES does not match the model's FP32");
}

TEST_F(TensorCodecTest, RejectsNegativeDims) {
  for (Request request : {RawRequest(), TypedRequest()}) {
    request.mutable_inputs(0)->set_shape(0, -2);
    ExpectInvalid(request, "input 'x'");
  }
}

TEST_F(TensorCodecTest, RejectsOverflowingDims) {
  for (Request request : {RawRequest(), TypedRequest()}) {
    request.mutable_inputs(0)->set_shape(0, int64_t{1} << 40);
    request.mutable_inputs(0)->set_shape(1, int64_t{1} << 40);
    ExpectInvalid(request, "input 'x'");
  }
}

TEST_F(TensorCodecTest, RejectsRawByteCountMismatch) {
  Request request = RawRequest();
  request.set_raw_input_contents(0, Bytes<float>({1, 2, 3}));
  ExpectInvalid(request,
                "input 'x': shape [2,2] of float32 needs 16 bytes, raw_input_contents has 12");
  request = RawRequest();
  request.set_raw_input_contents(2, "");
  ExpectInvalid(request, "input 'b'");
}

// A raw BOOL byte other than 0 or 1 is no bool (reading it as one is undefined behaviour; found
// by rest_request_fuzz, regressions/rest_request_fuzz/bool_binary_byte_not_0_or_1.req).
TEST_F(TensorCodecTest, RejectsRawBoolBytesOtherThanZeroAndOne) {
  Request request = RawRequest();
  request.set_raw_input_contents(2, std::string(1, '['));
  ExpectInvalid(request,
                "input 'b': BOOL element 0 is byte 91 in raw_input_contents; a BOOL is one byte, 0 "
                "(false) or 1 (true)");
  request.set_raw_input_contents(2, std::string(1, '\0'));
  EXPECT_TRUE(DecodeInferRequest(request, *model_).ok());
}

TEST_F(TensorCodecTest, RejectsTypedElementCountMismatch) {
  Request request = TypedRequest();
  request.mutable_inputs(1)->mutable_contents()->add_int64_contents(8);
  ExpectInvalid(request, "input 'y': shape [3] needs 3 elements, got 4 in int64_contents");
}

TEST_F(TensorCodecTest, RejectsTypedContentsInTheWrongField) {
  Request request = TypedRequest();
  request.mutable_inputs(0)->mutable_contents()->clear_fp32_contents();
  for (double v : {1.0, 2.0, 3.0, 4.0})
    request.mutable_inputs(0)->mutable_contents()->add_fp64_contents(v);
  ExpectInvalid(request, "input 'x': datatype FP32 expects fp32_contents, got fp64_contents");
}

TEST_F(TensorCodecTest, RejectsMixingRawAndTyped) {
  Request request = RawRequest();
  request.mutable_inputs(1)->mutable_contents()->add_int64_contents(1);
  ExpectInvalid(request,
                "contents field must not be specified when using raw_input_contents for 'y'");
}

TEST_F(TensorCodecTest, RejectsRawEntryCountMismatch) {
  Request request = RawRequest();
  request.mutable_raw_input_contents()->RemoveLast();
  ExpectInvalid(request, "raw_input_contents has 2 entries but the request has 3 inputs");
}

TEST_F(TensorCodecTest, RejectsUnknownOrRepeatedOutput) {
  Request request = RawRequest();
  request.add_outputs()->set_name("z");
  ExpectInvalid(request, "output 'z': the model has no such output");
  request = RawRequest();
  request.add_outputs()->set_name("x");
  request.add_outputs()->set_name("x");
  ExpectInvalid(request, "output 'x': requested more than once");
}

TEST_F(TensorCodecTest, EncodesSelectedOutputsRaw) {
  std::vector<engine::Value> values(3);
  engine::Tensor x(engine::DataType::kFloat32, engine::Shape({1, 2}));
  x.mutable_data<float>()[0] = 1.5f;
  x.mutable_data<float>()[1] = -2.f;
  values[0] = engine::Value(std::move(x));
  engine::Tensor b(engine::DataType::kBool, engine::Shape({}));
  b.mutable_data<bool>()[0] = true;
  values[2] = engine::Value(std::move(b));

  inference::ModelInferResponse response;
  ASSERT_TRUE(EncodeInferOutputs(*model_, {2, 0}, values, &response).ok());
  ASSERT_EQ(response.outputs_size(), 2);
  EXPECT_EQ(response.outputs(0).name(), "b");
  EXPECT_EQ(response.outputs(0).datatype(), "BOOL");
  EXPECT_EQ(response.outputs(0).shape_size(), 0);
  EXPECT_EQ(response.raw_output_contents(0), std::string(1, '\1'));
  EXPECT_EQ(response.outputs(1).name(), "x");
  EXPECT_EQ(response.outputs(1).datatype(), "FP32");
  EXPECT_THAT(response.outputs(1).shape(), ::testing::ElementsAre(1, 2));
  EXPECT_EQ(response.raw_output_contents(1), Bytes<float>({1.5f, -2.f}));
}

TEST_F(TensorCodecTest, SequenceOutputsAreUnimplemented) {
  std::vector<engine::Value> values(3);
  values[0].mutable_sequence();
  inference::ModelInferResponse response;
  EXPECT_EQ(EncodeInferOutputs(*model_, {0}, values, &response).code(),
            absl::StatusCode::kUnimplemented);
}

// SerializeInferResponse against protobuf's own serializer of the message that
// EncodeInferOutputs builds, and parsed back by protobuf.
std::string Flatten(grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& slice : slices) {
    out.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return out;
}

void ExpectSerializedAsProtobufDoes(const engine::Model& model, const std::vector<int>& outputs,
                                    const std::vector<engine::Value>& values,
                                    const std::string& name, const std::string& version,
                                    const std::string& id) {
  inference::ModelInferResponse message;
  ASSERT_TRUE(EncodeInferOutputs(model, outputs, values, &message).ok());
  message.set_model_name(name);
  message.set_model_version(version);
  message.set_id(id);
  grpc::ByteBuffer buffer;
  ASSERT_TRUE(SerializeInferResponse(name, version, id, model, outputs, values, &buffer).ok());
  const std::string direct = Flatten(buffer);
  EXPECT_EQ(direct, message.SerializeAsString());
  inference::ModelInferResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(direct));
  EXPECT_EQ(parsed.model_name(), name);
  EXPECT_EQ(parsed.model_version(), version);
  EXPECT_EQ(parsed.id(), id);
  ASSERT_EQ(parsed.outputs_size(), static_cast<int>(outputs.size()));
  ASSERT_EQ(parsed.raw_output_contents_size(), static_cast<int>(outputs.size()));
  for (size_t k = 0; k < outputs.size(); ++k) {
    const engine::Tensor& tensor = values[outputs[k]].tensor();
    EXPECT_EQ(parsed.outputs(k).name(), model.outputs()[outputs[k]].name);
    EXPECT_THAT(parsed.outputs(k).shape(), ::testing::ElementsAreArray(tensor.shape().dims()));
    if (tensor.dtype() != engine::DataType::kString) {
      EXPECT_EQ(parsed.raw_output_contents(k),
                std::string(static_cast<const char*>(tensor.raw_data()), tensor.ByteSize()));
    }
  }
}

TEST_F(TensorCodecTest, SerializesResponsesAsProtobufDoes) {
  std::vector<engine::Value> values(3);
  engine::Tensor x(engine::DataType::kFloat32, engine::Shape({70, 2}));  // 560 bytes: 2-byte length
  for (int i = 0; i < 140; ++i) x.mutable_data<float>()[i] = 0.25f * i - 7.f;
  values[0] = engine::Value(std::move(x));
  engine::Tensor y(engine::DataType::kInt64, engine::Shape({3}));
  for (int i = 0; i < 3; ++i)
    y.mutable_data<int64_t>()[i] = -(int64_t{1} << (20 * i));  // negative: 10-byte varints
  values[1] = engine::Value(std::move(y));
  engine::Tensor b(engine::DataType::kBool, engine::Shape({}));  // scalar: no shape field
  b.mutable_data<bool>()[0] = true;
  values[2] = engine::Value(std::move(b));
  ExpectSerializedAsProtobufDoes(*model_, {2, 0, 1}, values, "rnn", "12", "request-7");
  ExpectSerializedAsProtobufDoes(*model_, {1}, values, "m", "1", "");  // no id: field absent
  ExpectSerializedAsProtobufDoes(*model_, {}, values, "m", "1", "x");
  values[0] = engine::Value(engine::Tensor(engine::DataType::kFloat32, engine::Shape({0, 2})));
  ExpectSerializedAsProtobufDoes(*model_, {0}, values, "m", "1", "");  // an empty tensor
}

TEST_F(TensorCodecTest, SerializingSequenceOutputsIsUnimplemented) {
  std::vector<engine::Value> values(3);
  values[0].mutable_sequence();
  grpc::ByteBuffer buffer;
  EXPECT_EQ(SerializeInferResponse("m", "1", "", *model_, {0}, values, &buffer).code(),
            absl::StatusCode::kUnimplemented);
}

// BYTES: the model takes s string [-1] and returns it as t.
std::shared_ptr<const engine::Model> StringModel() {
  auto graph = std::make_shared<engine::Graph>();
  engine::ValueType type;
  type.dtype = engine::DataType::kString;
  type.dims = std::vector<int64_t>{-1};
  const engine::ValueId s = graph->AddValue("s", type);
  graph->inputs = {s};
  graph->outputs = {s};
  auto model = engine::Model::FromGraph(graph);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

// Triton's raw BYTES layout: a 4-byte little-endian length before each element.
std::string LengthPrefixed(std::initializer_list<std::string> elements) {
  std::string out;
  for (const std::string& e : elements) {
    const uint32_t n = static_cast<uint32_t>(e.size());
    out.push_back(static_cast<char>(n & 0xff));
    out.push_back(static_cast<char>((n >> 8) & 0xff));
    out.push_back(static_cast<char>((n >> 16) & 0xff));
    out.push_back(static_cast<char>(n >> 24));
    out += e;
  }
  return out;
}

Request BytesRequest(int64_t elements) {
  Request request;
  auto* s = request.add_inputs();
  s->set_name("s");
  s->set_datatype("BYTES");
  s->add_shape(elements);
  return request;
}

TEST(BytesCodecTest, DecodesRawAndTypedBytes) {
  auto model = StringModel();
  ASSERT_NE(model, nullptr);
  const std::string binary("\0\xff\x01", 3);
  const std::string long_text(300, 'z');  // a length past one byte
  Request raw = BytesRequest(4);
  raw.add_raw_input_contents(LengthPrefixed({"hello", "", binary, long_text}));
  Request typed = BytesRequest(4);
  for (const std::string& e : {std::string("hello"), std::string(), binary, long_text}) {
    typed.mutable_inputs(0)->mutable_contents()->add_bytes_contents(e);
  }
  for (const Request& request : {raw, typed}) {
    absl::StatusOr<DecodedRequest> decoded = DecodeInferRequest(request, *model);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    const engine::Tensor& t = decoded->inputs[0].tensor();
    ASSERT_EQ(t.dtype(), engine::DataType::kString);
    ASSERT_EQ(t.NumElements(), 4);
    EXPECT_EQ(t.data<std::string>()[0], "hello");
    EXPECT_EQ(t.data<std::string>()[1], "");
    EXPECT_EQ(t.data<std::string>()[2], binary);
    EXPECT_EQ(t.data<std::string>()[3], long_text);
  }
}

TEST(BytesCodecTest, RejectsMalformedRawBytes) {
  auto model = StringModel();
  ASSERT_NE(model, nullptr);
  auto expect_invalid = [&](std::string raw, int64_t elements, const std::string& fragment) {
    Request request = BytesRequest(elements);
    request.add_raw_input_contents(std::move(raw));
    absl::StatusOr<DecodedRequest> decoded = DecodeInferRequest(request, *model);
    ASSERT_FALSE(decoded.ok()) << fragment;
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(decoded.status().message()), HasSubstr(fragment));
  };
  // A length that runs past the end.
  std::string overrun = LengthPrefixed({"abc"});
  overrun.resize(overrun.size() - 1);
  expect_invalid(overrun, 1, "has length 3 but only 2 bytes follow");
  // A length cut short, a missing element, bytes left over.
  expect_invalid(LengthPrefixed({"abcdefgh"}) + std::string(2, '\0'), 2, "ends inside the length");
  expect_invalid(LengthPrefixed({"a", "b"}), 3, "length-prefixed");
  expect_invalid(LengthPrefixed({"a", "b"}), 1, "bytes after the 1 BYTES elements");
  // A huge shape with a few bytes is refused before anything is allocated for it.
  expect_invalid(LengthPrefixed({"a"}), int64_t{1} << 38, "needs 274877906944 length-prefixed");
  // Typed contents in another field, or too few.
  Request wrong_field = BytesRequest(1);
  wrong_field.mutable_inputs(0)->mutable_contents()->add_int_contents(1);
  absl::StatusOr<DecodedRequest> decoded = DecodeInferRequest(wrong_field, *model);
  ASSERT_FALSE(decoded.ok());
  EXPECT_THAT(std::string(decoded.status().message()), HasSubstr("expects bytes_contents"));
  Request too_few = BytesRequest(2);
  too_few.mutable_inputs(0)->mutable_contents()->add_bytes_contents("x");
  decoded = DecodeInferRequest(too_few, *model);
  ASSERT_FALSE(decoded.ok());
  EXPECT_THAT(std::string(decoded.status().message()), HasSubstr("needs 2 elements, got 1"));
}

TEST(BytesCodecTest, EncodesLengthPrefixedOutputs) {
  auto model = StringModel();
  ASSERT_NE(model, nullptr);
  engine::Tensor t(engine::DataType::kString, engine::Shape({3}));
  t.mutable_data<std::string>()[0] = "ab";
  t.mutable_data<std::string>()[2] = std::string(260, 'q');
  std::vector<engine::Value> values;
  values.emplace_back(std::move(t));
  inference::ModelInferResponse response;
  ASSERT_TRUE(EncodeInferOutputs(*model, {0}, values, &response).ok());
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_EQ(response.outputs(0).datatype(), "BYTES");
  EXPECT_THAT(response.outputs(0).shape(), ::testing::ElementsAre(3));
  EXPECT_EQ(response.raw_output_contents(0), LengthPrefixed({"ab", "", std::string(260, 'q')}));
  ExpectSerializedAsProtobufDoes(*model, {0}, values, "strings", "3", "i");
}

}  // namespace
}  // namespace loopserve::server
