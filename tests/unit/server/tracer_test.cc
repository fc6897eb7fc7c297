#include "server/observability/tracer.h"

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "server/observability/otlp_exporter.h"

namespace loopserve::server {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string MakeTempDir() {
  std::string pattern = (fs::temp_directory_path() / "tracer_test-XXXXXX").string();
  EXPECT_NE(mkdtemp(pattern.data()), nullptr);
  return pattern;
}

std::string Setting(const TraceSettingList& list, const std::string& name) {
  for (const auto& [n, values] : list) {
    if (n == name) return values.empty() ? "<none>" : values[0];
  }
  return "<missing>";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Which of `requests` requests for `model` the tracer picks (1-based), each trace finished.
std::vector<int> Sampled(Tracer& tracer, const std::string& model, int requests) {
  std::vector<int> picked;
  for (int k = 1; k <= requests; ++k) {
    std::unique_ptr<RequestTrace> trace = tracer.Sample(model, 1);
    if (trace != nullptr) picked.push_back(k);
    tracer.Finish(std::move(trace));
  }
  tracer.WaitWritten();
  return picked;
}

TEST(TracerTest, OffByDefaultAndWithoutAFile) {
  Tracer tracer;
  EXPECT_EQ(tracer.Sample("m", 1), nullptr);
  const TraceSettingList defaults = *tracer.Update("", {});
  EXPECT_EQ(Setting(defaults, "trace_level"), "OFF");
  EXPECT_EQ(Setting(defaults, "trace_rate"), "1000");
  EXPECT_EQ(Setting(defaults, "trace_count"), "-1");
  EXPECT_EQ(Setting(defaults, "log_frequency"), "0");
  EXPECT_EQ(Setting(defaults, "trace_file"), "");
  EXPECT_EQ(Setting(defaults, "trace_mode"), "triton");
  // A level without a file traces nothing (there is nowhere to write).
  ASSERT_TRUE(tracer.Update("", {{"trace_level", {"TIMESTAMPS"}}, {"trace_rate", {"1"}}}).ok());
  EXPECT_EQ(tracer.Sample("m", 1), nullptr);
}

TEST(TracerTest, RateTracesTheFirstOfEachNAndCountStops) {
  const std::string dir = MakeTempDir();
  Tracer tracer;
  tracer.SetDirectory(dir);
  ASSERT_TRUE(tracer
                  .Update("", {{"trace_level", {"TIMESTAMPS"}},
                               {"trace_rate", {"3"}},
                               {"trace_file", {"t.json"}}})
                  .ok());
  EXPECT_THAT(Sampled(tracer, "m", 10), ElementsAre(1, 4, 7, 10));
  // trace_count: what is left reads back, and sampling stops at 0.
  ASSERT_TRUE(tracer.Update("", {{"trace_count", {"2"}}, {"trace_rate", {"2"}}}).ok());
  EXPECT_THAT(Sampled(tracer, "m", 3), ElementsAre(1, 3));
  EXPECT_EQ(Setting(*tracer.Update("", {}), "trace_count"), "0");
  EXPECT_THAT(Sampled(tracer, "m", 10), ElementsAre());
  // The count ran out: the file holds every trace so far (4 + 2), as one JSON array.
  rapidjson::Document doc;
  doc.Parse(ReadFile(dir + "/t.json").c_str());
  ASSERT_TRUE(doc.IsArray()) << ReadFile(dir + "/t.json");
  EXPECT_EQ(doc.Size(), 6u);
  fs::remove_all(dir);
}

TEST(TracerTest, ModelSettingsOverrideOneByOneAndClearingReverts) {
  const std::string dir = MakeTempDir();
  Tracer tracer;
  tracer.SetDirectory(dir);
  ASSERT_TRUE(tracer
                  .Update("", {{"trace_level", {"TIMESTAMPS"}},
                               {"trace_rate", {"1"}},
                               {"trace_file", {"server.json"}}})
                  .ok());
  absl::StatusOr<TraceSettingList> model = tracer.Update("a", {{"trace_rate", {"2"}}});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(Setting(*model, "trace_rate"), "2");
  EXPECT_EQ(Setting(*model, "trace_file"), "server.json");  // the server's
  EXPECT_EQ(Setting(*tracer.Update("", {}), "trace_rate"), "1");
  EXPECT_THAT(Sampled(tracer, "a", 4), ElementsAre(1, 3));
  EXPECT_THAT(Sampled(tracer, "b", 3), ElementsAre(1, 2, 3));
  // A model OFF while the server traces; the server's later changes reach what it did not set.
  ASSERT_TRUE(tracer.Update("a", {{"trace_level", {"OFF"}}}).ok());
  EXPECT_THAT(Sampled(tracer, "a", 3), ElementsAre());
  ASSERT_TRUE(tracer.Update("", {{"trace_file", {"other.json"}}}).ok());
  EXPECT_EQ(Setting(*tracer.Update("a", {}), "trace_file"), "other.json");
  // Clearing the model's settings: it follows the server again.
  ASSERT_TRUE(tracer.Update("a", {{"trace_level", {}}, {"trace_rate", {}}}).ok());
  EXPECT_EQ(Setting(*tracer.Update("a", {}), "trace_level"), "TIMESTAMPS");
  EXPECT_EQ(Setting(*tracer.Update("a", {}), "trace_rate"), "1");
  // Clearing a server setting restores Triton's default.
  ASSERT_TRUE(tracer.Update("", {{"trace_rate", {}}}).ok());
  EXPECT_EQ(Setting(*tracer.Update("", {}), "trace_rate"), "1000");
  fs::remove_all(dir);
}

TEST(TracerTest, BadSettingsAreRefusedAllOrNothing) {
  Tracer tracer;
  auto code = [&](const TraceSettingList& changes) {
    return tracer.Update("", changes).status().code();
  };
  using absl::StatusCode;
  EXPECT_EQ(code({{"trace_level", {"LOUD"}}}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"trace_level", {"OFF", "TIMESTAMPS"}}}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"trace_level", {"TENSORS"}}}), StatusCode::kUnimplemented);
  EXPECT_EQ(code({{"trace_rate", {"0"}}}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"trace_rate", {"-3"}}}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"trace_rate", {"1x"}}}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"trace_count", {"-2"}}}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"trace_mode", {"zipkin"}}}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"verbosity", {"1"}}}), StatusCode::kInvalidArgument);
  // No trace folder: no file at all.
  EXPECT_EQ(code({{"trace_file", {"t.json"}}}), StatusCode::kFailedPrecondition);
  tracer.SetDirectory(fs::temp_directory_path().string());
  for (const std::string& name :
       {std::string("../escape.json"), std::string("/tmp/x.json"), std::string("a/b.json"),
        std::string("."), std::string(".."), std::string("a\0b", 3), std::string(256, 'x')}) {
    EXPECT_EQ(code({{"trace_file", {name}}}), StatusCode::kInvalidArgument) << name;
  }
  // All or nothing: a good change beside a bad one is not applied.
  EXPECT_EQ(code({{"trace_rate", {"5"}}, {"trace_level", {"LOUD"}}}), StatusCode::kInvalidArgument);
  EXPECT_EQ(Setting(*tracer.Update("", {}), "trace_rate"), "1000");
}

