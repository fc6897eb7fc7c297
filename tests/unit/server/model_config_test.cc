// Triton's config.pbtxt: parsing (Triton files load unchanged; ignored, rejected and unknown
// fields), completion and validation against a model, the request-side checks and reshapes
// (ModelIo), and OpenVINO Model Server's config.json.

#include "server/repository/model_config.h"

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/repository/ovms_config.h"
#include "tests/unit/server/test_util.h"

namespace loopserve::server {
namespace {

using engine::DataType;
using engine::ValueKind;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;
using testing::TempDir;

// A model whose outputs are its inputs (same names): enough for everything a config checks.
using Io = testing::TensorDecl;

std::shared_ptr<const engine::Model> MakeModel(const std::vector<Io>& tensors) {
  return testing::PassthroughModelOf(tensors);
}

// One input and one output: out = Identity(in).
std::shared_ptr<const engine::Model> MakeIdentityModel(const Io& in, const Io& out) {
  auto graph = std::make_shared<engine::Graph>();
  auto add = [&](const Io& io) {
    engine::ValueType type;
    type.kind = io.kind;
    type.dtype = io.dtype;
    type.dims = io.dims;
    return graph->AddValue(io.name, type);
  };
  const engine::ValueId in_id = add(in);
  const engine::ValueId out_id = add(out);
  engine::Node node;
  node.name = "identity";
  node.op_type = "Identity";
  node.opset = 13;
  node.inputs = {in_id};
  node.outputs = {out_id};
  graph->nodes.push_back(std::move(node));
  graph->inputs = {in_id};
  graph->outputs = {out_id};
  auto model = engine::Model::FromGraph(graph);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

// x float32 [-1,2], y int64 [3], b bool [] (tests/unit/server/test_util.h).
std::shared_ptr<const engine::Model> Passthrough() { return testing::PassthroughModel(); }

absl::StatusOr<inference::ModelConfig> Complete(const std::string& text, const engine::Model& model,
                                                CompletionOptions options = {},
                                                const std::string& file = "/r/m/1/model.onnx") {
  absl::StatusOr<ParsedModelConfig> parsed = ParseModelConfig(text, "m");
  if (!parsed.ok()) return parsed.status();
  return CompleteModelConfig(*parsed, model, file, options);
}

std::string Message(const absl::Status& status) { return std::string(status.message()); }

// ---- Parsing ----

// The example config of Triton's model-configuration documentation, loopserve's parameters added.
constexpr char kTritonConfig[] = R"pb(
  name: "m"
  platform: "onnxruntime_onnx"
  max_batch_size: 8 input
  [ {
    name: "x"
    data_type: TYPE_FP32
    format: FORMAT_NCHW
    dims: [ 4 ]
  }] output
  [ {
    name: "y"
    data_type: TYPE_FP32
    dims: [ 4 ]
    label_filename: "labels.txt"
  }] instance_group
  [ { count: 2 kind: KIND_CPU }
    , {
      count: 1
      kind: KIND_GPU
      gpus: [ 0 ]
    }]
  version_policy: { latest: { num_versions: 2 } }
  dynamic_batching {
    preferred_batch_size: [ 4, 8 ]
    max_queue_delay_microseconds: 100
  }
  optimization {
    execution_accelerators {
      gpu_execution_accelerator:
      [ {
        name: "tensorrt"
        parameters { key: "precision_mode" value: "FP16" }
      }]
    }
  }
  parameters {
    key: "max_loop_iterations"
    value: { string_value: "5000" }
  }
  parameters {
    key: "intra_op_thread_count"
    value: { string_value: "1" }
  } model_warmup
  [ {
    name: "zeros"
    batch_size: 2
    inputs {
      key: "x"
      value: {
        data_type: TYPE_FP32
        dims: [ 4 ]
        zero_data: true
      }
    }
    count: 3
  }]
)pb";

TEST(ParseModelConfigTest, ATritonConfigParsesUnchanged) {
  absl::StatusOr<ParsedModelConfig> parsed = ParseModelConfig(kTritonConfig, "m");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const inference::ModelConfig& config = parsed->config;
  EXPECT_EQ(config.platform(), "onnxruntime_onnx");
  EXPECT_EQ(config.max_batch_size(), 8);
  ASSERT_THAT(config.input(), SizeIs(1));
  EXPECT_EQ(config.input(0).data_type(), inference::TYPE_FP32);
  EXPECT_THAT(config.input(0).dims(), ElementsAre(4));
  EXPECT_EQ(config.instance_group(0).count(), 2);
  EXPECT_EQ(config.version_policy().latest().num_versions(), 2u);
  EXPECT_THAT(config.dynamic_batching().preferred_batch_size(), ElementsAre(4, 8));
  EXPECT_EQ(config.model_warmup(0).count(), 3u);
  EXPECT_EQ(ParameterOr(config, kMaxLoopIterationsParameter, 7), 5000);
  EXPECT_EQ(ParameterOr(config, kMaxOutputBytesParameter, 7), 7);
  // What means nothing here is reported, each once.
  const std::string ignored = absl::StrJoin(parsed->ignored, "\n");
  EXPECT_THAT(ignored, HasSubstr("optimization ignored"));
  EXPECT_THAT(ignored, HasSubstr("input 'x'.format ignored"));
  EXPECT_THAT(ignored, HasSubstr("label_filename ignored"));
  EXPECT_THAT(ignored, HasSubstr("instance_group[1]: KIND_GPU ignored"));
  EXPECT_THAT(ignored, HasSubstr("parameters 'intra_op_thread_count' ignored"));
  EXPECT_THAT(parsed->ignored, SizeIs(5));
}

TEST(ParseModelConfigTest, TheCompleteConfigDropsWhatIsIgnored) {
  std::shared_ptr<const engine::Model> model =
      MakeIdentityModel({"x", DataType::kFloat32, std::vector<int64_t>{-1, 4}},
                        {"y", DataType::kFloat32, std::vector<int64_t>{-1, 4}});
  absl::StatusOr<inference::ModelConfig> config = Complete(kTritonConfig, *model);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->has_optimization());
  EXPECT_EQ(config->input(0).format(), inference::ModelInput::FORMAT_NONE);
  EXPECT_THAT(config->output(0).label_filename(), IsEmpty());
  ASSERT_THAT(config->instance_group(), SizeIs(1));  // the KIND_GPU group is gone
  EXPECT_EQ(config->instance_group(0).kind(), inference::ModelInstanceGroup::KIND_CPU);
  EXPECT_EQ(config->instance_group(0).count(), 2);
  // What applies stays: batching, warm-up, parameters.
  EXPECT_EQ(config->max_batch_size(), 8);
  EXPECT_THAT(config->dynamic_batching().preferred_batch_size(), ElementsAre(4, 8));
  EXPECT_THAT(config->model_warmup(), SizeIs(1));
  EXPECT_EQ(config->parameters().at("max_loop_iterations").string_value(), "5000");
  EXPECT_EQ(config->parameters().count("intra_op_thread_count"), 1u);
}

TEST(ParseModelConfigTest, BackendAndPlatformSpellings) {
  for (const char* ok :
       {"backend: \"onnxruntime\"", "platform: \"openvino\"", "backend: \"openvino\"",
        "platform: \"onnxruntime_onnx\" backend: "
        "\"onnxruntime\""}) {
    EXPECT_TRUE(ParseModelConfig(ok, "m").ok()) << ok;
  }
  absl::StatusOr<ParsedModelConfig> bad = ParseModelConfig("platform: \"tensorrt_plan\"", "m");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(bad.status()),
              AllOf(HasSubstr("model 'm': config.pbtxt: "), HasSubstr("platform 'tensorrt_plan'"),
                    HasSubstr("onnxruntime_onnx"), HasSubstr("openvino")));
  EXPECT_THAT(Message(ParseModelConfig("backend: \"pytorch\"", "m").status()),
              HasSubstr("backend 'pytorch'"));
  EXPECT_THAT(
      Message(ParseModelConfig("platform: \"openvino\" backend: \"onnxruntime\"", "m").status()),
      HasSubstr("name different engines"));
}

