// Fuzz target: the bytes of a ModelInfer call, through the server's own request path without the
// network: ParseInferRequest -> DecodeInferRequest against the model the request names -> a run
// under tight limits -> EncodeInferOutputs. Two models: `identity` (one [N,3] input per KServe
// datatype, returned as is) and `counter` (a Loop adding 1 to x [2] M times). Seeds:
// make_seeds.py writes valid and slightly broken requests for both. See README.md.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "engine/engine.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "onnx/onnx_pb.h"
#include "proto/grpc_service.pb.h"
#include "server/logging.h"
#include "server/tensor_codec.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using loopserve::engine::Model;

void AddValueInfo(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list,
                  const std::string& name, int elem, std::vector<int64_t> dims) {
  onnx::ValueInfoProto* v = list->Add();
  v->set_name(name);
  auto* shape = v->mutable_type()->mutable_tensor_type();
  shape->set_elem_type(elem);
  for (int64_t d : dims) {
    if (d < 0) {
      shape->mutable_shape()->add_dim()->set_dim_param("N");
    } else {
      shape->mutable_shape()->add_dim()->set_dim_value(d);
    }
  }
}

onnx::NodeProto* AddNode(onnx::GraphProto* g, const std::string& op,
                         std::vector<std::string> inputs, std::vector<std::string> outputs) {
  onnx::NodeProto* n = g->add_node();
  n->set_op_type(op);
  for (auto& i : inputs) n->add_input(i);
  for (auto& o : outputs) n->add_output(o);
  return n;
}

std::shared_ptr<const Model> Load(const onnx::ModelProto& m) {
  auto model = Model::LoadOnnx(m.SerializeAsString());
  if (!model.ok()) abort();  // the fixture itself is broken
  return *model;
}

std::shared_ptr<const Model> IdentityModel() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("identity");
  const std::pair<const char*, int> types[] = {
      {"fp32", onnx::TensorProto::FLOAT},    {"fp64", onnx::TensorProto::DOUBLE},
      {"int8", onnx::TensorProto::INT8},     {"int16", onnx::TensorProto::INT16},
      {"int32", onnx::TensorProto::INT32},   {"int64", onnx::TensorProto::INT64},
      {"uint8", onnx::TensorProto::UINT8},   {"uint16", onnx::TensorProto::UINT16},
      {"uint32", onnx::TensorProto::UINT32}, {"uint64", onnx::TensorProto::UINT64},
      {"bool", onnx::TensorProto::BOOL},     {"fp16", onnx::TensorProto::FLOAT16},
  };
  for (const auto& [name, type] : types) {
    AddValueInfo(g->mutable_input(), std::string("in_") + name, type, {-1, 3});
    AddValueInfo(g->mutable_output(), std::string("out_") + name, type, {-1, 3});
    AddNode(g, "Identity", {std::string("in_") + name}, {std::string("out_") + name});
  }
  return Load(m);
}

std::shared_ptr<const Model> CounterModel() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("counter");
  AddValueInfo(g->mutable_input(), "M", onnx::TensorProto::INT64, {});
  AddValueInfo(g->mutable_input(), "x", onnx::TensorProto::FLOAT, {2});
  AddValueInfo(g->mutable_output(), "y", onnx::TensorProto::FLOAT, {2});
  onnx::NodeProto* loop = AddNode(g, "Loop", {"M", "", "x"}, {"y"});
  auto* attr = loop->add_attribute();
  attr->set_name("body");
  attr->set_type(onnx::AttributeProto::GRAPH);
  onnx::GraphProto* body = attr->mutable_g();
  body->set_name("body");
  AddValueInfo(body->mutable_input(), "i", onnx::TensorProto::INT64, {});
  AddValueInfo(body->mutable_input(), "c_in", onnx::TensorProto::BOOL, {});
  AddValueInfo(body->mutable_input(), "x_in", onnx::TensorProto::FLOAT, {2});
  AddValueInfo(body->mutable_output(), "c_out", onnx::TensorProto::BOOL, {});
  AddValueInfo(body->mutable_output(), "x_out", onnx::TensorProto::FLOAT, {2});
  onnx::TensorProto* one = body->add_initializer();
  one->set_name("one");
  one->set_data_type(onnx::TensorProto::FLOAT);
  one->add_dims(1);
  one->add_float_data(1.f);
  AddNode(body, "Identity", {"c_in"}, {"c_out"});
  AddNode(body, "Add", {"x_in", "one"}, {"x_out"});
  return Load(m);
}

}  // namespace

// As in the server: protobuf's per-field UTF-8 complaints go to the (debug-level) log.
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  loopserve::server::RouteProtobufLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::shared_ptr<const Model> identity = IdentityModel();
  static const std::shared_ptr<const Model> counter = CounterModel();
  grpc::Slice slice(data, size);
  grpc::ByteBuffer bytes(&slice, 1);
  inference::ModelInferRequest request;
  if (!loopserve::server::ParseInferRequest(bytes, "ModelInfer", &request).ok()) return 0;
  const Model& model = request.model_name() == "counter" ? *counter : *identity;
  auto decoded = loopserve::server::DecodeInferRequest(request, model);
  if (!decoded.ok()) return 0;
  auto outputs = model.Run(std::move(decoded->inputs), loopserve::fuzz::RunLimits());
  if (!outputs.ok()) return 0;
  inference::ModelInferResponse response;
  (void)loopserve::server::EncodeInferOutputs(model, decoded->outputs, *outputs, &response);
  return 0;
}