TEST(TracerTest, LogFrequencyWritesEveryNAndTheFileIsAlwaysAnArray) {
  const std::string dir = MakeTempDir();
  const std::string path = dir + "/t.json";
  {
    Tracer tracer;
    tracer.SetDirectory(dir);
    ASSERT_TRUE(tracer
                    .Update("", {{"trace_level", {"TIMESTAMPS"}},
                                 {"trace_rate", {"1"}},
                                 {"log_frequency", {"2"}},
                                 {"trace_file", {"t.json"}}})
                    .ok());
    Sampled(tracer, "m", 1);
    EXPECT_FALSE(fs::exists(path));  // one pending, not yet written
    Sampled(tracer, "m", 1);
    rapidjson::Document doc;
    doc.Parse(ReadFile(path).c_str());
    ASSERT_TRUE(doc.IsArray());
    EXPECT_EQ(doc.Size(), 2u);
    Sampled(tracer, "m", 3);  // 4 written, 1 pending until the tracer goes
    doc.Parse(ReadFile(path).c_str());
    ASSERT_TRUE(doc.IsArray());
    EXPECT_EQ(doc.Size(), 4u);
  }
  rapidjson::Document doc;
  doc.Parse(ReadFile(path).c_str());
  ASSERT_TRUE(doc.IsArray());
  ASSERT_EQ(doc.Size(), 5u);
  // Ids are unique and increasing.
  for (rapidjson::SizeType k = 1; k < doc.Size(); ++k) {
    EXPECT_GT(doc[k]["id"].GetUint64(), doc[k - 1]["id"].GetUint64());
  }
  fs::remove_all(dir);
}

