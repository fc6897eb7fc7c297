// ONNX import: scoping, constants, ordering and the errors a malformed model gets.

#include "engine/engine.h"
#include "engine/import/onnx_importer.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"

namespace loopserve::engine {
namespace {

onnx::ValueInfoProto* AddValueInfo(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list,
                                   const std::string& name, int elem, std::vector<int64_t> dims) {
  onnx::ValueInfoProto* v = list->Add();
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem);
  auto* shape = t->mutable_shape();
  for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
  return v;
}

onnx::NodeProto* AddNode(onnx::GraphProto* g, const std::string& op,
                         std::vector<std::string> inputs, std::vector<std::string> outputs,
                         const std::string& name = "") {
  onnx::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (auto& i : inputs) n->add_input(i);
  for (auto& o : outputs) n->add_output(o);
  return n;
}

onnx::ModelProto BaseModel(int opset = 13) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  m.mutable_graph()->set_name("g");
  return m;
}

absl::StatusOr<std::shared_ptr<const Model>> Load(const onnx::ModelProto& m) {
  return Model::LoadOnnx(m.SerializeAsString());
}

TEST(OnnxImporterTest, GarbageIsInvalidArgument) {
  auto model = Model::LoadOnnx("this is not a protobuf \x01\x02\x03");
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument) << model.status();
}

TEST(OnnxImporterTest, UnknownOpIsUnimplementedNamingNodeAndOpset) {
  onnx::ModelProto m = BaseModel(13);
  auto* g = m.mutable_graph();
  AddValueInfo(g->mutable_input(), "x", onnx::TensorProto::FLOAT, {2});
  AddValueInfo(g->mutable_output(), "y", onnx::TensorProto::FLOAT, {2});
  AddNode(g, "FancyOp", {"x"}, {"y"}, "fancy_1");
  auto model = Load(m);
  ASSERT_EQ(model.status().code(), absl::StatusCode::kUnimplemented) << model.status();
  EXPECT_NE(model.status().message().find("'fancy_1'"), std::string::npos) << model.status();
  EXPECT_NE(model.status().message().find("FancyOp"), std::string::npos);
  EXPECT_NE(model.status().message().find("opset 13"), std::string::npos);
}

TEST(OnnxImporterTest, UndefinedInputIsInvalidArgument) {
  onnx::ModelProto m = BaseModel();
  auto* g = m.mutable_graph();
  AddValueInfo(g->mutable_output(), "y", onnx::TensorProto::FLOAT, {2});
  AddNode(g, "Identity", {"nowhere"}, {"y"}, "id");
  auto model = Load(m);
  ASSERT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument) << model.status();
  EXPECT_NE(model.status().message().find("'nowhere'"), std::string::npos) << model.status();
}

TEST(OnnxImporterTest, CycleIsInvalidArgument) {
  onnx::ModelProto m = BaseModel();
  auto* g = m.mutable_graph();
  AddValueInfo(g->mutable_output(), "a", onnx::TensorProto::FLOAT, {2});
  AddNode(g, "Identity", {"b"}, {"a"}, "n1");
  AddNode(g, "Identity", {"a"}, {"b"}, "n2");
  auto model = Load(m);
  ASSERT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument) << model.status();
  EXPECT_NE(model.status().message().find("cycle"), std::string::npos) << model.status();
}

TEST(OnnxImporterTest, InitializerListedAsInputIsAConstantNotAnInput) {
  onnx::ModelProto m = BaseModel();
  auto* g = m.mutable_graph();
  AddValueInfo(g->mutable_input(), "x", onnx::TensorProto::FLOAT, {2});
  AddValueInfo(g->mutable_input(), "w", onnx::TensorProto::FLOAT, {2});
  AddValueInfo(g->mutable_output(), "w_out", onnx::TensorProto::FLOAT, {2});
  onnx::TensorProto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(2);
  w->add_float_data(1.5f);
  w->add_float_data(-2.0f);
  AddNode(g, "Identity", {"w"}, {"w_out"});
  auto model = Load(m);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ((*model)->inputs().size(), 1u);
  EXPECT_EQ((*model)->inputs()[0].name, "x");
  Tensor x(DataType::kFloat32, Shape{2});
  std::vector<Value> in;
  in.push_back(Value(std::move(x)));
  auto out = (*model)->Run(std::move(in), RunOptions());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].tensor().data<float>()[0], 1.5f);
  EXPECT_EQ((*out)[0].tensor().data<float>()[1], -2.0f);
}

TEST(OnnxImporterTest, UnsortedNodesAreOrdered) {
  onnx::ModelProto m = BaseModel();
  auto* g = m.mutable_graph();
  AddValueInfo(g->mutable_input(), "x", onnx::TensorProto::INT64, {1});
  AddValueInfo(g->mutable_output(), "z", onnx::TensorProto::INT64, {1});
  AddNode(g, "Identity", {"y"}, {"z"}, "second");
  AddNode(g, "Identity", {"x"}, {"y"}, "first");
  auto model = Load(m);
  ASSERT_TRUE(model.ok()) << model.status();
  Tensor x(DataType::kInt64, Shape{1});
  x.mutable_data<int64_t>()[0] = 42;
  std::vector<Value> in;
  in.push_back(Value(std::move(x)));
  auto out = (*model)->Run(std::move(in), RunOptions());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].tensor().data<int64_t>()[0], 42);
}