// A file that does not parse may be no config at all: its errors give the place and the message
// type but never the file's text (the unknown name is not repeated).
TEST(ParseModelConfigTest, UnknownFieldsAreErrorsNamingThePlaceNotTheText) {
  absl::StatusOr<ParsedModelConfig> parsed = ParseModelConfig("name: \"m\"\nbogus_field: 1", "m");
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      Message(parsed.status()),
      AllOf(HasSubstr("config.pbtxt: 2:"), HasSubstr("unknown field name in inference.ModelConfig"),
            Not(HasSubstr("bogus_field"))));
  // Also inside a message loopserve reads (a typo of `dims`).
  parsed = ParseModelConfig("input [ { name: \"x\" dim: [ 1 ] } ]", "m");
  EXPECT_THAT(
      Message(parsed.status()),
      AllOf(HasSubstr("unknown field name in inference.ModelInput"), Not(HasSubstr("dim'"))));
  // Syntax errors keep the parser's line:column.
  EXPECT_THAT(Message(ParseModelConfig("input [ { name: ", "m").status()),
              HasSubstr("config.pbtxt: 1:"));
  // An enum value Triton does not have.
  EXPECT_EQ(ParseModelConfig("instance_group [ { kind: KIND_TPU } ]", "m").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ParseModelConfigTest, LoopserveOldFieldsSayWhereTheyMoved) {
  absl::StatusOr<ParsedModelConfig> parsed = ParseModelConfig("max_loop_iterations: 5", "m");
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(parsed.status()),
              AllOf(HasSubstr("'max_loop_iterations' is no longer a top-level field"),
                    HasSubstr("parameters { key: \"max_loop_iterations\"")));
  EXPECT_THAT(Message(ParseModelConfig("instance_count: 2", "m").status()),
              HasSubstr("instance_group [ { count: N kind: KIND_CPU } ]"));
}

TEST(ParseModelConfigTest, TritonFeaturesLoopserveLacksAreUnimplemented) {
  for (const char* text :
       {"sequence_batching { iterative_sequence: true }",
        "platform: \"onnxruntime_onnx\" ensemble_scheduling { step [ { model_name: \"a\" } ] }",
        "model_operations { op_library_filename: \"libcustom.so\" }",
        "model_repository_agents { agents [ { name: \"checksum\" } ] }",
        "model_transaction_policy { decoupled: true }"}) {
    absl::StatusOr<ParsedModelConfig> parsed = ParseModelConfig(text, "m");
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kUnimplemented) << text;
  }
  EXPECT_TRUE(ParseModelConfig("model_transaction_policy { decoupled: false }", "m").ok());
}

// ---- sequence_batching (Triton's field names and rules) ----

// As Triton's sequence-batching documentation writes it (with fixed state dims).
constexpr char kTritonSequence[] = R"pb(
  max_batch_size: 2
  sequence_batching {
    max_sequence_idle_microseconds: 5000000
    oldest {
      max_candidate_sequences: 4
      preferred_batch_size: [ 2 ]
    } control_input
    [ {
      name: "START" control
      [ {
        kind: CONTROL_SEQUENCE_START
        fp32_false_true: [ 0, 1 ]
      }]
    }
      , {
        name: "CORRID" control
        [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 }]
      }] state
    [ {
      input_name: "in"
      output_name: "out"
      data_type: TYPE_FP32
      dims: [ 1 ]
      initial_state: {
        data_type: TYPE_FP32
        dims: [ 1 ]
        zero_data: true
        name: "z"
      }
    }]
  }
)pb";

TEST(ParseModelConfigTest, TritonSequenceBatchingParses) {
  absl::StatusOr<ParsedModelConfig> parsed = ParseModelConfig(kTritonSequence, "m");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(SequenceInputNames(parsed->config), ElementsAre("START", "CORRID", "in"));
  EXPECT_THAT(SequenceOutputNames(parsed->config), ElementsAre("out"));
  EXPECT_TRUE(ParseModelConfig("sequence_batching { }", "m").ok());
  EXPECT_THAT(parsed->ignored,
              ElementsAre(HasSubstr("sequence_batching.oldest.preferred_batch_size ignored")));
}

TEST(ParseModelConfigTest, SequenceBatchingMistakesNameTheField) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"sequence_batching { control_input [ { control [ { kind: CONTROL_SEQUENCE_START "
       "int32_false_true: [ 0, 1 ] } ] } ] }",
       "an input has no name"},
      {"sequence_batching { control_input [ { name: \"S\" } ] }",
       "control_input 'S': has 0 controls"},
      {"sequence_batching { control_input [ { name: \"S\" control [ { kind: "
       "CONTROL_SEQUENCE_START int32_false_true: [ 0 ] } ] } ] }",
       "CONTROL_SEQUENCE_START needs exactly one of int32_false_true"},
      {"sequence_batching { control_input [ { name: \"S\" control [ { kind: "
       "CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] fp32_false_true: [ 0, 1 ] } ] } ] }",
       "needs exactly one of"},
      {"sequence_batching { control_input [ { name: \"S\" control [ { kind: "
       "CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] data_type: TYPE_INT32 } ] } ] }",
       "not a data_type"},
      {"sequence_batching { control_input [ { name: \"C\" control [ { kind: "
       "CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 } ] } ] }",
       "CONTROL_SEQUENCE_CORRID data_type TYPE_FP32 is not one of"},
      {"sequence_batching { control_input [ { name: \"A\" control [ { kind: "
       "CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] }, { name: \"B\" control [ { kind: "
       "CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] } ] }",
       "control_input 'B': CONTROL_SEQUENCE_END is already another input's"},
      {"sequence_batching { state [ { input_name: \"i\" data_type: TYPE_FP32 dims: [ 1 ] } ] }",
       "a state needs input_name and output_name"},
      {"sequence_batching { state [ { input_name: \"i\" output_name: \"o\" dims: [ 1 ] } ] }",
       "state 'i': data_type TYPE_INVALID"},
      {"max_batch_size: 2 sequence_batching { state [ { input_name: \"i\" output_name: \"o\" "
       "data_type: TYPE_FP32 dims: [ -1 ] } ] }",
       "state 'i': dims [-1] (a state's dims are fixed, each >= 1"},
      {"sequence_batching { state [ { input_name: \"i\" output_name: \"o\" data_type: "
       "TYPE_FP32 dims: [ 2 ] initial_state { data_type: TYPE_FP32 dims: [ 3 ] zero_data: true "
       "} } ] }",
       "initial_state has data_type TYPE_FP32 dims [3], the state TYPE_FP32 [2]"},
      {"sequence_batching { state [ { input_name: \"i\" output_name: \"o\" data_type: "
       "TYPE_FP32 dims: [ 2 ] initial_state { data_type: TYPE_FP32 dims: [ 2 ] data_file: "
       "\"../secret\" } } ] }",
       "data_file '../secret' must be a file name in the model's initial_state/ folder"},
      {"sequence_batching { state [ { input_name: \"i\" output_name: \"o\" data_type: "
       "TYPE_FP32 dims: [ 2 ] initial_state { data_type: TYPE_FP32 dims: [ 2 ] } } ] }",
       "initial_state needs zero_data or data_file"},
      {"max_batch_size: 4 sequence_batching { oldest { preferred_batch_size: [ 5 ] } }",
       "sequence_batching.oldest.preferred_batch_size 5 is outside [1, 4]"},
      // The batcher allocates its slots and their states at load: no unbounded allocation.
      {"sequence_batching { oldest { max_candidate_sequences: 2000000000 } }",
       "sequence_batching: 2000000000 sequence slots"},
      {"max_batch_size: 2000000000 instance_group [ { count: 2000000000 } ] "
       "sequence_batching { }",
       "sequence slots (oldest.max_candidate_sequences, or max_batch_size x instance_group count)"},
      {"sequence_batching { state [ { input_name: \"i\" output_name: \"o\" data_type: "
       "TYPE_FP32 dims: [ 2000000000, 2000000000, 2000000000 ] } ] }",
       "state 'i': dims [2000000000,2000000000,2000000000] is too large"},
      // 2^20 slots x 2^15 FP32 elements = 2^37 bytes, past 16 GiB.
      {"sequence_batching { oldest { max_candidate_sequences: 1048576 } state [ { input_name: "
       "\"i\" output_name: \"o\" data_type: TYPE_FP32 dims: [ 32768 ] } ] }",
       "state 'i': the states of 1048576 sequence slots would hold more than 17179869184 bytes"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ParsedModelConfig> parsed = ParseModelConfig(c.text, "m");
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(Message(parsed.status()), HasSubstr(c.message)) << c.text;
  }
}