TEST(TracerTest, ALinkInTheFolderIsNotFollowed) {
  const std::string dir = MakeTempDir();
  const std::string outside = dir + "/outside";
  fs::create_directory(dir + "/traces");
  { std::ofstream(outside) << "untouched"; }
  fs::create_symlink(outside, dir + "/traces/t.json");
  {
    Tracer tracer;
    tracer.SetDirectory(dir + "/traces");
    ASSERT_TRUE(tracer
                    .Update("", {{"trace_level", {"TIMESTAMPS"}},
                                 {"trace_rate", {"1"}},
                                 {"log_frequency", {"1"}},
                                 {"trace_file", {"t.json"}}})
                    .ok());
    Sampled(tracer, "m", 2);
  }
  EXPECT_EQ(ReadFile(outside), "untouched");
  fs::remove_all(dir);
}

TEST(RequestTraceTest, JsonHasTritonsFieldsAndIterationSpansInOrder) {
  const std::vector<std::string> loops = {"outer_loop"};
  RequestTrace trace(7, "counter", 2, /*iterations=*/true, nullptr);
  trace.set_request_id("req-1");
  trace.set_loop_names(&loops);
  // The marks before the Loop are set by hand up to 3 us after t0, the Loop's spans read the clock:
  // t0 lies far enough back that the hand-set marks come before them (it was Now(): on a fast run
  // the first span's clock read came 0.8 us before t0 + 3 us).
  const absl::Time t0 = absl::Now() - absl::Milliseconds(1);
  trace.Mark(RequestTrace::kRequestStart, t0);
  trace.Mark(RequestTrace::kQueueStart, t0 + absl::Microseconds(1));
  trace.Mark(RequestTrace::kComputeStart, t0 + absl::Microseconds(2));
  trace.Mark(RequestTrace::kComputeInputEnd, t0 + absl::Microseconds(3));
  trace.OnLoopStart(0);
  for (int64_t i = 0; i < 3; ++i) ASSERT_TRUE(trace.OnIteration(0, i, {}).ok());
  const absl::Time t1 = absl::Now();
  trace.Mark(RequestTrace::kComputeOutputStart, t1);
  trace.Mark(RequestTrace::kComputeEnd, t1 + absl::Microseconds(1));
  trace.Mark(RequestTrace::kRequestEnd, t1 + absl::Microseconds(2));
  rapidjson::Document doc;
  doc.Parse(trace.ToJson().c_str());
  ASSERT_TRUE(doc.IsObject());
  EXPECT_EQ(doc["id"].GetUint64(), 7u);
  EXPECT_STREQ(doc["model_name"].GetString(), "counter");
  EXPECT_EQ(doc["model_version"].GetInt64(), 2);
  EXPECT_STREQ(doc["request_id"].GetString(), "req-1");
  const auto& stamps = doc["timestamps"];
  std::vector<std::string> names;
  for (const auto& s : stamps.GetArray()) names.push_back(s["name"].GetString());
  EXPECT_THAT(names,
              ElementsAre("REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END",
                          "LOOP_ITERATION_START", "LOOP_ITERATION_END", "LOOP_ITERATION_START",
                          "LOOP_ITERATION_END", "LOOP_ITERATION_START", "LOOP_ITERATION_END",
                          "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END"));
  for (rapidjson::SizeType k = 1; k < stamps.Size(); ++k) {
    EXPECT_LE(stamps[k - 1]["ns"].GetInt64(), stamps[k]["ns"].GetInt64()) << names[k];
  }
  EXPECT_EQ(stamps[4]["iteration"].GetInt64(), 0);
  EXPECT_EQ(stamps[9]["iteration"].GetInt64(), 2);
  EXPECT_STREQ(stamps[4]["loop"].GetString(), "outer_loop");
}

