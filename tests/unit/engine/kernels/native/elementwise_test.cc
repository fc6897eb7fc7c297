// Ceil, Floor, Sign, Reciprocal, Pow, Mod, Max, Min, Where.

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "tests/unit/engine/kernels/native/test_util.h"

namespace loopserve::engine::native_test {
namespace {

const float kNan = std::numeric_limits<float>::quiet_NaN();

TEST(UnaryTest, CeilFloor) {
  // Spec examples: ceil([-1.5, 1.2]) = [-1, 2], floor([-1.5, 1.2, 2]) = [-2, 1, 2].
  ExpectTensor<float>(RunOk(OpCase("Ceil", 13).In(Make<float>({2}, {-1.5f, 1.2f}))), {2}, {-1, 2});
  ExpectTensor<double>(RunOk(OpCase("Floor", 13).In(Make<double>({3}, {-1.5, 1.2, 2}))), {3},
                       {-2, 1, 2});
  ExpectError(OpCase("Ceil", 13).In(I64({1})), absl::StatusCode::kInvalidArgument, "int64");
}

TEST(UnaryTest, SignReciprocal) {
  ExpectTensor<float>(RunOk(OpCase("Sign", 13).In(Make<float>({4}, {-3.5f, 0, 2, kNan}))), {4},
                      {-1, 0, 1, kNan});
  ExpectTensor<int64_t>(RunOk(OpCase("Sign", 13).In(I64({-7, 0, 9}))), {3}, {-1, 0, 1});
  ExpectTensor<uint8_t>(RunOk(OpCase("Sign", 13).In(Make<uint8_t>({2}, {0, 200}))), {2}, {0, 1});
  // Spec example: reciprocal([-4, 2]) = [-0.25, 0.5].
  ExpectTensor<float>(RunOk(OpCase("Reciprocal", 13).In(Make<float>({2}, {-4, 2}))), {2},
                      {-0.25f, 0.5f});
  ExpectError(OpCase("Reciprocal", 13).In(I64({2})), absl::StatusCode::kInvalidArgument, "int64");
}

TEST(PowTest, SpecExamples) {
  // pow([1,2,3], [4,5,6]) = [1, 32, 729]; pow([1,2,3], 2) = [1,4,9].
  ExpectTensor<float>(
      RunOk(OpCase("Pow", 15).In(Make<float>({3}, {1, 2, 3})).In(Make<float>({3}, {4, 5, 6}))), {3},
      {1, 32, 729});
  ExpectTensor<float>(RunOk(OpCase("Pow", 15).In(Make<float>({3}, {1, 2, 3})).In(Scalar<float>(2))),
                      {3}, {1, 4, 9});
  // test_pow_bcast_array: x [2,3], y [3] = [1,2,3].
  ExpectTensor<int32_t>(RunOk(OpCase("Pow", 15)
                                  .In(Make<int32_t>({2, 3}, {1, 2, 3, 4, 5, 6}))
                                  .In(Make<int32_t>({3}, {1, 2, 3}))),
                        {2, 3}, {1, 4, 27, 4, 25, 216});
}

// One exponent of 2 squares the base (x * x, as the spec's x^2); any exponent type, a broadcast
// that adds axes, and the IEEE special values: (-inf)^2 = inf, NaN^2 = NaN, (-0)^2 = 0.
TEST(PowTest, SingleExponentTwoSquares) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ExpectTensor<float>(RunOk(OpCase("Pow", 15)
                                .In(Make<float>({4}, {-3, 0.5f, -inf, -0.0f}))
                                .In(Make<int64_t>({1, 1}, {2}))),
                      {1, 4}, {9, 0.25f, inf, 0});
  Tensor r = RunOk(OpCase("Pow", 15).In(Make<float>({2}, {nan, 1e20f})).In(Scalar<float>(2)));
  ASSERT_EQ(r.NumElements(), 2);
  EXPECT_TRUE(std::isnan(r.data<float>()[0]));
  EXPECT_EQ(r.data<float>()[1], inf);
  ExpectTensor<double>(RunOk(OpCase("Pow", 15).In(Make<double>({2}, {1.5, -2})).In(I64({2}))), {2},
                       {2.25, 4});
}

TEST(PowTest, MixedTypes) {
  // test_pow_types_int64_float32: [1,2,3] ^ [4,5,6] = [1,32,729] as int64.
  ExpectTensor<int64_t>(RunOk(OpCase("Pow", 15).In(I64({1, 2, 3})).In(Make<float>({3}, {4, 5, 6}))),
                        {3}, {1, 32, 729});
  ExpectTensor<float>(RunOk(OpCase("Pow", 15).In(Make<float>({2}, {2, 4})).In(I64({-1, 3}))), {2},
                      {0.5f, 64});
  // Integer exponents: negative ones truncate to 0 unless |base| is 1.
  ExpectTensor<int64_t>(RunOk(OpCase("Pow", 15).In(I64({2, -1, 1, -3})).In(I64({-1, -3, -5, 3}))),
                        {4}, {0, -1, 1, -27});
  ExpectError(OpCase("Pow", 15).In(Make<bool>({1}, {true})).In(I64({1})),
              absl::StatusCode::kInvalidArgument, "input X has element type bool");
}

TEST(ModTest, IntegerModFollowsDivisorSign) {
  // test_mod_mixed_sign_int64: [-4,7,5,4,-7,8] mod [2,-3,8,-2,3,5] = [0,-2,5,0,2,3].
  ExpectTensor<int64_t>(
      RunOk(OpCase("Mod", 13).In(I64({-4, 7, 5, 4, -7, 8})).In(I64({2, -3, 8, -2, 3, 5}))), {6},
      {0, -2, 5, 0, 2, 3});
  // test_mod_int64_fmod: fmod=1 follows the dividend: [0,1,5,0,-1,3].
  ExpectTensor<int64_t>(RunOk(OpCase("Mod", 13)
                                  .In(I64({-4, 7, 5, 4, -7, 8}))
                                  .In(I64({2, -3, 8, -2, 3, 5}))
                                  .Attr("fmod", IntAttr(1))),
                        {6}, {0, 1, 5, 0, -1, 3});
  ExpectTensor<int64_t>(
      RunOk(OpCase("Mod", 13).In(I64({std::numeric_limits<int64_t>::min(), 5})).In(I64({-1, -1}))),
      {2}, {0, 0});
}

TEST(ModTest, FloatFmodAndBroadcast) {
  // test_mod_mixed_sign_float32 with fmod=1: [-4.3,7.2,5,4.3,-7.2,8] fmod [2.1,-3.4,8,-2.1,3.4,5].
  ExpectTensor<float>(RunOk(OpCase("Mod", 13)
                                .In(Make<float>({6}, {-4.3f, 7.2f, 5.0f, 4.3f, -7.2f, 8.0f}))
                                .In(Make<float>({6}, {2.1f, -3.4f, 8.0f, -2.1f, 3.4f, 5.0f}))
                                .Attr("fmod", IntAttr(1))),
                      {6},
                      {std::fmod(-4.3f, 2.1f), std::fmod(7.2f, -3.4f), 5.0f, std::fmod(4.3f, -2.1f),
                       std::fmod(-7.2f, 3.4f), 3.0f});
  ExpectTensor<int32_t>(
      RunOk(OpCase("Mod", 13).In(Make<int32_t>({2, 2}, {5, 6, 7, 8})).In(Scalar<int32_t>(3))),
      {2, 2}, {2, 0, 1, 2});
}

// float fmod against std::fmod bit for bit: random magnitudes over 60 binades (quotients below
// and above 2^24), both signs, exact multiples (signed zeros), and infinities, NaN and zeros.
TEST(ModTest, FloatFmodMatchesStdFmodBitForBit) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-30, 30);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> xs, ds;
  for (int i = 0; i < 4000; ++i) {
    const float sx = rng() % 2 ? -1.0f : 1.0f, sd = rng() % 2 ? -1.0f : 1.0f;
    xs.push_back(sx * std::ldexp(mant(rng), expo(rng)));
    ds.push_back(sd * std::ldexp(mant(rng), expo(rng)));
  }
  const float specials_x[] = {-4.0f, 4.0f, 6.0f, -7.5f, 0.0f, -0.0f,
                              inf,   -inf, nan,  5.0f,  3.0f, 1e30f};
  const float specials_d[] = {2.0f, -2.0f, 1.5f, 2.5f, 3.0f, 3.0f,
                              2.0f, 2.0f,  2.0f, inf,  0.0f, 7.0f};
  for (size_t i = 0; i < sizeof(specials_x) / sizeof(float); ++i) {
    xs.push_back(specials_x[i]);
    ds.push_back(specials_d[i]);
  }
  const int64_t n = static_cast<int64_t>(xs.size());
  Tensor a(DataType::kFloat32, Shape({n})), b(DataType::kFloat32, Shape({n}));
  std::copy(xs.begin(), xs.end(), a.mutable_data<float>());
  std::copy(ds.begin(), ds.end(), b.mutable_data<float>());
  Tensor y = RunOk(OpCase("Mod", 13).In(std::move(a)).In(std::move(b)).Attr("fmod", IntAttr(1)));
  for (int64_t i = 0; i < n; ++i) {
    const float want = std::fmod(xs[i], ds[i]);
    const float got = y.data<float>()[i];
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << xs[i] << " fmod " << ds[i];
    } else {
      EXPECT_EQ(got, want) << xs[i] << " fmod " << ds[i];
      EXPECT_EQ(std::signbit(got), std::signbit(want)) << xs[i] << " fmod " << ds[i];
    }
  }
}

