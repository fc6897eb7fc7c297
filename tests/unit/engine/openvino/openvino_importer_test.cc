// Validation of untrusted OpenVINO IR: every malformed model is rejected with the right code and a
// message naming the layer's id, name and type; truncated files never crash. The runtime
// behaviour of valid models is covered by the generated cases (make_ov_models.py).

#include "engine/import/openvino_importer.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "engine/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loopserve::engine {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// y = x + c, c = [1, 2] from the .bin.
constexpr char kAdd[] = R"(<?xml version="1.0"?>
<net name="add" version="11"><layers>
<layer id="0" name="x" type="Parameter" version="opset1"><data shape="2" element_type="f32"/>
  <output><port id="0" precision="FP32" names="x"><dim>2</dim></port></output></layer>
<layer id="1" name="c" type="Const" version="opset1"><data element_type="f32" shape="2" offset="OFFSET" size="8"/>
  <output><port id="0" precision="FP32"><dim>2</dim></port></output></layer>
<layer id="2" name="sum" type="ADD_TYPE" version="opset1">
  <input><port id="0" precision="FP32"><dim>2</dim></port><port id="1" precision="FP32"><dim>2</dim></port></input>
  <output><port id="2" precision="FP32" names="y"><dim>2</dim></port></output></layer>
<layer id="3" name="out" type="Result" version="opset1"><input><port id="0" precision="FP32"><dim>2</dim></port></input></layer>
</layers><edges>
<edge from-layer="0" from-port="0" to-layer="2" to-port="0"/>
<edge from-layer="1" from-port="0" to-layer="2" to-port="TO_PORT"/>
<edge from-layer="2" from-port="2" to-layer="3" to-port="0"/>
</edges></net>)";

// A Loop counting to `trip` with a carried f32 [1] accumulator (acc += 1).
constexpr char kLoop[] = R"(<?xml version="1.0"?>
<net name="loop" version="11"><layers>
<layer id="0" name="trip" type="Parameter" version="opset1"><data shape="" element_type="i64"/>
  <output><port id="0" precision="I64" names="trip"/></output></layer>
<layer id="1" name="acc0" type="Parameter" version="opset1"><data shape="1" element_type="f32"/>
  <output><port id="0" precision="FP32" names="acc0"><dim>1</dim></port></output></layer>
<layer id="2" name="loop" type="Loop" version="opset5">
  <input><port id="0" precision="I64"/><port id="1" precision="BOOL"/><port id="2" precision="FP32"><dim>1</dim></port></input>
  <output><port id="3" precision="FP32" names="acc"><dim>1</dim></port></output>
  <port_map>
    <input external_port_id="2" internal_layer_id="INTERNAL"/>
    <output external_port_id="3" internal_layer_id="3"/>
    <output external_port_id="-1" internal_layer_id="4" purpose="execution_condition"/>
  </port_map>
  <back_edges><edge from-layer="BACK_FROM" to-layer="BACK_TO"/></back_edges>
  <body><layers>
    <layer id="0" name="b_acc" type="Parameter" version="opset1"><data shape="1" element_type="f32"/>
      <output><port id="0" precision="FP32"><dim>1</dim></port></output></layer>
    <layer id="1" name="one" type="Const" version="opset1"><data element_type="f32" shape="1" offset="0" size="4"/>
      <output><port id="0" precision="FP32"><dim>1</dim></port></output></layer>
    <layer id="2" name="inc" type="Add" version="opset1">
      <input><port id="0" precision="FP32"><dim>1</dim></port><port id="1" precision="FP32"><dim>1</dim></port></input>
      <output><port id="2" precision="FP32"><dim>1</dim></port></output></layer>
    <layer id="3" name="r_acc" type="Result" version="opset1"><input><port id="0" precision="FP32"><dim>1</dim></port></input></layer>
    <layer id="5" name="true" type="Const" version="opset1"><data element_type="boolean" shape="" offset="12" size="1"/>
      <output><port id="0" precision="BOOL"/></output></layer>
    <layer id="4" name="r_cond" type="Result" version="opset1"><input><port id="0" precision="BOOL"/></input></layer>
  </layers><edges>
    <edge from-layer="0" from-port="0" to-layer="2" to-port="0"/>
    <edge from-layer="1" from-port="0" to-layer="2" to-port="1"/>
    <edge from-layer="2" from-port="2" to-layer="3" to-port="0"/>
    <edge from-layer="5" from-port="0" to-layer="4" to-port="0"/>
  </edges></body></layer>
<layer id="3" name="c_true" type="Const" version="opset1"><data element_type="boolean" shape="" offset="12" size="1"/>
  <output><port id="0" precision="BOOL"/></output></layer>