// OTLP/HTTP JSON (opentelemetry-proto's ExportTraceServiceRequest in its JSON mapping): a request
// span, its compute child, one child of that per iteration, all in one trace.
TEST(OtlpExporterTest, SpansOfATraceNestAsRequestComputeIterations) {
  const std::vector<std::string> loops = {"counter_loop"};
  auto trace = std::make_unique<RequestTrace>(3, "counter", 1, /*iterations=*/true, nullptr);
  trace->set_loop_names(&loops);
  const absl::Time t0 = absl::FromUnixNanos(1700000000000000000);
  for (int a = 0; a < RequestTrace::kActivities; ++a) {
    trace->Mark(static_cast<RequestTrace::Activity>(a), t0 + absl::Microseconds(a));
  }
  trace->OnLoopStart(0);
  ASSERT_TRUE(trace->OnIteration(0, 0, {}).ok());
  ASSERT_TRUE(trace->OnIteration(0, 1, {}).ok());
  trace->KeepLoopNames();
  std::vector<std::unique_ptr<RequestTrace>> traces;
  traces.push_back(std::move(trace));
  rapidjson::Document doc;
  doc.Parse(OtlpExporter::ToOtlpJson(traces).c_str());
  ASSERT_TRUE(doc.IsObject());
  const auto& resource = doc["resourceSpans"][0];
  EXPECT_STREQ(resource["resource"]["attributes"][0]["value"]["stringValue"].GetString(),
               "loopserve");
  const auto& spans = resource["scopeSpans"][0]["spans"];
  ASSERT_EQ(spans.Size(), 4u);
  EXPECT_STREQ(spans[0]["name"].GetString(), "InferRequest");
  EXPECT_FALSE(spans[0].HasMember("parentSpanId"));
  EXPECT_EQ(std::string(spans[0]["traceId"].GetString()).size(), 32u);
  EXPECT_EQ(std::string(spans[0]["spanId"].GetString()).size(), 16u);
  EXPECT_STREQ(spans[0]["startTimeUnixNano"].GetString(), "1700000000000000000");
  EXPECT_STREQ(spans[0]["endTimeUnixNano"].GetString(), "1700000000000006000");
  ASSERT_EQ(spans[0]["events"].Size(), 7u);
  EXPECT_STREQ(spans[0]["events"][2]["name"].GetString(), "COMPUTE_START");
  EXPECT_STREQ(spans[1]["name"].GetString(), "compute");
  EXPECT_STREQ(spans[1]["parentSpanId"].GetString(), spans[0]["spanId"].GetString());
  for (rapidjson::SizeType k = 2; k < 4; ++k) {
    EXPECT_STREQ(spans[k]["name"].GetString(), "loop_iteration");
    EXPECT_STREQ(spans[k]["parentSpanId"].GetString(), spans[1]["spanId"].GetString());
    EXPECT_STREQ(spans[k]["traceId"].GetString(), spans[0]["traceId"].GetString());
    EXPECT_STREQ(spans[k]["attributes"][0]["value"]["stringValue"].GetString(), "counter_loop");
    EXPECT_STREQ(spans[k]["attributes"][1]["value"]["intValue"].GetString(),
                 std::to_string(k - 2).c_str());
  }
}

TEST(OtlpExporterTest, OnlyPlainHttpUrls) {
  EXPECT_TRUE(OtlpExporter::Create("http://127.0.0.1:4318/v1/traces").ok());
  EXPECT_TRUE(OtlpExporter::Create("http://collector").ok());
  for (const char* url : {"https://collector/v1/traces", "ftp://x", "http://", "http://h:0/",
                          "http://h:99999/", "http://h:port/", "collector:4318"}) {
    EXPECT_EQ(OtlpExporter::Create(url).status().code(), absl::StatusCode::kInvalidArgument) << url;
  }
}

TEST(TracerTest, OpenTelemetryModeNeedsAnExporter) {
  Tracer tracer;
  EXPECT_EQ(tracer.Update("", {{"trace_mode", {"opentelemetry"}}}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace loopserve::server
