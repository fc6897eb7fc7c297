#pragma once

#include "absl/status/status.h"
#include "engine/ir/graph.h"

namespace loopserve::engine {

// Lowers an ONNX Scan node (opsets 8, 9, 11, 16), as imported with its `body` attribute, into a
// "Loop" node with a LoopSpec, in place, so that Scan runs on the Loop kernel: the same hot path,
// deadline and cancellation checks, iteration cap and iteration metrics.
//
// Scan-9 and later: state variables become carried values, scan inputs sliced inputs (axis
// scan_input_axes[i], reversed for scan_input_directions[i] = 1, the axis removed from each
// part), scan outputs stacked outputs (new axis scan_output_axes[k], reversed for
// scan_output_directions[k] = 1). The loop runs once per part of the scan inputs.
//
// Scan-8 has a batch axis 0 on every input and output and an optional sequence_lens: it becomes
// a Loop over the batch whose body slices each batch entry's sequences to their length, runs the
// Scan-9 form of the body over axis 1 (then axis 0 of the entry), and pads the scan outputs back
// to the longest sequence with zeros (what ONNX Runtime returns for the padding).
//
// InvalidArgument (naming the node) when the node's inputs, outputs, body and attributes do not
// fit together.
absl::Status LowerOnnxScan(Node& node);

}  // namespace loopserve::engine
