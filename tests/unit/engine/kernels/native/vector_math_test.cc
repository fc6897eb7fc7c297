// vector_math (SLEEF on AVX-512 / AVX2, scalar floats elsewhere) against double-precision
// definitions computed here, on every ISA this CPU has (capped with SetMaxIsa), at lengths that
// exercise full vectors and every tail; and the elementwise chain with broadcasting against the
// same definitions applied op by op.

#include "engine/kernels/native/vector_math.h"

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/kernels/native/cpu_isa.h"
#include "engine/kernels/native/elementwise_chain.h"
#include "gtest/gtest.h"

namespace loopserve::engine::native {
namespace {

double Reference(VecUnary op, double x, double alpha, double beta) {
  switch (op) {
    case VecUnary::kIdentity:
      return x;
    case VecUnary::kRelu:
      return x < 0 ? 0 : x;
    case VecUnary::kTanh:
      return std::tanh(x);
    case VecUnary::kSigmoid:
      return 1 / (1 + std::exp(-x));
    case VecUnary::kExp:
      return std::exp(x);
    case VecUnary::kLog:
      return std::log(x);
    case VecUnary::kSqrt:
      return std::sqrt(x);
    case VecUnary::kAbs:
      return std::fabs(x);
    case VecUnary::kNeg:
      return -x;
    case VecUnary::kErf:
      return std::erf(x);
    case VecUnary::kSoftplus:
      return std::log1p(std::exp(x));
    case VecUnary::kGeluErf:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case VecUnary::kGeluTanh:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case VecUnary::kSin:
      return std::sin(x);
    case VecUnary::kCos:
      return std::cos(x);
    case VecUnary::kReciprocal:
      return 1 / x;
    case VecUnary::kLinear:
      return alpha * x + beta;
    case VecUnary::kPow:
      return std::pow(x, alpha);
    case VecUnary::kLeakyRelu:
      return x >= 0 ? x : alpha * x;
    case VecUnary::kElu:
      return x >= 0 ? x : alpha * std::expm1(x);
    case VecUnary::kHardSigmoid:
      return std::min(1.0, std::max(0.0, alpha * x + beta));
    case VecUnary::kHardSwish:
      return x * std::min(1.0, std::max(0.0, x / 6 + 0.5));
    case VecUnary::kSoftsign:
      return x / (1 + std::fabs(x));
    case VecUnary::kClip:
      return std::min(beta, std::max(alpha, x));
    case VecUnary::kFloor:
      return std::floor(x);
    case VecUnary::kCeil:
      return std::ceil(x);
    case VecUnary::kRound:
      return std::nearbyint(x);
    case VecUnary::kMish:
      return x * std::tanh(std::log1p(std::exp(x)));
    case VecUnary::kTan:
      return std::tan(x);
    case VecUnary::kAsin:
      return std::asin(x);
    case VecUnary::kAcos:
      return std::acos(x);
    case VecUnary::kAtan:
      return std::atan(x);
    case VecUnary::kSinh:
      return std::sinh(x);
    case VecUnary::kCosh:
      return std::cosh(x);
    case VecUnary::kAsinh:
      return std::asinh(x);
    case VecUnary::kAcosh:
      return std::acosh(x);
    case VecUnary::kAtanh:
      return std::atanh(x);
    case VecUnary::kCount:
      break;
  }
  return x;
}

// The ISAs to test: every one up to what the CPU has.
std::vector<Isa> Isas() {
  std::vector<Isa> isas = {Isa::kScalar};
  if (DetectedIsa() >= Isa::kAvx2) isas.push_back(Isa::kAvx2);
  if (DetectedIsa() >= Isa::kAvx512) isas.push_back(Isa::kAvx512);
  return isas;
}

class VectorMathTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override { SetMaxIsa(GetParam()); }
  void TearDown() override { SetMaxIsa(Isa::kAvx512); }
};

// Float inputs spread over [lo, hi], with the exact ends.
std::vector<float> Inputs(int n, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  if (n > 0) x[0] = lo;
  if (n > 1) x[n - 1] = hi;
  return x;
}

struct UnaryCase {
  VecUnary op;
  float lo, hi, alpha, beta;
};

TEST_P(VectorMathTest, UnaryMatchesDoublePrecision) {
  const UnaryCase cases[] = {
      {VecUnary::kIdentity, -5, 5, 0, 0},
      {VecUnary::kRelu, -5, 5, 0, 0},
      {VecUnary::kTanh, -12, 12, 0, 0},
      {VecUnary::kSigmoid, -30, 30, 0, 0},
      {VecUnary::kExp, -80, 80, 0, 0},
      {VecUnary::kLog, 1e-6f, 1e6f, 0, 0},
      {VecUnary::kSqrt, 0, 100, 0, 0},
      {VecUnary::kAbs, -5, 5, 0, 0},
      {VecUnary::kNeg, -5, 5, 0, 0},
      {VecUnary::kErf, -6, 6, 0, 0},
      {VecUnary::kSoftplus, -40, 40, 0, 0},
      {VecUnary::kGeluErf, -8, 8, 0, 0},
      {VecUnary::kGeluTanh, -8, 8, 0, 0},
      {VecUnary::kSin, -10, 10, 0, 0},
      {VecUnary::kCos, -10, 10, 0, 0},
      {VecUnary::kReciprocal, 0.01f, 100, 0, 0},
      {VecUnary::kLinear, -5, 5, 1.5f, -0.25f},
      {VecUnary::kPow, 0.01f, 10, 2.0f, 0},
      {VecUnary::kPow, 0.01f, 10, 0.5f, 0},
      {VecUnary::kPow, 0.01f, 10, 3.0f, 0},
      {VecUnary::kPow, 0.01f, 10, 1.7f, 0},
      {VecUnary::kPow, -10, 10, 2.0f, 0},
      {VecUnary::kLeakyRelu, -5, 5, 0.01f, 0},
      {VecUnary::kElu, -10, 5, 1.3f, 0},
      {VecUnary::kHardSigmoid, -8, 8, 0.2f, 0.5f},
      {VecUnary::kHardSwish, -8, 8, 0, 0},
      {VecUnary::kSoftsign, -50, 50, 0, 0},
      {VecUnary::kClip, -5, 5, -1.0f, 2.0f},
      {VecUnary::kFloor, -5, 5, 0, 0},
      {VecUnary::kCeil, -5, 5, 0, 0},
      {VecUnary::kRound, -5, 5, 0, 0},
      {VecUnary::kMish, -20, 20, 0, 0},
      {VecUnary::kTan, -1.5f, 1.5f, 0, 0},
      {VecUnary::kAsin, -1, 1, 0, 0},
      {VecUnary::kAcos, -1, 1, 0, 0},
      {VecUnary::kAtan, -50, 50, 0, 0},
      {VecUnary::kSinh, -20, 20, 0, 0},
      {VecUnary::kCosh, -20, 20, 0, 0},
      {VecUnary::kAsinh, -100, 100, 0, 0},
      {VecUnary::kAcosh, 1, 100, 0, 0},
      {VecUnary::kAtanh, -0.99f, 0.99f, 0, 0},
  };
  for (const UnaryCase& c : cases) {
    for (int n : {1, 7, 8, 15, 16, 17, 33, 200}) {
      SCOPED_TRACE("op " + std::to_string(static_cast<int>(c.op)) + " n " + std::to_string(n));
      const std::vector<float> x = Inputs(n, c.lo, c.hi, 1 + n);
      std::vector<float> y(n, -7.0f);
      UnaryF32(c.op, x.data(), y.data(), n, c.alpha, c.beta);
      for (int i = 0; i < n; ++i) {
        const double want = Reference(c.op, x[i], c.alpha, c.beta);
        ASSERT_NEAR(y[i], want, 2e-6 + 2e-6 * std::fabs(want)) << "x = " << x[i];
      }
      // In place gives the same.
      std::vector<float> z = x;
      UnaryF32(c.op, z.data(), z.data(), n, c.alpha, c.beta);
      for (int i = 0; i < n; ++i)
        ASSERT_EQ(std::isnan(z[i]) ? 0.0f : z[i], std::isnan(y[i]) ? 0.0f : y[i]);
    }
  }
}

TEST_P(VectorMathTest, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {nan, inf, -inf, 0.0f, -0.0f};
  std::vector<float> y(x.size());
  UnaryF32(VecUnary::kRelu, x.data(), y.data(), 5);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], inf);
  EXPECT_EQ(y[2], 0.0f);
  UnaryF32(VecUnary::kTanh, x.data(), y.data(), 5);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_EQ(y[2], -1.0f);
  UnaryF32(VecUnary::kExp, x.data(), y.data(), 5);
  EXPECT_EQ(y[1], inf);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[3], 1.0f);
  UnaryF32(VecUnary::kSigmoid, x.data(), y.data(), 5);
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_EQ(y[2], 0.0f);
  UnaryF32(VecUnary::kClip, x.data(), y.data(), 5, -1.0f, 1.0f);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_EQ(y[2], -1.0f);
  // Max / Min: NaN wins on either side (numpy); otherwise the larger / smaller.
  std::vector<float> a = {nan, 1.0f, 2.0f, -inf};
  std::vector<float> b = {1.0f, nan, 3.0f, 5.0f};
  std::vector<float> out(4);
  BinaryF32(VecBinary::kMax, a.data(), 1, b.data(), 1, out.data(), 4);
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_EQ(out[2], 3.0f);
  EXPECT_EQ(out[3], 5.0f);
  BinaryF32(VecBinary::kMin, a.data(), 1, b.data(), 1, out.data(), 4);
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_EQ(out[2], 2.0f);
  EXPECT_EQ(out[3], -inf);
  std::vector<float> row(40, 1.0f);
  row[37] = nan;
  EXPECT_TRUE(std::isnan(MaxF32(row.data(), 40)));
}

