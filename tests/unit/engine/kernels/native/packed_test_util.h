#pragma once

// What the packed product tests (packed_gemv_test, packed_gemm_test) share: random operands, the
// fused activations in double precision (the oracle's side of each comparison), and the nodes of
// the small graphs that check the MatMul kernels choose them.

#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/ir/graph.h"
#include "engine/kernels/native/packed_gemv.h"
#include "engine/tensor/tensor.h"

namespace loopserve::engine::native::test_util {

// A float32 tensor of `shape` with values uniform in [-scale, scale].
inline Tensor Random(const Shape& shape, std::mt19937& rng, float scale = 1.0f) {
  Tensor t(DataType::kFloat32, shape);
  std::uniform_real_distribution<float> dist(-scale, scale);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.mutable_data<float>()[i] = dist(rng);
  return t;
}

// `activation` applied to `v` in double precision.
inline double Activate(double v, PackedGemv::Activation activation) {
  switch (activation) {
    case PackedGemv::Activation::kNone:
      return v;
    case PackedGemv::Activation::kTanh:
      return std::tanh(v);
    case PackedGemv::Activation::kRelu:
      return v > 0 ? v : 0;
    case PackedGemv::Activation::kSigmoid:
      return 1 / (1 + std::exp(-v));
  }
  return v;
}

// A one-output opset-13 node of `op` (named after it) reading `in`.
inline Node MakeNode(const std::string& op, std::vector<ValueId> in, ValueId out) {
  Node n;
  n.name = op;
  n.op_type = op;
  n.opset = 13;
  n.inputs = std::move(in);
  n.outputs = {out};
  return n;
}

}  // namespace loopserve::engine::native::test_util