TEST(OnnxImporterTest, InputDtypeAndShapeAreChecked) {
  onnx::ModelProto m = BaseModel();
  auto* g = m.mutable_graph();
  AddValueInfo(g->mutable_input(), "x", onnx::TensorProto::INT64, {2});
  AddValueInfo(g->mutable_output(), "y", onnx::TensorProto::INT64, {2});
  AddNode(g, "Identity", {"x"}, {"y"});
  auto model = Load(m);
  ASSERT_TRUE(model.ok()) << model.status();
  {
    std::vector<Value> in;
    in.push_back(Value(Tensor(DataType::kFloat32, Shape{2})));
    auto out = (*model)->Run(std::move(in), RunOptions());
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(out.status().message().find("'x'"), std::string::npos) << out.status();
  }
  {
    std::vector<Value> in;
    in.push_back(Value(Tensor(DataType::kInt64, Shape{3})));
    auto out = (*model)->Run(std::move(in), RunOptions());
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(out.status().message().find("shape [3]"), std::string::npos) << out.status();
  }
}

TEST(OnnxImporterTest, UnsupportedElementTypeOfAnInputIsUnimplemented) {
  onnx::ModelProto m = BaseModel();
  auto* g = m.mutable_graph();
  AddValueInfo(g->mutable_input(), "s", onnx::TensorProto::COMPLEX64, {1});
  AddValueInfo(g->mutable_output(), "t", onnx::TensorProto::COMPLEX64, {1});
  AddNode(g, "Identity", {"s"}, {"t"});
  auto model = Load(m);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented) << model.status();
  EXPECT_NE(model.status().message().find("'s'"), std::string::npos) << model.status();
}

TEST(OnnxImporterTest, MalformedInitializerBytesAreInvalidArgument) {
  onnx::ModelProto m = BaseModel();
  auto* g = m.mutable_graph();
  AddValueInfo(g->mutable_output(), "w", onnx::TensorProto::FLOAT, {4});
  onnx::TensorProto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(4);
  w->set_raw_data(std::string(7, '\0'));  // 4 floats need 16 bytes
  auto model = Load(m);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument) << model.status();
  EXPECT_NE(model.status().message().find("16"), std::string::npos) << model.status();
}

// Dims claiming up to 2^40 elements in a few bytes of data (raw or typed, initializer or Constant)
// fail the load with InvalidArgument before anything that large is allocated.
TEST(OnnxImporterTest, AbsurdDimsWithFewBytesAreInvalidArgument) {
  for (const bool raw : {true, false}) {
    for (const bool constant_node : {false, true}) {
      onnx::ModelProto m = BaseModel();
      auto* g = m.mutable_graph();
      AddValueInfo(g->mutable_output(), "w", onnx::TensorProto::FLOAT, {});
      onnx::TensorProto* w;
      if (constant_node) {
        onnx::NodeProto* node = AddNode(g, "Constant", {}, {"w"}, "c");
        auto* attr = node->add_attribute();
        attr->set_name("value");
        attr->set_type(onnx::AttributeProto::TENSOR);
        w = attr->mutable_t();
      } else {
        w = g->add_initializer();
      }
      w->set_name("w");
      w->set_data_type(onnx::TensorProto::FLOAT);
      w->add_dims(int64_t{1} << 20);
      w->add_dims(int64_t{1} << 20);  // 2^40 elements: 4 TiB
      if (raw) {
        w->set_raw_data(std::string(8, '\0'));
      } else {
        w->add_float_data(1.f);
        w->add_float_data(2.f);
      }
      auto model = Load(m);
      EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument) << model.status();
      EXPECT_NE(model.status().message().find("needs"), std::string::npos) << model.status();
    }
  }
}

// The load-time memory cap: constants past it fail the load with InvalidArgument.
TEST(OnnxImporterTest, ConstantsPastTheMemoryCapFailTheLoad) {
  onnx::ModelProto m = BaseModel();
  auto* g = m.mutable_graph();
  AddValueInfo(g->mutable_output(), "w", onnx::TensorProto::FLOAT, {1024});
  onnx::TensorProto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(1024);
  w->set_raw_data(std::string(4096, '\0'));
  LoadOptions options;
  options.max_memory_bytes = 1024;
  auto capped = Model::LoadOnnx(m.SerializeAsString(), options);
  EXPECT_EQ(capped.status().code(), absl::StatusCode::kInvalidArgument) << capped.status();
  EXPECT_NE(capped.status().message().find("memory budget of 1024"), std::string::npos)
      << capped.status();
  options.max_memory_bytes = 1 << 20;
  EXPECT_TRUE(Model::LoadOnnx(m.SerializeAsString(), options).ok());
}

}  // namespace
}  // namespace loopserve::engine
