// Serving overhead: what loopserve adds on top of the engine for a small Loop request over
// loopback, against a bare gRPC echo of the same payload built with the same gRPC, and requests
// per second at 1, 2, 8 and 32 concurrent clients.
//
//   build/bin/serving_bench --models=build/bench/bench_models [--model=serve_rnn]
//                           [--requests=4000] [--rounds=3] [--clients=1,2,8,32]
//                           [--inline_run_limit_us=N]  (ServerOptions::inline_run_limit)
//   build/bin/serving_bench --models=... --rss_requests=100000 [--rss_clients=8]
//
// Both servers run in this process on 127.0.0.1:0 with the synchronous generated stub as the
// client (one channel per client thread). The echo server implements ModelInfer on the same
// callback API and copies each raw input into a raw output (the copy protobuf forces on the
// response). The engine time is Model::Run in process on the same inputs; overhead = loopserve
// latency - engine time, reported against the echo's latency (target <= 1.3x). Rounds alternate
// echo and loopserve; medians are over all requests of all rounds.
//
// --rss_requests=N instead sends N loopserve requests from a fixed set of client threads, each
// with one channel created up front, and prints this process's VmRSS every 10 000 requests and
// its growth from the first sample to the last (the clients' and servers' memory together).

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "engine/tools/looprun.h"
#include "proto/grpc_service.grpc.pb.h"
#include "server/server.h"

