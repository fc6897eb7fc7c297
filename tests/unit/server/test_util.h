#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/ir/graph.h"
#include "gtest/gtest.h"
#include "server/server.h"

namespace loopserve::server::testing {

// `method` http://127.0.0.1:<port><path> (HTTP/1.0, no body) with a plain socket; returns the
// whole HTTP response.
inline std::string HttpRequest(int port, const std::string& method, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request =
        method + " " + path + " HTTP/1.0\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n";
    if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buffer[4096];
      ssize_t n;
      while ((n = read(fd, buffer, sizeof(buffer))) > 0) response.append(buffer, n);
    }
  }
  close(fd);
  return response;
}

// Options for a server on `repository` that serves gRPC on a free port of 127.0.0.1 and has no
// metrics endpoint: what most server tests start from.
inline ServerOptions LocalServerOptions(const std::string& repository) {
  ServerOptions options;
  options.model_repository = repository;
  options.address = "127.0.0.1";
  options.grpc_port = 0;
  options.metrics_port = -1;
  return options;
}

// A graph with no nodes whose outputs are its inputs: the engine returns copies of what it is fed.
// Inputs (and outputs, same names): x float32 [-1,2], y int64 [3], b bool [] (scalar).
inline std::shared_ptr<const engine::Model> PassthroughModel() {
  auto graph = std::make_shared<engine::Graph>();
  auto add = [&](const char* name, engine::DataType dtype, std::vector<int64_t> dims) {
    engine::ValueType type;
    type.kind = engine::ValueKind::kTensor;
    type.dtype = dtype;
    type.dims = std::move(dims);
    return graph->AddValue(name, type);
  };
  const engine::ValueId x = add("x", engine::DataType::kFloat32, {-1, 2});
  const engine::ValueId y = add("y", engine::DataType::kInt64, {3});
  const engine::ValueId b = add("b", engine::DataType::kBool, {});
  graph->inputs = {x, y, b};
  graph->outputs = {x, y, b};
  auto model = engine::Model::FromGraph(graph);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

// A ModelLoader (ServerOptions::model_loader) that serves PassthroughModel for every path.
inline absl::StatusOr<std::shared_ptr<const engine::Model>> PassthroughLoader(
    const std::string&, const engine::LoadOptions&) {
  return PassthroughModel();
}

// A tensor of PassthroughModelOf: name, element type, dims (nullopt: unknown rank), kind.
struct TensorDecl {
  std::string name;
  engine::DataType dtype;
  std::optional<std::vector<int64_t>> dims;
  engine::ValueKind kind = engine::ValueKind::kTensor;
};

// A graph with no nodes whose inputs are `tensors` and whose outputs are the same values.
inline std::shared_ptr<const engine::Model> PassthroughModelOf(
    const std::vector<TensorDecl>& tensors) {
  auto graph = std::make_shared<engine::Graph>();
  for (const TensorDecl& tensor : tensors) {
    engine::ValueType type;
    type.kind = tensor.kind;
    type.dtype = tensor.dtype;
    type.dims = tensor.dims;
    const engine::ValueId id = graph->AddValue(tensor.name, type);
    graph->inputs.push_back(id);
    graph->outputs.push_back(id);
  }
  auto model = engine::Model::FromGraph(graph);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

// A fresh directory under the system temp dir, removed with the object.
class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "loopserve_test_XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

  // Creates `relative` (and its parents) as a file with `contents`.
  void WriteFile(const std::string& relative, const std::string& contents = "") const {
    const std::filesystem::path file = std::filesystem::path(path_) / relative;
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file) << contents;
  }
  void MakeDir(const std::string& relative) const {
    std::filesystem::create_directories(std::filesystem::path(path_) / relative);
  }

 private:
  std::string path_;
};

}  // namespace loopserve::server::testing
