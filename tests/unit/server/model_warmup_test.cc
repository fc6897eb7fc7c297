// model_warmup over the real engine: the warm-up creates the primitives a first request of that
// shape needs, runs as often as configured, reads its data files, and a warm-up that fails is a
// load error that leaves the previous version (or configuration) serving.

#include "server/repository/model_warmup.h"

#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "engine/kernels/dnnl/dnnl_kernel.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/repository/model_repository.h"
#include "server/server.h"
#include "tests/unit/server/test_util.h"

namespace loopserve::server {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

const std::string kModels = LOOPSERVE_SERVER_TEST_MODELS;

void CopyModel(const TempDir& root, const std::string& model, const std::string& to) {
  root.MakeDir(std::filesystem::path(to).parent_path().string());
  std::filesystem::copy_file(kModels + "/" + model, std::filesystem::path(root.path()) / to);
}

// A warm-up data file holding one int64 (little-endian, as the machine).
void WriteInt64(const TempDir& root, const std::string& path, int64_t value) {
  std::string bytes(sizeof(value), '\0');
  std::memcpy(bytes.data(), &value, sizeof(value));
  root.WriteFile(path, bytes);
}

std::vector<engine::Value> MatmulInput(int64_t rows) {
  engine::Tensor x(engine::DataType::kFloat32, engine::Shape{rows, 64});
  for (int64_t i = 0; i < x.NumElements(); ++i) x.mutable_data<float>()[i] = 0.01f * (i % 100);
  std::vector<engine::Value> inputs;
  inputs.push_back(engine::Value(std::move(x)));
  return inputs;
}

// Primitives a run of `model` on `rows` x 64 creates.
int64_t PrimitivesCreatedByRun(const LoadedModel& model, int64_t rows) {
  const int64_t before = engine::DnnlPrimitiveCreationCount();
  absl::StatusOr<std::vector<engine::Value>> outputs =
      model.model->Run(MatmulInput(rows), engine::RunOptions());
  EXPECT_TRUE(outputs.ok()) << outputs.status();
  return engine::DnnlPrimitiveCreationCount() - before;
}

TEST(ModelWarmupTest, TheFirstRequestOfTheWarmedShapeCreatesNoPrimitive) {
  // Primitives prove what was prepared only for products on oneDNN: below AVX-512 a product of
  // several rows with constant weights runs on the native packed kernel (no primitive). Off here.
  engine::native::PackedGemm::SetEnabled(false);
  TempDir root;
  CopyModel(root, "matmul.onnx", "cold/1/model.onnx");
  CopyModel(root, "matmul.onnx", "warm/1/model.onnx");
  root.WriteFile("warm/config.pbtxt", R"pb(
    model_warmup
    [ {
      name: "rows8"
      inputs {
        key: "x"
        value: {
          data_type: TYPE_FP32
          dims: [ 8, 64 ]
          random_data: true
        }
      }
    }]
  )pb");
  ModelRegistry registry({root.path(), 0, nullptr, nullptr});
  ASSERT_TRUE(registry.LoadAll().ok());
  absl::StatusOr<std::shared_ptr<const LoadedModel>> cold = registry.Get("cold", "");
  absl::StatusOr<std::shared_ptr<const LoadedModel>> warm = registry.Get("warm", "");
  ASSERT_TRUE(cold.ok()) << cold.status();
  ASSERT_TRUE(warm.ok()) << warm.status();
  // Without warm-up the first request makes the primitive; after warm-up, none is made.
  EXPECT_GT(PrimitivesCreatedByRun(**cold, 8), 0);
  EXPECT_EQ(PrimitivesCreatedByRun(**warm, 8), 0);
  // Another shape still needs its own (the warm-up covers what it ran).
  EXPECT_GT(PrimitivesCreatedByRun(**warm, 3), 0);
  engine::native::PackedGemm::SetEnabled(true);
}

TEST(ModelWarmupTest, RunsEachSampleCountTimesWithItsData) {
  TempDir root;
  CopyModel(root, "counter.onnx", "m/1/model.onnx");
  const int64_t trip = 3;
  WriteInt64(root, "m/warmup/m.bin", trip);
  root.WriteFile("m/config.pbtxt", R"pb(
    model_warmup
    [ {
      name: "zeros"
      count: 3
      inputs {
        key: "M"
        value: { data_type: TYPE_INT64 zero_data: true }
      }
      inputs {
        key: "x"
        value: {
          data_type: TYPE_FP32
          dims: [ 2 ]
          zero_data: true
        }
      }
    }
      , {
        name: "file"
        inputs {
          key: "M"
          value: { data_type: TYPE_INT64 input_data_file: "m.bin" }
        }
        inputs {
          key: "x"
          value: {
            data_type: TYPE_FP32
            dims: [ 2 ]
            random_data: true
          }
        }
      }]
  )pb");
  ModelRegistry registry({root.path(), 0, nullptr, nullptr});
  ASSERT_TRUE(registry.LoadAll().ok());
  absl::StatusOr<std::shared_ptr<const LoadedModel>> loaded = registry.Get("m", "");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  absl::StatusOr<int64_t> runs = RunModelWarmup((*loaded)->config, (*loaded)->io, *(*loaded)->model,
                                                root.path() + "/m", WarmupOptions());
  ASSERT_TRUE(runs.ok()) << runs.status();
  EXPECT_EQ(*runs, 3 + 1);  // count 3, and count 0 = once

  // The file's trip count reaches the model: with a cap below it, the warm-up fails on it.
  WarmupOptions capped;
  capped.max_loop_iterations = trip - 1;
  absl::StatusOr<int64_t> failed = RunModelWarmup((*loaded)->config, (*loaded)->io,
                                                  *(*loaded)->model, root.path() + "/m", capped);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(failed.status().message()),
              HasSubstr("model_warmup 'file' (run 1 of 1)"));

