#include "tests/integration/test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/onnx_tensor.h"

namespace loopserve::testing {
namespace {

template <typename T>
T At(const client::Tensor& t, int64_t i) {
  T v;
  std::memcpy(&v, t.bytes.data() + i * sizeof(T), sizeof(T));
  return v;
}

}  // namespace

std::string LoopserveBinary() { return LOOPSERVE_BINARY; }
std::string LoopctlBinary() { return LOOPCTL_BINARY; }
std::string TestModelRepository() { return LOOPSERVE_TEST_MODELS; }

absl::StatusOr<HttpResponse> HttpGet(int port, const std::string& path) {
  return HttpSend(port, absl::StrCat("GET ", path,
                                     " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"));
}

absl::StatusOr<HttpResponse> HttpSend(int port, absl::string_view request, size_t piece) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  timeval timeout{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const std::string error = std::strerror(errno);
    close(fd);
    return absl::UnavailableError(absl::StrCat("connect 127.0.0.1:", port, ": ", error));
  }
  if (piece > 0) {
    const int on = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
  }
  for (size_t sent = 0; sent < request.size();) {
    const size_t size = piece > 0 ? std::min(piece, request.size() - sent) : request.size() - sent;
    const ssize_t n = send(fd, request.data() + sent, size, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server closed early: its answer may be waiting
    sent += static_cast<size_t>(n);
    if (piece > 0) absl::SleepFor(absl::Milliseconds(1));  // the input's shape, not a wait
  }
  std::string raw;
  char buf[8192];
  while (true) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == ECONNRESET && !raw.empty()) break;
    if (n < 0) {
      const std::string error = std::strerror(errno);
      close(fd);
      return absl::UnavailableError(absl::StrCat("recv: ", error));
    }
    if (n == 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  const size_t header_end = raw.find("\r\n\r\n");
  const size_t space = raw.find(' ');
  HttpResponse response;
  if (header_end == std::string::npos || space == std::string::npos ||
      !absl::SimpleAtoi(raw.substr(space + 1, 3), &response.status)) {
    return absl::InternalError(absl::StrCat("malformed HTTP response: ", raw.substr(0, 200)));
  }
  response.body = raw.substr(header_end + 4);
  return response;
}

double SumMetric(absl::string_view text, absl::string_view name,
                 const std::vector<std::string>& labels, bool* found) {
  double sum = 0;
  bool any = false;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t name_end = line.find_first_of("{ ");
    if (name_end == absl::string_view::npos || line.substr(0, name_end) != name) continue;
    absl::string_view label_text;
    if (line[name_end] == '{') {
      const size_t close = line.find('}', name_end);
      if (close == absl::string_view::npos) continue;
      label_text = line.substr(name_end, close - name_end + 1);
    }
    bool match = true;
    for (const std::string& label : labels) {
      if (label_text.find(label) == absl::string_view::npos) match = false;
    }
    if (!match) continue;
    const size_t value_start = line.rfind(' ');
    double value = 0;
    if (!absl::SimpleAtod(line.substr(value_start + 1), &value)) continue;
    sum += value;
    any = true;
  }
  if (found != nullptr) *found = any;
  return sum;
}

absl::StatusOr<ExpectedCase> LoadExpectedCase(const std::string& model, const std::string& dir) {
  ExpectedCase c;
  c.model = model;
  c.dir = dir;
  const std::string path = absl::StrCat(TestModelRepository(), "/", model, "/", dir);
  auto inputs = client::ReadOnnxTensorDir(path, "input");
  if (!inputs.ok()) return inputs.status();
  auto outputs = client::ReadOnnxTensorDir(path, "output");
  if (!outputs.ok()) return outputs.status();
  c.inputs = *std::move(inputs);
  c.outputs = *std::move(outputs);
  return c;
}

std::string CompareTensors(const client::Tensor& e, const client::Tensor& a) {
  if (e.name != a.name) return absl::StrCat("name '", a.name, "', expected '", e.name, "'");
  if (e.datatype != a.datatype) {
    return absl::StrCat(e.name, ": datatype ", a.datatype, ", expected ", e.datatype);
  }
  if (e.shape != a.shape) {
    return absl::StrCat(e.name, ": shape [", absl::StrJoin(a.shape, ","), "], expected [",
                        absl::StrJoin(e.shape, ","), "]");
  }
  if (e.bytes.size() != a.bytes.size()) {
    return absl::StrCat(e.name, ": ", a.bytes.size(), " bytes, expected ", e.bytes.size());
  }
  const int64_t size = client::DataTypeSize(e.datatype);
  if (size == 0 && e.bytes != a.bytes) {  // BYTES: the length-prefixed elements, exactly
    return absl::StrCat(e.name, ": elements differ\n  actual:   ", client::FormatTensor(a),
                        "\n  expected: ", client::FormatTensor(e));
  }
  const int64_t n = size == 0 ? 0 : static_cast<int64_t>(e.bytes.size()) / size;
  for (int64_t i = 0; i < n; ++i) {
    bool equal;
    if (e.datatype == "FP32" || e.datatype == "FP64") {
      const double ev = e.datatype == "FP32" ? At<float>(e, i) : At<double>(e, i);
      const double av = a.datatype == "FP32" ? At<float>(a, i) : At<double>(a, i);
      equal = av == ev || std::abs(av - ev) <= 1e-6 + 1e-5 * std::abs(ev);  // == for infinities
    } else {
      equal = std::memcmp(e.bytes.data() + i * size, a.bytes.data() + i * size, size) == 0;
    }
    if (!equal) {
      return absl::StrCat(e.name, ": element ", i, " is ", client::FormatElement(a, i),
                          ", expected ", client::FormatElement(e, i),
                          "\n  actual:   ", client::FormatTensor(a),
                          "\n  expected: ", client::FormatTensor(e));
    }
  }
  return "";
}

}  // namespace loopserve::testing
