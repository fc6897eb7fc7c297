// Streaming a running Loop: for a greedy decoder of --steps steps, the time to the first
// streamed token against the time to the whole answer, and what streaming costs against
// ModelInfer. Two decoders:
//   --greedy=build/bench/bench_models/greedy/model.onnx   bench/make_bench_models.py's `greedy`
//       (hidden 256, vocabulary 1024: two matrix-vector products, Tanh, ArgMax per token; its
//       EOS is never produced), served from a repository made in a temporary folder;
//   --models=DIR   a repository with deploy's toy `greedy_decoder` (vocabulary 8, start token 4,
//       which never meets EOS): per-iteration work is ~1 us, so it shows the per-response cost.
//
//   build/bin/stream_bench (--greedy=FILE | --models=DIR) [--steps=200] [--requests=300]
//                          [--rounds=3] [--clients=2] [--seconds=3]
//
// loopserve runs in this process on 127.0.0.1:0; the clients use the synchronous generated stub
// (one channel each), as serving_bench does. Per request:
//   ModelInfer         the whole answer (latency);
//   ModelStreamInfer   stream_iterations: true on a fresh stream: time to the first iteration
//                      response, time to the final response, and every slice read;
//   ModelStreamInfer   without stream_iterations (one response), to separate the stream's own
//                      cost from the per-iteration responses.
//   REST /infer        the same request as JSON over HTTP/1.1 (libcurl, keep-alive): the whole
//                      answer;
//   REST SSE           POST .../generate_stream: time to the first server-sent event, time to
//                      the final one, every event read.
// The modes alternate request by request; medians over all requests. Then --clients closed-loop
// clients run each mode for --seconds: requests per second.

#include <curl/curl.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "proto/grpc_service.grpc.pb.h"
#include "server/server.h"