<layer id="4" name="out" type="Result" version="opset1"><input><port id="0" precision="FP32"><dim>1</dim></port></input></layer>
</layers><edges>
<edge from-layer="0" from-port="0" to-layer="2" to-port="0"/>
<edge from-layer="3" from-port="0" to-layer="2" to-port="1"/>
<edge from-layer="1" from-port="0" to-layer="2" to-port="2"/>
<edge from-layer="2" from-port="3" to-layer="4" to-port="0"/>
</edges></net>)";

std::string Weights() {
  // [0, 4): 1.0f; [4, 12): {1.0f, 2.0f}; [12, 13): true.
  const float v[3] = {1.0f, 1.0f, 2.0f};
  std::string bin(13, '\0');
  std::memcpy(&bin[0], v, sizeof(v));
  bin[12] = 1;
  return bin;
}

std::string AddModel(const std::string& offset = "4", const std::string& type = "Add",
                     const std::string& to_port = "1") {
  return absl::StrReplaceAll(kAdd, {{"OFFSET", offset}, {"ADD_TYPE", type}, {"TO_PORT", to_port}});
}

std::string LoopModel(const std::string& internal = "0", const std::string& back_from = "3",
                      const std::string& back_to = "0") {
  return absl::StrReplaceAll(
      kLoop, {{"INTERNAL", internal}, {"BACK_FROM", back_from}, {"BACK_TO", back_to}});
}

absl::StatusOr<std::vector<Value>> RunOne(const std::string& xml, std::vector<Tensor> inputs) {
  auto graph = ImportOpenVinoModel(xml, Weights());
  if (!graph.ok()) return graph.status();
  auto model = Model::FromGraph(*graph);
  if (!model.ok()) return model.status();
  std::vector<Value> values(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) values[i].mutable_tensor() = std::move(inputs[i]);
  return (*model)->Run(std::move(values), RunOptions());
}

TEST(OpenVinoImporterTest, ValidModelsImportAndRun) {
  Tensor x(DataType::kFloat32, Shape{2});
  x.mutable_data<float>()[0] = 10;
  x.mutable_data<float>()[1] = 20;
  std::vector<Tensor> in;
  in.push_back(std::move(x));
  auto out = RunOne(AddModel(), std::move(in));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].tensor().data<float>()[0], 11);
  EXPECT_EQ((*out)[0].tensor().data<float>()[1], 22);

  Tensor trip(DataType::kInt64, Shape{});
  trip.mutable_data<int64_t>()[0] = 4;
  Tensor acc(DataType::kFloat32, Shape{1});
  acc.mutable_data<float>()[0] = 0.5f;
  std::vector<Tensor> loop_in;
  loop_in.push_back(std::move(trip));
  loop_in.push_back(std::move(acc));
  auto loop_out = RunOne(LoopModel(), std::move(loop_in));
  ASSERT_TRUE(loop_out.ok()) << loop_out.status();
  EXPECT_EQ((*loop_out)[0].tensor().data<float>()[0], 4.5f);
}

TEST(OpenVinoImporterTest, NamesComeFromPortNames) {
  auto graph = ImportOpenVinoModel(AddModel(), Weights());
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto model = Model::FromGraph(*graph);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->inputs()[0].name, "x");
  EXPECT_EQ((*model)->outputs()[0].name, "y");
}

void ExpectError(const absl::Status& status, absl::StatusCode code,
                 const std::vector<std::string>& parts) {
  EXPECT_EQ(status.code(), code) << status;
  for (const std::string& part : parts) EXPECT_THAT(std::string(status.message()), HasSubstr(part));
}

TEST(OpenVinoImporterTest, RejectsNonXmlAndUnsupportedVersions) {
  ExpectError(ImportOpenVinoModel("<net version=\"11\"><layers>", "").status(),
              absl::StatusCode::kInvalidArgument, {"not valid XML"});
  ExpectError(ImportOpenVinoModel("<model/>", "").status(), absl::StatusCode::kInvalidArgument,
              {"<net>"});
  ExpectError(ImportOpenVinoModel(
                  absl::StrReplaceAll(AddModel(), {{"version=\"11\"", "version=\"7\""}}), Weights())
                  .status(),
              absl::StatusCode::kUnimplemented, {"version 7"});
}

TEST(OpenVinoImporterTest, TruncatedFilesFailCleanly) {
  for (const std::string& xml : {AddModel(), LoopModel()}) {
    for (size_t n = 0; n < xml.size(); n += 3) {
      auto graph = ImportOpenVinoModel(xml.substr(0, n), Weights());
      EXPECT_FALSE(graph.ok()) << "prefix of " << n << " bytes imported";
    }
    // Truncated weights: the constants no longer fit.
    for (size_t n = 0; n < 13; ++n) {
      auto graph = ImportOpenVinoModel(xml, Weights().substr(0, n));
      if (graph.ok()) continue;
      EXPECT_THAT(std::string(graph.status().message()), HasSubstr("outside the .bin"));
    }
  }
}

