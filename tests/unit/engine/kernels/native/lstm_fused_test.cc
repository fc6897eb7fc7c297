// The fused LSTM step (engine/kernels/native/lstm_fused) through the native recurrent layer,
// against a double-precision LSTM written here from the ONNX operator's equations (gate order
// i o f c in W, R, B and i o f in P), over a family of shapes: batch 1 to 33 (every row-tile
// width and remainder of the AVX-512 and AVX2 tiles), hidden sizes that are not multiples of 16
// (masked lanes), peepholes, clip, coupled input and forget gates, reverse and bidirectional
// layers, and sequence lengths that end rows early. Each case also checks that the weights were
// prepared for the fused step, so no case falls onto the generic path unnoticed.

#include "engine/kernels/native/lstm_fused.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "engine/kernels/native/cpu_isa.h"
#include "engine/kernels/native/packed_gemv.h"
#include "engine/kernels/native/recurrent.h"
#include "gtest/gtest.h"
#include "tests/unit/engine/operator_new_counter.h"

namespace loopserve::engine::native {
namespace {

struct Case {
  int64_t steps, batch, input, hidden;
  int directions = 1;
  bool reverse = false;
  bool peephole = false;
  float clip = 0;
  bool input_forget = false;
  bool lengths = false;
  bool nan_input = false;  // x[0] (step 0, row 0, feature 0) is NaN
};

struct OnnxLstm {
  std::vector<float> w, r, b, p;  // ONNX layouts: [D, 4H, I], [D, 4H, H], [D, 8H], [D, 3H]
};

double Sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// Y [T, D, B, H], Y_h and Y_c [D, B, H], by the ONNX equations in double precision. Steps past a
// row's length leave Y zero and the states as they were.
void Reference(const Case& c, const OnnxLstm& m, const std::vector<float>& x,
               const std::vector<int32_t>& lengths, const std::vector<float>& h0,
               const std::vector<float>& c0, std::vector<double>& y, std::vector<double>& yh,
               std::vector<double>& yc) {
  const int64_t T = c.steps, B = c.batch, I = c.input, H = c.hidden, D = c.directions;
  y.assign(T * D * B * H, 0.0);
  yh.assign(D * B * H, 0.0);
  yc.assign(D * B * H, 0.0);
  auto clip = [&](double v) {
    return c.clip > 0 ? std::min<double>(std::max<double>(v, -c.clip), c.clip) : v;
  };
  for (int64_t d = 0; d < D; ++d) {
    const bool backward = D == 2 ? d == 1 : c.reverse;
    const float* w = m.w.data() + d * 4 * H * I;
    const float* r = m.r.data() + d * 4 * H * H;
    const float* wb = m.b.data() + d * 8 * H;
    const float* rb = wb + 4 * H;
    const float* p = c.peephole ? m.p.data() + d * 3 * H : nullptr;
    for (int64_t b = 0; b < B; ++b) {
      std::vector<double> hs(H), cs(H);
      for (int64_t j = 0; j < H; ++j) {
        hs[j] = h0[(d * B + b) * H + j];
        cs[j] = c0[(d * B + b) * H + j];
      }
      const int64_t len = lengths.empty() ? T : lengths[b];
      for (int64_t s = 0; s < len; ++s) {
        const int64_t t = backward ? len - 1 - s : s;
        std::vector<double> g(4 * H);  // i o f c
        for (int64_t n = 0; n < 4 * H; ++n) {
          double v = wb[n] + rb[n];
          for (int64_t k = 0; k < I; ++k) v += double(x[(t * B + b) * I + k]) * w[n * I + k];
          for (int64_t k = 0; k < H; ++k) v += hs[k] * r[n * H + k];
          g[n] = v;
        }
        std::vector<double> hn(H);
        for (int64_t j = 0; j < H; ++j) {
          const double it = Sigmoid(clip(g[j] + (p ? p[j] * cs[j] : 0)));
          const double ft = c.input_forget
                                ? 1 - it
                                : Sigmoid(clip(g[2 * H + j] + (p ? p[2 * H + j] * cs[j] : 0)));
          const double ct = std::tanh(clip(g[3 * H + j]));
          cs[j] = ft * cs[j] + it * ct;
          const double ot = Sigmoid(clip(g[H + j] + (p ? p[H + j] * cs[j] : 0)));
          hn[j] = ot * std::tanh(cs[j]);
        }
        hs = hn;
        for (int64_t j = 0; j < H; ++j) y[((t * D + d) * B + b) * H + j] = hs[j];
      }
      for (int64_t j = 0; j < H; ++j) {
        yh[(d * B + b) * H + j] = hs[j];
        yc[(d * B + b) * H + j] = cs[j];
      }
    }
  }
}

Tensor FromVector(const std::vector<float>& v, const Shape& shape) {
  Tensor t(DataType::kFloat32, shape);
  std::copy(v.begin(), v.end(), t.mutable_data<float>());
  return t;
}

void ExpectNear(const std::vector<double>& want, const float* got, const char* what) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      ASSERT_TRUE(std::isnan(got[i])) << what << "[" << i << "] = " << got[i] << ", not NaN";
      continue;
    }
    ASSERT_NEAR(got[i], want[i], 2e-5 + 1e-3 * std::fabs(want[i])) << what << "[" << i << "]";
  }
}