TEST(ModTest, Errors) {
  ExpectError(OpCase("Mod", 13).In(I64({5})).In(I64({0})), absl::StatusCode::kInvalidArgument,
              "modulo by zero");
  ExpectError(OpCase("Mod", 13).In(Make<float>({1}, {1})).In(Make<float>({1}, {1})),
              absl::StatusCode::kInvalidArgument, "fmod must be 1");
  ExpectError(OpCase("Mod", 13).In(I64({5})).In(Make<int32_t>({1}, {1})),
              absl::StatusCode::kInvalidArgument, "element type");
}

TEST(MinMaxTest, VariadicBroadcast) {
  // Spec example: max([3,2,1], [1,4,4], [2,5,3]) = [3,5,4]; min = [1,2,1].
  ExpectTensor<float>(RunOk(OpCase("Max", 13)
                                .In(Make<float>({3}, {3, 2, 1}))
                                .In(Make<float>({3}, {1, 4, 4}))
                                .In(Make<float>({3}, {2, 5, 3}))),
                      {3}, {3, 5, 4});
  ExpectTensor<float>(RunOk(OpCase("Min", 13)
                                .In(Make<float>({3}, {3, 2, 1}))
                                .In(Make<float>({3}, {1, 4, 4}))
                                .In(Make<float>({3}, {2, 5, 3}))),
                      {3}, {1, 2, 1});
  ExpectTensor<int64_t>(
      RunOk(OpCase("Max", 13).In(Make<int64_t>({2, 1}, {1, 5})).In(I64({2, 3, 4}))), {2, 3},
      {2, 3, 4, 5, 5, 5});
  ExpectTensor<int64_t>(RunOk(OpCase("Min", 13).In(I64({4, -2}))), {2}, {4, -2});
  ExpectTensor<float>(
      RunOk(OpCase("Max", 13).In(Make<float>({2}, {kNan, 1})).In(Make<float>({2}, {1, kNan}))), {2},
      {kNan, kNan});
  ExpectError(OpCase("Max", 13).In(I64({1, 2})).In(I64({1, 2, 3})),
              absl::StatusCode::kInvalidArgument, "cannot be broadcast");
  ExpectError(OpCase("Max", 13).In(Make<bool>({1}, {true})), absl::StatusCode::kInvalidArgument,
              "bool");
}

