// Trig/hyperbolic functions, Erf, Round, IsNaN, IsInf, Clip, Shrink, ThresholdedRelu, BitShift,
// Sum, Mean, CastLike, Dropout.

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>

#include "tests/unit/engine/kernels/native/test_util.h"

namespace loopserve::engine::native_test {
namespace {

TEST(TrigTest, KnownValues) {
  const float pi = 3.14159265f;
  ExpectTensor<float>(RunOk(OpCase("Sin", 7).In(Make<float>({2}, {0, pi / 2}))), {2}, {0, 1});
  ExpectTensor<float>(RunOk(OpCase("Cos", 7).In(Make<float>({1}, {0}))), {1}, {1});
  ExpectTensor<double>(RunOk(OpCase("Tan", 7).In(Make<double>({1}, {0}))), {1}, {0});
  ExpectTensor<float>(RunOk(OpCase("Asin", 7).In(Make<float>({1}, {1}))), {1}, {pi / 2});
  ExpectTensor<float>(RunOk(OpCase("Acos", 7).In(Make<float>({1}, {1}))), {1}, {0});
  ExpectTensor<float>(RunOk(OpCase("Atan", 7).In(Make<float>({1}, {1}))), {1}, {pi / 4});
  ExpectTensor<float>(RunOk(OpCase("Sinh", 9).In(Make<float>({1}, {0}))), {1}, {0});
  ExpectTensor<float>(RunOk(OpCase("Cosh", 9).In(Make<float>({1}, {0}))), {1}, {1});
  ExpectTensor<float>(RunOk(OpCase("Asinh", 9).In(Make<float>({1}, {0}))), {1}, {0});
  ExpectTensor<float>(RunOk(OpCase("Acosh", 9).In(Make<float>({1}, {1}))), {1}, {0});
  ExpectTensor<float>(RunOk(OpCase("Atanh", 9).In(Make<float>({1}, {0}))), {1}, {0});
  ExpectTensor<float>(RunOk(OpCase("Erf", 13).In(Make<float>({2}, {0, 10}))), {2}, {0, 1});
  ExpectError(OpCase("Sin", 7).In(Make<int32_t>({1}, {0})), absl::StatusCode::kInvalidArgument,
              "int32");
}

// The float32 vector path (vector_math) of each op against the double-precision libm function,
// over a size that is not a multiple of any vector width.
TEST(TrigTest, Float32VectorPathMatchesDoublePrecision) {
  struct Case {
    const char* op;
    int opset;
    float lo, hi;
    std::function<double(double)> f;
  };
  const Case cases[] = {
      {"Sin", 7, -10, 10, [](double x) { return std::sin(x); }},
      {"Cos", 7, -10, 10, [](double x) { return std::cos(x); }},
      {"Tan", 7, -1.5f, 1.5f, [](double x) { return std::tan(x); }},
      {"Asin", 7, -1, 1, [](double x) { return std::asin(x); }},
      {"Acos", 7, -1, 1, [](double x) { return std::acos(x); }},
      {"Atan", 7, -20, 20, [](double x) { return std::atan(x); }},
      {"Erf", 13, -4, 4, [](double x) { return std::erf(x); }},
      {"Round", 11, -50, 50, [](double x) { return std::nearbyint(x); }},
      {"Mish", 18, -20, 20, [](double x) { return x * std::tanh(std::log1p(std::exp(x))); }},
  };
  std::mt19937 rng(9);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op);
    std::uniform_real_distribution<float> u(c.lo, c.hi);
    Tensor x(DataType::kFloat32, {3, 347});
    float* p = x.mutable_data<float>();
    for (int64_t i = 0; i < x.NumElements(); ++i) p[i] = u(rng);
    p[0] = c.lo;
    p[1] = c.hi;
    std::vector<float> in(p, p + x.NumElements());
    Tensor y = RunOk(OpCase(c.op, c.opset).In(std::move(x)));
    ASSERT_EQ(y.shape(), Shape({3, 347}));
    for (size_t i = 0; i < in.size(); ++i) {
      const double want = c.f(in[i]);
      ASSERT_NEAR(y.data<float>()[i], want, 2e-6 + 2e-6 * std::fabs(want)) << "x = " << in[i];
    }
  }
}

TEST(RoundTest, HalfToEven) {
  ExpectTensor<float>(
      RunOk(
          OpCase("Round", 11).In(Make<float>({7}, {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.3f, -2.7f}))),
      {7}, {0, 2, 2, -0.0f, -2, 2, -3});
}

TEST(IsNaNIsInfTest, Flags) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ExpectTensor<bool>(RunOk(OpCase("IsNaN", 13).In(Make<float>({3}, {1, nan, inf}))), {3},
                     {false, true, false});
  ExpectTensor<bool>(RunOk(OpCase("IsInf", 10).In(Make<float>({4}, {1, nan, inf, -inf}))), {4},
                     {false, false, true, true});
  ExpectTensor<bool>(RunOk(OpCase("IsInf", 10)
                               .In(Make<float>({2}, {inf, -inf}))
                               .Attr("detect_negative", IntAttr(0))),
                     {2}, {true, false});
}