TEST(OpenVinoImporterTest, ConstRangesAreCheckedAgainstTheBin) {
  ExpectError(ImportOpenVinoModel(AddModel("8"), Weights()).status(),
              absl::StatusCode::kInvalidArgument, {"layer 1 'c' (Const)", "outside the .bin"});
  ExpectError(ImportOpenVinoModel(AddModel("18446744073709551615"), Weights()).status(),
              absl::StatusCode::kInvalidArgument, {"layer 1 'c' (Const)", "offset"});
  ExpectError(ImportOpenVinoModel(AddModel("-4"), Weights()).status(),
              absl::StatusCode::kInvalidArgument, {"layer 1 'c' (Const)", "negative"});
  ExpectError(ImportOpenVinoModel(absl::StrReplaceAll(AddModel(), {{"size=\"8\"", "size=\"12\""}}),
                                  Weights())
                  .status(),
              absl::StatusCode::kInvalidArgument, {"layer 1 'c' (Const)", "size is 12 bytes"});
  ExpectError(ImportOpenVinoModel(
                  absl::StrReplaceAll(AddModel(), {{"shape=\"2\" offset",
                                                    "shape=\"4611686018427387904,4\" offset"}}),
                  Weights())
                  .status(),
              absl::StatusCode::kInvalidArgument, {"layer 1 'c' (Const)"});
}

TEST(OpenVinoImporterTest, IdsAndEdgesAreChecked) {
  ExpectError(
      ImportOpenVinoModel(absl::StrReplaceAll(AddModel(), {{"<layer id=\"2\"", "<layer id=\"1\""}}),
                          Weights())
          .status(),
      absl::StatusCode::kInvalidArgument,
      {"layer 1 'sum' (Add)", "also used by layer 1 'c' (Const)"});
  ExpectError(ImportOpenVinoModel(AddModel("4", "Add", "7"), Weights()).status(),
              absl::StatusCode::kInvalidArgument, {"layer 2 'sum' (Add)", "no input port 7"});
  ExpectError(ImportOpenVinoModel(AddModel("4", "Add", "0"), Weights()).status(),
              absl::StatusCode::kInvalidArgument, {"layer 2 'sum' (Add)", "already fed"});
  ExpectError(
      ImportOpenVinoModel(absl::StrReplaceAll(AddModel(), {{"to-layer=\"3\"", "to-layer=\"9\""}}),
                          Weights())
          .status(),
      absl::StatusCode::kInvalidArgument, {"layer 9 does not exist"});
  ExpectError(
      ImportOpenVinoModel(
          absl::StrReplaceAll(AddModel(), {{"<layer id=\"2\"", "<layer id=\"x2\""}}), Weights())
          .status(),
      absl::StatusCode::kInvalidArgument, {"'sum' (Add)", "not an integer"});
}

TEST(OpenVinoImporterTest, PortCountsAndTypesAreChecked) {
  // An edge joining an FP32 output to an I64 input.
  std::string xml = AddModel();
  xml = absl::StrReplaceAll(
      xml, {{"<input><port id=\"0\" precision=\"FP32\"><dim>2</dim></port><port id=\"1\" "
             "precision=\"FP32\">",
             "<input><port id=\"0\" precision=\"FP32\"><dim>2</dim></port><port id=\"1\" "
             "precision=\"I64\">"}});
  ExpectError(ImportOpenVinoModel(xml, Weights()).status(), absl::StatusCode::kInvalidArgument,
              {"layer 2 'sum' (Add)", "precision"});
  // A Const whose element type disagrees with its port.
  ExpectError(ImportOpenVinoModel(
                  absl::StrReplaceAll(AddModel(), {{"element_type=\"f32\" shape=\"2\" offset",
                                                    "element_type=\"i32\" shape=\"2\" offset"}}),
                  Weights())
                  .status(),
              absl::StatusCode::kInvalidArgument, {"layer 1 'c' (Const)", "element_type"});
  // A binary op with one input port.
  std::string one_input = absl::StrReplaceAll(
      AddModel(), {{"<port id=\"1\" precision=\"FP32\"><dim>2</dim></port></input>", "</input>"},
                   {"<edge from-layer=\"1\" from-port=\"0\" to-layer=\"2\" to-port=\"1\"/>", ""}});
  ExpectError(ImportOpenVinoModel(one_input, Weights()).status(),
              absl::StatusCode::kInvalidArgument, {"layer 2 'sum' (Add)", "input ports"});
}

