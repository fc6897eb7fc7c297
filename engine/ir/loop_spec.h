#pragma once

#include <cstdint>
#include <vector>

#include "engine/tensor/dtype.h"

namespace loopserve::engine {

// The one Loop representation both importers lower into, modelled on OpenVINO's port map.
//
// A Loop node's inputs are: [0] the trip count (kNoValue when absent), [1] the initial execution
// condition (kNoValue when absent, meaning true), then any further values the ports below name.
// The body is a Graph whose parameters and results are addressed by index.
//
// Per iteration i (0-based), while (no trip count || i < trip count) && condition:
//   1. the current-iteration parameter (if any) is set to i;
//   2. sliced inputs give their i-th part (a sliced input also bounds the trip count by its number
//      of parts); carried parameters hold the previous iteration's
//      result (the initial value on iteration 0); invariant inputs hold their value throughout;
//   3. the body runs;
//   4. concatenated outputs append their result, and the condition result (if any) becomes the
//      condition of the next iteration — the iteration that returns false still contributes;
//   5. back edges hand each carried result to its parameter (by swapping buffers).
// Last-value outputs return the final value; with zero iterations, the initial value of a carried
// parameter and an empty concatenation ([0, ...]).
struct LoopSpec {
  // How a negative trip count is read: ONNX runs 0 iterations, OpenVINO Loop-5 runs forever.
  enum class NegativeTripCount : uint8_t { kZeroIterations, kInfinite };

  struct InputPort {
    enum class Kind : uint8_t { kInvariant, kCarried, kSliced };
    Kind kind = Kind::kInvariant;
    int node_input = -1;  // index into the Loop node's inputs
    int body_param = -1;  // index into body.inputs
    int back_edge = -1;   // kCarried: index into body.outputs feeding body_param next iteration
    // kSliced: the input is cut along `axis` into parts of `part_size` elements covering the
    // inclusive index range [start, end] (negative values count from the end: -1 is the last
    // index), taken first to last (stride +1) or last to first (stride -1). The part keeps the
    // axis (dim part_size; OpenVINO) or, with `squeeze` (part_size 1), loses it (ONNX Scan).
    int64_t axis = 0;
    int64_t stride = 1;
    int64_t part_size = 1;
    int64_t start = 0;
    int64_t end = -1;
    bool squeeze = false;
  };

  struct OutputPort {
    enum class Kind : uint8_t { kLastValue, kConcat, kStack };
    Kind kind = Kind::kLastValue;
    int node_output = -1;  // index into the Loop node's outputs
    int body_result = -1;  // index into body.outputs
    // kConcat: axis of the result along which iterations are joined (negative counts from the
    // end of the result's rank). kStack: iterations are stacked on a new axis `axis` of the output
    // (negative counts from the end of the output's rank, the result's + 1): ONNX Loop's scan
    // outputs use axis 0, Scan's scan_output_axes any.
    int64_t axis = 0;
    int64_t stride = 1;  // -1 lays the iterations out in reverse order
  };

  NegativeTripCount negative_trip_count = NegativeTripCount::kZeroIterations;
  int current_iteration_param = -1;  // body input receiving i, or -1
  int condition_result = -1;         // body output read as the next condition, or -1 (none)
  std::vector<InputPort> inputs;
  std::vector<OutputPort> outputs;
};

}  // namespace loopserve::engine