TEST(ClipTest, InputsAttributesAndIntegers) {
  ExpectTensor<float>(RunOk(OpCase("Clip", 13)
                                .In(Make<float>({3}, {-2, 0, 2}))
                                .In(Scalar<float>(-1))
                                .In(Scalar<float>(1))),
                      {3}, {-1, 0, 1});
  ExpectTensor<float>(
      RunOk(OpCase("Clip", 13).In(Make<float>({3}, {-2, 0, 2})).Omitted().In(Scalar<float>(1))),
      {3}, {-2, 0, 1});
  ExpectTensor<float>(RunOk(OpCase("Clip", 6)
                                .In(Make<float>({3}, {-2, 0, 2}))
                                .Attr("min", FloatAttr(-1))
                                .Attr("max", FloatAttr(1))),
                      {3}, {-1, 0, 1});
  ExpectTensor<int32_t>(
      RunOk(OpCase("Clip", 13).In(Make<int32_t>({3}, {-5, 3, 9})).In(Scalar<int32_t>(0))), {3},
      {0, 3, 9});
  ExpectError(OpCase("Clip", 13).In(Make<float>({1}, {1})).In(Make<float>({2}, {0, 1})),
              absl::StatusCode::kInvalidArgument, "scalar");
  // Clip-6's float bounds on an integer input saturate to its range: the default min (-FLT_MAX,
  // once undefined as uint8: tests/fuzz/regressions/onnx_importer_fuzz/
  // clip6_uint8_default_min_out_of_range.onnx) clips nothing, as np.clip with -3.4e38 does.
  ExpectTensor<uint8_t>(RunOk(OpCase("Clip", 6).In(Make<uint8_t>({3}, {0, 7, 255}))), {3},
                        {0, 7, 255});
  // np.clip(np.int8([-128, 1, 100]), -1000, 3) == [-128, 1, 3].
  ExpectTensor<int8_t>(RunOk(OpCase("Clip", 6)
                                 .In(Make<int8_t>({3}, {-128, 1, 100}))
                                 .Attr("min", FloatAttr(-1000))
                                 .Attr("max", FloatAttr(3))),
                       {3}, {-128, 1, 3});
}

TEST(ShrinkTest, SpecExamples) {
  ExpectTensor<float>(RunOk(OpCase("Shrink", 9)
                                .In(Make<float>({5}, {-2, -1, 0, 1, 2}))
                                .Attr("lambd", FloatAttr(1.5f))
                                .Attr("bias", FloatAttr(1.5f))),
                      {5}, {-0.5f, 0, 0, 0, 0.5f});
  ExpectTensor<float>(RunOk(OpCase("ThresholdedRelu", 10)
                                .In(Make<float>({5}, {-1, 0, 1, 2, 3}))
                                .Attr("alpha", FloatAttr(2))),
                      {5}, {0, 0, 0, 0, 3});
}

TEST(BitShiftTest, LeftRightAndWideShifts) {
  ExpectTensor<uint8_t>(RunOk(OpCase("BitShift", 11)
                                  .In(Make<uint8_t>({3}, {16, 4, 1}))
                                  .In(Make<uint8_t>({3}, {1, 2, 3}))
                                  .Attr("direction", StringAttr("RIGHT"))),
                        {3}, {8, 1, 0});
  ExpectTensor<uint16_t>(RunOk(OpCase("BitShift", 11)
                                   .In(Make<uint16_t>({3}, {16, 4, 1}))
                                   .In(Make<uint16_t>({1}, {20}))
                                   .Attr("direction", StringAttr("LEFT"))),
                         {3}, {0, 0, 0});
  ExpectError(OpCase("BitShift", 11)
                  .In(Make<int32_t>({1}, {1}))
                  .In(Make<int32_t>({1}, {1}))
                  .Attr("direction", StringAttr("LEFT")),
              absl::StatusCode::kInvalidArgument, "int32");
}

TEST(SumMeanTest, SpecExamplesAndBroadcast) {
  auto three = [](const char* op) {
    OpCase c(op, 13);
    c.In(Make<float>({3}, {3, 0, 2}))
        .In(Make<float>({3}, {1, 3, 4}))
        .In(Make<float>({3}, {2, 6, 6}));
    return c;
  };
  ExpectTensor<float>(RunOk(three("Sum")), {3}, {6, 9, 12});
  ExpectTensor<float>(RunOk(three("Mean")), {3}, {2, 3, 4});
  ExpectTensor<int64_t>(
      RunOk(OpCase("Sum", 13).In(Make<int64_t>({2, 1}, {1, 2})).In(Make<int64_t>({2}, {10, 20}))),
      {2, 2}, {11, 21, 12, 22});
  ExpectTensor<float>(RunOk(OpCase("Sum", 13).In(Make<float>({1}, {4}))), {1}, {4});
  ExpectError(OpCase("Sum", 6).In(Make<float>({2}, {1, 2})).In(Make<float>({1}, {1})),
              absl::StatusCode::kInvalidArgument, "no broadcasting");
}

TEST(CastLikeTest, TakesTypeOfSecondInput) {
  ExpectTensor<int32_t>(
      RunOk(OpCase("CastLike", 15).In(Make<float>({2}, {1.5f, -2.5f})).In(Scalar<int32_t>(0))), {2},
      {1, -2});
}

TEST(DropoutTest, InferenceIsIdentityWithTrueMask) {
  absl::StatusOr<std::vector<Value>> out =
      RunOp(OpCase("Dropout", 13).In(Make<float>({2}, {1, 2})).Outputs(2));
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectTensor<float>((*out)[0].tensor(), {2}, {1, 2});
  ExpectTensor<bool>((*out)[1].tensor(), {2}, {true, true});
  ExpectError(OpCase("Dropout", 13)
                  .In(Make<float>({1}, {1}))
                  .In(Scalar<float>(0.5f))
                  .In(Scalar<bool>(true)),
              absl::StatusCode::kUnimplemented, "training");
}

}  // namespace
}  // namespace loopserve::engine::native_test