namespace loopserve {
namespace {

using Clock = std::chrono::steady_clock;

// ModelInfer that answers each raw input as a raw output of the same name, type and shape.
class EchoService final : public inference::GRPCInferenceService::CallbackService {
 public:
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override {
    response->set_model_name(request->model_name());
    for (int i = 0; i < request->inputs_size(); ++i) {
      inference::ModelInferResponse::InferOutputTensor* out = response->add_outputs();
      out->set_name(request->inputs(i).name());
      out->set_datatype(request->inputs(i).datatype());
      *out->mutable_shape() = request->inputs(i).shape();
      response->add_raw_output_contents(request->raw_input_contents(i));
    }
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

const char* KServeType(engine::DataType t) {
  switch (t) {
    case engine::DataType::kFloat32:
      return "FP32";
    case engine::DataType::kInt64:
      return "INT64";
    case engine::DataType::kBool:
      return "BOOL";
    case engine::DataType::kInt32:
      return "INT32";
    default:
      return "BYTES";
  }
}

inference::ModelInferRequest MakeRequest(const std::string& name, const engine::Model& model,
                                         const std::vector<engine::Value>& inputs) {
  inference::ModelInferRequest r;
  r.set_model_name(name);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const engine::Tensor& t = inputs[i].tensor();
    auto* in = r.add_inputs();
    in->set_name(model.inputs()[i].name);
    in->set_datatype(KServeType(t.dtype()));
    for (int64_t d : t.shape().dims()) in->add_shape(d);
    r.add_raw_input_contents(std::string(static_cast<const char*>(t.raw_data()), t.ByteSize()));
  }
  return r;
}

// This process's resident set size in KiB (VmRSS), to show it stays flat across requests.
long RssKib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return -1;
}

struct Result {
  double median_us = 0;
  double p99_us = 0;
  double rps = 0;
};

std::unique_ptr<inference::GRPCInferenceService::Stub> NewStub(int port) {
  grpc::ChannelArguments args;
  args.SetInt("grpc.use_local_subchannel_pool", 1);  // one connection per client
  args.SetMaxReceiveMessageSize(-1);
  return inference::GRPCInferenceService::NewStub(grpc::CreateCustomChannel(
      "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials(), args));
}

// `clients` threads send `requests` ModelInfer calls in all; latencies per call.
Result Drive(int port, const inference::ModelInferRequest& request, int clients, int requests,
             std::vector<double>* all) {
  std::vector<std::vector<double>> lat(clients);
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      auto stub = NewStub(port);
      for (int i = c; i < requests; i += clients) {
        grpc::ClientContext ctx;
        inference::ModelInferResponse response;
        const auto t0 = Clock::now();
        const grpc::Status s = stub->ModelInfer(&ctx, request, &response);
        const auto t1 = Clock::now();
        if (!s.ok()) {
          std::fprintf(stderr, "ModelInfer failed: %s\n", s.error_message().c_str());
          std::exit(2);
        }
        lat[c].push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      }
    });
  }
  for (auto& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (auto& l : lat) all->insert(all->end(), l.begin(), l.end());
  Result r;
  r.rps = requests / seconds;
  return r;
}

// `clients` threads with one channel each, created once, send `requests` calls in all; VmRSS is
// sampled after every `every` answered calls. Returns the (answered, KiB) series.
std::vector<std::pair<int64_t, long>> RssRun(int port, const inference::ModelInferRequest& request,
                                             int clients, int64_t requests, int64_t every) {
  std::vector<std::unique_ptr<inference::GRPCInferenceService::Stub>> stubs;
  for (int c = 0; c < clients; ++c) stubs.push_back(NewStub(port));
  std::atomic<int64_t> next{0}, answered{0};
  std::mutex mutex;
  std::vector<std::pair<int64_t, long>> series;
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      while (next.fetch_add(1) < requests) {
        grpc::ClientContext ctx;
        inference::ModelInferResponse response;
        const grpc::Status s = stubs[c]->ModelInfer(&ctx, request, &response);
        if (!s.ok()) {
          std::fprintf(stderr, "ModelInfer failed: %s\n", s.error_message().c_str());
          std::exit(2);
        }
        const int64_t done = answered.fetch_add(1) + 1;
        if (done % every == 0) {
          const long rss = RssKib();
          std::lock_guard<std::mutex> lock(mutex);
          series.emplace_back(done, rss);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  std::sort(series.begin(), series.end());
  return series;
}

// Where loopserve's own time goes, from its ModelStatistics counters: means per request since
// `last` of decoding, receipt -> run start (the hand-off to a worker, when there is one), the
// engine, encoding, and receipt -> answer. Updates `last`.
std::string ServerTimes(server::Server& server, const std::string& name,
                        server::ModelVersionStatistics* last) {
  auto model = server.registry().Get(name, "");
  if (!model.ok()) return "";
  const server::ModelVersionStatistics now = (*model)->metrics->Statistics();
  auto mean_us = [](const server::ModelVersionStatistics::Duration& a,
                    const server::ModelVersionStatistics::Duration& b) {
    return a.count == b.count ? 0.0 : (a.ns - b.ns) / 1e3 / static_cast<double>(a.count - b.count);
  };
  char line[256];
  std::snprintf(line, sizeof(line),
                "decode %.1f us, receipt->run start %.1f us, engine %.1f us, encode %.1f us, "
                "receipt->answer %.1f us",
                mean_us(now.compute_input, last->compute_input), mean_us(now.queue, last->queue),
                mean_us(now.compute_infer, last->compute_infer),
                mean_us(now.compute_output, last->compute_output),
                mean_us(now.success, last->success));
  *last = now;
  return line;
}

void Summarize(std::vector<double>& lat, Result& r) {
  std::sort(lat.begin(), lat.end());
  r.median_us = lat[lat.size() / 2];
  r.p99_us = lat[std::min(lat.size() - 1, lat.size() * 99 / 100)];
}

int Main(int argc, char** argv) {
  std::string models = "bench_models";
  std::string name = "serve_rnn";
  int requests = 4000;
  int rounds = 3;
  std::vector<int> client_counts = {1, 2, 8, 32};
  int64_t rss_requests = 0;
  int rss_clients = 8;
  int inline_run_limit_us = -1;  // -1: the server's default
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--models=", 9) == 0) models = argv[i] + 9;
    if (std::strncmp(argv[i], "--model=", 8) == 0) name = argv[i] + 8;
    if (std::strncmp(argv[i], "--requests=", 11) == 0) requests = std::atoi(argv[i] + 11);
    if (std::strncmp(argv[i], "--rounds=", 9) == 0) rounds = std::atoi(argv[i] + 9);
    if (std::strncmp(argv[i], "--rss_requests=", 15) == 0) rss_requests = std::atoll(argv[i] + 15);
    if (std::strncmp(argv[i], "--rss_clients=", 14) == 0) rss_clients = std::atoi(argv[i] + 14);
    if (std::strncmp(argv[i], "--inline_run_limit_us=", 22) == 0) {
      inline_run_limit_us = std::atoi(argv[i] + 22);
    }
    if (std::strncmp(argv[i], "--clients=", 10) == 0) {
      client_counts.clear();
      for (const char* p = argv[i] + 10; *p != '\0';) {
        client_counts.push_back(std::atoi(p));
        while (*p != '\0' && *p != ',') ++p;
        if (*p == ',') ++p;
      }
    }
  }
  const std::string folder = models + "/" + name;
  auto model = engine::Model::Load(folder + "/model.onnx");
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", std::string(model.status().message()).c_str());
    return 2;
  }
  auto inputs = tools::ReadInputs(**model, folder + "/test_data_set_0");
  if (!inputs.ok()) return 2;
  engine::SetIntraOpThreads(1);

  // Engine time in process.
  std::vector<double> engine_us;
  for (int i = 0; i < 2000; ++i) {
    const auto t0 = Clock::now();
    auto out = (*model)->Run(tools::ViewInputs(*inputs), engine::RunOptions());
    engine_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (!out.ok()) return 2;
  }
  std::sort(engine_us.begin(), engine_us.end());
  const double engine_median = engine_us[engine_us.size() / 2];

  // The repository: <tmp>/<name>/1/model.onnx.
  const std::filesystem::path repo = std::filesystem::temp_directory_path() /
                                     ("loopserve_serving_bench_" + std::to_string(getpid()));
  std::filesystem::create_directories(repo / name / "1");
  std::filesystem::copy_file(folder + "/model.onnx", repo / name / "1" / "model.onnx",
                             std::filesystem::copy_options::overwrite_existing);
  server::ServerOptions options;
  options.model_repository = repo.string();
  options.address = "127.0.0.1";
  options.grpc_port = 0;
  options.metrics_port = -1;
  options.workers = engine::AvailableCores();
  options.intra_op_threads = 1;
  options.max_queue_size = 256;
  options.model_control_mode = server::ModelControlMode::kNone;
  if (inline_run_limit_us >= 0) options.inline_run_limit = absl::Microseconds(inline_run_limit_us);
  auto loopserve = server::Server::Start(options);
  if (!loopserve.ok()) {
    std::fprintf(stderr, "%s\n", std::string(loopserve.status().message()).c_str());
    return 2;
  }
  EchoService echo_service;
  grpc::ServerBuilder builder;
  int echo_port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &echo_port);
  builder.RegisterService(&echo_service);
  std::unique_ptr<grpc::Server> echo = builder.BuildAndStart();

