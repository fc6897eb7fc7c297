#pragma once

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "engine/runtime/kernel.h"

namespace loopserve::engine {

// The table from op type to kernel factory. Built once, explicitly (RegisterBuiltinKernels), and
// read-only afterwards: thread-safe for concurrent Find.
class KernelRegistry {
 public:
  // Registers `factory` for `op_type` in the default ONNX domain (""), for opsets
  // [min_opset, max_opset]. A later registration of the same op and overlapping opsets wins.
  void Register(const std::string& op_type, KernelFactory factory, int min_opset = 1,
                int max_opset = 1 << 30);

  // The factory for `op_type` at `opset`, or nullptr.
  const KernelFactory* Find(const std::string& op_type, int opset) const;

  // The registry with every built-in kernel (engine/kernels/builtin.cc). Built on first use.
  static const KernelRegistry& Builtin();

 private:
  struct Entry {
    int min_opset;
    int max_opset;
    KernelFactory factory;
  };
  absl::flat_hash_map<std::string, std::vector<Entry>> entries_;
};

// Adds every built-in kernel to `registry`. The one explicit kernel table of the engine.
void RegisterBuiltinKernels(KernelRegistry& registry);

}  // namespace loopserve::engine