TEST(WhereTest, Broadcast3Way) {
  // Spec example: cond [[1,0],[1,1]], x [[1,2],[3,4]], y [[9,8],[7,6]] -> [[1,8],[3,4]].
  ExpectTensor<float>(RunOk(OpCase("Where", 16)
                                .In(Make<bool>({2, 2}, {true, false, true, true}))
                                .In(Make<float>({2, 2}, {1, 2, 3, 4}))
                                .In(Make<float>({2, 2}, {9, 8, 7, 6}))),
                      {2, 2}, {1, 8, 3, 4});
  // test_where_long_example-like: cond [3], x scalar, y [2,1].
  ExpectTensor<int64_t>(RunOk(OpCase("Where", 16)
                                  .In(Make<bool>({3}, {true, false, true}))
                                  .In(Scalar<int64_t>(0))
                                  .In(Make<int64_t>({2, 1}, {7, 8}))),
                        {2, 3}, {0, 7, 0, 0, 8, 0});
  ExpectTensor<bool>(RunOk(OpCase("Where", 9)
                               .In(Make<bool>({2}, {true, false}))
                               .In(Make<bool>({2}, {false, false}))
                               .In(Make<bool>({2}, {true, true}))),
                     {2}, {false, true});
  ExpectError(OpCase("Where", 16).In(I64({1})).In(I64({1})).In(I64({1})),
              absl::StatusCode::kInvalidArgument, "condition must be bool");
  ExpectError(
      OpCase("Where", 16).In(Make<bool>({1}, {true})).In(I64({1})).In(Make<int32_t>({1}, {1})),
      absl::StatusCode::kInvalidArgument, "input X has element type int64");
  ExpectError(OpCase("Where", 16).In(Make<bool>({2}, {true, true})).In(I64({1, 2, 3})).In(I64({1})),
              absl::StatusCode::kInvalidArgument, "cannot be broadcast");
}

