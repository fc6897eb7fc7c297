// The vectorised row scans of engine/kernels/native/row_select (ArgMax / ArgMin's first extremum,
// TopK's candidate filter) against plain loops written here, on the widest ISA and forced onto
// AVX2, for row lengths around every vector width and unroll (not multiples of 8 or 16), with
// ties, infinities and NaNs; and TopK over long rows (k 1-32, vocabularies 1000-32000) against a
// stable sort of the row, as ONNX orders equal values (lower index first).

#include "engine/kernels/native/row_select.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "engine/kernels/native/cpu_isa.h"
#include "engine/kernels/native/vector_math.h"
#include "gtest/gtest.h"
#include "tests/unit/engine/kernels/native/test_util.h"

namespace loopserve::engine::native_test {
namespace {

using native::FirstExtremumIndexF32;
using native::Isa;
using native::MaxF32;
using native::NextCandidateF32;
using native::SetMaxIsa;

// Run on the CPU's widest kernels, and again capped at AVX2 (the same on an AVX2 CPU).
class RowSelectIsaTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { SetMaxIsa(GetParam() ? Isa::kAvx2 : Isa::kAvx512); }
  void TearDown() override { SetMaxIsa(Isa::kAvx512); }
};

std::vector<int64_t> Lengths() {
  std::vector<int64_t> n;
  for (int64_t i = 1; i <= 140; ++i) n.push_back(i);
  for (int64_t i : {255, 256, 257, 1000, 1023, 1024, 1025, 4099, 32000}) n.push_back(i);
  return n;
}

// Values from a few levels, so that the extreme value appears several times.
std::vector<float> TiedRow(int64_t n, std::mt19937& rng) {
  std::vector<float> row(n);
  for (float& v : row) v = static_cast<float>(static_cast<int>(rng() % 9) - 4) * 0.25f;
  return row;
}

int64_t ExpectedFirstExtremum(const std::vector<float>& row, bool max) {
  int64_t best = 0;
  for (size_t j = 1; j < row.size(); ++j) {
    if (max ? row[j] > row[best] : row[j] < row[best]) best = static_cast<int64_t>(j);
  }
  return best;
}

TEST_P(RowSelectIsaTest, FirstExtremumIsTheFirstIndexOfTheExtremeValue) {
  std::mt19937 rng(3);
  const float inf = std::numeric_limits<float>::infinity();
  for (const int64_t n : Lengths()) {
    for (const bool max : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " max=" << max);
      std::vector<float> row = TiedRow(n, rng);
      EXPECT_EQ(FirstExtremumIndexF32(row.data(), n, max), ExpectedFirstExtremum(row, max));
      // The extreme at the very end (the tail of the vector loop).
      row[n - 1] = max ? 100.0f : -100.0f;
      EXPECT_EQ(FirstExtremumIndexF32(row.data(), n, max), n - 1);
      // Infinities are ordinary values: the first of two equal infinities wins.
      row[n / 2] = max ? inf : -inf;
      row[n - 1] = max ? inf : -inf;
      EXPECT_EQ(FirstExtremumIndexF32(row.data(), n, max), n / 2);
      // Every element the "wrong" infinity: the first index.
      std::fill(row.begin(), row.end(), max ? -inf : inf);
      EXPECT_EQ(FirstExtremumIndexF32(row.data(), n, max), 0);
      // A NaN anywhere: -1 (the caller's general path).
      row = TiedRow(n, rng);
      row[rng() % n] = std::nanf("");
      EXPECT_EQ(FirstExtremumIndexF32(row.data(), n, max), -1);
    }
  }
}

TEST_P(RowSelectIsaTest, NextCandidateFindsTheFirstElementPastTheBound) {
  std::mt19937 rng(4);
  for (const int64_t n : Lengths()) {
    for (const bool largest : {true, false}) {
      const std::vector<float> row = TiedRow(n, rng);
      for (const float bound : {-1.0f, 0.0f, 0.75f, 1.0f, 5.0f}) {
        for (int64_t from : {int64_t{0}, n / 3, n - 1, n}) {
          SCOPED_TRACE(::testing::Message() << "n=" << n << " largest=" << largest
                                            << " bound=" << bound << " from=" << from);
          int64_t expected = n;
          for (int64_t j = from; j < n; ++j) {
            if (largest ? row[j] > bound : row[j] < bound) {
              expected = j;
              break;
            }
          }
          EXPECT_EQ(NextCandidateF32(row.data(), from, n, bound, largest), expected);
        }
      }
      // A NaN stops the scan as a candidate would.
      std::vector<float> with_nan(n, 0.0f);
      const int64_t at = static_cast<int64_t>(rng() % n);
      with_nan[at] = std::nanf("");
      EXPECT_EQ(NextCandidateF32(with_nan.data(), 0, n, largest ? 1.0f : -1.0f, largest), at);
    }
  }
}

