#pragma once

// loopctl: the command-line client for loopserve (and any Open Inference Protocol gRPC server).
// loopctl_main.cc is a thin wrapper around RunLoopctl; the pieces are exposed for tests.

#include <iosfwd>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/tensor.h"

namespace loopserve::client {

// The text `loopctl --help` prints.
std::string LoopctlUsage();

// Parses an `--input=` value:
//   NAME:DTYPE:SHAPE:VALUES   inline; SHAPE = comma-separated dims ("" for a scalar), VALUES =
//                             comma-separated values in row-major order, or one value that fills
//                             the tensor. BOOL values: true/false/1/0.
//   NAME:PATH                 an ONNX TensorProto file (NAME empty: the name stored in the file).
absl::StatusOr<Tensor> ParseInputSpec(absl::string_view spec);

// Builds a tensor of `datatype`/`shape` from text values (see ParseInputSpec).
absl::StatusOr<Tensor> ParseTensorText(absl::string_view name, absl::string_view datatype,
                                       const std::vector<int64_t>& shape, absl::string_view values);

// Runs loopctl with `args` (args[0] is the program name). Writes results to `out`, errors to
// `err` as `error: <GRPC_CODE_NAME>: <message>`. Returns the exit code: 0 success, 1 the server
// answered with an error (or not live/ready), 2 bad usage.
int RunLoopctl(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace loopserve::client