// INPUT int32 [-1,1], START int32 [-1,1], S fp32 [-1,2] (outputs: the same).
std::shared_ptr<const engine::Model> SequenceModel() {
  return MakeModel({{"INPUT", DataType::kInt32, std::vector<int64_t>{-1, 1}},
                    {"START", DataType::kInt32, std::vector<int64_t>{-1, 1}},
                    {"S", DataType::kFloat32, std::vector<int64_t>{-1, 2}}});
}

constexpr char kSequenceConfig[] = R"pb(
  max_batch_size: 4
  sequence_batching { control_input
                      [ {
                        name: "START" control
                        [ {
                          kind: CONTROL_SEQUENCE_START
                          int32_false_true: [ 0, 1 ]
                        }]
                      }] state
                      [ {
                        input_name: "S"
                        output_name: "S"
                        data_type: TYPE_FP32
                        dims: [ 2 ]
                      }] }
)pb";

TEST(CompleteModelConfigTest, SequenceTensorsAreTheServersNotTheClients) {
  absl::StatusOr<inference::ModelConfig> config = Complete(kSequenceConfig, *SequenceModel());
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_THAT(config->input(), SizeIs(1));
  EXPECT_EQ(config->input(0).name(), "INPUT");
  std::vector<std::string> outputs;
  for (const auto& output : config->output()) outputs.push_back(output.name());
  EXPECT_THAT(outputs, ElementsAre("INPUT", "START"));
}

TEST(CompleteModelConfigTest, SequenceMismatchesNameTheTensor) {
  auto replace = [](std::string text, const std::string& from, const std::string& to) {
    text.replace(text.find(from), from.size(), to);
    return text;
  };
  const std::string base = kSequenceConfig;
  const std::pair<std::string, const char*> cases[] = {
      {replace(base, "int32_false_true", "fp32_false_true"),
       "control_input 'START': data_type TYPE_FP32 does not match the model's TYPE_INT32"},
      {replace(base, "name: \"START\"", "name: \"GO\""),
       "control_input 'GO': the model has no such input (it has INPUT, START, S)"},
      {replace(base, "dims: [ 2 ]", "dims: [ 3 ]"), "state 'S' (model tensor 'S'): dims [3]"},
      {replace(base, "TYPE_FP32", "TYPE_INT32"),
       "state 'S' (model tensor 'S'): data_type TYPE_INT32 does not match the model's TYPE_FP32"},
      {replace(base, "output_name: \"S\"", "output_name: \"T\""), "the model has no output 'T'"},
      {base + "input [ { name: \"START\" data_type: TYPE_INT32 dims: [ 1 ] } ]",
       "input 'START': declared both here and in sequence_batching"},
  };
  for (const auto& [text, message] : cases) {
    absl::StatusOr<inference::ModelConfig> config = Complete(text, *SequenceModel());
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(Message(config.status()), HasSubstr(message)) << text;
  }
}

TEST(ParseModelConfigTest, BadValuesNameTheField) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"name: \"other\"", "name 'other' differs from the model's name 'm'"},
      {"instance_group [ { count: -1 kind: KIND_CPU } ]", "instance_group[0].count -1"},
      {"max_batch_size: -2", "max_batch_size -2"},
      {"parameters { key: \"unbatched_inputs\" value: { string_value: \"M\" } }",
       "parameters 'unbatched_inputs' needs max_batch_size > 0"},
      {"max_batch_size: 4 parameters { key: \"unbatched_inputs\" value: { string_value: "
       "\"M,,x\" } }",
       "parameters 'unbatched_inputs': an empty name"},
      {"max_batch_size: 4 parameters { key: \"output_batch_axes\" value: { string_value: "
       "\"h_seq\" } }",
       "parameters 'output_batch_axes': 'h_seq' is not NAME:AXIS"},
      {"max_batch_size: 4 parameters { key: \"output_batch_axes\" value: { string_value: "
       "\"h_seq:-1\" } }",
       "'h_seq:-1' is not NAME:AXIS"},
      {"input [ { name: \"x\" dims: [ -2 ] } ]", "input 'x': dims [-2]"},
      {"input [ { name: \"x\" }, { name: \"x\" } ]", "input 'x': declared twice"},
      {"output [ { name: \"y\" dims: [ 2 ] reshape { shape: [ 3 ] } } ]",
       "output 'y': reshape [3] cannot hold the elements of dims [2]"},
      {"input [ { name: \"x\" dims: [ 4 ] reshape { shape: [ -1, -1 ] } } ]",
       "reshape [-1,-1] may hold at most one -1"},
      {"input [ { name: \"x\" dims: [ -1 ] reshape { shape: [ 2, 2 ] } } ]",
       "reshape [2,2] cannot hold the elements of dims [-1]"},
      {"default_model_filename: \"../../etc/passwd\"", "default_model_filename '../../etc/passwd'"},
      {"platform: \"onnxruntime_onnx\" default_model_filename: \"net.xml\"",
       "net.xml' is an "
       "OpenVINO IR"},
      {"version_policy { specific { versions: [ 0 ] } }", "lists version 0"},
      {"dynamic_batching { }", "dynamic_batching needs max_batch_size > 0"},
      {"max_batch_size: 4 dynamic_batching { preferred_batch_size: [ 8 ] }",
       "preferred_batch_size 8 is outside [1, 4]"},
      {"max_batch_size: 4 dynamic_batching { priority_levels: 2 default_priority_level: 3 }",
       "default_priority_level 3 is outside [1, 2]"},
      {"parameters { key: \"max_loop_iterations\" value: { string_value: \"lots\" } }",
       "parameters 'max_loop_iterations': string_value 'lots' is not a non-negative integer"},
      {"parameters { key: \"max_output_bytes\" value: { string_value: \"-5\" } }",
       "parameters 'max_output_bytes'"},
      {"parameters { key: \"max_request_memory_bytes\" value: { string_value: \"1e9\" } }",
       "parameters 'max_request_memory_bytes'"},
      {"parameters { key: \"loop_threads\" value: { string_value: \"sometimes\" } }",
       "parameters 'loop_threads': string_value must be adaptive, intra_op or one, not "
       "'sometimes'"},
      {"parameters { key: \"precision\" value: { string_value: \"fp16\" } }",
       "parameters 'precision': string_value must be fp32 or bf16, not 'fp16'"},
      {"parameters { key: \"precision\" value: { string_value: \"BF16\" } }",
       "parameters 'precision': string_value must be fp32 or bf16, not 'BF16'"},
      {"model_warmup [ { batch_size: 1 } ]", "model_warmup[0]: no name"},
      {"model_warmup [ { name: \"w\" batch_size: 2 } ]", "batch_size 2 is above max_batch_size 0"},
      {"model_warmup [ { name: \"w\" inputs { key: \"x\" value: { data_type: TYPE_FP32 } } } ]",
       "model_warmup 'w': input 'x': no data (zero_data, random_data or input_data_file)"},
      {"model_warmup [ { name: \"w\" inputs { key: \"x\" value: { zero_data: true } } } ]",
       "model_warmup 'w': input 'x': no data_type"},
      {"model_warmup [ { name: \"w\" inputs { key: \"x\" value: { data_type: TYPE_FP32 dims: "
       "[ -1 ] zero_data: true } } } ]",
       "dims [-1] must be concrete"},
      {"model_warmup [ { name: \"w\" inputs { key: \"x\" value: { data_type: TYPE_FP32 "
       "input_data_file: \"../secret\" } } } ]",
       "input_data_file '../secret' must be a file name in the model's warmup/ folder"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ParsedModelConfig> parsed = ParseModelConfig(c.text, "m");
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(Message(parsed.status()), HasSubstr(c.message)) << c.text;
  }
}