  // And the version's memory budget applies to warm-up samples as to requests (their inputs are
  // charged first: one byte holds none).
  WarmupOptions tiny;
  tiny.max_memory_bytes = 1;
  absl::StatusOr<int64_t> over =
      RunModelWarmup((*loaded)->config, (*loaded)->io, *(*loaded)->model, root.path() + "/m", tiny);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted) << over.status();
  EXPECT_THAT(std::string(over.status().message()),
              HasSubstr("model_warmup 'zeros' (batch_size 0): its inputs do not fit"));
}

TEST(ModelWarmupTest, BadDataFileIsALoadError) {
  TempDir root;
  CopyModel(root, "counter.onnx", "m/1/model.onnx");
  root.WriteFile("m/warmup/short.bin", "abc");
  root.WriteFile("m/config.pbtxt", R"pb(
    model_warmup
    [ {
      name: "w"
      inputs {
        key: "M"
        value: { data_type: TYPE_INT64 input_data_file: "short.bin" }
      }
      inputs {
        key: "x"
        value: {
          data_type: TYPE_FP32
          dims: [ 2 ]
          zero_data: true
        }
      }
    }]
  )pb");
  ModelRegistry registry({root.path(), 0, nullptr, nullptr});
  ASSERT_TRUE(registry.LoadAll().ok());
  absl::StatusOr<std::shared_ptr<const LoadedModel>> loaded = registry.Get("m", "1");
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(loaded.status().message()),
              HasSubstr("model_warmup 'w': input 'M': input_data_file"));
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr("has 3 bytes; 8 expected"));
}

// BYTES warm-up data as Triton's raw contents lay it out: per element a 4-byte little-endian
// length, then its bytes.
std::string LengthPrefixed(const std::vector<std::string>& elements) {
  std::string out;
  for (const std::string& e : elements) {
    const uint32_t n = static_cast<uint32_t>(e.size());
    for (int k = 0; k < 4; ++k) out.push_back(static_cast<char>((n >> (8 * k)) & 0xff));
    out += e;
  }
  return out;
}

constexpr char kStringWarmup[] = R"pb(
  model_warmup
  [ {
    name: "s"
    inputs {
      key: "s"
      value: {
        data_type: TYPE_STRING
        dims: [ 1 ]
        input_data_file: "s.bin"
      }
    }
    inputs {
      key: "x"
      value: {
        data_type: TYPE_FP32
        dims: [ 2 ]
        zero_data: true
      }
    }
  }]
)pb";

