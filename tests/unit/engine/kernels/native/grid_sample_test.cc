// GridSample on every mode, padding and align_corners against a direct evaluation of
// torch.nn.functional.grid_sample's definition (which the ONNX spec points to), on every ISA this
// CPU has (capped with SetMaxIsa), with grids reaching outside the image and location counts that
// leave vector tails.

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/kernels/native/cpu_isa.h"
#include "tests/unit/engine/kernels/native/test_util.h"

namespace loopserve::engine::native_test {
namespace {

using native::Isa;

double Unnormalize(double g, int64_t size, bool align) {
  return align ? (g + 1) / 2 * (size - 1) : ((g + 1) * size - 1) / 2;
}

// Reflection of v about the image's edges (pixel centres with align_corners, else pixel edges),
// then clipped, as torch's reflect_coordinates + clip_coordinates.
double Reflect(double v, double low, double high) {
  if (low == high) return 0;
  const double span = high - low;
  v = std::fabs(v - low);
  const double extra = std::fmod(v, span);
  const int64_t flips = static_cast<int64_t>(std::floor(v / span));
  return flips % 2 == 0 ? extra + low : span - extra + low;
}

double PadCoordinate(double v, int64_t size, const std::string& padding, bool align) {
  if (padding == "border") return std::clamp(v, 0.0, size - 1.0);
  if (padding == "reflection") {
    v = align ? Reflect(v, 0, size - 1.0) : Reflect(v, -0.5, size - 0.5);
    return std::clamp(v, 0.0, size - 1.0);
  }
  return v;
}

double Pixel(const std::vector<double>& plane, int64_t h, int64_t w, double r, double c) {
  if (!(r >= 0 && r < h && c >= 0 && c < w)) return 0;
  return plane[static_cast<int64_t>(r) * w + static_cast<int64_t>(c)];
}

double Cubic(double t, int tap) {  // A = -0.75
  const double a = -0.75;
  const double x = std::fabs(tap == 0 ? t + 1 : tap == 1 ? t : tap == 2 ? 1 - t : 2 - t);
  return x <= 1 ? ((a + 2) * x - (a + 3)) * x * x + 1 : ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
}

double Reference(const std::vector<double>& plane, int64_t h, int64_t w, double gx, double gy,
                 const std::string& mode, const std::string& padding, bool align) {
  const double x = Unnormalize(gx, w, align), y = Unnormalize(gy, h, align);
  if (mode == "bicubic") {
    const double fx = std::floor(x), fy = std::floor(y);
    double v = 0;
    for (int j = 0; j < 4; ++j) {
      for (int i = 0; i < 4; ++i) {
        v += Cubic(y - fy, j) * Cubic(x - fx, i) *
             Pixel(plane, h, w, PadCoordinate(fy - 1 + j, h, padding, align),
                   PadCoordinate(fx - 1 + i, w, padding, align));
      }
    }
    return v;
  }
  const double sx = PadCoordinate(x, w, padding, align), sy = PadCoordinate(y, h, padding, align);
  if (mode == "nearest") return Pixel(plane, h, w, std::nearbyint(sy), std::nearbyint(sx));
  const double x0 = std::floor(sx), y0 = std::floor(sy), tx = sx - x0, ty = sy - y0;
  return (1 - ty) * (1 - tx) * Pixel(plane, h, w, y0, x0) +
         (1 - ty) * tx * Pixel(plane, h, w, y0, x0 + 1) +
         ty * (1 - tx) * Pixel(plane, h, w, y0 + 1, x0) +
         ty * tx * Pixel(plane, h, w, y0 + 1, x0 + 1);
}

std::vector<Isa> Isas() {
  std::vector<Isa> isas = {Isa::kScalar};
  if (native::DetectedIsa() >= Isa::kAvx2) isas.push_back(Isa::kAvx2);
  if (native::DetectedIsa() >= Isa::kAvx512) isas.push_back(Isa::kAvx512);
  return isas;
}

class GridSampleIsaTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override { native::SetMaxIsa(GetParam()); }
  void TearDown() override { native::SetMaxIsa(Isa::kAvx512); }
};

TEST_P(GridSampleIsaTest, AgreesWithTheDefinition) {
  const int64_t batch = 2, channels = 3, h = 5, w = 7, h_out = 3, w_out = 13;  // 39 locations
  std::mt19937 rng(27);
  std::uniform_real_distribution<double> value(-1, 1), location(-1.4, 1.4);
  std::vector<double> x(batch * channels * h * w), grid(batch * h_out * w_out * 2);
  for (double& v : x) v = static_cast<float>(value(rng));
  for (double& v : grid) v = static_cast<float>(location(rng));
  grid[0] = -1, grid[1] = 1, grid[2] = 1, grid[3] = -1;  // exact corners
  for (const char* mode : {"bilinear", "nearest", "bicubic"}) {
    for (const char* padding : {"zeros", "border", "reflection"}) {
      for (const int align : {0, 1}) {
        for (const DataType type : {DataType::kFloat32, DataType::kFloat64}) {
          Tensor xt(type, Shape{batch, channels, h, w}), gt(type, Shape{batch, h_out, w_out, 2});
          for (size_t i = 0; i < x.size(); ++i) {
            if (type == DataType::kFloat32) {
              xt.mutable_data<float>()[i] = static_cast<float>(x[i]);
            } else {
              xt.mutable_data<double>()[i] = x[i];
            }
          }
          for (size_t i = 0; i < grid.size(); ++i) {
            if (type == DataType::kFloat32) {
              gt.mutable_data<float>()[i] = static_cast<float>(grid[i]);
            } else {
              gt.mutable_data<double>()[i] = grid[i];
            }
          }
          const Tensor y = RunOk(OpCase("GridSample", 16)
                                     .In(std::move(xt))
                                     .In(std::move(gt))
                                     .Attr("mode", StringAttr(mode))
                                     .Attr("padding_mode", StringAttr(padding))
                                     .Attr("align_corners", IntAttr(align)));
          ASSERT_EQ(y.shape(), (Shape{batch, channels, h_out, w_out}));
          const double tolerance = type == DataType::kFloat32 ? 2e-6 : 1e-12;
          for (int64_t n = 0; n < batch; ++n) {
            for (int64_t c = 0; c < channels; ++c) {
              const auto begin = x.begin() + (n * channels + c) * h * w;
              const std::vector<double> plane(begin, begin + h * w);
              for (int64_t p = 0; p < h_out * w_out; ++p) {
                const double* g = &grid[(n * h_out * w_out + p) * 2];
                const double expected = Reference(plane, h, w, g[0], g[1], mode, padding, align);
                const int64_t i = (n * channels + c) * h_out * w_out + p;
                const double got =
                    type == DataType::kFloat32 ? y.data<float>()[i] : y.data<double>()[i];
                EXPECT_NEAR(got, expected, tolerance)
                    << mode << " " << padding << " align " << align << " location " << p;
              }
            }
          }
        }
      }
    }
  }
}

TEST_P(GridSampleIsaTest, OutsideTapsIgnoreNonFinitePixels) {
  // Pixel 0 is infinite; a location wholly outside the image samples nothing (0, not NaN), and one
  // on pixel 1 reads only it.
  const Tensor y = RunOk(OpCase("GridSample", 16)
                             .In(Make<float>({1, 1, 1, 2}, {INFINITY, 2}))
                             .In(Make<float>({1, 1, 2, 2}, {5, 5, 1, 0}))
                             .Attr("align_corners", IntAttr(1)));
  ExpectTensor<float>(y, Shape{1, 1, 1, 2}, {0, 2});
}

INSTANTIATE_TEST_SUITE_P(Isas, GridSampleIsaTest, ::testing::ValuesIn(Isas()),
                         [](const ::testing::TestParamInfo<Isa>& info) {
                           return std::string(native::IsaName(info.param));
                         });

}  // namespace
}  // namespace loopserve::engine::native_test