// Random broadcast forms (every operand broadcast along some dim, contiguous rows, odd sizes)
// against the definition: out[i, j, k] = c[...] ? x[...] : y[...] with size-1 dims indexed at 0.
TEST(WhereTest, RandomBroadcastFormsMatchTheDefinition) {
  std::mt19937 rng(17);
  const std::vector<std::vector<std::vector<int64_t>>> forms = {
      {{3, 5, 37}, {3, 5, 37}, {3, 5, 37}},
      {{3, 1, 37}, {1, 5, 37}, {3, 5, 1}},
      {{1, 1, 37}, {3, 5, 37}, {1, 1, 1}},
      {{3, 5, 1}, {1, 1, 37}, {3, 1, 37}},
      {{37}, {3, 5, 37}, {5, 1}}};
  for (const auto& form : forms) {
    std::vector<Tensor> ops;
    for (int k = 0; k < 3; ++k) {
      Shape shape;
      for (int64_t d : form[k]) shape.mutable_dims().push_back(d);
      Tensor t(k == 0 ? DataType::kBool : DataType::kFloat32, shape);
      for (int64_t i = 0; i < t.NumElements(); ++i) {
        if (k == 0) {
          t.mutable_data<bool>()[i] = rng() % 2 == 0;
        } else {
          t.mutable_data<float>()[i] = static_cast<float>(rng() % 1000) + 1000.0f * k;
        }
      }
      ops.push_back(std::move(t));
    }
    auto at = [](const Tensor& t, int64_t i, int64_t j, int64_t k) {
      const int r = t.rank();
      const int64_t idx[3] = {i, j, k};
      int64_t off = 0;
      for (int d = 0; d < r; ++d) {
        const int64_t v = t.dim(d) == 1 ? 0 : idx[3 - r + d];
        off = off * t.dim(d) + v;
      }
      return off;
    };
    Tensor c, x, y;
    c.CopyFrom(ops[0]);
    x.CopyFrom(ops[1]);
    y.CopyFrom(ops[2]);
    Tensor out = RunOk(OpCase("Where", 16).In(std::move(c)).In(std::move(x)).In(std::move(y)));
    ASSERT_EQ(out.shape(), Shape({3, 5, 37}));
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t j = 0; j < 5; ++j) {
        for (int64_t k = 0; k < 37; ++k) {
          const float want = ops[0].data<bool>()[at(ops[0], i, j, k)]
                                 ? ops[1].data<float>()[at(ops[1], i, j, k)]
                                 : ops[2].data<float>()[at(ops[2], i, j, k)];
          ASSERT_EQ(out.data<float>()[(i * 5 + j) * 37 + k], want) << i << " " << j << " " << k;
        }
      }
    }
  }
}

}  // namespace
}  // namespace loopserve::engine::native_test
