#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/ir/graph.h"
#include "engine/runtime/run_context.h"
#include "engine/tensor/value.h"

namespace loopserve::engine {

class Plan;

// A model input or output as clients see it.
struct TensorSpec {
  std::string name;
  ValueType type;  // kind, element type and dims (-1 = variable)
};

// Largest model file Load reads by default (each of model.onnx, model.xml and model.bin).
inline constexpr int64_t kDefaultMaxModelFileBytes = int64_t{2} << 30;

struct LoadOptions {
  // Name used in error messages ("model 'rnn' v2: ...") by callers; the engine does not add it.
  std::string name;
  // Largest model file accepted, in bytes, checked before reading; 0 = kDefaultMaxModelFileBytes.
  int64_t max_file_bytes = 0;
  // Largest number of tensor bytes loading may allocate (constants, compiled weights); 0 = no
  // limit. Past it the load fails with InvalidArgument before the allocation.
  int64_t max_memory_bytes = 0;
};

// A loaded, compiled model. Immutable after Load and shared as shared_ptr<const Model>: Run is
// thread-safe and may be called concurrently from any number of threads; each call gets its own
// ExecutionFrame and RunContext.
class Model {
 public:
  // Loads `path`: an ONNX model (.onnx) or an OpenVINO IR (.xml with its .bin beside it).
  // InvalidArgument for malformed models, files over the size limit and models needing more
  // memory than allowed (sizes are checked before anything is read or allocated), Unimplemented
  // for unsupported ops/opsets/types (naming the node, op type and opset), NotFound when the file
  // does not exist. Messages name the file by its base name, never its folders. The .onnx file
  // is parsed as it is read and the .bin is mapped, so a file is never held twice in memory.
  static absl::StatusOr<std::shared_ptr<const Model>> Load(const std::string& path,
                                                           const LoadOptions& options = {});
  // Loads an ONNX ModelProto from serialized bytes.
  static absl::StatusOr<std::shared_ptr<const Model>> LoadOnnx(absl::string_view bytes,
                                                               const LoadOptions& options = {});
  // Loads an OpenVINO IR from the text of its .xml and the bytes of its .bin (empty: no weights).
  static absl::StatusOr<std::shared_ptr<const Model>> LoadOpenVino(absl::string_view xml,
                                                                   absl::string_view weights,
                                                                   const LoadOptions& options = {});
  // Compiles an already-imported graph (used by importers and tests).
  static absl::StatusOr<std::shared_ptr<const Model>> FromGraph(std::shared_ptr<Graph> graph,
                                                                const LoadOptions& options = {});

  const std::vector<TensorSpec>& inputs() const { return inputs_; }
  const std::vector<TensorSpec>& outputs() const { return outputs_; }
  // Index of the named input/output, or -1.
  int FindInput(absl::string_view name) const;
  int FindOutput(absl::string_view name) const;

  // Names of every Loop node in the model (nested ones included), indexed as in
  // LoopObserver::OnLoopFinished.
  const std::vector<std::string>& loop_names() const { return loop_names_; }

  // Runs the model. `inputs` are in inputs() order (tensors may be views of caller memory, which
  // must stay valid during the call). Checks each input's kind, element type and rank/dims against
  // the declared ones (InvalidArgument naming the input). Returns the outputs in outputs() order,
  // owning their buffers. `stats` (optional) receives loop counts.
  absl::StatusOr<std::vector<Value>> Run(std::vector<Value> inputs, const RunOptions& options,
                                         RunStats* stats = nullptr) const;

 private:
  Model() = default;
  absl::StatusOr<std::vector<Value>> RunUnchecked(std::vector<Value> inputs,
                                                  const RunOptions& options, RunStats* stats) const;

  std::shared_ptr<const Plan> plan_;
  std::vector<TensorSpec> inputs_;
  std::vector<TensorSpec> outputs_;
  std::vector<std::string> loop_names_;
};

}  // namespace loopserve::engine
