#pragma once

// Lowering of ordinary OpenVINO layers (opset1-opset8 element-wise, shape, data-movement,
// reduction and comparison ops) into engine IR nodes: ONNX-named ops where the semantics match
// (Subtract -> Sub, Convert -> Cast, ShapeOf -> Shape, Select -> Where, ...), with the attributes
// and helper nodes (Transpose for MatMul's transpose_a/b, Cast of int32 shape operands, ...) that
// make them match; "ov:"-prefixed ops (engine/kernels/openvino) where no ONNX op does.
// Parameter, Result, Const, Loop and TensorIterator are handled by the importer itself.

#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "engine/import/openvino/ir_document.h"
#include "engine/ir/graph.h"
#include "engine/tensor/tensor.h"

namespace loopserve::engine::openvino {

// The ONNX opset the emitted ONNX-named nodes are written against (list operands as inputs,
// Reshape's allowzero, Softmax on one axis).
inline constexpr int kOnnxOpset = 18;

// Constants of the graph being built, by value id.
using ConstantMap = absl::flat_hash_map<ValueId, std::shared_ptr<const Tensor>>;

struct LayerValues {
  std::vector<ValueId> inputs;   // per input port of the layer; kNoValue when unconnected
  std::vector<ValueId> outputs;  // per output port, already defined in the graph
};

// Appends to `graph` the nodes that compute `layer`. Unimplemented (naming the layer) for an
// unsupported type or attribute value; InvalidArgument for wrong port counts, missing inputs or
// operands the op requires to be constant.
absl::Status LowerLayer(const IrLayer& layer, const LayerValues& values,
                        const ConstantMap& constants, Graph& graph);

// Weight-only compression as NNCF writes it, Multiply(Subtract(Convert(q), zero_point), scale)
// lowered to Mul(Sub(Cast(q), zp), scale) with q an 8-bit constant and zp (a float constant or a
// Cast of a constant of q's type) and scale float constants varying along at most one axis of q:
// rewritten into DequantizeLinear(q, scale, zp; axis), which fold_qdq folds into the integer
// product that reads it (with a quantized activation) or fold_constants into a float weight. The
// Sub and Casts go when nothing else reads them. Anything else is left as it is.
void FoldWeightDecompression(Graph& graph);

}  // namespace loopserve::engine::openvino