TEST(ModelWarmupTest, StringInputsReadLengthPrefixedDataFiles) {
  TempDir root;
  CopyModel(root, "string_counter.onnx", "m/1/model.onnx");
  root.WriteFile("m/warmup/s.bin", LengthPrefixed({"7"}));
  root.WriteFile("m/config.pbtxt", kStringWarmup);
  ModelRegistry registry({root.path(), 0, nullptr, nullptr});
  ASSERT_TRUE(registry.LoadAll().ok());
  absl::StatusOr<std::shared_ptr<const LoadedModel>> loaded = registry.Get("m", "");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->config.input(0).data_type(), inference::TYPE_STRING);

  // The string "7" reaches the model as its trip count: a cap of 7 passes, 6 stops it.
  WarmupOptions seven;
  seven.max_loop_iterations = 7;
  absl::StatusOr<int64_t> runs = RunModelWarmup((*loaded)->config, (*loaded)->io, *(*loaded)->model,
                                                root.path() + "/m", seven);
  EXPECT_TRUE(runs.ok()) << runs.status();
  WarmupOptions six;
  six.max_loop_iterations = 6;
  absl::StatusOr<int64_t> capped =
      RunModelWarmup((*loaded)->config, (*loaded)->io, *(*loaded)->model, root.path() + "/m", six);
  EXPECT_EQ(capped.status().code(), absl::StatusCode::kResourceExhausted) << capped.status();

  // Files that do not hold exactly one length-prefixed element.
  const struct {
    std::string bytes;
    const char* message;
  } bad[] = {
      {"", "holds fewer than 1 length-prefixed BYTES elements"},
      {std::string("\x05\0\0\0abc", 7), "BYTES element 0 overruns the file"},
      {LengthPrefixed({"7", "8"}), "has bytes after its 1 BYTES elements"},
  };
  for (const auto& c : bad) {
    root.WriteFile("m/warmup/s.bin", c.bytes);
    absl::StatusOr<int64_t> failed = RunModelWarmup(
        (*loaded)->config, (*loaded)->io, *(*loaded)->model, root.path() + "/m", WarmupOptions());
    EXPECT_EQ(failed.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(std::string(failed.status().message()), HasSubstr(c.message));
    EXPECT_THAT(std::string(failed.status().message()), HasSubstr("input 's'"));
  }
}

TEST(ModelWarmupTest, FailingWarmupKeepsThePreviousConfigAndVersionServing) {
  TempDir root;
  CopyModel(root, "counter.onnx", "m/1/model.onnx");
  const int64_t trip = 1000;
  WriteInt64(root, "m/warmup/big.bin", trip);
  ModelRegistry registry({root.path(), /*max_loop_iterations=*/10, nullptr, nullptr});
  ASSERT_TRUE(registry.LoadAll().ok());
  std::shared_ptr<const LoadedModel> v1 = *registry.Get("m", "");

  // A config whose warm-up hits the iteration cap: rejected, v1 keeps its old config.
  const std::string failing = R"pb(
    model_warmup
    [ {
      name: "big"
      inputs {
        key: "M"
        value: { data_type: TYPE_INT64 input_data_file: "big.bin" }
      }
      inputs {
        key: "x"
        value: {
          data_type: TYPE_FP32
          dims: [ 2 ]
          zero_data: true
        }
      }
    }]
  )pb";
  root.WriteFile("m/config.pbtxt", failing);
  ASSERT_TRUE(registry.Poll().ok());
  EXPECT_EQ(*registry.Get("m", ""), v1);
  const std::vector<ModelRegistry::ModelState> index = registry.Index();
  ASSERT_EQ(index.size(), 1u);
  ASSERT_EQ(index[0].versions.size(), 1u);
  EXPECT_TRUE(index[0].versions[0].ready);
  EXPECT_THAT(index[0].versions[0].reason,
              HasSubstr("new config rejected, serving the previous one"));
  EXPECT_THAT(index[0].versions[0].reason, HasSubstr("model_warmup 'big' (run 1 of 1)"));
  EXPECT_THAT(index[0].versions[0].reason, HasSubstr("RESOURCE_EXHAUSTED"));

  // A new version under that config fails its warm-up too: v1 is retained.
  CopyModel(root, "counter.onnx", "m/2/model.onnx");
  ASSERT_TRUE(registry.Poll().ok());
  EXPECT_EQ(registry.Get("m", "2").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(*registry.Get("m", ""), v1);

  // Fixed (a cap the warm-up fits under): both serve.
  root.WriteFile("m/config.pbtxt",
                 failing +
                     "parameters { key: \"max_loop_iterations\" value: { string_value: "
                     "\"5000\" } }\nversion_policy { all { } }");
  ASSERT_TRUE(registry.Poll().ok());
  absl::StatusOr<std::shared_ptr<const LoadedModel>> v2 = registry.Get("m", "2");
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ((*v2)->max_loop_iterations, 5000);
  EXPECT_TRUE(registry.Get("m", "1").ok());
}

