// Fuzz target: a KServe v2 REST request, through the HTTP adapter's own code without a socket:
// the path through ParseRestRoute; for .../infer and .../generate_stream the body through
// RestInferParser (JSON `data`, Triton's binary data extension, parameters, requested outputs),
// BindRequest against the model the path names, a run under tight limits and EncodeRestResponse
// (JSON or binary outputs as asked, with the stream's final-response parameters for
// generate_stream); for the repository's index and load the body through ParseIndexBody /
// ParseLoadBody; every error through ErrorJson, as the server answers it. Models
// (fuzz_models.h): `counter`, or for any other name `identity` (the one of the first input's
// datatype).
//
// Input: the path, '\n', the Inference-Header-Content-Length header's value ("-": no header),
// '\n', the body. Seeds: make_seeds.py writes the request bodies of the tests. See README.md.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"
#include "engine/engine.h"
#include "server/http/http_codec.h"
#include "server/http/http_server.h"
#include "server/http/http_service.h"
#include "server/runner/infer_request.h"
#include "tests/fuzz/fuzz_models.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using loopserve::engine::Model;
namespace server = loopserve::server;

// The first line of `input`, and `input` advanced past it (all of it when there is no '\n').
absl::string_view TakeLine(absl::string_view& input) {
  const size_t end = input.find('\n');
  const absl::string_view line = input.substr(0, end);
  input.remove_prefix(end == absl::string_view::npos ? input.size() : end + 1);
  return line;
}

// What the server does with an error: its message becomes the JSON body.
void Answer(const absl::Status& status) {
  if (!status.ok()) (void)server::ErrorJson(status.message());
}

void Infer(const server::RestRoute& route, absl::string_view body, const char* header_length) {
  static const std::shared_ptr<const Model> counter = loopserve::fuzz::CounterModel();
  static server::RestInferParser parser;
  server::InferenceRequest request;
  server::RestOutputs outputs;
  request.model_name = route.model;
  request.model_version = route.version;
  const absl::Status parsed = parser.Parse(route.action, body, header_length, &request, &outputs);
  if (!parsed.ok()) return Answer(parsed);
  const Model& model =
      route.model == "counter"
          ? *counter
          : loopserve::fuzz::IdentityModelFor(request.inputs.empty() ? "" : request.inputs[0].name);
  auto decoded = server::BindRequest(request, model);
  if (!decoded.ok()) return Answer(decoded.status());
  auto values = model.Run(std::move(decoded->inputs), loopserve::fuzz::RunLimits());
  if (!values.ok()) return Answer(values.status());
  const server::RestStreamParameters final_response{-1, /*final_response=*/true};
  std::string response;
  size_t json_length = 0;
  Answer(server::EncodeRestResponse(model, route.model, route.version, request.id, decoded->outputs,
                                    *values, outputs, &response, &json_length,
                                    route.action == "generate_stream" ? &final_response : nullptr));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view input(reinterpret_cast<const char*>(data), size);
  const std::string path(TakeLine(input));
  const std::string header(TakeLine(input));
  // As HttpServer hands bodies over: contiguous, with kBodyPadding readable bytes past the end
  // (simdjson reads them). Only the body's own bytes are initialized, as in the server.
  std::string storage;
  storage.reserve(input.size() + server::HttpExchange::kBodyPadding);
  storage.assign(input.data(), input.size());
  const absl::string_view body = storage;

  const server::RestRoute route = server::ParseRestRoute(path);
  if (route.action == "infer" || route.action == "generate_stream") {
    Infer(route, body, header == "-" ? nullptr : header.c_str());
  } else if (route.action == "index") {
    Answer(server::ParseIndexBody(body).status());
  } else if (route.action == "load") {
    Answer(server::ParseLoadBody(body).status());
  }
  return 0;
}
