#pragma once

// The models the request fuzz targets (infer_request_fuzz, rest_request_fuzz) run requests
// against, built in memory: `identity` (one [N,3] input per KServe datatype but BF16, returned as
// is) and `counter` (a Loop adding 1 to x [2] M times).

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/engine.h"
#include "onnx/onnx_pb.h"

namespace loopserve::fuzz {

inline void AddValueInfo(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list,
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

inline onnx::NodeProto* AddNode(onnx::GraphProto* g, const std::string& op,
                                std::vector<std::string> inputs, std::vector<std::string> outputs) {
  onnx::NodeProto* n = g->add_node();
  n->set_op_type(op);
  for (auto& i : inputs) n->add_input(i);
  for (auto& o : outputs) n->add_output(o);
  return n;
}

inline std::shared_ptr<const engine::Model> Load(const onnx::ModelProto& m) {
  auto model = engine::Model::LoadOnnx(m.SerializeAsString());
  if (!model.ok()) abort();  // the fixture itself is broken
  return *model;
}

// The datatypes of the identity models: the names of their tensors, ONNX element types.
inline constexpr std::pair<const char*, int> kIdentityTypes[] = {
    {"fp32", onnx::TensorProto::FLOAT},    {"fp64", onnx::TensorProto::DOUBLE},
    {"int8", onnx::TensorProto::INT8},     {"int16", onnx::TensorProto::INT16},
    {"int32", onnx::TensorProto::INT32},   {"int64", onnx::TensorProto::INT64},
    {"uint8", onnx::TensorProto::UINT8},   {"uint16", onnx::TensorProto::UINT16},
    {"uint32", onnx::TensorProto::UINT32}, {"uint64", onnx::TensorProto::UINT64},
    {"bool", onnx::TensorProto::BOOL},     {"fp16", onnx::TensorProto::FLOAT16},
    {"bytes", onnx::TensorProto::STRING},
};

// Identity nodes in_<type> [N,3] -> out_<type> for `types`.
inline std::shared_ptr<const engine::Model> IdentityModel(
    absl::Span<const std::pair<const char*, int>> types) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("identity");
  for (const auto& [name, type] : types) {
    AddValueInfo(g->mutable_input(), std::string("in_") + name, type, {-1, 3});
    AddValueInfo(g->mutable_output(), std::string("out_") + name, type, {-1, 3});
    AddNode(g, "Identity", {std::string("in_") + name}, {std::string("out_") + name});
  }
  return Load(m);
}

// The identity model a request whose first input is `input` is run against: the one-input model
// of that datatype ("in_fp32": a request with only that input gets as far as a run), or, for any
// other name, the model with every datatype's input (all of them required).
inline const engine::Model& IdentityModelFor(absl::string_view input) {
  static const auto* const models = [] {
    auto* models = new std::map<std::string, std::shared_ptr<const engine::Model>, std::less<>>();
    for (const auto& type : kIdentityTypes) {
      (*models)[std::string("in_") + type.first] = IdentityModel({type});
    }
    (*models)[""] = IdentityModel(kIdentityTypes);
    return models;
  }();
  auto it = models->find(input);
  return *(it == models->end() ? models->at("") : it->second);
}

inline std::shared_ptr<const engine::Model> CounterModel() {
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

}  // namespace loopserve::fuzz
