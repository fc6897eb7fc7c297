// RoiAlign against a direct per-sample evaluation of the operator's definition (the ONNX
// reference's and ONNX Runtime's bilinear sampling), on rois inside, across and outside the image;
// LpPool against the definition summed in double (the random-window comparison with the reference
// kernel is in dnnl/conv_pool_test.cc).

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "tests/unit/engine/kernels/native/test_util.h"

namespace loopserve::engine::native_test {
namespace {

struct RoiCase {
  int64_t out_h, out_w, sampling_ratio;
  double spatial_scale;
  bool half_pixel, max_mode;
};

// The bilinear value at (sy, sx) and its largest weighted corner; 0 outside [-1, size].
void Sample(const std::vector<double>& plane, int64_t h, int64_t w, double sy, double sx,
            double* value, double* max_corner) {
  *value = *max_corner = 0;
  if (!(sy >= -1.0 && sy <= h && sx >= -1.0 && sx <= w)) return;
  sy = std::max(sy, 0.0);
  sx = std::max(sx, 0.0);
  int64_t y0 = static_cast<int64_t>(sy), x0 = static_cast<int64_t>(sx);
  int64_t y1 = y0 + 1, x1 = x0 + 1;
  if (y0 >= h - 1) y0 = y1 = h - 1, sy = static_cast<double>(y0);
  if (x0 >= w - 1) x0 = x1 = w - 1, sx = static_cast<double>(x0);
  const double ly = sy - y0, lx = sx - x0;
  const double c[4] = {(1 - ly) * (1 - lx) * plane[y0 * w + x0], (1 - ly) * lx * plane[y0 * w + x1],
                       ly * (1 - lx) * plane[y1 * w + x0], ly * lx * plane[y1 * w + x1]};
  *value = c[0] + c[1] + c[2] + c[3];
  *max_corner = std::max(std::max(c[0], c[1]), std::max(c[2], c[3]));
}

// out[r][c][ph][pw] by the definition, one sample at a time.
std::vector<double> Reference(const std::vector<double>& x, int64_t channels, int64_t h, int64_t w,
                              const std::vector<double>& rois, const RoiCase& k) {
  const int64_t num_rois = static_cast<int64_t>(rois.size() / 4);
  const double scale = static_cast<float>(k.spatial_scale);  // a float attribute
  std::vector<double> out;
  for (int64_t r = 0; r < num_rois; ++r) {
    const double offset = k.half_pixel ? 0.5 : 0.0;
    const double x1 = rois[r * 4] * scale - offset;
    const double y1 = rois[r * 4 + 1] * scale - offset;
    double roi_w = rois[r * 4 + 2] * scale - offset - x1;
    double roi_h = rois[r * 4 + 3] * scale - offset - y1;
    if (!k.half_pixel) roi_w = std::max(roi_w, 1.0), roi_h = std::max(roi_h, 1.0);
    const double bin_h = roi_h / k.out_h, bin_w = roi_w / k.out_w;
    const int64_t grid_h = std::max<int64_t>(
        0, k.sampling_ratio > 0 ? k.sampling_ratio : static_cast<int64_t>(std::ceil(bin_h)));
    const int64_t grid_w = std::max<int64_t>(
        0, k.sampling_ratio > 0 ? k.sampling_ratio : static_cast<int64_t>(std::ceil(bin_w)));
    const double count = std::max<double>(static_cast<double>(grid_h * grid_w), 1.0);
    for (int64_t c = 0; c < channels; ++c) {
      const std::vector<double> plane(x.begin() + c * h * w, x.begin() + (c + 1) * h * w);
      for (int64_t ph = 0; ph < k.out_h; ++ph) {
        for (int64_t pw = 0; pw < k.out_w; ++pw) {
          double sum = 0, best = -std::numeric_limits<double>::infinity();
          for (int64_t iy = 0; iy < grid_h; ++iy) {
            for (int64_t ix = 0; ix < grid_w; ++ix) {
              double v, m;
              Sample(plane, h, w, y1 + ph * bin_h + (iy + 0.5) * bin_h / grid_h,
                     x1 + pw * bin_w + (ix + 0.5) * bin_w / grid_w, &v, &m);
              sum += v;
              best = std::max(best, m);
            }
          }
          out.push_back(k.max_mode ? (grid_h * grid_w > 0 ? best : 0.0) : sum / count);
        }
      }
    }
  }
  return out;
}

TEST(RoiAlignTest, AgreesWithTheDefinition) {
  const int64_t channels = 3, h = 9, w = 11;
  std::mt19937 rng(27);
  std::uniform_real_distribution<double> uniform(-1, 1);
  std::vector<double> x(channels * h * w);
  for (double& v : x) v = uniform(rng);
  // Inside; across the right and bottom edges; partly left of and above the image; wholly
  // outside; a point-sized roi; a reversed one (negative size); one larger than the image.
  const std::vector<double> rois = {1, 1, 6, 5, 7, 4, 14, 12, -3, -2, 3,  4,  20,  20,  30,  25,
                                    4, 4, 4, 4, 6, 6, 2,  3,  -5, -5, 16, 14, 0.3, 0.7, 2.2, 1.9};
  const int64_t num_rois = static_cast<int64_t>(rois.size() / 4);
  for (const RoiCase& k : {RoiCase{7, 7, 2, 1.0, true, false}, RoiCase{3, 5, 0, 1.0, true, false},
                           RoiCase{2, 3, 0, 0.5, false, false}, RoiCase{4, 2, 3, 0.8, false, false},
                           RoiCase{3, 3, 2, 1.0, true, true}, RoiCase{2, 4, 0, 0.5, false, true}}) {
    for (const DataType type : {DataType::kFloat32, DataType::kFloat64}) {
      Tensor xt(type, Shape{1, channels, h, w}), rt(type, Shape{num_rois, 4});
      for (size_t i = 0; i < x.size(); ++i) {
        if (type == DataType::kFloat32) {
          xt.mutable_data<float>()[i] = static_cast<float>(x[i]);
        } else {
          xt.mutable_data<double>()[i] = x[i];
        }
      }
      for (size_t i = 0; i < rois.size(); ++i) {
        if (type == DataType::kFloat32) {
          rt.mutable_data<float>()[i] = static_cast<float>(rois[i]);
        } else {
          rt.mutable_data<double>()[i] = rois[i];
        }
      }
      std::vector<double> xs = x, rs = rois;
      if (type == DataType::kFloat32) {  // the reference sees the values the kernel sees
        for (double& v : xs) v = static_cast<float>(v);
        for (double& v : rs) v = static_cast<float>(v);
      }
      const std::vector<double> expected = Reference(xs, channels, h, w, rs, k);
      const Tensor y =
          RunOk(OpCase("RoiAlign", 16)
                    .In(std::move(xt))
                    .In(std::move(rt))
                    .In(Make<int64_t>({num_rois}, {0, 0, 0, 0, 0, 0, 0, 0}))
                    .Attr("output_height", IntAttr(k.out_h))
                    .Attr("output_width", IntAttr(k.out_w))
                    .Attr("sampling_ratio", IntAttr(k.sampling_ratio))
                    .Attr("spatial_scale", FloatAttr(static_cast<float>(k.spatial_scale)))
                    .Attr("mode", StringAttr(k.max_mode ? "max" : "avg"))
                    .Attr("coordinate_transformation_mode",
                          StringAttr(k.half_pixel ? "half_pixel" : "output_half_pixel")));
      ASSERT_EQ(y.shape(), (Shape{num_rois, channels, k.out_h, k.out_w}));
      const double tolerance = type == DataType::kFloat32 ? 1e-6 : 1e-12;
      for (size_t i = 0; i < expected.size(); ++i) {
        const double got = type == DataType::kFloat32 ? y.data<float>()[i] : y.data<double>()[i];
        EXPECT_NEAR(got, expected[i], tolerance)
            << "element " << i << ", " << k.out_h << "x" << k.out_w << " ratio " << k.sampling_ratio
            << (k.max_mode ? " max" : " avg");
      }
    }
  }
}

TEST(RoiAlignTest, RejectsABatchIndexOutsideTheBatch) {
  ExpectError(OpCase("RoiAlign", 16)
                  .In(Make<float>({1, 1, 2, 2}, {0, 1, 2, 3}))
                  .In(Make<float>({1, 4}, {0, 0, 1, 1}))
                  .In(Make<int64_t>({1}, {1})),
              absl::StatusCode::kInvalidArgument, "batch_indices[0] = 1");
}

struct LpCase {
  int64_t kh, kw, sh, sw, dh, dw, pad_top, pad_left, pad_bottom, pad_right;
  bool ceil;
  double p;
};

TEST(LpPoolTest, AgreesWithTheDefinition) {
  // p = 1, 2, 3 and a fractional 2.5 (LpPool-1's float p); strides, dilations, asymmetric pads,
  // ceil_mode (a last window hanging over the edge) and a window larger than the stride.
  const int64_t channels = 3, h = 9, w = 10;
  std::mt19937 rng(29);
  std::uniform_real_distribution<double> uniform(-2, 2);
  std::vector<double> x(2 * channels * h * w);
  for (double& v : x) v = static_cast<float>(uniform(rng));
  for (const LpCase& k : {LpCase{3, 3, 2, 2, 1, 1, 1, 1, 1, 1, false, 2},
                          LpCase{2, 2, 2, 2, 1, 1, 0, 0, 0, 0, false, 2},
                          LpCase{3, 2, 1, 3, 2, 1, 0, 1, 2, 0, true, 1},
                          LpCase{2, 3, 3, 2, 1, 2, 1, 0, 0, 1, true, 3},
                          LpCase{4, 4, 2, 3, 1, 1, 2, 2, 1, 1, false, 2.5}}) {
    const auto out_size = [&](int64_t in, int64_t kernel, int64_t stride, int64_t dilation,
                              int64_t pads) {
      const int64_t span = in + pads - ((kernel - 1) * dilation + 1);
      return (k.ceil ? (span + stride - 1) / stride : span / stride) + 1;
    };
    const int64_t out_h = out_size(h, k.kh, k.sh, k.dh, k.pad_top + k.pad_bottom);
    const int64_t out_w = out_size(w, k.kw, k.sw, k.dw, k.pad_left + k.pad_right);
    Tensor xt(DataType::kFloat32, Shape{2, channels, h, w});
    for (size_t i = 0; i < x.size(); ++i) xt.mutable_data<float>()[i] = static_cast<float>(x[i]);
    const bool integer_p = k.p == std::floor(k.p);
    OpCase op("LpPool", integer_p ? 18 : 1);  // p is a float attribute in LpPool-1
    op.In(std::move(xt))
        .Attr("kernel_shape", IntsAttr({k.kh, k.kw}))
        .Attr("strides", IntsAttr({k.sh, k.sw}))
        .Attr("pads", IntsAttr({k.pad_top, k.pad_left, k.pad_bottom, k.pad_right}))
        .Attr("p",
              integer_p ? IntAttr(static_cast<int64_t>(k.p)) : FloatAttr(static_cast<float>(k.p)));
    if (integer_p) {
      op.Attr("dilations", IntsAttr({k.dh, k.dw})).Attr("ceil_mode", IntAttr(k.ceil));
    }
    const Tensor y = RunOk(op);
    ASSERT_EQ(y.shape(), (Shape{2, channels, out_h, out_w})) << "p " << k.p;
    for (int64_t plane = 0; plane < 2 * channels; ++plane) {
      for (int64_t oh = 0; oh < out_h; ++oh) {
        for (int64_t ow = 0; ow < out_w; ++ow) {
          double sum = 0;
          for (int64_t i = 0; i < k.kh; ++i) {
            for (int64_t j = 0; j < k.kw; ++j) {
              const int64_t r = oh * k.sh - k.pad_top + i * k.dh;
              const int64_t c = ow * k.sw - k.pad_left + j * k.dw;
              if (r < 0 || r >= h || c < 0 || c >= w) continue;
              sum += std::pow(std::fabs(x[(plane * h + r) * w + c]), k.p);
            }
          }
          const double expected = std::pow(sum, 1 / k.p);
          EXPECT_NEAR(y.data<float>()[(plane * out_h + oh) * out_w + ow], expected,
                      2e-6 * (1 + expected))
              << "p " << k.p << " at " << plane << ", " << oh << ", " << ow;
        }
      }
    }
  }
}

}  // namespace
}  // namespace loopserve::engine::native_test