// How many float ulps `got` is from the double `want`: ulps of want's binade, and for results
// below the smallest normal float, ulps of the subnormal spacing 2^-149.
double UlpError(float got, double want) {
  if (std::isinf(want)) return got == static_cast<float>(want) ? 0 : 1e30;
  const double a = std::fabs(want);
  const double ulp = a < std::numeric_limits<float>::min() ? std::ldexp(1.0, -149)
                                                           : std::ldexp(1.0, std::ilogb(a) - 23);
  return std::fabs(got - want) / ulp;
}

// Exp, Tanh, Erf, Softplus and Sigmoid (the ones with ISA-specific code of our own) on a dense
// sweep of their range, against double precision in ulps: within 4 ulps (Exp also on subnormal
// results, to 2^-149 spacing, and to +inf above log(FLT_MAX); Tanh also on tiny arguments, where a
// relative error shows), Erf within 6 (AVX2's rational approximation, Eigen's and XLA's, is 5.6
// ulps off at worst, on results near +-1). The worst of each is recorded as a test property.
TEST_P(VectorMathTest, ExpTanhSigmoidOverTheWholeRange) {
  std::vector<float> x;
  for (double v = -104.0; v <= 90.0; v += 0.00097) x.push_back(static_cast<float>(v));
  for (float v : {88.7228f, 88.72283f, 88.72284f, 88.7229f, -87.3365f, -103.97f, -103.28f})
    x.push_back(v);
  std::vector<float> y(x.size());
  UnaryF32(VecUnary::kExp, x.data(), y.data(), static_cast<int64_t>(x.size()));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    const double want_f =
        want > std::numeric_limits<float>::max() ? std::numeric_limits<double>::infinity() : want;
    const double e = UlpError(y[i], want_f);
    worst = std::max(worst, e);
    ASSERT_LE(e, 4.0) << "exp(" << x[i] << ") = " << y[i] << ", want " << want;
  }
  RecordProperty("exp_worst_ulp", std::to_string(worst));

  std::vector<float> t;
  for (double v = -12.0; v <= 12.0; v += 0.00011) t.push_back(static_cast<float>(v));
  for (double v = 1e-30; v < 1.0; v *= 1.07) {
    t.push_back(static_cast<float>(v));
    t.push_back(static_cast<float>(-v));
  }
  y.resize(t.size());
  UnaryF32(VecUnary::kTanh, t.data(), y.data(), static_cast<int64_t>(t.size()));
  double tanh_worst = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    const double want = std::tanh(static_cast<double>(t[i]));
    tanh_worst = std::max(tanh_worst, UlpError(y[i], want));
    ASSERT_LE(UlpError(y[i], want), 4.0) << "tanh(" << t[i] << ") = " << y[i] << ", want " << want;
  }
  RecordProperty("tanh_worst_ulp", std::to_string(tanh_worst));
  UnaryF32(VecUnary::kErf, t.data(), y.data(), static_cast<int64_t>(t.size()));
  double erf_worst = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    const double want = std::erf(static_cast<double>(t[i]));
    erf_worst = std::max(erf_worst, UlpError(y[i], want));
    ASSERT_LE(UlpError(y[i], want), 6.0) << "erf(" << t[i] << ") = " << y[i] << ", want " << want;
  }
  RecordProperty("erf_worst_ulp", std::to_string(erf_worst));
  // Softplus over [-12, 12] and tiny arguments, and far out where log1p(exp(-|x|)) is tiny.
  std::vector<float> sp = t;
  for (float v : {-90.0f, -40.0f, -17.0f, 17.0f, 40.0f, 90.0f}) sp.push_back(v);
  std::vector<float> z(sp.size());
  UnaryF32(VecUnary::kSoftplus, sp.data(), z.data(), static_cast<int64_t>(sp.size()));
  double softplus_worst = 0;
  for (size_t i = 0; i < sp.size(); ++i) {
    const double want = std::log1p(std::exp(static_cast<double>(sp[i])));
    softplus_worst = std::max(softplus_worst, UlpError(z[i], want));
    ASSERT_LE(UlpError(z[i], want), 4.0)
        << "softplus(" << sp[i] << ") = " << z[i] << ", want " << want;
  }
  RecordProperty("softplus_worst_ulp", std::to_string(softplus_worst));
  UnaryF32(VecUnary::kSigmoid, t.data(), y.data(), static_cast<int64_t>(t.size()));
  for (size_t i = 0; i < t.size(); ++i) {
    const double want = 1 / (1 + std::exp(-static_cast<double>(t[i])));
    ASSERT_LE(UlpError(y[i], want), 4.0)
        << "sigmoid(" << t[i] << ") = " << y[i] << ", want " << want;
  }
}

