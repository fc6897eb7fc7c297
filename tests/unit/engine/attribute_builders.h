#pragma once

// Attribute builders for the engine tests that put nodes together by hand (native and oneDNN
// kernel tests, transform tests).

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/ir/graph.h"
#include "engine/tensor/tensor.h"

namespace loopserve::engine::test_attrs {

inline Attribute IntAttr(int64_t v) {
  Attribute a;
  a.type = Attribute::Type::kInt;
  a.i = v;
  return a;
}

inline Attribute IntsAttr(std::vector<int64_t> v) {
  Attribute a;
  a.type = Attribute::Type::kInts;
  a.ints = std::move(v);
  return a;
}

inline Attribute StringAttr(std::string v) {
  Attribute a;
  a.type = Attribute::Type::kString;
  a.s = std::move(v);
  return a;
}

inline Attribute FloatAttr(float v) {
  Attribute a;
  a.type = Attribute::Type::kFloat;
  a.f = v;
  return a;
}

inline Attribute TensorAttr(Tensor t) {
  Attribute a;
  a.type = Attribute::Type::kTensor;
  a.tensor = std::make_shared<const Tensor>(std::move(t));
  return a;
}

}  // namespace loopserve::engine::test_attrs