// vector_math's row maximum (a softmax's first pass; four running maxima on long rows): the
// largest element wherever it is, and NaN when any element is NaN, in the unrolled body and in the
// tails.
TEST_P(RowSelectIsaTest, RowMaxFindsTheMaximumAndPropagatesNaN) {
  std::mt19937 rng(10);
  for (const int64_t n : Lengths()) {
    std::vector<float> row = TiedRow(n, rng);
    for (const int64_t at : {int64_t{0}, n / 2, n - 1, static_cast<int64_t>(rng() % n)}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " at=" << at);
      std::vector<float> x = row;
      x[at] = 7.5f;
      EXPECT_EQ(MaxF32(x.data(), n), 7.5f);
      x[at] = std::nanf("");
      EXPECT_TRUE(std::isnan(MaxF32(x.data(), n)));
    }
  }
}

// TopK's fast path (k small against the row) through the op, on the shapes of beam searches.
TEST_P(RowSelectIsaTest, TopKOverLongRowsMatchesAStableSort) {
  std::mt19937 rng(8);
  for (const int64_t n : {1000, 1003, 4000, 16000, 32000}) {
    for (const int64_t k : {1, 4, 8, 16, 32}) {
      for (const int largest : {1, 0}) {
        SCOPED_TRACE(::testing::Message() << "n=" << n << " k=" << k << " largest=" << largest);
        // Ties between levels, and a rising tail so that late elements keep entering.
        std::vector<float> row(n);
        for (float& v : row) v = static_cast<float>(static_cast<int>(rng() % 200) - 100) * 0.1f;
        for (int64_t j = n - 40; j < n; ++j) {
          row[j] = (largest ? 1.0f : -1.0f) * (10.0f + static_cast<float>(j % 7));
        }
        Tensor x(DataType::kFloat32, Shape{1, n});
        std::copy(row.begin(), row.end(), x.mutable_data<float>());
        absl::StatusOr<std::vector<Value>> out = RunOp(OpCase("TopK", 11)
                                                           .In(std::move(x))
                                                           .In(I64({k}))
                                                           .Attr("largest", IntAttr(largest))
                                                           .Outputs(2));
        ASSERT_TRUE(out.ok()) << out.status();
        std::vector<int64_t> order(n);
        for (int64_t j = 0; j < n; ++j) order[j] = j;
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
          return largest ? row[a] > row[b] : row[a] < row[b];
        });
        const Tensor& values = (*out)[0].tensor();
        const Tensor& indices = (*out)[1].tensor();
        ASSERT_EQ(indices.shape(), (Shape{1, k}));
        for (int64_t e = 0; e < k; ++e) {
          ASSERT_EQ(indices.data<int64_t>()[e], order[e]) << "rank " << e;
          ASSERT_EQ(values.data<float>()[e], row[order[e]]) << "rank " << e;
        }
      }
    }
  }
}

// ArgMax / ArgMin through the op on logits rows of decoder sizes, against a loop written here.
TEST_P(RowSelectIsaTest, ArgMaxArgMinMatchALoop) {
  std::mt19937 rng(9);
  for (const int64_t n : {1, 7, 17, 1000, 1024, 1031, 32000}) {
    for (const bool max : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " max=" << max);
      const std::vector<float> row = TiedRow(n, rng);
      Tensor x(DataType::kFloat32, Shape{1, n});
      std::copy(row.begin(), row.end(), x.mutable_data<float>());
      absl::StatusOr<std::vector<Value>> out =
          RunOp(OpCase(max ? "ArgMax" : "ArgMin", 13).In(std::move(x)).Attr("axis", IntAttr(1)));
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_EQ((*out)[0].tensor().data<int64_t>()[0], ExpectedFirstExtremum(row, max));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, RowSelectIsaTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Avx2" : "Widest"; });

}  // namespace
}  // namespace loopserve::engine::native_test