TEST_P(VectorMathTest, ReduceRowsMatchDoublePrecision) {
  const VecReduce ops[] = {VecReduce::kSum,  VecReduce::kMax,    VecReduce::kMin,
                           VecReduce::kProd, VecReduce::kSumAbs, VecReduce::kSumSquare};
  for (VecReduce op : ops) {
    for (int n : {1, 7, 16, 17, 33, 56, 100}) {
      SCOPED_TRACE("op " + std::to_string(static_cast<int>(op)) + " n " + std::to_string(n));
      const int rows = 5;
      std::vector<float> x = Inputs(rows * n, -1.5f, 1.5f, 7 + n);
      std::vector<float> y(rows, -7.0f);
      ReduceRowsF32(op, x.data(), rows, n, y.data());
      for (int r = 0; r < rows; ++r) {
        const float* row = x.data() + r * n;
        double want = op == VecReduce::kProd ? 1 : 0;
        if (op == VecReduce::kMax) want = -INFINITY;
        if (op == VecReduce::kMin) want = INFINITY;
        for (int i = 0; i < n; ++i) {
          const double v = row[i];
          switch (op) {
            case VecReduce::kMax:
              want = std::max(want, v);
              break;
            case VecReduce::kMin:
              want = std::min(want, v);
              break;
            case VecReduce::kProd:
              want *= v;
              break;
            case VecReduce::kSumAbs:
              want += std::fabs(v);
              break;
            case VecReduce::kSumSquare:
              want += v * v;
              break;
            default:
              want += v;
              break;
          }
        }
        ASSERT_NEAR(y[r], want, 1e-5 * (1 + std::fabs(want))) << "row " << r;
      }
    }
    // A NaN anywhere in a row wins Max and Min (and poisons the rest).
    if (op == VecReduce::kMax || op == VecReduce::kMin) {
      for (int at : {0, 5, 16, 20}) {
        std::vector<float> x = Inputs(21, -1.0f, 1.0f, 3);
        x[at] = std::numeric_limits<float>::quiet_NaN();
        float y = 0;
        ReduceRowsF32(op, x.data(), 1, 21, &y);
        EXPECT_TRUE(std::isnan(y)) << "NaN at " << at;
      }
    }
  }
}