TEST(OpenVinoImporterTest, UnsupportedOpsAreNamed) {
  ExpectError(ImportOpenVinoModel(AddModel("4", "Einsum"), Weights()).status(),
              absl::StatusCode::kUnimplemented, {"layer 2 'sum' (Einsum)", "not supported"});
}

TEST(OpenVinoImporterTest, LoopPortMapIsChecked) {
  // Back edge into a Result.
  ExpectError(ImportOpenVinoModel(LoopModel("0", "3", "4"), Weights()).status(),
              absl::StatusCode::kInvalidArgument,
              {"layer 2 'loop' (Loop)", "layer 4 is not a Parameter of the body"});
  // Back edge from a Parameter.
  ExpectError(ImportOpenVinoModel(LoopModel("0", "0", "0"), Weights()).status(),
              absl::StatusCode::kInvalidArgument,
              {"layer 2 'loop' (Loop)", "layer 0 is not a Result of the body"});
  // internal_layer_id naming a non-Parameter and a missing layer.
  ExpectError(ImportOpenVinoModel(LoopModel("2"), Weights()).status(),
              absl::StatusCode::kInvalidArgument,
              {"layer 2 'loop' (Loop)", "layer 2 is not a Parameter of the body"});
  ExpectError(ImportOpenVinoModel(LoopModel("77"), Weights()).status(),
              absl::StatusCode::kInvalidArgument, {"layer 2 'loop' (Loop)", "77"});
  // An output port missing from the port map.
  std::string unmapped = absl::StrReplaceAll(
      LoopModel(), {{"<output external_port_id=\"3\" internal_layer_id=\"3\"/>", ""}});
  ExpectError(ImportOpenVinoModel(unmapped, Weights()).status(), absl::StatusCode::kInvalidArgument,
              {"layer 2 'loop' (Loop)", "output port 3 is not in the port map"});
  // A trip count of the wrong type.
  std::string bad_trip =
      absl::StrReplaceAll(LoopModel(), {{"<input><port id=\"0\" precision=\"I64\"/>",
                                         "<input><port id=\"0\" precision=\"FP32\"/>"}});
  EXPECT_FALSE(ImportOpenVinoModel(bad_trip, Weights()).ok());
  // Errors inside the body name the Loop and the body layer.
  std::string bad_body = absl::StrReplaceAll(
      LoopModel(), {{"name=\"inc\" type=\"Add\"", "name=\"inc\" type=\"Frobnicate\""}});
  ExpectError(ImportOpenVinoModel(bad_body, Weights()).status(), absl::StatusCode::kUnimplemented,
              {"layer 2 'loop' (Loop)", "layer 2 'inc' (Frobnicate)"});
}

TEST(OpenVinoImporterTest, LoadsGeneratedModelsFromDisk) {
  auto model =
      Model::Load(std::string(LOOPSERVE_OV_CASES_DIR) + "/trip_count_i64_scalar/model.xml");
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ((*model)->inputs().size(), 3u);
  EXPECT_EQ((*model)->inputs()[0].name, "trip");
  EXPECT_EQ((*model)->inputs()[2].name, "x");
  EXPECT_EQ((*model)->loop_names().size(), 1u);
  auto missing = Model::Load(std::string(LOOPSERVE_OV_CASES_DIR) + "/nowhere/model.xml");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

// A TensorIterator whose body is one cell runs as the recurrent layer (transform
// lower_cell_loops): no Loop is left. Its outputs are checked against numpy by the
// openvino_loop_cases test (ti_*_cell* cases); a Loop-5 with a trip count keeps its Loop.
TEST(OpenVinoImporterTest, TensorIteratorOverOneCellRunsAsTheLayer) {
  LoadOptions options;
  options.dump_plan = true;
  for (const char* name : {"ti_lstm_cell4", "ti_lstm_cell4_reverse_clip",
                           "ti_gru_cell3_linear_before_reset_reverse", "ti_rnn_cell3"}) {
    auto model =
        Model::Load(absl::StrCat(LOOPSERVE_OV_CASES_DIR, "/", name, "/model.xml"), options);
    ASSERT_TRUE(model.ok()) << name << ": " << model.status();
    EXPECT_THAT((*model)->plan_dump(), HasSubstr("lower_cell_loops")) << name;
    EXPECT_TRUE((*model)->loop_names().empty()) << name;
  }
  auto loop5 =
      Model::Load(std::string(LOOPSERVE_OV_CASES_DIR) + "/loop5_lstm_cell4/model.xml", options);
  ASSERT_TRUE(loop5.ok()) << loop5.status();
  EXPECT_THAT((*loop5)->plan_dump(), Not(HasSubstr("lower_cell_loops")));
  EXPECT_EQ((*loop5)->loop_names().size(), 1u);
}

}  // namespace
}  // namespace loopserve::engine