TEST(ParseModelConfigTest, MissingFileMeansDefaults) {
  TempDir dir;
  absl::StatusOr<ParsedModelConfig> parsed = ReadModelConfig(dir.path(), "m");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->from_file);
  EXPECT_EQ(parsed->model_name, "m");
  dir.WriteFile("config.pbtxt", "max_batch_size: 2");
  parsed = ReadModelConfig(dir.path(), "m");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->from_file);
  EXPECT_EQ(parsed->config.max_batch_size(), 2);
}

// ---- Completion against the model ----

TEST(CompleteModelConfigTest, NoConfigIsCompletedFromTheModel) {
  CompletionOptions options;
  options.max_loop_iterations = 1000;
  options.default_instance_count = 3;
  absl::StatusOr<inference::ModelConfig> config = Complete("", *Passthrough(), options);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->name(), "m");
  EXPECT_EQ(config->platform(), "onnxruntime_onnx");
  EXPECT_EQ(config->backend(), "onnxruntime");
  EXPECT_EQ(config->default_model_filename(), "model.onnx");
  EXPECT_EQ(config->max_batch_size(), 0);
  EXPECT_EQ(config->version_policy().latest().num_versions(), 1u);
  ASSERT_THAT(config->input(), SizeIs(3));
  EXPECT_EQ(config->input(0).name(), "x");
  EXPECT_EQ(config->input(0).data_type(), inference::TYPE_FP32);
  EXPECT_THAT(config->input(0).dims(), ElementsAre(-1, 2));
  EXPECT_EQ(config->input(1).data_type(), inference::TYPE_INT64);
  EXPECT_THAT(config->input(1).dims(), ElementsAre(3));
  EXPECT_EQ(config->input(2).data_type(), inference::TYPE_BOOL);
  EXPECT_THAT(config->input(2).dims(), IsEmpty());
  ASSERT_THAT(config->output(), SizeIs(3));
  EXPECT_EQ(config->output(1).name(), "y");
  ASSERT_THAT(config->instance_group(), SizeIs(1));
  EXPECT_EQ(config->instance_group(0).kind(), inference::ModelInstanceGroup::KIND_CPU);
  EXPECT_EQ(config->instance_group(0).count(), 3);
  EXPECT_EQ(config->parameters().at("max_loop_iterations").string_value(), "1000");
  EXPECT_EQ(config->parameters().at("max_output_bytes").string_value(), "0");
  EXPECT_EQ(config->parameters().at("loop_threads").string_value(), "adaptive");
  EXPECT_EQ(config->parameters().at("precision").string_value(), "fp32");
  EXPECT_EQ(InstanceCount(*config), 3);

  absl::StatusOr<inference::ModelConfig> ir =
      Complete("", *Passthrough(), options, "/r/m/1/model.xml");
  ASSERT_TRUE(ir.ok()) << ir.status();
  EXPECT_EQ(ir->platform(), "openvino");
  EXPECT_EQ(ir->backend(), "openvino");
}

// The precision parameter overrides the server's --precision; the complete config shows the
// effective one either way.
TEST(CompleteModelConfigTest, PrecisionIsTheParameterElseTheFlag) {
  CompletionOptions options;
  options.precision = engine::LoadOptions::Precision::kBf16;
  absl::StatusOr<inference::ModelConfig> config = Complete("", *Passthrough(), options);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->parameters().at("precision").string_value(), "bf16");
  config = Complete("parameters { key: \"precision\" value: { string_value: \" fp32 \" } }",
                    *Passthrough(), options);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->parameters().at("precision").string_value(), "fp32");
  EXPECT_EQ(PrecisionOr(*config, engine::LoadOptions::Precision::kBf16),
            engine::LoadOptions::Precision::kFp32);
  options.precision = engine::LoadOptions::Precision::kFp32;
  config = Complete("parameters { key: \"precision\" value: { string_value: \"bf16\" } }",
                    *Passthrough(), options);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->parameters().at("precision").string_value(), "bf16");
  // Not among the ignored settings: loopserve reads it.
  absl::StatusOr<ParsedModelConfig> parsed =
      ParseModelConfig("parameters { key: \"precision\" value: { string_value: \"bf16\" } }", "m");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(parsed->ignored, IsEmpty());
}

TEST(CompleteModelConfigTest, PartialConfigKeepsWhatItDeclaresAndAppendsTheRest) {
  absl::StatusOr<inference::ModelConfig> config = Complete(
      "input [ { name: \"b\" data_type: TYPE_BOOL dims: [ ] } ]\n"
      "instance_group [ { count: 2 kind: KIND_CPU }, { count: 4 kind: KIND_GPU } ]\n"
      "parameters { key: \"max_loop_iterations\" value: { string_value: \"77\" } }",
      *Passthrough());
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_THAT(config->input(), SizeIs(3));
  EXPECT_EQ(config->input(0).name(), "b");
  EXPECT_EQ(config->input(1).name(), "x");
  EXPECT_EQ(config->input(2).name(), "y");
  ASSERT_THAT(config->instance_group(), SizeIs(1));  // the GPU group is dropped
  EXPECT_EQ(config->instance_group(0).count(), 2);
  EXPECT_EQ(config->parameters().at("max_loop_iterations").string_value(), "77");
  // A declared input with the data_type left out takes the model's.
  config = Complete("input [ { name: \"y\" dims: [ 3 ] } ]", *Passthrough());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->input(0).data_type(), inference::TYPE_INT64);
}