TEST_P(VectorMathTest, BinaryWithScalarOperands) {
  const VecBinary ops[] = {VecBinary::kAdd, VecBinary::kSub, VecBinary::kMul, VecBinary::kDiv,
                           VecBinary::kMax, VecBinary::kMin, VecBinary::kPow, VecBinary::kPRelu};
  for (VecBinary op : ops) {
    for (int n : {1, 9, 16, 31}) {
      // PRelu's both branches: a negative and positive.
      const std::vector<float> a = Inputs(n, op == VecBinary::kPRelu ? -4.0f : 0.5f, 4.0f, 3);
      const std::vector<float> b = Inputs(n, -2.0f, 2.0f, 4);
      for (int sa : {0, 1}) {
        for (int sb : {0, 1}) {
          std::vector<float> y(n);
          BinaryF32(op, a.data(), sa, b.data(), sb, y.data(), n);
          for (int i = 0; i < n; ++i) {
            const double x = a[i * sa], z = b[i * sb];
            double want = 0;
            switch (op) {
              case VecBinary::kAdd:
                want = x + z;
                break;
              case VecBinary::kSub:
                want = x - z;
                break;
              case VecBinary::kMul:
                want = x * z;
                break;
              case VecBinary::kDiv:
                want = x / z;
                break;
              case VecBinary::kMax:
                want = std::max(x, z);
                break;
              case VecBinary::kMin:
                want = std::min(x, z);
                break;
              case VecBinary::kPow:
                want = std::pow(x, z);
                break;
              case VecBinary::kPRelu:
                want = x >= 0 ? x : x * z;
                break;
              case VecBinary::kCount:
                break;
            }
            ASSERT_NEAR(y[i], want, 1e-6 + 2e-6 * std::fabs(want))
                << "op " << static_cast<int>(op) << " n " << n << " i " << i;
          }
        }
      }
    }
  }
}

