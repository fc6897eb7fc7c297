#pragma once

#include "engine/transform/pass.h"

namespace loopserve::engine::transform {

// A TensorIterator (or Loop) over the steps of a sequence whose body is one recurrent cell
// becomes the recurrent layer itself: one RNN / GRU / LSTM node over the whole sequence, which
// projects the inputs of all steps in one product instead of one per step (at hidden 256, batch 1
// the per-step projection read 1 MB of weights each step: bench/RESULTS.md, LSTM layer).
//
// It applies to a Loop node without trip count, condition input or condition result whose port
// map has one sliced input (part_size 1, the whole axis 0 or 1, stride 1 or -1) and whose body is
// `Squeeze(part, that axis) -> cell [-> Unsqueeze(h, that axis)]`, where the cell is an RNN, GRU
// or LSTM node in the OpenVINO cell layout (what the importer makes of RNNCell, GRUCell,
// LSTMCell) with constant weights, no sequence lengths, and its hidden (and cell) state carried:
// the parameter's back edge is the cell's own output. The outputs may be the Unsqueeze
// concatenated along the sliced axis with the slice's stride, and the last hidden / cell state.
// The layer runs in the direction of the stride, with ONNX layout 0 (axis 0) or 1 (axis 1); its
// outputs are squeezed back to the Loop's shapes. Anything else is left alone.
//
// The Loop it replaces counted iterations (metrics, max_loop_iterations); the layer does not:
// its step count is the input's length, as the sliced input bounded the Loop's.
class LowerCellLoopsPass final : public Pass {
 public:
  const char* name() const override { return "lower_cell_loops"; }
  absl::Status Run(Graph& graph, const TransformContext& context,
                   std::vector<std::string>& log) const override;
};

}  // namespace loopserve::engine::transform