TEST(CompleteModelConfigTest, MismatchesNameTheTensorTheFieldAndBothValues) {
  struct Case {
    const char* text;
    std::vector<const char*> message;
  };
  const Case cases[] = {
      {"input [ { name: \"y\" data_type: TYPE_INT64 dims: [ 4 ] } ]",
       {"input 'y'", "dims [4]", "the model's [3]", "dim 0: 4 vs 3"}},
      {"input [ { name: \"y\" data_type: TYPE_INT64 dims: [ -1 ] } ]",
       {"input 'y'", "dims [-1]", "[3]"}},
      {"input [ { name: \"x\" data_type: TYPE_FP32 dims: [ 2 ] } ]",
       {"input 'x'", "dims [2] have rank 1", "the model's [-1,2] rank 2"}},
      {"input [ { name: \"x\" data_type: TYPE_INT32 dims: [ -1, 2 ] } ]",
       {"input 'x'", "data_type TYPE_INT32", "the model's TYPE_FP32"}},
      {"output [ { name: \"y\" data_type: TYPE_FP64 dims: [ 3 ] } ]",
       {"output 'y'", "data_type TYPE_FP64", "TYPE_INT64"}},
      {"input [ { name: \"z\" data_type: TYPE_FP32 dims: [ 1 ] } ]",
       {"input 'z': the model has no such input (it has x, y, b)"}},
      {"output [ { name: \"z\" data_type: TYPE_FP32 dims: [ 1 ] } ]",
       {"output 'z': the model has no such output"}},
      {"input [ { name: \"y\" data_type: TYPE_INT64 dims: [ 3 ] optional: true } ]",
       {"input 'y': optional: true, but the model requires this input"}},
      {"max_batch_size: 4",
       {"max_batch_size > 0 needs a variable batch dim first", "input 'y'", "[3]"}},
      {"input [ { name: \"x\" data_type: TYPE_FP32 dims: [ 9 ] reshape { shape: [ 3, 3 ] } } ]",
       {"input 'x'", "reshape [3,3]", "the model's [-1,2]", "dim 1: 3 vs 2"}},
      {"model_warmup [ { name: \"w\" inputs { key: \"q\" value: { data_type: TYPE_FP32 "
       "zero_data: true } } } ]",
       {"model_warmup 'w': input 'q': the model has no such input"}},
      {"model_warmup [ { name: \"w\" inputs [ { key: \"x\" value: { data_type: TYPE_FP64 dims: "
       "[ 1, 2 ] zero_data: true } }, { key: \"y\" value: { data_type: TYPE_INT64 dims: [ 3 ] "
       "zero_data: true } }, { key: \"b\" value: { data_type: TYPE_BOOL zero_data: true } } ] } ]",
       {"model_warmup 'w': input 'x': data_type TYPE_FP64 differs from the input's TYPE_FP32"}},
      {"model_warmup [ { name: \"w\" inputs [ { key: \"x\" value: { data_type: TYPE_FP32 dims: "
       "[ 1, 3 ] zero_data: true } }, { key: \"y\" value: { data_type: TYPE_INT64 dims: [ 3 ] "
       "zero_data: true } }, { key: \"b\" value: { data_type: TYPE_BOOL zero_data: true } } ] } ]",
       {"model_warmup 'w': input 'x': dims [1,3] do not fit the input's dims [-1,2]"}},
      {"model_warmup [ { name: \"w\" inputs [ { key: \"x\" value: { data_type: TYPE_FP32 dims: "
       "[ 1, 2 ] zero_data: true } } ] } ]",
       {"model_warmup 'w': input 'y' missing"}},
  };
  for (const Case& c : cases) {
    absl::StatusOr<inference::ModelConfig> config = Complete(c.text, *Passthrough());
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    for (const char* part : c.message) {
      EXPECT_THAT(Message(config.status()), HasSubstr(part)) << c.text;
    }
    EXPECT_THAT(Message(config.status()), HasSubstr("config.pbtxt: ")) << c.text;
  }
  // x is FP32 in the model: a TYPE_STRING declaration is a mismatch like any other.
  absl::StatusOr<inference::ModelConfig> strings =
      Complete("input [ { name: \"x\" data_type: TYPE_STRING dims: [ -1, 2 ] } ]", *Passthrough());
  EXPECT_EQ(strings.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      Message(Complete("platform: \"onnxruntime_onnx\"", *Passthrough(), {}, "/r/m/1/model.xml")
                  .status()),
      HasSubstr("cannot load the OpenVINO IR 'model.xml'"));
}

TEST(CompleteModelConfigTest, WithoutAutoCompleteEverythingMustBeDeclared) {
  CompletionOptions strict;
  strict.auto_complete = false;
  ParsedModelConfig absent;
  absent.model_name = "m";
  EXPECT_THAT(
      Message(CompleteModelConfig(absent, *Passthrough(), "/m/1/model.onnx", strict).status()),
      HasSubstr("auto-complete is disabled"));
  EXPECT_THAT(Message(Complete("max_batch_size: 0", *Passthrough(), strict).status()),
              HasSubstr("no platform or backend"));
  EXPECT_THAT(
      Message(Complete("backend: \"onnxruntime\" input [ { name: \"x\" data_type: TYPE_FP32 dims: "
                       "[ -1, 2 ] } ]",
                       *Passthrough(), strict)
                  .status()),
      HasSubstr("input 'y': not declared"));
  const std::string full =
      "backend: \"onnxruntime\"\n"
      "input [ { name: \"x\" data_type: TYPE_FP32 dims: [ -1, 2 ] },"
      "  { name: \"y\" data_type: TYPE_INT64 dims: [ 3 ] },"
      "  { name: \"b\" data_type: TYPE_BOOL dims: [ ] } ]\n"
      "output [ { name: \"x\" data_type: TYPE_FP32 dims: [ -1, 2 ] },"
      "  { name: \"y\" data_type: TYPE_INT64 dims: [ 3 ] },"
      "  { name: \"b\" data_type: TYPE_BOOL dims: [ ] } ]";
  absl::StatusOr<inference::ModelConfig> config = Complete(full, *Passthrough(), strict);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->platform(), "onnxruntime_onnx");
}

// ---- Requests against the config ----

engine::Value FloatTensor(std::vector<int64_t> dims) {
  engine::Tensor tensor(DataType::kFloat32, engine::Shape(absl::MakeConstSpan(dims)));
  for (int64_t i = 0; i < tensor.NumElements(); ++i) tensor.mutable_data<float>()[i] = i;
  return engine::Value(std::move(tensor));
}

TEST(ModelIoTest, BatchDimsAndNarrowedDims) {
  std::shared_ptr<const engine::Model> model =
      MakeModel({{"seq", DataType::kFloat32, std::vector<int64_t>{-1, -1, 4}},
                 {"len", DataType::kInt64, std::vector<int64_t>{-1}}});
  absl::StatusOr<inference::ModelConfig> config = Complete(
      "max_batch_size: 8\ninput [ { name: \"seq\" data_type: TYPE_FP32 dims: [ 3, 4 ] } ]", *model);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(config->input(1).dims(), IsEmpty());  // len: the batch dim only
  const ModelIo io = ModelIo::Build(*config, *model);
  ASSERT_THAT(io.inputs(), SizeIs(2));
  EXPECT_EQ(io.inputs()[0].dims, (std::vector<int64_t>{-1, 3, 4}));
  EXPECT_EQ(io.inputs()[1].dims, (std::vector<int64_t>{-1}));
  EXPECT_EQ(io.max_batch_size(), 8);

  auto request = [](std::vector<int64_t> seq_dims, int64_t batch) {
    std::vector<engine::Value> inputs;
    inputs.push_back(FloatTensor(std::move(seq_dims)));
    engine::Tensor len(DataType::kInt64, engine::Shape{batch});
    inputs.push_back(engine::Value(std::move(len)));
    return inputs;
  };
  std::vector<engine::Value> ok = request({2, 3, 4}, 2);
  EXPECT_TRUE(io.AdaptInputs(ok).ok());
  std::vector<engine::Value> too_big = request({9, 3, 4}, 9);
  absl::Status status = io.AdaptInputs(too_big);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), AllOf(HasSubstr("input 'seq': shape [9,3,4]"), HasSubstr("[-1,3,4]"),
                                     HasSubstr("batch dim 1 to 8")));
  std::vector<engine::Value> empty_batch = request({0, 3, 4}, 0);
  EXPECT_FALSE(io.AdaptInputs(empty_batch).ok());
  std::vector<engine::Value> narrowed = request({2, 5, 4}, 2);  // the model takes 5, the config 3
  EXPECT_THAT(Message(io.AdaptInputs(narrowed)), HasSubstr("input 'seq': shape [2,5,4]"));
  std::vector<engine::Value> two_batch_sizes = request({2, 3, 4}, 3);
  EXPECT_THAT(Message(io.AdaptInputs(two_batch_sizes)),
              HasSubstr("input 'len': batch size 3 differs from input 'seq''s 2"));
  std::vector<engine::Value> wrong_type = request({2, 3, 4}, 2);
  wrong_type[1] = FloatTensor({2});
  EXPECT_THAT(Message(io.AdaptInputs(wrong_type)),
              HasSubstr("input 'len': float32 does not match the config's data_type TYPE_INT64"));
}