TEST_P(VectorMathTest, Reductions) {
  for (int n : {1, 5, 16, 17, 100, 1000}) {
    const std::vector<float> x = Inputs(n, -3.0f, 3.0f, 9);
    double sum = 0, max = -1e30, exp_sum = 0;
    for (float v : x) {
      sum += v;
      max = std::max<double>(max, v);
    }
    std::vector<float> e(n);
    const float got_exp_sum = ExpShiftSumF32(x.data(), 1.5f, e.data(), n);
    for (int i = 0; i < n; ++i) {
      const double want = std::exp(static_cast<double>(x[i]) - 1.5);
      exp_sum += want;
      ASSERT_NEAR(e[i], want, 3e-6 * want);
    }
    EXPECT_NEAR(SumF32(x.data(), n), sum, 1e-4 * (1 + std::fabs(sum)));
    EXPECT_EQ(MaxF32(x.data(), n), static_cast<float>(max));
    EXPECT_NEAR(got_exp_sum, exp_sum, 1e-5 * exp_sum);
  }
}

// out = Tanh((a + b) * c) - d with a [2,3,5], b [5], c [2,1,1], d scalar (d first: d - value).
TEST_P(VectorMathTest, ChainBroadcastsEveryOperand) {
  const ElementwiseChain chain(
      4, {ChainStep::Binary(VecBinary::kAdd, 1), ChainStep::Binary(VecBinary::kMul, 2),
          ChainStep::Unary(VecUnary::kTanh),
          ChainStep::Binary(VecBinary::kSub, 3, /*operand_first=*/true)});
  const Shape sa{2, 3, 5}, sb{5}, sc{2, 1, 1}, sd{};
  const std::vector<float> a = Inputs(30, -1, 1, 1), b = Inputs(5, -1, 1, 2),
                           c = Inputs(2, 0.5f, 2, 3), d = {0.25f};
  const Shape* shapes[] = {&sa, &sb, &sc, &sd};
  auto prepared = chain.Prepare(shapes);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_EQ(prepared->output, (Shape{2, 3, 5}));
  std::vector<float> out(30);
  const float* operands[] = {a.data(), b.data(), c.data(), d.data()};
  chain.Run(*prepared, operands, out.data());
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int k = 0; k < 5; ++k) {
        const int at = (i * 3 + j) * 5 + k;
        const double want = 0.25 - std::tanh((static_cast<double>(a[at]) + b[k]) * c[i]);
        ASSERT_NEAR(out[at], want, 2e-6) << i << "," << j << "," << k;
      }
    }
  }
  // Shapes that do not broadcast are refused.
  const Shape bad{4};
  const Shape* bad_shapes[] = {&sa, &bad, &sc, &sd};
  EXPECT_FALSE(chain.Prepare(bad_shapes).ok());
}

