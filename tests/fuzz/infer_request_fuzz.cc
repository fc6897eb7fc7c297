// Fuzz target: the bytes of a ModelInfer call, through the server's own request path without the
// network: ParseInferRequest -> DecodeInferRequest against the model the request names -> a run
// under tight limits -> EncodeInferOutputs. Two models (fuzz_models.h): `identity` (one [N,3]
// input per KServe datatype, returned as is; the one of the first input's datatype) and `counter`
// (a Loop adding 1 to x [2] M times). Seeds:
// make_seeds.py writes valid and slightly broken requests for both. See README.md.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "engine/engine.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "proto/grpc_service.pb.h"
#include "server/grpc/tensor_codec.h"
#include "server/observability/logging.h"
#include "tests/fuzz/fuzz_models.h"
#include "tests/fuzz/fuzz_util.h"

// As in the server: protobuf's per-field UTF-8 complaints go to the (debug-level) log.
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  loopserve::server::RouteProtobufLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using loopserve::engine::Model;
  static const std::shared_ptr<const Model> counter = loopserve::fuzz::CounterModel();
  grpc::Slice slice(data, size);
  grpc::ByteBuffer bytes(&slice, 1);
  inference::ModelInferRequest request;
  if (!loopserve::server::ParseInferRequest(bytes, "ModelInfer", &request).ok()) return 0;
  const Model& model = request.model_name() == "counter"
                           ? *counter
                           : loopserve::fuzz::IdentityModelFor(
                                 request.inputs_size() > 0 ? request.inputs(0).name() : "");
  auto decoded = loopserve::server::DecodeInferRequest(request, model);
  if (!decoded.ok()) return 0;
  auto outputs = model.Run(std::move(decoded->inputs), loopserve::fuzz::RunLimits());
  if (!outputs.ok()) return 0;
  inference::ModelInferResponse response;
  (void)loopserve::server::EncodeInferOutputs(model, decoded->outputs, *outputs, &response);
  return 0;
}