// ONNX Runtime's leniency, as clients use it (Silero VAD's packages send the scalar `sr` as [1]):
// an unbatched scalar takes [1] and a [1] takes a scalar, each read as the config's shape; other
// one-element shapes stay errors. With Triton's idiom (dims [1] reshaped to []), a scalar sent
// works too.
TEST(ModelIoTest, ScalarAndVectorOfOneAreInterchangeable) {
  std::shared_ptr<const engine::Model> model =
      MakeModel({{"sr", DataType::kInt64, std::vector<int64_t>{}},
                 {"x", DataType::kFloat32, std::vector<int64_t>{1}}});
  absl::StatusOr<inference::ModelConfig> config = Complete("", *model);
  ASSERT_TRUE(config.ok()) << config.status();
  const ModelIo io = ModelIo::Build(*config, *model);
  auto request = [](std::vector<int64_t> sr_dims, std::vector<int64_t> x_dims) {
    std::vector<engine::Value> inputs;
    engine::Tensor sr(DataType::kInt64, engine::Shape(absl::MakeConstSpan(sr_dims)));
    inputs.push_back(engine::Value(std::move(sr)));
    inputs.push_back(FloatTensor(std::move(x_dims)));
    return inputs;
  };
  std::vector<engine::Value> swapped = request({1}, {});
  ASSERT_TRUE(io.AdaptInputs(swapped).ok());
  EXPECT_EQ(swapped[0].tensor().shape(), engine::Shape{});
  EXPECT_EQ(swapped[1].tensor().shape(), engine::Shape{1});
  std::vector<engine::Value> matrix = request({1, 1}, {1});
  EXPECT_THAT(Message(io.AdaptInputs(matrix)), HasSubstr("input 'sr': shape [1,1]"));
  std::vector<engine::Value> two = request({}, {2});
  EXPECT_THAT(Message(io.AdaptInputs(two)), HasSubstr("input 'x': shape [2]"));

  absl::StatusOr<inference::ModelConfig> triton = Complete(
      "input [ { name: \"sr\" data_type: TYPE_INT64 dims: [ 1 ] reshape: { shape: [ ] } } ]",
      *model);
  ASSERT_TRUE(triton.ok()) << triton.status();
  const ModelIo triton_io = ModelIo::Build(*triton, *model);
  std::vector<engine::Value> scalar = request({}, {1});
  ASSERT_TRUE(triton_io.AdaptInputs(scalar).ok());
  EXPECT_EQ(scalar[0].tensor().shape(), engine::Shape{});
}

// A batched input of unknown rank still has its batch dim checked: in range and equal to the
// other batched inputs' (otherwise the batcher would merge an inconsistent request).
TEST(ModelIoTest, BatchDimOfAnInputOfUnknownRank) {
  std::shared_ptr<const engine::Model> model =
      MakeModel({{"x", DataType::kFloat32, std::nullopt},
                 {"y", DataType::kFloat32, std::vector<int64_t>{-1, 4}}});
  absl::StatusOr<inference::ModelConfig> config = Complete("max_batch_size: 8", *model);
  ASSERT_TRUE(config.ok()) << config.status();
  const ModelIo io = ModelIo::Build(*config, *model);
  ASSERT_EQ(io.InputBatchAxis(0), 0);
  auto request = [](std::vector<int64_t> x_dims, std::vector<int64_t> y_dims) {
    std::vector<engine::Value> inputs;
    inputs.push_back(FloatTensor(std::move(x_dims)));
    inputs.push_back(FloatTensor(std::move(y_dims)));
    return inputs;
  };
  std::vector<engine::Value> ok = request({2, 7, 5}, {2, 4});
  EXPECT_TRUE(io.AdaptInputs(ok).ok());
  std::vector<engine::Value> mismatch = request({3, 7}, {2, 4});
  absl::Status status = io.AdaptInputs(mismatch);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("input 'y': batch size 2 differs from input 'x''s 3"));
  std::vector<engine::Value> scalar = request({}, {2, 4});
  EXPECT_THAT(Message(io.AdaptInputs(scalar)),
              AllOf(HasSubstr("input 'x': shape []"), HasSubstr("batch dim 1 to 8")));
  std::vector<engine::Value> too_big = request({9, 1}, {9, 4});
  EXPECT_THAT(Message(io.AdaptInputs(too_big)), HasSubstr("input 'x': shape [9,1]"));
}

// loopserve's batching layout: inputs without a batch dim, an output batched at axis 1.
TEST(ModelIoTest, UnbatchedInputsAndOutputBatchAxes) {
  // Inputs are outputs of the same names: M and seq are unbatched inputs; as an output, seq
  // [T, batch, 4] has its batch dim at axis 1.
  std::shared_ptr<const engine::Model> model =
      MakeModel({{"M", DataType::kInt64, std::nullopt},  // unknown rank: an output too
                 {"x", DataType::kFloat32, std::vector<int64_t>{-1, 4}},
                 {"seq", DataType::kFloat32, std::vector<int64_t>{-1, -1, 4}}});
  const std::string layout =
      "max_batch_size: 8\n"
      "parameters { key: \"unbatched_inputs\" value: { string_value: \" M , seq\" } }\n"
      "parameters { key: \"output_batch_axes\" value: { string_value: \"seq:1\" } }\n";
  absl::StatusOr<inference::ModelConfig> config = Complete(layout, *model);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(config->input(0).dims(), IsEmpty());               // M: whole, no batch
  EXPECT_THAT(config->input(1).dims(), ElementsAre(4));          // x: without the batch
  EXPECT_THAT(config->input(2).dims(), ElementsAre(-1, -1, 4));  // seq in: whole
  EXPECT_THAT(config->output(2).dims(), ElementsAre(-1, 4));     // seq out: axis 1 gone
  const ModelIo io = ModelIo::Build(*config, *model);
  EXPECT_EQ(io.InputBatchAxis(0), -1);
  EXPECT_EQ(io.InputBatchAxis(1), 0);
  EXPECT_EQ(io.InputBatchAxis(2), -1);
  EXPECT_EQ(io.OutputBatchAxis(1), 0);
  EXPECT_EQ(io.OutputBatchAxis(2), 1);
  EXPECT_EQ(io.outputs()[2].dims, (std::vector<int64_t>{-1, -1, 4}));

  std::vector<engine::Value> inputs;
  inputs.push_back(engine::Value(engine::Tensor(DataType::kInt64, engine::Shape{})));
  inputs.push_back(FloatTensor({3, 4}));
  inputs.push_back(FloatTensor({20, 9, 4}));  // unbatched: any first dim, no batch-size check
  EXPECT_TRUE(io.AdaptInputs(inputs).ok());
  std::vector<engine::Value> outputs;
  outputs.push_back(engine::Value(engine::Tensor(DataType::kInt64, engine::Shape{})));
  outputs.push_back(FloatTensor({3, 4}));
  outputs.push_back(FloatTensor({7, 3, 4}));
  EXPECT_TRUE(io.AdaptOutputs(outputs).ok());

  // Completion checks the names and that the batch dim is variable where the layout puts it.
  EXPECT_THAT(Message(Complete("max_batch_size: 8\nparameters { key: \"unbatched_inputs\" "
                               "value: { string_value: \"M,zz\" } }",
                               *model)
                          .status()),
              HasSubstr("parameters 'unbatched_inputs': the model has no input 'zz'"));
  EXPECT_THAT(Message(Complete("max_batch_size: 8\nparameters { key: \"output_batch_axes\" "
                               "value: { string_value: \"nope:1\" } }",
                               *model)
                          .status()),
              HasSubstr("parameters 'output_batch_axes': the model has no output 'nope'"));
  // An input with a fixed first dim: the message says how to declare it unbatched.
  EXPECT_THAT(Message(Complete("max_batch_size: 8", *Passthrough()).status()),
              AllOf(HasSubstr("input 'y'"), HasSubstr("needs a variable batch dim first"),
                    HasSubstr("parameters 'unbatched_inputs'")));
  EXPECT_THAT(
      Message(Complete("max_batch_size: 8\nparameters { key: \"unbatched_inputs\" "
                       "value: { string_value: \"M,seq\" } }\n"
                       "parameters { key: \"output_batch_axes\" value: { "
                       "string_value: \"x:1\" } }",
                       *model)
                  .status()),
      AllOf(HasSubstr("output 'x': max_batch_size > 0 needs a variable batch dim at axis 1"),
            HasSubstr("give an output's batch axis in parameters 'output_batch_axes'"),
            Not(HasSubstr("unbatched_inputs"))));
}

