// DFT, STFT, MelWeightMatrix and GridSample on inputs whose results are known in closed form
// (the ONNX node tests cover the spec's own examples).

#include <cmath>

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
  ExpectError(OpCase("DFT", 17).In(Make<float>({1, 2, 3}, {1, 2, 3, 4, 5, 6})),
              absl::StatusCode::kInvalidArgument, "expected [batch, signal..., 1 or 2]");
  ExpectError(
      OpCase("DFT", 17).In(Make<float>({1, 2, 2}, {1, 2, 3, 4})).Attr("onesided", IntAttr(1)),
      absl::StatusCode::kInvalidArgument, "onesided");
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
