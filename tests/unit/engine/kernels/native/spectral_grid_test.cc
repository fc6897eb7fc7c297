// DFT, STFT, MelWeightMatrix and GridSample on inputs whose results are known in closed form
// (the ONNX node tests cover the spec's own examples).

#include <cmath>
#include <complex>
#include <random>

#include "tests/unit/engine/kernels/native/test_util.h"

namespace loopserve::engine::native_test {
namespace {

void ExpectNear(const Tensor& t, const Shape& shape, const std::vector<double>& values,
                double tolerance = 1e-5) {
  ASSERT_EQ(t.shape(), shape) << t.shape().ToString();
  ASSERT_EQ(t.NumElements(), static_cast<int64_t>(values.size()));
  for (size_t i = 0; i < values.size(); ++i) {
    const double v = t.dtype() == DataType::kFloat32 ? t.data<float>()[i] : t.data<double>()[i];
    EXPECT_NEAR(v, values[i], tolerance) << "element " << i;
  }
}

TEST(DftTest, ImpulseConstantAndCosine) {
  // An impulse transforms to all ones; a constant to n at bin 0; cos(2 pi j / 8) to 4 at bins 1
  // and 7. Length 8 runs the radix-2 FFT, length 6 the direct transform.
  std::vector<float> cosine(8);
  for (int j = 0; j < 8; ++j) cosine[j] = static_cast<float>(std::cos(2 * M_PI * j / 8));
  Tensor x(DataType::kFloat32, Shape{3, 8, 1});
  for (int j = 0; j < 8; ++j) {
    x.mutable_data<float>()[j] = j == 0 ? 1.0f : 0.0f;
    x.mutable_data<float>()[8 + j] = 2.0f;
    x.mutable_data<float>()[16 + j] = cosine[j];
  }
  Tensor y = RunOk(OpCase("DFT", 17).In(std::move(x)));
  std::vector<double> expected;
  for (int k = 0; k < 8; ++k) expected.insert(expected.end(), {1.0, 0.0});
  for (int k = 0; k < 8; ++k) expected.insert(expected.end(), {k == 0 ? 16.0 : 0.0, 0.0});
  for (int k = 0; k < 8; ++k) expected.insert(expected.end(), {k == 1 || k == 7 ? 4.0 : 0.0, 0.0});
  ExpectNear(y, Shape{3, 8, 2}, expected);
  // Length 6, onesided (4 bins), and the inverse bringing a constant spectrum back to an impulse.
  Tensor ones(DataType::kFloat64, Shape{1, 6, 1});
  for (int j = 0; j < 6; ++j) ones.mutable_data<double>()[j] = 1.0;
  ExpectNear(RunOk(OpCase("DFT", 17).In(std::move(ones)).Attr("onesided", IntAttr(1))),
             Shape{1, 4, 2}, {6, 0, 0, 0, 0, 0, 0, 0});
  Tensor spectrum(DataType::kFloat32, Shape{1, 6, 2});
  for (int k = 0; k < 6; ++k) {
    spectrum.mutable_data<float>()[2 * k] = 1.0f;
    spectrum.mutable_data<float>()[2 * k + 1] = 0.0f;
  }
  ExpectNear(RunOk(OpCase("DFT", 17).In(std::move(spectrum)).Attr("inverse", IntAttr(1))),
             Shape{1, 6, 2}, {1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
}

TEST(DftTest, DftLengthPadsAndTruncates) {
  // [1, 1] padded to 4: 1 + w^k for w = -i: 2, 1-i, 0, 1+i. Truncated to 1: just the first value.
  ExpectNear(RunOk(OpCase("DFT", 17).In(Make<float>({1, 2, 1}, {1, 1})).In(Scalar<int64_t>(4))),
             Shape{1, 4, 2}, {2, 0, 1, -1, 0, 0, 1, 1});
  ExpectNear(RunOk(OpCase("DFT", 17).In(Make<float>({1, 2, 1}, {3, 5})).In(Scalar<int64_t>(1))),
             Shape{1, 1, 2}, {3, 0});
  ExpectError(OpCase("DFT", 17).In(Make<float>({1, 2, 1}, {3, 5})).In(Scalar<int64_t>(0)),
              absl::StatusCode::kInvalidArgument, "dft_length 0");
  // A prime length above Bluestein's limit (its buffers would take gigabytes): refused.
  ExpectError(OpCase("DFT", 17).In(Make<float>({1, 2, 1}, {3, 5})).In(Scalar<int64_t>(4194319)),
              absl::StatusCode::kUnimplemented, "length 4194319 (prime factor 4194319)");
  ExpectError(OpCase("DFT", 17).In(Make<float>({1, 2, 3}, {1, 2, 3, 4, 5, 6})),
              absl::StatusCode::kInvalidArgument, "expected [batch, signal..., 1 or 2]");
  ExpectError(
      OpCase("DFT", 17).In(Make<float>({1, 2, 2}, {1, 2, 3, 4})).Attr("onesided", IntAttr(1)),
      absl::StatusCode::kInvalidArgument, "onesided");
}

// The direct transform in long double: the reference the FFT paths are checked against.
std::vector<std::complex<long double>> DirectDft(const std::vector<std::complex<long double>>& x,
                                                 bool inverse) {
  const int64_t n = static_cast<int64_t>(x.size());
  const long double pi = 3.141592653589793238462643383279502884L;
  std::vector<std::complex<long double>> roots(n), out(n);
  for (int64_t j = 0; j < n; ++j) {
    const long double angle = (inverse ? 2 : -2) * pi * j / static_cast<long double>(n);
    roots[j] = {std::cos(angle), std::sin(angle)};
  }
  for (int64_t k = 0; k < n; ++k) {
    std::complex<long double> acc = 0;
    for (int64_t j = 0; j < n; ++j) acc += x[j] * roots[(j * k) % n];
    out[k] = inverse ? acc / static_cast<long double>(n) : acc;
  }
  return out;
}

TEST(DftTest, EveryLengthKindAgreesWithTheDirectTransform) {
  // Powers of two (radix 4 and 2), products of 3 and 5, the 400 of a 25 ms frame at 16 kHz,
  // other small primes (their own butterfly), primes above the butterfly limit of 64 (Bluestein),
  // odd and even, real (packed into a half-length transform when even) and complex, forward,
  // inverse and onesided, in float64 so the comparison sees the algorithm, not float rounding.
  std::mt19937 rng(27);
  std::uniform_real_distribution<double> uniform(-1, 1);
  for (const int64_t n :
       {1,  2,  3,  4,  5,  6,  7,  8,  9,   10,  12,  14,  15,  16,  21,  22,  25,
        27, 30, 32, 49, 60, 64, 67, 97, 121, 128, 131, 200, 243, 400, 512, 1031}) {
    for (const bool complex_in : {false, true}) {
      for (const int inverse : {0, 1}) {
        for (const int onesided : {0, 1}) {
          if (onesided && complex_in) continue;
          const int64_t comps = complex_in ? 2 : 1;
          Tensor x(DataType::kFloat64, Shape{2, n, comps});
          std::vector<double> values(2 * n * comps);
          for (double& v : values) v = uniform(rng);
          std::copy(values.begin(), values.end(), x.mutable_data<double>());
          const Tensor y = RunOk(OpCase("DFT", 17)
                                     .In(std::move(x))
                                     .Attr("inverse", IntAttr(inverse))
                                     .Attr("onesided", IntAttr(onesided)));
          const int64_t bins = onesided ? n / 2 + 1 : n;
          ASSERT_EQ(y.shape(), (Shape{2, bins, 2})) << "n " << n;
          for (int64_t b = 0; b < 2; ++b) {
            std::vector<std::complex<long double>> line(n);
            for (int64_t j = 0; j < n; ++j) {
              const double* at = &values[(b * n + j) * comps];
              line[j] = {at[0], complex_in ? at[1] : 0.0};
            }
            const auto expected = DirectDft(line, inverse != 0);
            const double tolerance = 1e-12 * n;
            for (int64_t k = 0; k < bins; ++k) {
              const double* got = &y.data<double>()[(b * bins + k) * 2];
              EXPECT_NEAR(got[0], static_cast<double>(expected[k].real()), tolerance)
                  << "n " << n << " complex " << complex_in << " inverse " << inverse << " bin "
                  << k;
              EXPECT_NEAR(got[1], static_cast<double>(expected[k].imag()), tolerance)
                  << "n " << n << " complex " << complex_in << " inverse " << inverse << " bin "
                  << k;
            }
          }
        }
      }
    }
  }
}

TEST(StftTest, WindowedFramesAgreeWithTheDirectTransform) {
  // 1000 samples, Hann frames of 400 every 160 (the speech front end's 25 ms / 10 ms at 16 kHz)
  // and of 31 every 7 (odd length: the unpacked path), onesided.
  std::mt19937 rng(28);
  std::uniform_real_distribution<double> uniform(-1, 1);
  for (const auto& [length, step] : {std::pair<int64_t, int64_t>{400, 160}, {31, 7}}) {
    std::vector<double> signal(1000), window(length);
    for (double& v : signal) v = uniform(rng);
    for (int64_t j = 0; j < length; ++j) window[j] = 0.5 - 0.5 * std::cos(2 * M_PI * j / length);
    Tensor x(DataType::kFloat64, Shape{1, 1000, 1});
    std::copy(signal.begin(), signal.end(), x.mutable_data<double>());
    Tensor w(DataType::kFloat64, Shape{length});
    std::copy(window.begin(), window.end(), w.mutable_data<double>());
    const Tensor y =
        RunOk(OpCase("STFT", 17).In(std::move(x)).In(Scalar<int64_t>(step)).In(std::move(w)));
    const int64_t frames = (1000 - length) / step + 1, bins = length / 2 + 1;
    ASSERT_EQ(y.shape(), (Shape{1, frames, bins, 2}));
    for (int64_t f = 0; f < frames; ++f) {
      std::vector<std::complex<long double>> line(length);
      for (int64_t j = 0; j < length; ++j) line[j] = signal[f * step + j] * window[j];
      const auto expected = DirectDft(line, false);
      for (int64_t k = 0; k < bins; ++k) {
        const double* got = &y.data<double>()[((f * bins) + k) * 2];
        EXPECT_NEAR(got[0], static_cast<double>(expected[k].real()), 1e-11) << f << ", " << k;
        EXPECT_NEAR(got[1], static_cast<double>(expected[k].imag()), 1e-11) << f << ", " << k;
      }
    }
  }
}

TEST(StftTest, FramesOfAConstantSignal) {
  // A constant 1 over 10 samples, frames of 4 every 3 samples: 3 frames, each DFT 4 at bin 0;
  // onesided keeps 3 bins. A window [1, 0, 0, 0] leaves 1 in every bin.
  Tensor signal(DataType::kFloat32, Shape{1, 10, 1});
  for (int j = 0; j < 10; ++j) signal.mutable_data<float>()[j] = 1.0f;
  Tensor copy;
  copy.CopyFrom(signal);
  ExpectNear(RunOk(OpCase("STFT", 17)
                       .In(std::move(signal))
                       .In(Scalar<int64_t>(3))
                       .Omitted()
                       .In(Scalar<int64_t>(4))),
             Shape{1, 3, 3, 2}, {4, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0});
  ExpectNear(RunOk(OpCase("STFT", 17)
                       .In(std::move(copy))
                       .In(Scalar<int64_t>(3))
                       .In(Make<float>({4}, {1, 0, 0, 0}))),
             Shape{1, 3, 3, 2}, {1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0});
}

TEST(MelWeightMatrixTest, RejectsBadEdges) {
  ExpectError(OpCase("MelWeightMatrix", 17)
                  .In(Scalar<int32_t>(8))
                  .In(Scalar<int32_t>(16))
                  .In(Scalar<int32_t>(8192))
                  .In(Scalar<float>(100))
                  .In(Scalar<float>(50)),
              absl::StatusCode::kInvalidArgument, "mel filter bank");
}

TEST(GridSampleTest, InterpolationAndPadding) {
  // X = [[0, 1], [2, 3]]. Grid (0, 0) is the image centre: bilinear 1.5 with or without
  // align_corners. (-1, -1) with align_corners is pixel (0, 0): 0; without it, the corner of the
  // image, half a pixel outside: a quarter of pixel (0, 0) with zeros padding (0), the pixel
  // itself with border padding (0). (1, -1) without align_corners: the top-right corner: zeros
  // gives 1/4 of pixel (0, 1) = 0.25, border gives 1.
  const Tensor x = Make<float>({1, 1, 2, 2}, {0, 1, 2, 3});
  auto sample = [&](std::vector<float> grid, const char* mode, const char* padding, int align) {
    Tensor g(DataType::kFloat32, Shape{1, 1, static_cast<int64_t>(grid.size() / 2), 2});
    std::copy(grid.begin(), grid.end(), g.mutable_data<float>());
    Tensor xc;
    xc.CopyFrom(x);
    return RunOk(OpCase("GridSample", 16)
                     .In(std::move(xc))
                     .In(std::move(g))
                     .Attr("mode", StringAttr(mode))
                     .Attr("padding_mode", StringAttr(padding))
                     .Attr("align_corners", IntAttr(align)));
  };
  ExpectNear(sample({0, 0, -1, -1, 1, -1}, "bilinear", "zeros", 0), Shape{1, 1, 1, 3},
             {1.5, 0, 0.25});
  ExpectNear(sample({0, 0, -1, -1, 1, -1}, "bilinear", "border", 0), Shape{1, 1, 1, 3},
             {1.5, 0, 1});
  ExpectNear(sample({0, 0, -1, -1, 1, 1}, "bilinear", "zeros", 1), Shape{1, 1, 1, 3}, {1.5, 0, 3});
  // Nearest: (0.6, -0.6) lies in pixel (0, 1); far-off and NaN locations sample nothing.
  ExpectNear(sample({0.6f, -0.6f, 40, 40}, "nearest", "zeros", 0), Shape{1, 1, 1, 2}, {1, 0});
  Tensor nan = sample({std::nanf(""), 0}, "nearest", "zeros", 0);
  EXPECT_EQ(nan.data<float>()[0], 0.0f);
  // Bicubic at a pixel centre (align_corners) reproduces the pixel.
  ExpectNear(sample({1, 1}, "bicubic", "border", 1), Shape{1, 1, 1, 1}, {3});
  ExpectError(OpCase("GridSample", 16)
                  .In(Make<float>({1, 1, 2, 2}, {0, 1, 2, 3}))
                  .In(Make<float>({1, 1, 1, 3}, {0, 0, 0})),
              absl::StatusCode::kInvalidArgument, "[N, H_out, W_out, 2]");
  ExpectError(OpCase("GridSample", 16)
                  .In(Make<float>({1, 1, 2, 2}, {0, 1, 2, 3}))
                  .In(Make<float>({1, 1, 1, 2}, {0, 0}))
                  .Attr("mode", StringAttr("cubic")),
              absl::StatusCode::kInvalidArgument, "mode");
}

}  // namespace
}  // namespace loopserve::engine::native_test