TEST(ModelIoTest, ReshapesInputsAndOutputs) {
  // Triton's idiom for a scalar: dims [1] with reshape []. And an output the model makes [-1,6]
  // that clients receive as [-1,2,3].
  std::shared_ptr<const engine::Model> model =
      MakeModel({{"s", DataType::kFloat32, std::vector<int64_t>{}},
                 {"grid", DataType::kFloat32, std::vector<int64_t>{-1, 6}}});
  absl::StatusOr<inference::ModelConfig> config = Complete(
      "input [ { name: \"s\" data_type: TYPE_FP32 dims: [ 1 ] reshape { shape: [ ] } },"
      "  { name: \"grid\" data_type: TYPE_FP32 dims: [ -1, 2, 3 ] reshape { shape: [ -1, "
      "6 ] } } ]\n"
      "output [ { name: \"grid\" data_type: TYPE_FP32 dims: [ -1, 2, 3 ] reshape { shape: "
      "[ -1, 6 ] } } ]",
      *model);
  ASSERT_TRUE(config.ok()) << config.status();
  const ModelIo io = ModelIo::Build(*config, *model);
  std::vector<engine::Value> inputs;
  inputs.push_back(FloatTensor({1}));
  inputs.push_back(FloatTensor({4, 2, 3}));
  ASSERT_TRUE(io.AdaptInputs(inputs).ok());
  EXPECT_EQ(inputs[0].tensor().shape(), engine::Shape({}));
  EXPECT_EQ(inputs[1].tensor().shape(), engine::Shape({4, 6}));
  EXPECT_EQ(inputs[1].tensor().data<float>()[5], 5.f);  // the same row-major data

  std::vector<engine::Value> outputs;
  outputs.push_back(FloatTensor({}));
  outputs.push_back(FloatTensor({5, 6}));
  ASSERT_TRUE(io.AdaptOutputs(outputs).ok());
  EXPECT_EQ(outputs[1].tensor().shape(), engine::Shape({5, 2, 3}));
  EXPECT_EQ(outputs[0].tensor().shape(), engine::Shape({}));  // not reshaped

  std::vector<engine::Value> bad;
  bad.push_back(FloatTensor({2}));
  bad.push_back(FloatTensor({1, 2, 3}));
  EXPECT_THAT(Message(io.AdaptInputs(bad)), HasSubstr("input 's': shape [2]"));
}

TEST(ModelIoTest, OptionalInputsAndUnknownRank) {
  std::shared_ptr<const engine::Model> model =
      MakeModel({{"opt", DataType::kFloat32, std::vector<int64_t>{2}, ValueKind::kOptional},
                 {"any", DataType::kFloat32, std::nullopt}});
  absl::StatusOr<inference::ModelConfig> config = Complete("", *model);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->input(0).optional());
  const ModelIo io = ModelIo::Build(*config, *model);
  EXPECT_FALSE(io.inputs()[1].dims.has_value());  // unknown rank: no check
  std::vector<engine::Value> inputs(2);
  inputs[1] = FloatTensor({2, 3, 4});
  EXPECT_TRUE(io.AdaptInputs(inputs).ok());
  // The config may require what the model leaves optional.
  config = Complete("input [ { name: \"opt\" data_type: TYPE_FP32 dims: [ 2 ] } ]", *model);
  ASSERT_TRUE(config.ok()) << config.status();
  std::vector<engine::Value> missing(2);
  missing[1] = FloatTensor({1});
  EXPECT_THAT(Message(ModelIo::Build(*config, *model).AdaptInputs(missing)),
              HasSubstr("input 'opt': missing from the request"));
}

// ---- Model files ----

