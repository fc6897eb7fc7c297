#pragma once

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "engine/runtime/kernel.h"

namespace loopserve::engine {

// The kernel table: op type and opset -> kernel factory. Owned by the kernel families
// (engine/kernels/): built once, explicitly (RegisterBuiltinKernels calls each family's
// Register* function), and read-only afterwards, so concurrent Find is thread-safe. The compiler
// (engine/runtime/plan.h) only looks kernels up in it.
//
// Two registrations of the same op type with overlapping opset ranges are an error: the second is
// dropped and status() reports the first such conflict, naming the op and both ranges (every
// model load fails with it, and a unit test checks the built-in table).
class KernelRegistry {
 public:
  // Registers `factory` for `op_type` in the default ONNX domain (""), for opsets
  // [min_opset, max_opset].
  void Register(const std::string& op_type, KernelFactory factory, int min_opset = 1,
                int max_opset = kMaxOpset);

  // The factory for `op_type` at `opset`, or nullptr.
  const KernelFactory* Find(const std::string& op_type, int opset) const;

  // OK, or Internal naming the first overlapping registration.
  const absl::Status& status() const { return status_; }

  // Every registered op type (for tests and --help output).
  std::vector<std::string> OpTypes() const;

  // The registry with every built-in kernel. Built on first use.
  static const KernelRegistry& Builtin();

  static constexpr int kMaxOpset = 1 << 30;

 private:
  struct Entry {
    int min_opset;
    int max_opset;
    KernelFactory factory;
  };
  absl::flat_hash_map<std::string, std::vector<Entry>> entries_;
  absl::Status status_;
};

// Adds every built-in kernel to `registry` (engine/kernels/builtin.cc). The one explicit kernel
// table of the engine.
void RegisterBuiltinKernels(KernelRegistry& registry);

}  // namespace loopserve::engine