namespace loopserve {
namespace {

using Clock = std::chrono::steady_clock;

double Micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::unique_ptr<inference::GRPCInferenceService::Stub> NewStub(int port) {
  grpc::ChannelArguments args;
  args.SetInt("grpc.use_local_subchannel_pool", 1);  // a connection per client
  return inference::GRPCInferenceService::NewStub(grpc::CreateCustomChannel(
      "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials(), args));
}

constexpr int64_t kBenchHidden = 256;  // make_bench_models.py's greedy

inference::ModelInferRequest DecoderRequest(bool bench_greedy, int64_t steps,
                                            bool stream_iterations) {
  inference::ModelInferRequest request;
  request.set_model_name(bench_greedy ? "greedy" : "greedy_decoder");
  auto add = [&](const char* name, const char* datatype, std::vector<int64_t> shape,
                 std::string bytes) {
    auto* in = request.add_inputs();
    in->set_name(name);
    in->set_datatype(datatype);
    for (int64_t d : shape) in->add_shape(d);
    request.add_raw_input_contents(std::move(bytes));
  };
  auto int64 = [](int64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); };
  if (bench_greedy) {
    add("M", "INT64", {}, int64(steps));
    add("cond", "BOOL", {}, std::string(1, '\1'));
    add("h0", "FP32", {1, kBenchHidden}, std::string(kBenchHidden * sizeof(float), '\0'));
    add("tok0", "INT64", {1}, int64(1));
  } else {
    add("start_token", "INT64", {1}, int64(4));
    add("max_len", "INT64", {}, int64(steps));
  }
  if (stream_iterations) (*request.mutable_parameters())["stream_iterations"].set_bool_param(true);
  return request;
}

struct Timing {
  double first_us = 0;  // first response (a slice, or the only response)
  double total_us = 0;  // final response
  int64_t responses = 0;
  bool ok = false;
};

Timing Unary(inference::GRPCInferenceService::Stub& stub,
             const inference::ModelInferRequest& request) {
  grpc::ClientContext context;
  inference::ModelInferResponse response;
  const Clock::time_point start = Clock::now();
  Timing t;
  t.ok = stub.ModelInfer(&context, request, &response).ok();
  t.total_us = t.first_us = Micros(Clock::now() - start);
  t.responses = 1;
  return t;
}

Timing Streamed(inference::GRPCInferenceService::Stub& stub,
                const inference::ModelInferRequest& request) {
  grpc::ClientContext context;
  const Clock::time_point start = Clock::now();
  auto stream = stub.ModelStreamInfer(&context);
  Timing t;
  if (stream->Write(request)) stream->WritesDone();
  inference::ModelStreamInferResponse message;
  bool errors = false;
  while (stream->Read(&message)) {
    const double at = Micros(Clock::now() - start);
    if (t.responses++ == 0) t.first_us = at;
    t.total_us = at;
    errors |= !message.error_message().empty();
  }
  t.ok = stream->Finish().ok() && !errors;
  return t;
}

// The decoder's request as a KServe v2 JSON body.
std::string DecoderJson(bool bench_greedy, int64_t steps) {
  const std::string n = std::to_string(steps);
  if (!bench_greedy) {
    return R"({"inputs":[{"name":"start_token","datatype":"INT64","shape":[1],"data":[4]},)"
           R"({"name":"max_len","datatype":"INT64","shape":[],"data":[)" +
           n + "]}]}";
  }
  std::string zeros;
  for (int64_t i = 0; i < kBenchHidden; ++i) zeros += i == 0 ? "0" : ",0";
  return R"({"inputs":[{"name":"M","datatype":"INT64","shape":[],"data":[)" + n +
         R"(]},{"name":"cond","datatype":"BOOL","shape":[],"data":[true]},)"
         R"({"name":"h0","datatype":"FP32","shape":[1,256],"data":[)" +
         zeros + R"(]},{"name":"tok0","datatype":"INT64","shape":[1],"data":[1]}]})";
}

// One client's HTTP connection (a libcurl easy handle, kept alive from request to request).
class RestClient {
 public:
  RestClient(int port, const std::string& model) : curl_(curl_easy_init()) {
    const std::string base = "http://127.0.0.1:" + std::to_string(port) + "/v2/models/" + model;
    infer_url_ = base + "/infer";
    sse_url_ = base + "/generate_stream";
    headers_ = curl_slist_append(nullptr, "Content-Type: application/json");
  }
  ~RestClient() {
    curl_slist_free_all(headers_);
    curl_easy_cleanup(curl_);
  }

  // POST `body` to /infer (`events` false) or generate_stream; counts server-sent events (each
  // ends with a blank line) as they arrive.
  Timing Post(const std::string& body, bool events) {
    start_ = Clock::now();
    timing_ = Timing();
    events_ = events;
    previous_ = '\0';
    curl_easy_setopt(curl_, CURLOPT_URL, events ? sse_url_.c_str() : infer_url_.c_str());
    curl_easy_setopt(curl_, CURLOPT_HTTPHEADER, headers_);
    curl_easy_setopt(curl_, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(curl_, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    curl_easy_setopt(curl_, CURLOPT_WRITEFUNCTION, &RestClient::Write);
    curl_easy_setopt(curl_, CURLOPT_WRITEDATA, this);
    long status = 0;
    timing_.ok = curl_easy_perform(curl_) == CURLE_OK &&
                 curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK &&
                 status == 200;
    timing_.total_us = Micros(Clock::now() - start_);
    if (!events) {
      timing_.first_us = timing_.total_us;
      timing_.responses = 1;
    }
    return timing_;
  }

 private:
  static size_t Write(char* data, size_t size, size_t count, void* self) {
    auto* client = static_cast<RestClient*>(self);
    const size_t n = size * count;
    if (!client->events_) return n;
    for (size_t i = 0; i < n; ++i) {
      if (data[i] == '\n' && client->previous_ == '\n' && client->timing_.responses++ == 0) {
        client->timing_.first_us = Micros(Clock::now() - client->start_);
      }
      client->previous_ = data[i];
    }
    return n;
  }

  CURL* const curl_;
  curl_slist* headers_ = nullptr;
  std::string infer_url_, sse_url_;
  Clock::time_point start_;
  Timing timing_;
  bool events_ = false;
  char previous_ = '\0';
};

enum Mode { kUnary, kStreamIterations, kStreamOnce, kRestUnary, kRestEvents, kModes };
const char* const kModeNames[] = {"ModelInfer", "ModelStreamInfer stream_iterations",
                                  "ModelStreamInfer one response", "REST /infer",
                                  "REST generate_stream (SSE)"};

Timing RunOne(Mode mode, inference::GRPCInferenceService::Stub& stub,
              const inference::ModelInferRequest* requests, RestClient& rest,
              const std::string& json) {
  switch (mode) {
    case kUnary:
      return Unary(stub, requests[kUnary]);
    case kRestUnary:
      return rest.Post(json, /*events=*/false);
    case kRestEvents:
      return rest.Post(json, /*events=*/true);
    default:
      return Streamed(stub, requests[mode]);
  }
}

int Main(int argc, char** argv) {
  std::string models;
  std::string greedy;
  int64_t steps = 200, requests = 300, rounds = 3, clients = 2;
  double seconds = 3;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      const std::string prefix = std::string("--") + flag + "=";
      return a.rfind(prefix, 0) == 0 ? argv[i] + prefix.size() : nullptr;
    };
    if (const char* v = value("models")) {
      models = v;
    } else if (const char* v = value("greedy")) {
      greedy = v;
    } else if (const char* v = value("steps")) {
      steps = std::atoll(v);
    } else if (const char* v = value("requests")) {
      requests = std::atoll(v);
    } else if (const char* v = value("rounds")) {
      rounds = std::atoll(v);
    } else if (const char* v = value("clients")) {
      clients = std::atoll(v);
    } else if (const char* v = value("seconds")) {
      seconds = std::atof(v);
    } else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  const bool bench_greedy = !greedy.empty();
  if (bench_greedy == !models.empty()) {
    std::fprintf(stderr, "give one of --greedy=FILE and --models=DIR\n");
    return 2;
  }
  std::filesystem::path temp;
  if (bench_greedy) {
    char pattern[] = "/tmp/stream_bench_XXXXXX";
    if (mkdtemp(pattern) == nullptr) return 1;
    temp = pattern;
    std::filesystem::create_directories(temp / "greedy" / "1");
    std::filesystem::copy_file(greedy, temp / "greedy" / "1" / "model.onnx");
    models = temp.string();
  }
  server::ServerOptions options;
  options.model_repository = models;
  options.address = "127.0.0.1";
  options.grpc_port = 0;
  options.http_port = 0;
  options.metrics_port = -1;
  options.model_control_mode = server::ModelControlMode::kNone;
  auto server = server::Server::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "server: %s\n", server.status().ToString().c_str());
    return 1;
  }
  const int port = (*server)->grpc_port();
  const inference::ModelInferRequest reqs[kModes] = {DecoderRequest(bench_greedy, steps, false),
                                                     DecoderRequest(bench_greedy, steps, true),
                                                     DecoderRequest(bench_greedy, steps, false),
                                                     {},
                                                     {}};
  const int http_port = (*server)->http_port();
  const std::string model = bench_greedy ? "greedy" : "greedy_decoder";
  const std::string json = DecoderJson(bench_greedy, steps);
  curl_global_init(CURL_GLOBAL_DEFAULT);

  auto stub = NewStub(port);
  RestClient rest(http_port, model);
  const Timing check = Streamed(*stub, reqs[kStreamIterations]);
  const Timing check_events = rest.Post(json, /*events=*/true);
  if (!check.ok || check.responses != steps + 1 || !check_events.ok ||
      check_events.responses != steps + 1) {
    std::fprintf(stderr,
                 "stream_iterations: %lld responses (ok %d), %lld events (ok %d), expected "
                 "%lld\n",
                 static_cast<long long>(check.responses), check.ok,
                 static_cast<long long>(check_events.responses), check_events.ok,
                 static_cast<long long>(steps + 1));
    return 1;
  }
  for (int m = 0; m < kModes; ++m) {
    for (int i = 0; i < 50; ++i) RunOne(static_cast<Mode>(m), *stub, reqs, rest, json);  // warm-up
  }
  std::vector<double> first[kModes], total[kModes];
  // Modes interleave request by request, so drifting machine load hits them alike.
  for (int64_t r = 0; r < rounds; ++r) {
    for (int64_t i = 0; i < requests; ++i) {
      for (int m = 0; m < kModes; ++m) {
        const Timing t = RunOne(static_cast<Mode>(m), *stub, reqs, rest, json);
        if (!t.ok) {
          std::fprintf(stderr, "%s failed\n", kModeNames[m]);
          return 1;
        }
        first[m].push_back(t.first_us);
        total[m].push_back(t.total_us);
      }
    }
  }
  std::printf("%s, %lld steps, %lld requests x %lld rounds, one client\n",
              bench_greedy ? "greedy (hidden 256, vocabulary 1024)" : "greedy_decoder (toy)",
              static_cast<long long>(steps), static_cast<long long>(requests),
              static_cast<long long>(rounds));
  std::printf("%-36s %14s %14s\n", "mode", "first us (p50)", "whole us (p50)");
  for (int m = 0; m < kModes; ++m) {
    std::printf("%-36s %14.1f %14.1f\n", kModeNames[m], Median(first[m]), Median(total[m]));
  }
  const double unary = Median(total[kUnary]);
  std::printf("time to first token: %.1f us = %.3fx ModelInfer's whole answer (%.1f us)\n",
              Median(first[kStreamIterations]), Median(first[kStreamIterations]) / unary, unary);
  std::printf("whole answer streamed: %.2fx ModelInfer's\n",
              Median(total[kStreamIterations]) / unary);
  const double rest_unary = Median(total[kRestUnary]);
  std::printf(
      "REST: first event %.1f us = %.3fx /infer's whole answer (%.1f us); whole answer "
      "as events %.2fx /infer's\n",
      Median(first[kRestEvents]), Median(first[kRestEvents]) / rest_unary, rest_unary,
      Median(total[kRestEvents]) / rest_unary);

  double rps[kModes];
  for (int m = 0; m < kModes; ++m) {
    std::atomic<int64_t> done{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int64_t c = 0; c < clients; ++c) {
      threads.emplace_back([&, m] {
        auto own = NewStub(port);
        RestClient own_rest(http_port, model);
        while (!stop.load()) {
          if (RunOne(static_cast<Mode>(m), *own, reqs, own_rest, json).ok) done.fetch_add(1);
        }
      });
    }
    const Clock::time_point start = Clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop.store(true);
    for (auto& t : threads) t.join();
    rps[m] = done.load() / std::chrono::duration<double>(Clock::now() - start).count();
  }
  std::printf("throughput, %lld closed-loop clients:\n", static_cast<long long>(clients));
  for (int m = 0; m < kModes; ++m) {
    const int peer = m >= kRestUnary ? kRestUnary : kUnary;
    std::printf("  %-36s %10.1f req/s  (%.2fx %s)\n", kModeNames[m], rps[m], rps[m] / rps[peer],
                kModeNames[peer]);
  }
  (*server)->Shutdown();
  curl_global_cleanup();
  if (!temp.empty()) std::filesystem::remove_all(temp);
  return 0;
}

}  // namespace
}  // namespace loopserve

int main(int argc, char** argv) { return loopserve::Main(argc, argv); }
