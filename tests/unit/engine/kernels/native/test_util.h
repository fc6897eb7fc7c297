#pragma once

// Helpers for the native kernel tests: build a one-node graph by hand, run it through Model, and
// compare results. Expected values in the tests come from the ONNX spec or are worked out by hand.

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/ir/graph.h"
#include "engine/tensor/tensor.h"
#include "engine/tensor/value.h"
#include "gtest/gtest.h"
#include "tests/unit/engine/attribute_builders.h"

namespace loopserve::engine::native_test {

template <typename T>
Tensor Make(const Shape& shape, std::initializer_list<T> values) {
  Tensor t(DataTypeOf<T>::value, shape);
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.NumElements()) << "test tensor size";
  T* p = t.mutable_data<T>();
  for (T v : values) *p++ = v;
  return t;
}

template <typename T>
Tensor Scalar(T v) {
  return Make<T>(Shape{}, {v});
}

inline Tensor I64(std::initializer_list<int64_t> v) {
  return Make<int64_t>(Shape{static_cast<int64_t>(v.size())}, v);
}

using test_attrs::FloatAttr;
using test_attrs::IntAttr;
using test_attrs::IntsAttr;
using test_attrs::StringAttr;
using test_attrs::TensorAttr;

// A node to run, built fluently: OpCase("Gather", 13).In(data).In(indices).Attr("axis", ...).
struct OpCase {
  explicit OpCase(std::string op_type, int op_opset = 17)
      : op(std::move(op_type)), opset(op_opset) {}
  OpCase& In(Tensor t) {
    inputs.emplace_back(std::move(t));
    return *this;
  }
  OpCase& Omitted() {  // an omitted optional input
    inputs.emplace_back(std::nullopt);
    return *this;
  }
  OpCase& Outputs(int n) {  // number of node outputs (default 1)
    num_outputs = n;
    return *this;
  }
  OpCase& Attr(const std::string& name, Attribute a) {
    attributes[name] = std::move(a);
    return *this;
  }

  std::string op;
  int opset;
  std::vector<std::optional<Tensor>> inputs;
  std::map<std::string, Attribute> attributes;
  int num_outputs = 1;
};

// Builds graph + model and runs it. Load errors and run errors both come back as the status.
absl::StatusOr<std::vector<Value>> RunOp(const OpCase& c);

// Runs and returns output 0, failing the test on error.
Tensor RunOk(const OpCase& c);

template <typename T>
void ExpectTensor(const Tensor& t, const Shape& shape, std::initializer_list<T> values) {
  ASSERT_EQ(t.dtype(), DataTypeOf<T>::value)
      << DataTypeName(t.dtype()) << " vs " << DataTypeName(DataTypeOf<T>::value);
  ASSERT_EQ(t.shape(), shape) << t.shape().ToString() << " vs " << shape.ToString();
  ASSERT_EQ(static_cast<int64_t>(values.size()), t.NumElements());
  const T* p = t.data<T>();
  int i = 0;
  for (T v : values) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(p[i])) << "element " << i;
      } else {
        EXPECT_FLOAT_EQ(p[i], v) << "element " << i;
      }
    } else {
      EXPECT_EQ(p[i], v) << "element " << i;
    }
    ++i;
  }
}

// Expects the op to fail with `code` and a message containing `fragment`.
void ExpectError(const OpCase& c, absl::StatusCode code, const std::string& fragment);

}  // namespace loopserve::engine::native_test