void RunCase(const Case& c, std::mt19937& rng) {
  SCOPED_TRACE(::testing::Message()
               << "T=" << c.steps << " B=" << c.batch << " I=" << c.input << " H=" << c.hidden
               << " D=" << c.directions << " reverse=" << c.reverse << " peephole=" << c.peephole
               << " clip=" << c.clip << " input_forget=" << c.input_forget
               << " lengths=" << c.lengths);
  const int64_t T = c.steps, B = c.batch, I = c.input, H = c.hidden, D = c.directions;
  const float scale = 1.0f / std::sqrt(static_cast<float>(H));
  auto random = [&](int64_t n, float s) {
    std::uniform_real_distribution<float> dist(-s, s);
    std::vector<float> v(n);
    for (float& e : v) e = dist(rng);
    return v;
  };
  OnnxLstm m;
  m.w = random(D * 4 * H * I, 2 * scale);
  m.r = random(D * 4 * H * H, 2 * scale);
  m.b = random(D * 8 * H, 0.5f);
  m.p = random(D * 3 * H, 0.5f);
  std::vector<float> x = random(T * B * I, 1.0f);
  if (c.nan_input) x[0] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> h0 = random(D * B * H, 0.8f);
  const std::vector<float> c0 = random(D * B * H, 0.8f);
  std::vector<int32_t> lengths;
  if (c.lengths) {
    std::uniform_int_distribution<int32_t> len(0, static_cast<int32_t>(T));
    for (int64_t b = 0; b < B; ++b) lengths.push_back(b == 0 ? static_cast<int32_t>(T) : len(rng));
  }

  RecurrentSpec spec;
  spec.cell = RecurrentCell::kLstm;
  spec.num_directions = c.directions;
  spec.reverse = c.reverse;
  spec.hidden = H;
  spec.clip = c.clip;
  spec.input_forget = c.input_forget;
  spec.gate_order = "iofc";
  for (int d = 0; d < D; ++d) {
    spec.activations.push_back({RecurrentActivation::Kind::kSigmoid, 0, 0});
    spec.activations.push_back({RecurrentActivation::Kind::kTanh, 0, 0});
    spec.activations.push_back({RecurrentActivation::Kind::kTanh, 0, 0});
  }
  const Tensor w = FromVector(m.w, Shape{D, 4 * H, I});
  const Tensor r = FromVector(m.r, Shape{D, 4 * H, H});
  const Tensor b = FromVector(m.b, Shape{D, 8 * H});
  const Tensor p = FromVector(m.p, Shape{D, 3 * H});
  RecurrentWeights weights;
  ASSERT_TRUE(
      CanonicalRecurrentWeights(spec, w, r, &b, c.peephole ? &p : nullptr, /*pack=*/true, weights)
          .ok());
  ASSERT_EQ(weights.fused_lstm.size(), static_cast<size_t>(D)) << "not on the fused step";

  absl::StatusOr<RecurrentShape> shape = ResolveRecurrentShape(spec, Shape{T, B, I});
  ASSERT_TRUE(shape.ok());
  std::vector<float> y(T * D * B * H, -7.0f), yh(D * B * H, -7.0f), yc(D * B * H, -7.0f);
  RecurrentIo io;
  io.x = x.data();
  io.lengths = c.lengths ? lengths.data() : nullptr;
  io.h0 = h0.data();
  io.c0 = c0.data();
  io.y = y.data();
  io.y_h = yh.data();
  io.y_c = yc.data();
  RecurrentScratch scratch;
  // Twice on the same scratch: the second run must not see the first one's state.
  for (int run = 0; run < 2; ++run) {
    ASSERT_TRUE(RunNativeRecurrent(spec, weights, *shape, io, scratch).ok());
  }
  std::vector<double> want_y, want_h, want_c;
  Reference(c, m, x, lengths, h0, c0, want_y, want_h, want_c);
  ExpectNear(want_y, y.data(), "Y");
  ExpectNear(want_h, yh.data(), "Y_h");
  ExpectNear(want_c, yc.data(), "Y_c");
}

