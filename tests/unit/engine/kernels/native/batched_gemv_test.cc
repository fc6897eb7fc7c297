// The native batched matrix-vector kernel against the reference MatMul (in double, then
// rounded) on broadcast batch dims, both orientations (M = 1, N = 1) and operands stored
// transposed.

#include "engine/kernels/native/batched_gemv.h"

#include <random>

#include "engine/kernels/native/cpu_isa.h"
#include "engine/kernels/reference/reference.h"
#include "gtest/gtest.h"

namespace loopserve::engine::native {
namespace {

Tensor Random(const Shape& shape, std::mt19937& rng) {
  Tensor t(DataType::kFloat32, shape);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  float* data = t.mutable_data<float>();
  for (int64_t i = 0; i < t.NumElements(); ++i) data[i] = dist(rng);
  return t;
}

// `t` with its last two dims swapped, data moved accordingly.
Tensor Transposed(const Tensor& t) {
  const int r = t.rank();
  Shape::Dims dims(t.shape().dims().begin(), t.shape().dims().end());
  std::swap(dims[r - 1], dims[r - 2]);
  Tensor out(DataType::kFloat32, Shape(dims));
  const int64_t rows = t.dim(r - 2), cols = t.dim(r - 1);
  const int64_t batch = t.NumElements() / (rows * cols);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        out.mutable_data<float>()[b * rows * cols + j * rows + i] =
            t.data<float>()[b * rows * cols + i * cols + j];
      }
    }
  }
  return out;
}

struct Case {
  Shape a, b;  // logical shapes
  bool trans_a, trans_b;
};

class BatchedGemvTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override { SetMaxIsa(GetParam()); }
  void TearDown() override { SetMaxIsa(Isa::kAvx512); }
};

TEST_P(BatchedGemvTest, MatchesTheReferenceMatMul) {
  const Case cases[] = {
      {Shape{1, 37}, Shape{37, 19}, false, false},  // one row
      {Shape{1, 37}, Shape{37, 19}, false, true},   // B stored [n, k] (q K^T)
      {Shape{2, 3, 1, 16}, Shape{2, 3, 16, 33}, false, true},
      {Shape{4, 1, 1, 9}, Shape{3, 9, 5}, false, false},  // broadcast batch
      {Shape{8, 50, 24}, Shape{8, 24, 1}, false, false},  // N = 1 (memory @ query)
      {Shape{8, 50, 24}, Shape{8, 24, 1}, true, false},   // A stored [k, m]
      {Shape{1, 1, 70}, Shape{5, 70, 1}, false, false},   // M = N = 1
      // Wide enough for the four-vector column blocks (64 floats on AVX-512, 32 on AVX2), then
      // single vectors and a scalar tail; and rows in groups of four with a k tail.
      {Shape{1, 45}, Shape{45, 150}, false, false},
      {Shape{3, 1, 40}, Shape{3, 40, 71}, false, true},
      {Shape{2, 130, 20}, Shape{2, 20, 1}, true, false},
      {Shape{2, 131, 36}, Shape{2, 36, 1}, false, false},
      {Shape{4, 1, 37}, Shape{4, 37, 32}, false, false},  // two vectors (AVX-512), odd k
      {Shape{1, 1, 39}, Shape{1, 39, 24}, false, false},  // one vector + tail (AVX2), k % 4 = 3
  };
  std::mt19937 rng(11);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.a.ToString() + " x " + c.b.ToString());
    const Tensor a = Random(c.a, rng), b = Random(c.b, rng);
    auto dims = reference::MatMulShapes(c.a, c.b);
    ASSERT_TRUE(dims.ok());
    ASSERT_TRUE(BatchedGemv::Applies(*dims));
    const Tensor a_stored = c.trans_a ? Transposed(a) : Tensor::ViewOf(a);
    const Tensor b_stored = c.trans_b ? Transposed(b) : Tensor::ViewOf(b);
    const BatchedGemv gemv(*dims, c.trans_a, c.trans_b);
    Tensor got(DataType::kFloat32, dims->output);
    gemv.Run(a_stored.data<float>(), b_stored.data<float>(), got.mutable_data<float>());
    Tensor want;
    ASSERT_TRUE(reference::MatMul(a, b, want).ok());
    ASSERT_EQ(want.shape(), got.shape());
    for (int64_t i = 0; i < got.NumElements(); ++i) {
      ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-5) << "element " << i;
    }
  }
}

std::vector<Isa> Isas() {
  std::vector<Isa> isas = {Isa::kScalar};
  if (DetectedIsa() >= Isa::kAvx2) isas.push_back(Isa::kAvx2);
  if (DetectedIsa() >= Isa::kAvx512) isas.push_back(Isa::kAvx512);
  return isas;
}

INSTANTIATE_TEST_SUITE_P(Isas, BatchedGemvTest, ::testing::ValuesIn(Isas()),
                         [](const ::testing::TestParamInfo<Isa>& info) {
                           return std::string(IsaName(info.param));
                         });

}  // namespace
}  // namespace loopserve::engine::native
