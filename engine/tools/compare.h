#pragma once

// The output comparison of the ONNX backend-test runner (onnx 1.12
// `Runner.assert_similar_outputs`, see shared/research/ort-node-conformance.md §3), for looprun.

#include <optional>
#include <string>

#include "engine/tensor/tensor.h"
#include "engine/tensor/value.h"

namespace loopserve::tools {

// Tolerances for floating-point elements: |actual - expected| <= atol + rtol * |expected|, with
// NaN == NaN and equal infinities equal.
struct Tolerance {
  double rtol = 1e-3;
  double atol = 1e-7;
};

// Compares `actual` with the reference `expected`: same element type, same shape; floating types
// (float32/64, float16, bfloat16) element-wise within `tolerance`; integers and bools exactly.
// A bfloat16 result is compared with a uint16 reference as bit patterns (the onnx 1.12 test data
// store bfloat16 that way). Returns nullopt when they match, otherwise a one-line description of
// the difference ("3 of 12 elements differ; first at [1,2]: got 1.5, expected 1.6").
std::optional<std::string> CompareTensors(const engine::Tensor& expected,
                                          const engine::Tensor& actual,
                                          const Tolerance& tolerance = {});

// As CompareTensors for values: tensors as above, sequences element-wise (same length), an empty
// optional matches only an empty optional.
std::optional<std::string> CompareValues(const engine::Value& expected, const engine::Value& actual,
                                         const Tolerance& tolerance = {});

}  // namespace loopserve::tools