// On the CPU's widest kernel, and again forced onto the AVX2 one (the same on an AVX2 CPU).
class LstmFusedTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    SetMaxIsa(GetParam() ? Isa::kAvx2 : Isa::kAvx512);
    if (!LstmFusedStep::Available()) GTEST_SKIP() << "no AVX2/AVX-512 on this CPU";
  }
  void TearDown() override { SetMaxIsa(Isa::kAvx512); }
};

TEST_P(LstmFusedTest, BatchAndHiddenFamily) {
  std::mt19937 rng(13);
  for (int64_t batch : {1, 2, 3, 5, 6, 7, 12, 13, 16, 33}) {
    for (int64_t hidden : {1, 7, 16, 17, 40}) {
      RunCase({5, batch, 6, hidden}, rng);
    }
  }
}

TEST_P(LstmFusedTest, PeepholeClipInputForget) {
  std::mt19937 rng(17);
  for (int64_t batch : {1, 4, 9}) {
    Case c{6, batch, 5, 23};
    c.peephole = true;
    RunCase(c, rng);
    c.clip = 0.7f;
    RunCase(c, rng);
    c.input_forget = true;
    RunCase(c, rng);
  }
}

TEST_P(LstmFusedTest, DirectionsAndSequenceLengths) {
  std::mt19937 rng(19);
  for (int64_t batch : {1, 3, 8, 14}) {
    Case c{7, batch, 4, 19};
    c.reverse = true;
    RunCase(c, rng);
    c.reverse = false;
    c.directions = 2;
    c.peephole = true;
    RunCase(c, rng);
    c.lengths = true;
    RunCase(c, rng);
    c.directions = 1;
    c.reverse = true;
    RunCase(c, rng);
  }
}

// A NaN input makes its row's outputs NaN, as the equations (and the generic kernel) give, with
// and without clip: the clamps in the gates and in tanh must not turn it into a bound.
TEST_P(LstmFusedTest, NanInputStaysNan) {
  std::mt19937 rng(17);
  for (float clip : {0.0f, 3.0f}) {
    for (int64_t batch : {1, 3}) {
      Case c{4, batch, 5, 17};
      c.clip = clip;
      c.nan_input = true;
      RunCase(c, rng);
    }
  }
}

TEST_P(LstmFusedTest, BenchmarkShape) {
  std::mt19937 rng(23);
  RunCase({4, 2, 256, 256}, rng);
}

// The hot-path contract on the fused path: once the scratch has the run's shapes, another run
// allocates nothing (no Tensor buffer, no operator new).
TEST_P(LstmFusedTest, RepeatedRunsAllocateNothing) {
  const int64_t T = 6, B = 5, I = 7, H = 21;
  RecurrentSpec spec;
  spec.hidden = H;
  spec.gate_order = "iofc";
  spec.activations = {{RecurrentActivation::Kind::kSigmoid, 0, 0},
                      {RecurrentActivation::Kind::kTanh, 0, 0},
                      {RecurrentActivation::Kind::kTanh, 0, 0}};
  std::vector<float> w(4 * H * I, 0.05f), r(4 * H * H, -0.03f), x(T * B * I, 0.5f);
  RecurrentWeights weights;
  ASSERT_TRUE(CanonicalRecurrentWeights(spec, FromVector(w, Shape{1, 4 * H, I}),
                                        FromVector(r, Shape{1, 4 * H, H}), nullptr, nullptr,
                                        /*pack=*/true, weights)
                  .ok());
  ASSERT_EQ(weights.fused_lstm.size(), 1u);
  absl::StatusOr<RecurrentShape> shape = ResolveRecurrentShape(spec, Shape{T, B, I});
  ASSERT_TRUE(shape.ok());
  std::vector<int32_t> lengths = {6, 0, 3, 6, 1};
  std::vector<float> y(T * B * H), yh(B * H), yc(B * H);
  RecurrentIo io;
  io.x = x.data();
  io.lengths = lengths.data();
  io.y = y.data();
  io.y_h = yh.data();
  io.y_c = yc.data();
  RecurrentScratch scratch;
  ASSERT_TRUE(RunNativeRecurrent(spec, weights, *shape, io, scratch).ok());
  const std::vector<float> first = y;
  const int64_t before = OperatorNewCount();
  for (int run = 0; run < 3; ++run) {
    ASSERT_TRUE(RunNativeRecurrent(spec, weights, *shape, io, scratch).ok());
  }
  EXPECT_EQ(OperatorNewCount(), before);
  EXPECT_EQ(y, first);
}

INSTANTIATE_TEST_SUITE_P(Isa, LstmFusedTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Avx2" : "Widest";
                         });

}  // namespace
}  // namespace loopserve::engine::native