// A selective scan's state update, s = Exp(dt[..., None] * A) * s + u, over [P, B, D, N] with short
// rows (N = 16: whole vectors on both ISAs; 24: whole AVX2 vectors, an AVX-512 tail; 5: tails
// only; 8, 16, 32, 64: 1, 2 or 4 vectors a row, which the 4-vector blocks span over several rows;
// 40, 72: blocks and single vectors in a row), which run a block of rows per call (chain_rows), 7
// rows (a remainder after the blocks of rows): dt [P, B, D, 1], A [D, N], s and u [P, B, D, N].
TEST_P(VectorMathTest, ChainOverBlocksOfShortRows) {
  const ElementwiseChain chain(
      4, {ChainStep::Binary(VecBinary::kMul, 1), ChainStep::Unary(VecUnary::kExp),
          ChainStep::Binary(VecBinary::kMul, 2), ChainStep::Binary(VecBinary::kAdd, 3)});
  for (int64_t n : {16, 24, 5, 8, 32, 40, 64, 72}) {
    for (int64_t p : {1, 2}) {
      const int64_t b = 3, d = 7;
      const Shape s_dt{p, b, d, 1}, s_a{d, n}, s_s{p, b, d, n};
      const std::vector<float> dt = Inputs(static_cast<int>(p * b * d), 0.1f, 1.0f, 4),
                               a = Inputs(static_cast<int>(d * n), -2.0f, -0.1f, 5),
                               st = Inputs(static_cast<int>(p * b * d * n), -1.0f, 1.0f, 6),
                               u = Inputs(static_cast<int>(p * b * d * n), -1.0f, 1.0f, 7);
      const Shape* shapes[] = {&s_dt, &s_a, &s_s, &s_s};
      auto prepared = chain.Prepare(shapes);
      ASSERT_TRUE(prepared.ok()) << prepared.status();
      ASSERT_EQ(prepared->output, s_s);
      std::vector<float> out(st.size());
      const float* operands[] = {dt.data(), a.data(), st.data(), u.data()};
      chain.Run(*prepared, operands, out.data());
      for (int64_t q = 0; q < p * b; ++q) {
        for (int64_t j = 0; j < d; ++j) {
          for (int64_t k = 0; k < n; ++k) {
            const int64_t at = (q * d + j) * n + k;
            const double want =
                std::exp(static_cast<double>(dt[q * d + j]) * a[j * n + k]) * st[at] + u[at];
            ASSERT_NEAR(out[at], want, 3e-6 * (1 + std::fabs(want)))
                << "n " << n << " p " << p << " at " << at;
          }
        }
      }
    }
  }
}

// One long row per call (chain_row) at every length from 1 to 70 and a few longer ones: 4-vector
// blocks, single vectors and tails, with full-row and scalar operands on either side:
// out = d - tanh((a + b) * c) / e, a, b, d [n], c and e scalars.
TEST_P(VectorMathTest, ChainOnRowsOfEveryLength) {
  const ElementwiseChain chain(
      5, {ChainStep::Binary(VecBinary::kAdd, 1), ChainStep::Binary(VecBinary::kMul, 2),
          ChainStep::Unary(VecUnary::kTanh), ChainStep::Binary(VecBinary::kDiv, 4),
          ChainStep::Binary(VecBinary::kSub, 3, /*operand_first=*/true)});
  std::vector<int64_t> lengths;
  for (int64_t n = 1; n <= 70; ++n) lengths.push_back(n);
  for (int64_t n : {127, 128, 129, 257, 300, 1000}) lengths.push_back(n);
  for (int64_t n : lengths) {
    const Shape row{n}, scalar{};
    const std::vector<float> a = Inputs(static_cast<int>(n), -2, 2, 11),
                             b = Inputs(static_cast<int>(n), -1, 1, 12),
                             d = Inputs(static_cast<int>(n), -1, 1, 13), c = {0.75f}, e = {1.5f};
    const Shape* shapes[] = {&row, &row, &scalar, &row, &scalar};
    auto prepared = chain.Prepare(shapes);
    ASSERT_TRUE(prepared.ok()) << prepared.status();
    std::vector<float> out(static_cast<size_t>(n), -7.0f);
    const float* operands[] = {a.data(), b.data(), c.data(), d.data(), e.data()};
    chain.Run(*prepared, operands, out.data());
    for (int64_t i = 0; i < n; ++i) {
      const double want = d[i] - std::tanh((static_cast<double>(a[i]) + b[i]) * 0.75) / 1.5;
      ASSERT_NEAR(out[i], want, 2e-6) << "n " << n << " i " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, VectorMathTest, ::testing::ValuesIn(Isas()),
                         [](const ::testing::TestParamInfo<Isa>& info) {
                           return std::string(IsaName(info.param));
                         });

}  // namespace
}  // namespace loopserve::engine::native