// Issue 26: a warm-up batch is allocated through the version's per-request memory budget. A
// batch_size of 2^30 under max_batch_size 2^31-1 (256 GiB of inputs) aborted the process with
// std::bad_alloc, at start-up and on a poll-mode rewrite; now it is a load error naming the sample,
// and a rewrite to it keeps the previous config serving.
std::string HugeBatchWarmupConfig(uint32_t batch_size) {
  return absl::StrCat(R"pb(
    max_batch_size: 2147483647
    model_warmup
    [ {
      name: "huge"
      batch_size:)pb",
                      batch_size, R"pb(
      inputs {
        key: "x"
        value: {
          data_type: TYPE_FP32
          dims: [ 64 ]
          random_data: true
        }
      }
    }]
  )pb");
}

TEST(ModelWarmupTest, ABatchOverTheMemoryBudgetIsALoadErrorNamingIt) {
  TempDir root;
  CopyModel(root, "matmul.onnx", "m/1/model.onnx");
  root.WriteFile("m/config.pbtxt", HugeBatchWarmupConfig(uint32_t{1} << 30));
  ModelRegistry::Options options{root.path(), 0, nullptr, nullptr};
  options.max_request_memory_bytes = int64_t{64} << 20;
  ModelRegistry registry(std::move(options));
  ASSERT_TRUE(registry.LoadAll().ok());
  absl::StatusOr<std::shared_ptr<const LoadedModel>> loaded = registry.Get("m", "1");
  ASSERT_EQ(loaded.status().code(), absl::StatusCode::kUnavailable) << loaded.status();
  const std::string message(loaded.status().message());
  EXPECT_THAT(message, HasSubstr("model_warmup 'huge' (batch_size 1073741824)"));
  EXPECT_THAT(message, HasSubstr("memory budget of 67108864 bytes"));
  EXPECT_THAT(message, HasSubstr("RESOURCE_EXHAUSTED"));

  // A batch that fits loads; a rewrite to the huge one (poll mode) keeps it serving.
  root.WriteFile("m/config.pbtxt", HugeBatchWarmupConfig(16));
  ASSERT_TRUE(registry.Poll().ok());
  absl::StatusOr<std::shared_ptr<const LoadedModel>> fits = registry.Get("m", "1");
  ASSERT_TRUE(fits.ok()) << fits.status();
  root.WriteFile("m/config.pbtxt", HugeBatchWarmupConfig(uint32_t{1} << 24));
  ASSERT_TRUE(registry.Poll().ok());
  EXPECT_EQ(*registry.Get("m", "1"), *fits);
  const std::vector<ModelRegistry::ModelState> index = registry.Index();
  ASSERT_EQ(index.size(), 1u);
  ASSERT_EQ(index[0].versions.size(), 1u);
  EXPECT_THAT(index[0].versions[0].reason, HasSubstr("new config rejected"));
  EXPECT_THAT(index[0].versions[0].reason, HasSubstr("model_warmup 'huge' (batch_size 16777216)"));
}

// Model `name`'s config asks for 5 warm-up runs of the counter with M = INT64_MAX: each loops
// until its deadline or a stop.
void WriteEndlessWarmup(const TempDir& root, const std::string& name) {
  WriteInt64(root, name + "/warmup/endless.bin", INT64_MAX);
  root.WriteFile(name + "/config.pbtxt", R"pb(
    model_warmup
    [ {
      name: "endless"
      count: 5
      inputs {
        key: "M"
        value: { data_type: TYPE_INT64 input_data_file: "endless.bin" }
      }
      inputs {
        key: "x"
        value: {
          data_type: TYPE_FP32
          dims: [ 2 ]
          zero_data: true
        }
      }
    }]
  )pb");
}

