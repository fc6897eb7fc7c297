// QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger, QLinearMatMul and
// Unique (ONNX spec examples).

#include "tests/unit/engine/kernels/native/test_util.h"

namespace loopserve::engine::native_test {
namespace {

TEST(QuantizeTest, SpecExamples) {
  // x = [0, 2, 3, 1000, -254, -1000], scale 2, zero point 128.
  ExpectTensor<uint8_t>(RunOk(OpCase("QuantizeLinear", 13)
                                  .In(Make<float>({6}, {0, 2, 3, 1000, -254, -1000}))
                                  .In(Scalar<float>(2))
                                  .In(Scalar<uint8_t>(128))),
                        {6}, {128, 129, 130, 255, 1, 0});
  ExpectTensor<float>(RunOk(OpCase("DequantizeLinear", 13)
                                .In(Make<uint8_t>({4}, {0, 3, 128, 255}))
                                .In(Scalar<float>(2))
                                .In(Scalar<uint8_t>(128))),
                      {4}, {-256, -250, 0, 254});
  // Per-axis: axis 1 with two channels.
  ExpectTensor<int8_t>(RunOk(OpCase("QuantizeLinear", 13)
                                 .In(Make<float>({1, 2}, {4, 4}))
                                 .In(Make<float>({2}, {1, 2}))
                                 .In(Make<int8_t>({2}, {0, -1}))),
                       {1, 2}, {4, 1});
  ExpectError(
      OpCase("QuantizeLinear", 13).In(Make<float>({1, 3}, {1, 2, 3})).In(Make<float>({2}, {1, 2})),
      absl::StatusCode::kInvalidArgument, "axis 1 has size 3");
}

// A zero scale (found by onnx_importer_fuzz: the node test's model run on zeros): x / 0 is +-inf,
// saturated, and 0 / 0 is NaN, which becomes the lowest value (what ONNX Runtime's x86-64 build
// gives) instead of an undefined float-to-integer conversion.
TEST(QuantizeTest, ZeroScaleSaturatesAndNanIsTheLowestValue) {
  ExpectTensor<uint8_t>(RunOk(OpCase("QuantizeLinear", 13)
                                  .In(Make<float>({3}, {0, 5, -5}))
                                  .In(Scalar<float>(0))
                                  .In(Scalar<uint8_t>(10))),
                        {3}, {0, 255, 0});
  ExpectTensor<int8_t>(RunOk(OpCase("QuantizeLinear", 13)
                                 .In(Make<float>({3}, {0, 5, -5}))
                                 .In(Scalar<float>(0))
                                 .In(Scalar<int8_t>(0))),
                       {3}, {-128, 127, -128});
}

TEST(QuantizeTest, Dynamic) {
  absl::StatusOr<std::vector<Value>> out =
      RunOp(OpCase("DynamicQuantizeLinear", 11).In(Make<float>({3}, {0, 2, -3})).Outputs(3));
  ASSERT_TRUE(out.ok()) << out.status();
  // Range [-3, 2] -> scale 5/255, zero point round(3 / scale) = 153.
  ExpectTensor<float>((*out)[1].tensor(), {}, {5.0f / 255});
  ExpectTensor<uint8_t>((*out)[2].tensor(), {}, {153});
  ExpectTensor<uint8_t>((*out)[0].tensor(), {3}, {153, 255, 0});
}

TEST(IntMatMulTest, SpecExamples) {
  ExpectTensor<int32_t>(RunOk(OpCase("MatMulInteger", 10)
                                  .In(Make<uint8_t>({4, 3}, {11, 7, 3, 10, 6, 2, 9, 5, 1, 8, 4, 0}))
                                  .In(Make<uint8_t>({3, 2}, {1, 4, 2, 5, 3, 6}))
                                  .In(Scalar<uint8_t>(12))
                                  .In(Scalar<uint8_t>(0))),
                        {4, 2}, {-38, -83, -44, -98, -50, -113, -56, -128});
  ExpectTensor<uint8_t>(
      RunOk(OpCase("QLinearMatMul", 10)
                .In(Make<uint8_t>({2, 4}, {208, 236, 0, 238, 3, 214, 255, 29}))
                .In(Scalar<float>(0.0066f))
                .In(Scalar<uint8_t>(113))
                .In(Make<uint8_t>({4, 3}, {152, 51, 244, 60, 26, 255, 0, 127, 246, 127, 254, 247}))
                .In(Scalar<float>(0.00705f))
                .In(Scalar<uint8_t>(114))
                .In(Scalar<float>(0.0107f))
                .In(Scalar<uint8_t>(118))),
      {2, 3}, {168, 115, 255, 1, 66, 151});
  ExpectError(OpCase("MatMulInteger", 10)
                  .In(Make<uint8_t>({2, 3}, {1, 2, 3, 4, 5, 6}))
                  .In(Make<uint8_t>({2, 2}, {1, 2, 3, 4})),
              absl::StatusCode::kInvalidArgument, "cannot be multiplied");
}

// A zero y_scale (found by onnx_importer_fuzz: the node test's model run on zeros): sums of
// 10, -10 and 0 become +inf, -inf and NaN; the infinities saturate and NaN is the lowest value,
// as in QuantizeLinear, instead of an undefined float-to-integer conversion.
TEST(IntMatMulTest, ZeroOutputScaleSaturatesAndNanIsTheLowestValue) {
  auto zero_scale = [](Tensor y_zero_point) {
    return RunOk(OpCase("QLinearMatMul", 10)
                     .In(Make<uint8_t>({3, 2}, {10, 20, 10, 0, 10, 10}))
                     .In(Scalar<float>(1))
                     .In(Scalar<uint8_t>(10))
                     .In(Make<uint8_t>({2, 1}, {0, 1}))
                     .In(Scalar<float>(1))
                     .In(Scalar<uint8_t>(0))
                     .In(Scalar<float>(0))
                     .In(std::move(y_zero_point)));
  };
  ExpectTensor<uint8_t>(zero_scale(Scalar<uint8_t>(7)), {3, 1}, {255, 0, 0});
  ExpectTensor<int8_t>(zero_scale(Scalar<int8_t>(0)), {3, 1}, {127, -128, -128});
}

TEST(UniqueTest, SortedUnsortedAndAxis) {
  absl::StatusOr<std::vector<Value>> out =
      RunOp(OpCase("Unique", 11).In(Make<float>({6}, {2, 1, 1, 3, 4, 3})).Outputs(4));
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectTensor<float>((*out)[0].tensor(), {4}, {1, 2, 3, 4});
  ExpectTensor<int64_t>((*out)[1].tensor(), {4}, {1, 0, 3, 4});
  ExpectTensor<int64_t>((*out)[2].tensor(), {6}, {1, 0, 0, 2, 3, 2});
  ExpectTensor<int64_t>((*out)[3].tensor(), {4}, {2, 1, 2, 1});
  out = RunOp(OpCase("Unique", 11)
                  .In(Make<float>({6}, {2, 1, 1, 3, 4, 3}))
                  .Attr("sorted", IntAttr(0))
                  .Outputs(4));
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectTensor<float>((*out)[0].tensor(), {4}, {2, 1, 3, 4});
  ExpectTensor<int64_t>((*out)[2].tensor(), {6}, {0, 1, 1, 2, 3, 2});
  ExpectTensor<int64_t>((*out)[3].tensor(), {4}, {1, 2, 2, 1});
  // Rows of [[1,0,0],[1,0,0],[2,3,4]] along axis 0.
  ExpectTensor<int32_t>(RunOk(OpCase("Unique", 11)
                                  .In(Make<int32_t>({3, 3}, {1, 0, 0, 1, 0, 0, 2, 3, 4}))
                                  .Attr("axis", IntAttr(0))),
                        {2, 3}, {1, 0, 0, 2, 3, 4});
}

}  // namespace
}  // namespace loopserve::engine::native_test
