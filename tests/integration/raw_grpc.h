#pragma once

// Calls with bytes no generated stub would send: for the tests of what the server does with
// requests that do not parse.

#include <string>

#include "grpcpp/generic/generic_stub.h"

namespace loopserve::testing {

// Sends `bytes` as the serialized request of inference.GRPCInferenceService/`method` through
// `stub` (30 s deadline) and returns the call's status.
grpc::Status RawUnaryCall(grpc::GenericStub& stub, const std::string& method,
                          const std::string& bytes);

}  // namespace loopserve::testing