// The stop flag (a SIGTERM during start-up, or Shutdown during a poll): a warm-up run that would
// run for its whole deadline stops within moments, the load returns Cancelled, the model being
// loaded is not installed, and what served before keeps serving.
TEST(ModelWarmupTest, TheStopFlagCancelsAWarmupAndInstallsNothing) {
  TempDir root;
  CopyModel(root, "counter.onnx", "a_serving/1/model.onnx");
  CopyModel(root, "counter.onnx", "slow/1/model.onnx");
  WriteEndlessWarmup(root, "slow");
  std::atomic<bool> stop{false};
  ModelRegistry::Options options{root.path(), 0, nullptr, nullptr};
  options.warmup_run_timeout = absl::Seconds(30);  // each of the 5 runs, without the stop
  options.stop = &stop;
  ModelRegistry registry(std::move(options));
  absl::Status loaded;
  std::thread loader([&] { loaded = registry.LoadAll(); });
  // a_serving loads in a millisecond; then slow's first warm-up run loops.
  absl::SleepFor(absl::Milliseconds(500));
  const absl::Time stopped = absl::Now();
  stop.store(true);
  loader.join();
  const absl::Duration took = absl::Now() - stopped;
  std::printf("warm-up stopped %.1f ms after the stop flag\n", absl::ToDoubleMilliseconds(took));
  EXPECT_LT(took, absl::Seconds(15));  // without the flag: 5 x 30 s
  EXPECT_EQ(loaded.code(), absl::StatusCode::kCancelled) << loaded;
  EXPECT_TRUE(registry.Get("a_serving", "").ok());
  EXPECT_EQ(registry.Get("slow", "").status().code(), absl::StatusCode::kNotFound);
  // Stopped loads start no other: a later poll returns at once.
  EXPECT_EQ(registry.Poll().code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(registry.Get("a_serving", "").ok());
}

// A gRPC-only server on a free port that polls `root` every 100 ms.
ServerOptions PollingOptions(const TempDir& root) {
  ServerOptions options = testing::LocalServerOptions(root.path());
  options.model_control_mode = ModelControlMode::kPoll;
  options.repository_poll_interval = absl::Milliseconds(100);
  return options;
}

// Shutdown while the repository poller is warming up a new model (endless warm-up runs, 60 s
// deadline each): the warm-up is cancelled and Shutdown returns at once instead of after it.
TEST(ModelWarmupTest, ShutdownStopsAWarmupThePollerRuns) {
  TempDir root;
  CopyModel(root, "counter.onnx", "a/1/model.onnx");
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(PollingOptions(root));
  ASSERT_TRUE(server.ok()) << server.status();
  WriteEndlessWarmup(root, "slow");
  CopyModel(root, "counter.onnx", "slow/1/model.onnx");
  absl::SleepFor(absl::Seconds(1));  // the next poll finds it and starts warming it up
  const absl::Time start = absl::Now();
  (*server)->Shutdown();
  const absl::Duration took = absl::Now() - start;
  std::printf("Shutdown during a poll's endless warm-up: %.1f ms\n",
              absl::ToDoubleMilliseconds(took));
  EXPECT_LT(took, absl::Seconds(15));  // the warm-up alone: 5 x 60 s
  EXPECT_EQ((*server)->registry().Get("slow", "").status().code(), absl::StatusCode::kNotFound);
}

// Issue 26: loads and warm-ups run on the registry's loader pool. While the poller's load of a
// model is stuck in an endless warm-up (5 runs x 60 s), a model added later is loaded by the next
// polls, and a config change of a serving model is applied; Shutdown still stops the warm-up.
TEST(ModelWarmupTest, ASlowWarmupDoesNotHoldUpOtherModelsUpdates) {
  TempDir root;
  CopyModel(root, "counter.onnx", "a/1/model.onnx");
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(PollingOptions(root));
  ASSERT_TRUE(server.ok()) << server.status();
  ModelRegistry& registry = (*server)->registry();
  WriteEndlessWarmup(root, "slow");
  CopyModel(root, "counter.onnx", "slow/1/model.onnx");
  absl::SleepFor(absl::Seconds(1));  // a poll finds it and starts its endless warm-up
  CopyModel(root, "counter.onnx", "b/1/model.onnx");
  root.WriteFile("a/config.pbtxt",
                 "parameters { key: \"max_loop_iterations\" value: { string_value: \"77\" } }");
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  auto updated = [&] {
    absl::StatusOr<std::shared_ptr<const LoadedModel>> a = registry.Get("a", "");
    return registry.Get("b", "").ok() && a.ok() && (*a)->max_loop_iterations == 77;
  };
  while (!updated() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));  // bounded wait for the next polls
  }
  EXPECT_TRUE(registry.Get("b", "").ok());
  absl::StatusOr<std::shared_ptr<const LoadedModel>> a = registry.Get("a", "");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->max_loop_iterations, 77);
  // Still warming up: not served yet.
  EXPECT_EQ(registry.Get("slow", "").status().code(), absl::StatusCode::kNotFound);
  const absl::Time start = absl::Now();
  (*server)->Shutdown();
  server->reset();  // joins the loader pool: the warm-up was stopped
  const absl::Duration took = absl::Now() - start;
  std::printf("Shutdown and teardown during an endless warm-up on the loader pool: %.1f ms\n",
              absl::ToDoubleMilliseconds(took));
  EXPECT_LT(took, absl::Seconds(15));  // the warm-up alone: 5 x 60 s
}

}  // namespace
}  // namespace loopserve::server