TEST(FindModelFileTest, FollowsPlatformAndFileName) {
  TempDir dir;
  dir.WriteFile("1/model.onnx");
  dir.WriteFile("1/model.xml");
  dir.WriteFile("1/custom.onnx");
  dir.WriteFile("2/ir_model.xml");
  dir.WriteFile("2/ir_model.bin");
  dir.WriteFile("3/a.onnx");
  dir.WriteFile("3/b.onnx");
  const std::string v1 = dir.path() + "/1";
  inference::ModelConfig config;
  EXPECT_THAT(*FindModelFile(v1, config), HasSubstr("1/model.onnx"));
  config.set_platform("openvino");
  EXPECT_THAT(*FindModelFile(v1, config), HasSubstr("1/model.xml"));
  config.set_default_model_filename("custom.onnx");
  EXPECT_THAT(*FindModelFile(v1, config), HasSubstr("1/custom.onnx"));
  config.set_default_model_filename("absent.onnx");
  absl::StatusOr<std::string> absent = FindModelFile(v1, config);
  EXPECT_EQ(absent.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(absent.status()), HasSubstr("absent.onnx"));
  // OpenVINO Model Server folders may name their file anything.
  EXPECT_EQ(FindModelFile(dir.path() + "/2", inference::ModelConfig()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_THAT(*FindModelFile(dir.path() + "/2", inference::ModelConfig(), /*any_name=*/true),
              HasSubstr("2/ir_model.xml"));
  EXPECT_EQ(FindModelFile(dir.path() + "/3", inference::ModelConfig(), true).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DataTypeTest, TritonTypesMapToEngineTypes) {
  // Triton's DataType numbers (model_config.proto) and the engine type each one means.
  const std::tuple<int, DataType> expected[] = {
      {1, DataType::kBool},     {2, DataType::kUint8},    {3, DataType::kUint16},
      {4, DataType::kUint32},   {5, DataType::kUint64},   {6, DataType::kInt8},
      {7, DataType::kInt16},    {8, DataType::kInt32},    {9, DataType::kInt64},
      {10, DataType::kFloat16}, {11, DataType::kFloat32}, {12, DataType::kFloat64},
      {13, DataType::kString},  {14, DataType::kBFloat16}};
  for (const auto& [number, type] : expected) {
    EXPECT_EQ(DataTypeFromConfig(static_cast<inference::DataType>(number)), type) << number;
    EXPECT_EQ(static_cast<int>(DataTypeToConfig(type)), number);
  }
  EXPECT_EQ(DataTypeToConfig(DataType::kUndefined), inference::TYPE_INVALID);
}

// ---- OpenVINO Model Server config.json ----

TEST(OvmsConfigTest, ParsesModelListWithItsSettings) {
  absl::StatusOr<OvmsConfig> config = ParseOvmsConfig(R"json({
    "model_config_list": [
      {"config": {"name": "rnn", "base_path": "models/rnn", "nireq": 4,
                  "model_version_policy": {"latest": {"num_versions": 2}},
                  "target_device": "GPU", "plugin_config": {"NUM_STREAMS": "2"}}},
      {"config": {"name": "counter", "base_path": "/abs/counter/",
                  "model_version_policy": {"specific": {"versions": [1, 3]}},
                  "shape": "auto", "target_device": "CPU"}},
      {"config": {"name": "all", "base_path": "./x/../all", "model_version_policy": {"all": {}}}}
    ],
    "pipeline_config_list": [],
    "monitoring": {"metrics": {"enable": true}}
  })json",
                                                      "/etc/ovms");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_THAT(config->models, SizeIs(3));
  const OvmsModelEntry& rnn = config->models[0];
  EXPECT_EQ(rnn.name, "rnn");
  EXPECT_EQ(rnn.base_path, "/etc/ovms/models/rnn");
  EXPECT_EQ(rnn.nireq, 4);
  EXPECT_EQ(rnn.version_policy->latest().num_versions(), 2u);
  EXPECT_THAT(absl::StrJoin(rnn.ignored, "\n"),
              AllOf(HasSubstr("target_device 'GPU' ignored"),
                    HasSubstr("plugin_config {NUM_STREAMS} ignored")));
  const OvmsModelEntry& counter = config->models[1];
  EXPECT_EQ(counter.base_path, "/abs/counter");
  EXPECT_THAT(counter.version_policy->specific().versions(), ElementsAre(1, 3));
  EXPECT_THAT(counter.ignored, ElementsAre(HasSubstr("shape \"auto\" ignored")));
  EXPECT_EQ(config->models[2].base_path, "/etc/ovms/all");
  EXPECT_TRUE(config->models[2].version_policy->has_all());
  EXPECT_THAT(config->ignored, ElementsAre(HasSubstr("monitoring ignored")));

  ParsedModelConfig parsed;
  parsed.config.mutable_version_policy()->mutable_all();
  ApplyOvmsEntry(rnn, parsed);
  EXPECT_EQ(parsed.config.version_policy().latest().num_versions(), 2u);
  ASSERT_THAT(parsed.config.instance_group(), SizeIs(1));
  EXPECT_EQ(parsed.config.instance_group(0).count(), 4);
  EXPECT_EQ(parsed.config.instance_group(0).kind(), inference::ModelInstanceGroup::KIND_CPU);
  EXPECT_THAT(parsed.ignored, SizeIs(2));
  EXPECT_EQ(parsed.config.parameters().count("precision"), 0u);
}

// plugin_config's INFERENCE_PRECISION_HINT is the precision parameter (f32 -> fp32, bf16); the
// other plugin settings stay ignored; another hint is refused naming it.
TEST(OvmsConfigTest, InferencePrecisionHintIsThePrecision) {
  absl::StatusOr<OvmsConfig> config = ParseOvmsConfig(R"json({"model_config_list": [
      {"config": {"name": "a", "base_path": "a",
                  "plugin_config": {"INFERENCE_PRECISION_HINT": "bf16", "NUM_STREAMS": "1"}}},
      {"config": {"name": "b", "base_path": "b",
                  "plugin_config": {"INFERENCE_PRECISION_HINT": "f32"}}}]})json",
                                                      "/etc/ovms");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_THAT(config->models, SizeIs(2));
  EXPECT_EQ(config->models[0].precision, "bf16");
  EXPECT_THAT(config->models[0].ignored, ElementsAre(HasSubstr("plugin_config {NUM_STREAMS}")));
  EXPECT_EQ(config->models[1].precision, "fp32");
  EXPECT_THAT(config->models[1].ignored, IsEmpty());
  ParsedModelConfig parsed;
  ApplyOvmsEntry(config->models[0], parsed);
  EXPECT_EQ(parsed.config.parameters().at("precision").string_value(), "bf16");

  config = ParseOvmsConfig(R"json({"model_config_list": [{"config": {"name": "a",
      "base_path": "a", "plugin_config": {"INFERENCE_PRECISION_HINT": "f16"}}}]})json",
                           "/etc/ovms");
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(config.status()),
              HasSubstr("plugin_config.INFERENCE_PRECISION_HINT: 'f16' is not f32 or bf16"));
}

TEST(OvmsConfigTest, BadFilesNameTheJsonPath) {
  struct Case {
    const char* json;
    absl::StatusCode code;
    const char* message;
  };
  const Case cases[] = {
      {"{\"model_config_list\": [", absl::StatusCode::kInvalidArgument, "not valid JSON"},
      {"[]", absl::StatusCode::kInvalidArgument, "(top level): expected an object"},
      {"{}", absl::StatusCode::kInvalidArgument, "\"model_config_list\" is required"},
      {"{\"model_config_list\": [], \"models\": 1}", absl::StatusCode::kInvalidArgument,
       "'models': unknown key"},
      {"{\"model_config_list\": [{\"config\": {\"base_path\": \"/m\"}}]}",
       absl::StatusCode::kInvalidArgument, "model_config_list[0].config: \"name\" is required"},
      {"{\"model_config_list\": [{\"config\": {\"name\": \"m\"}}]}",
       absl::StatusCode::kInvalidArgument, "\"base_path\" is required"},
      {"{\"model_config_list\": [{\"config\": {\"name\": \"../m\", \"base_path\": \"/m\"}}]}",
       absl::StatusCode::kInvalidArgument, "config.name: '../m' is not a valid model name"},
      {"{\"model_config_list\": [{\"config\": {\"name\": \"m\", \"base_path\": \"/m\", "
       "\"nireqs\": 2}}]}",
       absl::StatusCode::kInvalidArgument, "model_config_list[0].config.nireqs: unknown key"},
      {"{\"model_config_list\": [{\"config\": {\"name\": \"m\", \"base_path\": \"/m\", "
       "\"nireq\": -1}}]}",
       absl::StatusCode::kInvalidArgument, "config.nireq: -1 must be an integer >= 0"},
      {"{\"model_config_list\": [{\"config\": {\"name\": \"m\", \"base_path\": \"/m\", "
       "\"nireq\": 1.5}}]}",
       absl::StatusCode::kInvalidArgument, "must be an integer"},
      {"{\"model_config_list\": [{\"config\": {\"name\": \"m\", \"base_path\": \"/m\", "
       "\"model_version_policy\": {\"latest\": {\"num_versions\": 1}, \"all\": {}}}}]}",
       absl::StatusCode::kInvalidArgument, "exactly one of"},
      {"{\"model_config_list\": [{\"config\": {\"name\": \"m\", \"base_path\": \"/m\", "
       "\"model_version_policy\": {\"specific\": {\"versions\": [0]}}}}]}",
       absl::StatusCode::kInvalidArgument, "model_version_policy.specific.versions[0]"},
      {"{\"model_config_list\": [{\"config\": {\"name\": \"m\", \"base_path\": \"/a\"}}, "
       "{\"config\": {\"name\": \"m\", \"base_path\": \"/b\"}}]}",
       absl::StatusCode::kInvalidArgument, "'m' is listed twice"},
      {"{\"model_config_list\": [{\"config\": {\"name\": \"m\", \"base_path\": \"s3://b/m\"}}]}",
       absl::StatusCode::kUnimplemented, "cloud storage"},
      {"{\"model_config_list\": [{\"config\": {\"name\": \"m\", \"base_path\": \"/m\", "
       "\"shape\": \"(1,3)\"}}]}",
       absl::StatusCode::kUnimplemented, "cannot change them; remove 'shape'"},
      {"{\"model_config_list\": [{\"config\": {\"name\": \"m\", \"base_path\": \"/m\", "
       "\"stateful\": true}}]}",
       absl::StatusCode::kUnimplemented, "stateful models"},
      {"{\"model_config_list\": [], \"pipeline_config_list\": [{\"name\": \"p\"}]}",
       absl::StatusCode::kUnimplemented, "pipeline_config_list"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<OvmsConfig> config = ParseOvmsConfig(c.json, "/etc");
    EXPECT_EQ(config.status().code(), c.code) << c.json;
    EXPECT_THAT(Message(config.status()), AllOf(HasSubstr("config.json: "), HasSubstr(c.message)))
        << c.json;
  }
  EXPECT_EQ(ReadOvmsConfig("/nonexistent/config.json").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace loopserve::server