  const inference::ModelInferRequest request = MakeRequest(name, **model, *inputs);
  size_t response_bytes = 0;
  {
    grpc::ClientContext ctx;
    inference::ModelInferResponse response;
    if (NewStub((*loopserve)->grpc_port())->ModelInfer(&ctx, request, &response).ok()) {
      response_bytes = response.ByteSizeLong();
    }
  }
  std::printf(
      "model %s: request %zu bytes, loopserve's response %zu bytes, engine median %.1f us (in "
      "process, 1 thread)\n",
      name.c_str(), request.ByteSizeLong(), response_bytes, engine_median);
  if (rss_requests > 0) {
    const int64_t every = 10000;
    std::printf("RSS before: %ld KiB; %lld requests from %d clients (channels created once)\n",
                RssKib(), static_cast<long long>(rss_requests), rss_clients);
    const auto series =
        RssRun((*loopserve)->grpc_port(), request, rss_clients, rss_requests, every);
    for (const auto& [done, kib] : series) {
      std::printf("  after %7lld requests: VmRSS %ld KiB\n", static_cast<long long>(done), kib);
    }
    if (series.size() >= 2) {
      std::printf("growth from %lld to %lld requests: %+ld KiB\n",
                  static_cast<long long>(series.front().first),
                  static_cast<long long>(series.back().first),
                  series.back().second - series.front().second);
    }
    echo->Shutdown();
    (*loopserve)->Shutdown();
    std::filesystem::remove_all(repo);
    return 0;
  }
  std::printf(
      "| clients | echo median (us) | loopserve median (us) | overhead (us) | "
      "overhead / echo | echo req/s | loopserve req/s |\n|---|---|---|---|---|---|---|\n");
  long rss_start = -1;
  int64_t served = 0;
  server::ModelVersionStatistics last_stats;
  std::vector<std::string> server_times;
  for (int clients : client_counts) {
    std::vector<double> echo_lat, ours_lat;
    double echo_rps = 0, ours_rps = 0;
    Drive(echo_port, request, clients, 200, &echo_lat);  // warm up both
    Drive((*loopserve)->grpc_port(), request, clients, 200, &ours_lat);
    echo_lat.clear();
    ours_lat.clear();
    ServerTimes(**loopserve, name, &last_stats);  // leaves the warm-up out
    if (rss_start < 0) rss_start = RssKib();      // after the first warm-up: pools and caches exist
    for (int r = 0; r < rounds; ++r) {
      echo_rps += Drive(echo_port, request, clients, requests, &echo_lat).rps / rounds;
      ours_rps +=
          Drive((*loopserve)->grpc_port(), request, clients, requests, &ours_lat).rps / rounds;
      served += requests;
    }
    Result e, o;
    Summarize(echo_lat, e);
    Summarize(ours_lat, o);
    const double overhead = o.median_us - engine_median;
    std::printf("| %d | %.1f | %.1f | %.1f | %.2fx | %.0f | %.0f |\n", clients, e.median_us,
                o.median_us, overhead, overhead / e.median_us, echo_rps, ours_rps);
    std::fflush(stdout);
    server_times.push_back(std::to_string(clients) +
                           " clients: " + ServerTimes(**loopserve, name, &last_stats));
  }
  std::printf("loopserve's own means per request (ModelStatistics):\n");
  for (const std::string& line : server_times) std::printf("  %s\n", line.c_str());
  std::printf("RSS after warm-up %ld KiB, after %lld more loopserve requests %ld KiB\n", rss_start,
              static_cast<long long>(served), RssKib());
  echo->Shutdown();
  (*loopserve)->Shutdown();
  std::filesystem::remove_all(repo);
  return 0;
}

}  // namespace
}  // namespace loopserve

int main(int argc, char** argv) {
  loopserve::engine::UsePassiveOpenMpWait(argv);
  return loopserve::Main(argc, argv);
}
