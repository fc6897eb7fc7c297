#pragma once

// Helpers shared by the integration tests: locations baked in by CMake, a plain-HTTP GET for the
// metrics endpoint, Prometheus text parsing, the numpy-computed expected cases of the test model
// repository, and tensor comparison.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/tensor.h"

namespace loopserve::testing {

// Build-time locations (CMake compile definitions).
std::string LoopserveBinary();
std::string LoopctlBinary();
std::string TestModelRepository();

struct HttpResponse {
  int status = 0;
  std::string body;
};

// GET http://127.0.0.1:<port><path> over a plain socket (HTTP/1.0, Connection: close).
absl::StatusOr<HttpResponse> HttpGet(int port, const std::string& path);

// Sends `request` (raw bytes: request line, headers, body) to 127.0.0.1:<port> and reads the
// answer until the server closes the connection (so ask for Connection: close, or send something
// the server closes on). A server that closes before taking the whole request still has its
// answer read. Reads time out after 10 s. `piece` > 0 trickles the request: that many bytes at a
// time, each in its own TCP segment, 1 ms apart (a slow client, or a network that splits).
absl::StatusOr<HttpResponse> HttpSend(int port, absl::string_view request, size_t piece = 0);

// Sums the samples of metric `name` (exact name, e.g. "loopserve_loop_iterations_count") whose
// label set contains every one of `labels` (each `key="value"`). Returns the sum and, through
// `found`, whether any sample matched.
double SumMetric(absl::string_view text, absl::string_view name,
                 const std::vector<std::string>& labels, bool* found = nullptr);

// One numpy-computed case of a test model: OUT_DIR/<model>/<dir>/{input_k,output_k}.pb.
struct ExpectedCase {
  std::string model;
  std::string dir;  // "expected" or "expected_<case>"
  std::vector<client::Tensor> inputs;
  std::vector<client::Tensor> outputs;
};

// Reads the case `dir` of `model` from the test model repository.
absl::StatusOr<ExpectedCase> LoadExpectedCase(const std::string& model, const std::string& dir);

// Empty when `actual` matches `expected` (name, datatype, shape; integers and bools exactly,
// floats within |a - e| <= 1e-6 + 1e-5 * |e|); otherwise a description of the first difference.
std::string CompareTensors(const client::Tensor& expected, const client::Tensor& actual);

}  // namespace loopserve::testing
