// MeanVarianceNormalization against its definition evaluated in double: mean and variance over
// `axes`, y = (x - mean) / (sqrt(variance) + 1e-9), at ranks 2 to 5, default and other axes.

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/engine/kernels/native/test_util.h"

namespace loopserve::engine::native_test {
namespace {

template <typename T>
Tensor RandomInput(const Shape& shape, std::mt19937& rng) {
  Tensor t(DataTypeOf<T>::value, shape);
  // An offset per tensor so that the mean is not near zero.
  std::uniform_real_distribution<double> offset(-3.0, 3.0), value(-2.0, 2.0);
  const double shift = offset(rng);
  for (int64_t i = 0; i < t.NumElements(); ++i) {
    t.mutable_data<T>()[i] = static_cast<T>(shift + value(rng));
  }
  return t;
}

// The spec's function body in double: two passes (mean, then the mean of squared deviations).
template <typename T>
std::vector<double> Expected(const Tensor& x, const std::vector<int64_t>& axes) {
  const int rank = x.rank();
  std::vector<bool> reduced(rank, false);
  for (int64_t a : axes) reduced[a < 0 ? a + rank : a] = true;
  const int64_t n = x.NumElements();
  std::vector<int64_t> group(n);
  int64_t groups = 1;
  for (int d = 0; d < rank; ++d) {
    if (!reduced[d]) groups *= x.dim(d);
  }
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i, g = 0, stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t coord = rest % x.dim(d);
      rest /= x.dim(d);
      if (!reduced[d]) {
        g += coord * stride;
        stride *= x.dim(d);
      }
    }
    group[i] = g;
  }
  std::vector<double> mean(groups, 0.0), var(groups, 0.0), count(groups, 0.0), y(n);
  const T* in = x.data<T>();
  for (int64_t i = 0; i < n; ++i) {
    mean[group[i]] += in[i];
    count[group[i]] += 1;
  }
  for (int64_t g = 0; g < groups; ++g) mean[g] /= count[g];
  for (int64_t i = 0; i < n; ++i)
    var[group[i]] += (in[i] - mean[group[i]]) * (in[i] - mean[group[i]]);
  for (int64_t g = 0; g < groups; ++g) var[g] /= count[g];
  for (int64_t i = 0; i < n; ++i) {
    y[i] = (in[i] - mean[group[i]]) / (std::sqrt(var[group[i]]) + 1e-9);
  }
  return y;
}

template <typename T>
void CheckCase(const Shape& shape, const std::vector<int64_t>& axes, bool default_axes,
               std::mt19937& rng) {
  SCOPED_TRACE(shape.ToString() + (default_axes ? " default axes" : " axes given"));
  const Tensor x = RandomInput<T>(shape, rng);
  OpCase c("MeanVarianceNormalization", 13);
  Tensor input;
  input.CopyFrom(x);
  c.In(std::move(input));
  if (!default_axes) c.Attr("axes", IntsAttr(axes));
  const Tensor y = RunOk(c);
  ASSERT_EQ(y.dtype(), x.dtype());
  ASSERT_EQ(y.shape(), shape);
  const std::vector<double> expected = Expected<T>(x, axes);
  int bad = 0;
  for (int64_t i = 0; i < x.NumElements() && bad < 5; ++i) {
    const double e = expected[i], got = y.data<T>()[i];
    if (!(std::abs(got - e) <= 1e-5 * std::max(1.0, std::abs(e)))) {
      ADD_FAILURE() << "element " << i << ": " << got << " vs " << e;
      ++bad;
    }
  }
}

TEST(MvnTest, DefaultAxesMatchDefinition) {
  std::mt19937 rng(11);
  for (const Shape& shape : {Shape{1, 64, 56, 56}, Shape{2, 3, 4, 5}, Shape{3, 1, 7, 1}}) {
    CheckCase<float>(shape, {0, 2, 3}, /*default_axes=*/true, rng);
    CheckCase<double>(shape, {0, 2, 3}, /*default_axes=*/true, rng);
  }
}

TEST(MvnTest, OtherAxesRanks2To5MatchDefinition) {
  std::mt19937 rng(12);
  struct Case {
    Shape shape;
    std::vector<int64_t> axes;
  };
  const std::vector<Case> cases = {
      {Shape{16, 1024}, {0}},
      {Shape{16, 1024}, {1}},
      {Shape{5, 7}, {0, 1}},
      {Shape{4, 6, 9}, {2}},
      {Shape{4, 6, 9}, {0, 2}},
      {Shape{4, 6, 9}, {1}},
      {Shape{2, 3, 4, 5}, {1, 3}},
      {Shape{2, 3, 4, 5}, {-1}},
      {Shape{2, 3, 4, 5}, {0, 1, 2, 3}},
      {Shape{2, 3, 1, 5, 6}, {0, 2, 3, 4}},
      {Shape{2, 3, 4, 5, 6}, {1, 2}},
      {Shape{2, 3, 4, 5, 6}, {0, 4}},
      {Shape{3, 4, 5, 6, 2}, {3}},
  };
  for (const Case& c : cases) {
    CheckCase<float>(c.shape, c.axes, /*default_axes=*/false, rng);
    CheckCase<double>(c.shape, c.axes, /*default_axes=*/false, rng);
  }
}

// A constant group has variance 0: (x - mean) / (0 + 1e-9) is exactly 0 there.
TEST(MvnTest, ConstantGroupsGiveZeros) {
  Tensor x = Make<float>(Shape{1, 2, 1, 3}, {4.25f, 4.25f, 4.25f, -7.5f, -7.5f, -7.5f});
  ExpectTensor<float>(RunOk(OpCase("MeanVarianceNormalization", 13).In(std::move(x))),
                      Shape{1, 2, 1, 3}, {0, 0, 0, 0, 0, 0});
}

TEST(MvnTest, BadInputsAreErrors) {
  ExpectError(OpCase("MeanVarianceNormalization", 13)
                  .In(Make<float>(Shape{2, 2}, {1, 2, 3, 4}))
                  .Attr("axes", IntsAttr({2})),
              absl::StatusCode::kInvalidArgument, "axes");
  ExpectError(OpCase("MeanVarianceNormalization", 13)
                  .In(Make<int32_t>(Shape{2}, {1, 2}))
                  .Attr("axes", IntsAttr({0})),
              absl::StatusCode::kInvalidArgument, "element type");
}

TEST(MvnTest, EmptyInputGivesEmptyOutput) {
  const Tensor y = RunOk(
      OpCase("MeanVarianceNormalization", 13).In(Tensor(DataType::kFloat32, Shape{0, 3, 2, 2})));
  EXPECT_EQ(y.shape(), (Shape{0, 3, 2, 2}));
}

}  // namespace
}  // namespace loopserve::engine::native_test
