// Resize, Upsample, NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss, DepthToSpace,
// SpaceToDepth, Compress, ReverseSequence, EyeLike and the window generators.

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "tests/unit/engine/kernels/native/test_util.h"

namespace loopserve::engine::native_test {
namespace {

Tensor F32(std::initializer_list<float> v) {
  return Make<float>(Shape{static_cast<int64_t>(v.size())}, v);
}

TEST(ResizeTest, NearestUpsampleSpecExample) {
  // [[1,2],[3,4]] scaled by [1,1,2,3] with asymmetric nearest (Upsample semantics).
  ExpectTensor<float>(RunOk(OpCase("Resize", 13)
                                .In(Make<float>({1, 1, 2, 2}, {1, 2, 3, 4}))
                                .Omitted()
                                .In(F32({1, 1, 2, 3}))
                                .Attr("coordinate_transformation_mode", StringAttr("asymmetric"))
                                .Attr("nearest_mode", StringAttr("floor"))),
                      {1, 1, 4, 6},
                      {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4});
  ExpectTensor<float>(RunOk(OpCase("Upsample", 9).In(Make<float>({1, 2}, {1, 2})).In(F32({1, 2}))),
                      {1, 4}, {1, 1, 2, 2});
}

TEST(ResizeTest, LinearHalfPixelAndAlignCorners) {
  // half_pixel upsample of [1, 2] by 2: x_orig = -0.25, 0.25, 0.75, 1.25 -> clamped edges.
  ExpectTensor<float>(RunOk(OpCase("Resize", 13)
                                .In(Make<float>({2}, {1, 2}))
                                .Omitted()
                                .In(F32({2}))
                                .Attr("mode", StringAttr("linear"))),
                      {4}, {1, 1.25f, 1.75f, 2});
  ExpectTensor<float>(
      RunOk(OpCase("Resize", 13)
                .In(Make<float>({2}, {1, 2}))
                .Omitted()
                .Omitted()
                .In(I64({3}))
                .Attr("mode", StringAttr("linear"))
                .Attr("coordinate_transformation_mode", StringAttr("align_corners"))),
      {3}, {1, 1.5f, 2});
}

TEST(ResizeTest, CubicKeepsSamplePoints) {
  // Asymmetric cubic at integer source positions reproduces the samples.
  Tensor out = RunOk(OpCase("Resize", 13)
                         .In(Make<float>({4}, {1, 2, 4, 8}))
                         .Omitted()
                         .In(F32({2}))
                         .Attr("mode", StringAttr("cubic"))
                         .Attr("coordinate_transformation_mode", StringAttr("asymmetric")));
  ASSERT_EQ(out.shape(), Shape({8}));
  EXPECT_FLOAT_EQ(out.data<float>()[0], 1);
  EXPECT_FLOAT_EQ(out.data<float>()[2], 2);
  EXPECT_FLOAT_EQ(out.data<float>()[4], 4);
  ExpectError(OpCase("Resize", 13).In(Make<float>({2}, {1, 2})).Omitted().In(F32({-1})),
              absl::StatusCode::kInvalidArgument, "not positive");
}

TEST(LossTest, NllAndSoftmaxCrossEntropy) {
  // input log-probs [[-1,-2],[-3,-4]], targets [1, 0] -> losses 2 and 3.
  auto input = [] { return Make<float>({2, 2}, {-1, -2, -3, -4}); };
  ExpectTensor<float>(RunOk(OpCase("NegativeLogLikelihoodLoss", 13)
                                .In(input())
                                .In(I64({1, 0}))
                                .Attr("reduction", StringAttr("none"))),
                      {2}, {2, 3});
  ExpectTensor<float>(RunOk(OpCase("NegativeLogLikelihoodLoss", 13).In(input()).In(I64({1, 0}))),
                      {}, {2.5f});
  // Weights [1, 3]: (2*3 + 3*1) / (3 + 1).
  ExpectTensor<float>(
      RunOk(OpCase("NegativeLogLikelihoodLoss", 13).In(input()).In(I64({1, 0})).In(F32({1, 3}))),
      {}, {9.0f / 4});
  ExpectTensor<float>(RunOk(OpCase("NegativeLogLikelihoodLoss", 13)
                                .In(input())
                                .In(I64({1, 0}))
                                .Attr("ignore_index", IntAttr(0))
                                .Attr("reduction", StringAttr("sum"))),
                      {}, {2});
  // Equal scores: log-softmax is log(1/2) everywhere.
  ExpectTensor<float>(
      RunOk(OpCase("SoftmaxCrossEntropyLoss", 13).In(Make<float>({1, 2}, {5, 5})).In(I64({0}))), {},
      {std::log(2.0f)});
  ExpectError(OpCase("NegativeLogLikelihoodLoss", 13).In(input()).In(I64({2, 0})),
              absl::StatusCode::kInvalidArgument, "out of range");
}

TEST(ResizeTest, NearestPicksTheSpecsSourcePixel) {
  // Float32 nearest over the last two dims (the copy path): rows up 9/5, columns down 4/7, with
  // asymmetric + floor (Upsample's rule) and half_pixel + round_prefer_ceil; each output pixel is
  // the input pixel at the spec's source coordinate, computed here.
  const int64_t planes = 6, h = 5, w = 7, oh = 9, ow = 4;
  std::vector<float> x(planes * h * w);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  for (const bool half_pixel : {false, true}) {
    Tensor xt(DataType::kFloat32, Shape{2, 3, h, w});
    std::copy(x.begin(), x.end(), xt.mutable_data<float>());
    const Tensor y =
        RunOk(OpCase("Resize", 13)
                  .In(std::move(xt))
                  .Omitted()
                  .Omitted()
                  .In(I64({2, 3, oh, ow}))
                  .Attr("mode", StringAttr("nearest"))
                  .Attr("coordinate_transformation_mode",
                        StringAttr(half_pixel ? "half_pixel" : "asymmetric"))
                  .Attr("nearest_mode", StringAttr(half_pixel ? "round_prefer_ceil" : "floor")));
    ASSERT_EQ(y.shape(), (Shape{2, 3, oh, ow}));
    auto source = [&](int64_t o, int64_t in, int64_t out) {
      const double scale = static_cast<double>(out) / in;
      if (!half_pixel) return static_cast<int64_t>(std::floor(o / scale));
      const double at = (o + 0.5) / scale - 0.5;
      const int64_t i = at - std::floor(at) == 0.5 ? static_cast<int64_t>(std::ceil(at))
                                                   : static_cast<int64_t>(std::round(at));
      return std::clamp<int64_t>(i, 0, in - 1);
    };
    for (int64_t p = 0; p < planes; ++p) {
      for (int64_t r = 0; r < oh; ++r) {
        for (int64_t c = 0; c < ow; ++c) {
          EXPECT_EQ(y.data<float>()[(p * oh + r) * ow + c],
                    x[(p * h + source(r, h, oh)) * w + source(c, w, ow)])
              << "half_pixel " << half_pixel << " at " << p << ", " << r << ", " << c;
        }
      }
    }
  }
}

TEST(LossTest, SoftmaxCrossEntropyAgreesWithDoubleLogSoftmax) {
  // Float32 rows of 1000 and 37 classes (vector paths with and without tails), scores up to +-30
  // so exp would overflow without the max shift, a weight per class and an ignored label: both
  // outputs against log-softmax and the weighted mean computed here in double.
  std::mt19937 rng(27);
  std::uniform_real_distribution<double> uniform(-30, 30);
  for (const int64_t classes : {1000, 37}) {
    const int64_t n = 5;
    std::vector<double> scores(n * classes), weights(classes);
    for (double& v : scores) v = static_cast<float>(uniform(rng));
    for (double& v : weights) v = static_cast<float>(uniform(rng) / 60 + 1);
    const std::vector<int64_t> labels = {3, 0, classes - 1, 7, 3};
    Tensor x(DataType::kFloat32, Shape{n, classes}), w(DataType::kFloat32, Shape{classes});
    for (int64_t i = 0; i < n * classes; ++i) x.mutable_data<float>()[i] = scores[i];
    for (int64_t k = 0; k < classes; ++k) w.mutable_data<float>()[k] = weights[k];
    Tensor t(DataType::kInt64, Shape{n});
    std::copy(labels.begin(), labels.end(), t.mutable_data<int64_t>());
    absl::StatusOr<std::vector<Value>> out = RunOp(OpCase("SoftmaxCrossEntropyLoss", 13)
                                                       .In(std::move(x))
                                                       .In(std::move(t))
                                                       .In(std::move(w))
                                                       .Attr("ignore_index", IntAttr(7))
                                                       .Outputs(2));
    ASSERT_TRUE(out.ok()) << out.status();
    const Tensor& loss = (*out)[0].tensor();
    const Tensor& log_prob = (*out)[1].tensor();
    ASSERT_EQ(log_prob.shape(), (Shape{n, classes}));
    double sum = 0, weight_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      double mx = -INFINITY, s = 0;
      for (int64_t k = 0; k < classes; ++k) mx = std::max(mx, scores[i * classes + k]);
      for (int64_t k = 0; k < classes; ++k) s += std::exp(scores[i * classes + k] - mx);
      const double lse = mx + std::log(s);
      for (int64_t k = 0; k < classes; ++k) {
        EXPECT_NEAR(log_prob.data<float>()[i * classes + k], scores[i * classes + k] - lse, 1e-5)
            << classes << " classes, row " << i << ", class " << k;
      }
      if (labels[i] == 7) continue;
      sum -= (scores[i * classes + labels[i]] - lse) * weights[labels[i]];
      weight_sum += weights[labels[i]];
    }
    ASSERT_EQ(loss.shape(), Shape{});
    EXPECT_NEAR(loss.data<float>()[0], sum / weight_sum, 1e-5) << classes << " classes";
  }
}

TEST(RearrangeTest, DepthSpaceRoundTrip) {
  // DCR example from the spec, reduced: [1, 4, 1, 1] -> [1, 1, 2, 2].
  ExpectTensor<float>(RunOk(OpCase("DepthToSpace", 13)
                                .In(Make<float>({1, 4, 1, 1}, {1, 2, 3, 4}))
                                .Attr("blocksize", IntAttr(2))),
                      {1, 1, 2, 2}, {1, 2, 3, 4});
  // CRD on [1, 8, 1, 1]: channel c*4 + i*2 + j goes to (c, i, j).
  ExpectTensor<float>(RunOk(OpCase("DepthToSpace", 13)
                                .In(Make<float>({1, 8, 1, 1}, {0, 1, 2, 3, 4, 5, 6, 7}))
                                .Attr("blocksize", IntAttr(2))
                                .Attr("mode", StringAttr("CRD"))),
                      {1, 2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  ExpectTensor<float>(RunOk(OpCase("SpaceToDepth", 13)
                                .In(Make<float>({1, 1, 2, 2}, {1, 2, 3, 4}))
                                .Attr("blocksize", IntAttr(2))),
                      {1, 4, 1, 1}, {1, 2, 3, 4});
  ExpectError(OpCase("SpaceToDepth", 13)
                  .In(Make<float>({1, 1, 3, 2}, {1, 2, 3, 4, 5, 6}))
                  .Attr("blocksize", IntAttr(2)),
              absl::StatusCode::kInvalidArgument, "multiples");
}

TEST(RearrangeTest, CompressAndReverseSequence) {
  ExpectTensor<int32_t>(RunOk(OpCase("Compress", 11)
                                  .In(Make<int32_t>({3, 2}, {1, 2, 3, 4, 5, 6}))
                                  .In(Make<bool>({3}, {false, true, true}))
                                  .Attr("axis", IntAttr(0))),
                        {2, 2}, {3, 4, 5, 6});
  ExpectTensor<int32_t>(RunOk(OpCase("Compress", 11)
                                  .In(Make<int32_t>({3, 2}, {1, 2, 3, 4, 5, 6}))
                                  .In(Make<bool>({2}, {false, true}))),
                        {1}, {2});
  // time_axis 0, batch_axis 1: [[0,4],[1,5],[2,6],[3,7]] with lens [4, 2].
  ExpectTensor<int32_t>(RunOk(OpCase("ReverseSequence", 10)
                                  .In(Make<int32_t>({4, 2}, {0, 4, 1, 5, 2, 6, 3, 7}))
                                  .In(I64({4, 2}))),
                        {4, 2}, {3, 5, 2, 4, 1, 6, 0, 7});
}

TEST(WindowTest, EyeLikeAndWindows) {
  ExpectTensor<int32_t>(
      RunOk(
          OpCase("EyeLike", 9).In(Make<int32_t>({2, 3}, {7, 7, 7, 7, 7, 7})).Attr("k", IntAttr(1))),
      {2, 3}, {0, 1, 0, 0, 0, 1});
  ExpectTensor<float>(RunOk(OpCase("HannWindow", 17).In(Scalar<int64_t>(4))), {4},
                      {0, 0.5f, 1, 0.5f});
  ExpectTensor<float>(
      RunOk(OpCase("HannWindow", 17).In(Scalar<int64_t>(3)).Attr("periodic", IntAttr(0))), {3},
      {0, 1, 0});
  Tensor b = RunOk(OpCase("BlackmanWindow", 17).In(Scalar<int32_t>(2)));
  ASSERT_EQ(b.NumElements(), 2);
  EXPECT_NEAR(b.data<float>()[1], 0.42 + 0.5 + 0.08, 1e-6);
}

}  // namespace
}  // namespace loopserve::engine::native_test
