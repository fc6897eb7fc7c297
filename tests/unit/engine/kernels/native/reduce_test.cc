// ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare, ArgMax/ArgMin.

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/unit/engine/kernels/native/test_util.h"

namespace loopserve::engine::native_test {
namespace {

// The ONNX reduce examples' data: shape [3,2,2], values 1..12 as
// [[[5,1],[20,2]],[[30,1],[40,2]],[[55,1],[60,2]]].
Tensor ReduceData() { return Make<float>({3, 2, 2}, {5, 1, 20, 2, 30, 1, 40, 2, 55, 1, 60, 2}); }

TEST(ReduceSumTest, AxesInput) {
  // test_reduce_sum_keepdims_example: axes [1], keepdims 1 on [[[1,2],[3,4]],...] (1..12).
  Tensor x = Make<float>({3, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  ExpectTensor<float>(RunOk(OpCase("ReduceSum", 13).In(std::move(x)).In(I64({1}))), {3, 1, 2},
                      {4, 6, 12, 14, 20, 22});
  // Negative axes, no keepdims.
  ExpectTensor<float>(RunOk(OpCase("ReduceSum", 13)
                                .In(Make<float>({3, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}))
                                .In(I64({-2}))
                                .Attr("keepdims", IntAttr(0))),
                      {3, 2}, {4, 6, 12, 14, 20, 22});
  // Default axes: everything.
  ExpectTensor<int64_t>(RunOk(OpCase("ReduceSum", 13).In(Make<int64_t>({2, 2}, {1, 2, 3, 4}))),
                        {1, 1}, {10});
  // Empty axes with noop_with_empty_axes: identity.
  ExpectTensor<int64_t>(RunOk(OpCase("ReduceSum", 13)
                                  .In(Make<int64_t>({2, 2}, {1, 2, 3, 4}))
                                  .In(Tensor(DataType::kInt64, {0}))
                                  .Attr("noop_with_empty_axes", IntAttr(1))),
                        {2, 2}, {1, 2, 3, 4});
  // Empty axes without it: reduce all.
  ExpectTensor<int64_t>(RunOk(OpCase("ReduceSum", 13)
                                  .In(Make<int64_t>({2, 2}, {1, 2, 3, 4}))
                                  .In(Tensor(DataType::kInt64, {0}))
                                  .Attr("keepdims", IntAttr(0))),
                        {}, {10});
}

TEST(ReduceSumTest, AxesAttributeBeforeOpset13) {
  ExpectTensor<int32_t>(RunOk(OpCase("ReduceSum", 11)
                                  .In(Make<int32_t>({2, 3}, {1, 2, 3, 4, 5, 6}))
                                  .Attr("axes", IntsAttr({0}))
                                  .Attr("keepdims", IntAttr(0))),
                        {3}, {5, 7, 9});
  ExpectTensor<int32_t>(RunOk(OpCase("ReduceSum", 1)
                                  .In(Make<int32_t>({2, 3}, {1, 2, 3, 4, 5, 6}))
                                  .Attr("axes", IntsAttr({-1}))),
                        {2, 1}, {6, 15});
}

TEST(ReduceSumTest, EmptyInput) {
  // Sum over an empty axis is 0; product is 1.
  ExpectTensor<float>(RunOk(OpCase("ReduceSum", 13)
                                .In(Tensor(DataType::kFloat32, {2, 0}))
                                .In(I64({1}))
                                .Attr("keepdims", IntAttr(0))),
                      {2}, {0, 0});
  ExpectTensor<int64_t>(RunOk(OpCase("ReduceProd", 13)
                                  .In(Tensor(DataType::kInt64, {0, 2}))
                                  .Attr("axes", IntsAttr({0}))),
                        {1, 2}, {1, 1});
}

TEST(ReduceOtherTest, MeanMaxMinProd) {
  // test_reduce_mean_keepdims_example: axes [1] -> [[[12.5,1.5]],[[35,1.5]],[[57.5,1.5]]].
  ExpectTensor<float>(RunOk(OpCase("ReduceMean", 13).In(ReduceData()).Attr("axes", IntsAttr({1}))),
                      {3, 1, 2}, {12.5f, 1.5f, 35, 1.5f, 57.5f, 1.5f});
  // test_reduce_max_keepdims_example: [[[20,2]],[[40,2]],[[60,2]]].
  ExpectTensor<float>(RunOk(OpCase("ReduceMax", 13).In(ReduceData()).Attr("axes", IntsAttr({1}))),
                      {3, 1, 2}, {20, 2, 40, 2, 60, 2});
  // test_reduce_min_keepdims_example: [[[5,1]],[[30,1]],[[55,1]]].
  ExpectTensor<float>(RunOk(OpCase("ReduceMin", 13).In(ReduceData()).Attr("axes", IntsAttr({1}))),
                      {3, 1, 2}, {5, 1, 30, 1, 55, 1});
  // test_reduce_prod_keepdims_example on 1..12: [[[3,8]],[[35,48]],[[99,120]]].
  ExpectTensor<float>(RunOk(OpCase("ReduceProd", 13)
                                .In(Make<float>({3, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}))
                                .Attr("axes", IntsAttr({1}))),
                      {3, 1, 2}, {3, 8, 35, 48, 99, 120});
  // Several axes, int64, no keepdims.
  ExpectTensor<int64_t>(RunOk(OpCase("ReduceMax", 13)
                                  .In(Make<int64_t>({2, 2, 2}, {1, 8, 3, 4, 5, 6, 7, 2}))
                                  .Attr("axes", IntsAttr({0, 2}))
                                  .Attr("keepdims", IntAttr(0))),
                        {2}, {8, 7});
  // Opset 18 takes the axes as an input.
  ExpectTensor<int64_t>(
      RunOk(OpCase("ReduceMin", 18).In(Make<int64_t>({2, 2}, {4, 1, 3, 2})).In(I64({0}))), {1, 2},
      {3, 1});
}

// Integer element types: what numpy gives for the same dtype (sums, squares and products wrap
// modulo 2^bits), and a float result (log, sqrt) stored as the integer type saturates instead of
// being undefined: log(0) = -inf is the type's lowest value (the fuzzer's ReduceLogSum on uint16
// zeros, tests/fuzz/regressions/onnx_importer_fuzz/reduce_log_sum_uint16_zeros_neg_inf.onnx).
// Every float32 reduce op over every subset of axes of an odd-sized [3, 5, 1, 7, 18] tensor
// (inner and outer reduced axes, interleaved kept ones, a size-1 dim), keepdims on and off,
// against a double-precision loop over the definition written here.
TEST(ReduceTest, Float32EveryAxisSetMatchesTheDefinition) {
  const std::vector<int64_t> dims = {3, 5, 1, 7, 18};
  const int rank = static_cast<int>(dims.size());
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  std::bernoulli_distribution negative(0.3);
  int64_t total = 1;
  for (int64_t d : dims) total *= d;
  std::vector<float> data(total);
  for (float& v : data) v = negative(rng) ? -u(rng) : u(rng);
  const char* ops[] = {"ReduceSum", "ReduceMean", "ReduceMax",    "ReduceMin",      "ReduceProd",
                       "ReduceL1",  "ReduceL2",   "ReduceLogSum", "ReduceSumSquare"};
  for (const char* op : ops) {
    const std::string name = op;
    for (int mask = 1; mask < (1 << rank); ++mask) {
      for (int keep = 0; keep < 2; ++keep) {
        SCOPED_TRACE(name + " axes mask " + std::to_string(mask) + " keepdims " +
                     std::to_string(keep));
        std::vector<int64_t> axes;
        for (int d = 0; d < rank; ++d) {
          if (mask & (1 << d)) axes.push_back(d);
        }
        // Reference: per output element, the reduced values in double.
        std::vector<int64_t> out_dims;
        for (int d = 0; d < rank; ++d) {
          if (!(mask & (1 << d))) out_dims.push_back(dims[d]);
        }
        int64_t n_out = 1;
        for (int64_t d : out_dims) n_out *= d;
        std::vector<std::vector<double>> groups(n_out);
        for (int64_t i = 0; i < total; ++i) {
          int64_t rem = i, o = 0, scale = 1;
          for (int d = rank - 1; d >= 0; --d) {
            const int64_t c = rem % dims[d];
            rem /= dims[d];
            if (!(mask & (1 << d))) {
              o += c * scale;
              scale *= dims[d];
            }
          }
          groups[o].push_back(data[i]);
        }
        Tensor x(DataType::kFloat32, Shape(std::vector<int64_t>(dims)));
        std::copy(data.begin(), data.end(), x.mutable_data<float>());
        // ReduceSum takes axes as an input at opset 13, the others as an attribute at opset 13.
        OpCase c(op, 13);
        c.In(std::move(x)).Attr("keepdims", IntAttr(keep));
        if (name == "ReduceSum") {
          Tensor a(DataType::kInt64, Shape({static_cast<int64_t>(axes.size())}));
          std::copy(axes.begin(), axes.end(), a.mutable_data<int64_t>());
          c.In(std::move(a));
        } else {
          c.Attr("axes", IntsAttr(axes));
        }
        Tensor y = RunOk(c);
        ASSERT_EQ(y.NumElements(), n_out);
        ASSERT_EQ(y.rank(), keep ? rank : static_cast<int>(out_dims.size()));
        for (int64_t o = 0; o < n_out; ++o) {
          const std::vector<double>& g = groups[o];
          double want = 0;
          if (name == "ReduceMax") {
            want = *std::max_element(g.begin(), g.end());
          } else if (name == "ReduceMin") {
            want = *std::min_element(g.begin(), g.end());
          } else if (name == "ReduceProd") {
            want = 1;
            for (double v : g) want *= v;
          } else {
            for (double v : g) {
              want += name == "ReduceL1"                                  ? std::fabs(v)
                      : (name == "ReduceL2" || name == "ReduceSumSquare") ? v * v
                                                                          : v;
            }
            if (name == "ReduceMean") want /= static_cast<double>(g.size());
            if (name == "ReduceL2") want = std::sqrt(want);
            if (name == "ReduceLogSum") want = std::log(want);
          }
          const double got = y.data<float>()[o];
          if (name == "ReduceLogSum" && !(want == want)) {  // log of a negative sum
            EXPECT_TRUE(std::isnan(got)) << "output " << o;
            continue;
          }
          if (std::isinf(static_cast<float>(want))) {
            EXPECT_EQ(got, static_cast<float>(want)) << "output " << o;
            continue;
          }
          ASSERT_NEAR(got, want, 2e-5 * (1 + std::fabs(want))) << "output " << o;
        }
      }
    }
  }
}

TEST(ReduceTest, Float32MaxMinPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const char* op : {"ReduceMax", "ReduceMin"}) {
    SCOPED_TRACE(op);
    // Along the inner axis (rows) and the outer axis (elementwise over rows).
    ExpectTensor<float>(RunOk(OpCase(op, 13)
                                  .In(Make<float>({2, 3}, {1, nan, 3, 4, 5, 6}))
                                  .Attr("axes", IntsAttr({1}))
                                  .Attr("keepdims", IntAttr(0))),
                        {2}, {nan, std::string(op) == "ReduceMax" ? 6.0f : 4.0f});
    ExpectTensor<float>(RunOk(OpCase(op, 13)
                                  .In(Make<float>({2, 3}, {1, nan, 3, 4, 5, 6}))
                                  .Attr("axes", IntsAttr({0}))
                                  .Attr("keepdims", IntAttr(0))),
                        {3},
                        {std::string(op) == "ReduceMax" ? 4.0f : 1.0f, nan,
                         std::string(op) == "ReduceMax" ? 6.0f : 3.0f});
  }
}

TEST(ReduceTest, IntegerTypesWrapAndSaturate) {
  ExpectTensor<uint16_t>(RunOk(OpCase("ReduceLogSum", 13).In(Make<uint16_t>({2, 2}, {0, 0, 0, 0}))),
                         {1, 1}, {0});
  ExpectTensor<int32_t>(RunOk(OpCase("ReduceLogSum", 13).In(Make<int32_t>({2}, {0, 0}))), {1},
                        {std::numeric_limits<int32_t>::min()});
  // log(1 + 2 + 4) = 1.9459..., truncated toward zero.
  ExpectTensor<int32_t>(RunOk(OpCase("ReduceLogSum", 13).In(Make<int32_t>({3}, {1, 2, 4}))), {1},
                        {1});
  // log(e^3 + e^3) = 3 + log 2 = 3.693...
  ExpectTensor<int64_t>(RunOk(OpCase("ReduceLogSumExp", 13).In(Make<int64_t>({2}, {3, 3}))), {1},
                        {3});
  // sqrt(3^2 + 4^2) = 5.
  ExpectTensor<uint8_t>(RunOk(OpCase("ReduceL2", 13).In(Make<uint8_t>({2}, {3, 4}))), {1}, {5});
  // numpy: np.array([2**31 - 1, 1], np.int32).sum(dtype=np.int32) == -2**31.
  ExpectTensor<int32_t>(
      RunOk(
          OpCase("ReduceSum", 13).In(Make<int32_t>({2}, {std::numeric_limits<int32_t>::max(), 1}))),
      {1}, {std::numeric_limits<int32_t>::min()});
  // np.prod(np.array([65535, 65535], np.uint16), dtype=np.uint16) == 1 (65535^2 mod 2^16).
  ExpectTensor<uint16_t>(RunOk(OpCase("ReduceProd", 13).In(Make<uint16_t>({2}, {65535, 65535}))),
                         {1}, {1});
  // np.abs(np.int32(-2**31)) == -2**31; 65536^2 mod 2^32 == 0.
  ExpectTensor<int32_t>(
      RunOk(OpCase("ReduceL1", 13).In(Make<int32_t>({1}, {std::numeric_limits<int32_t>::min()}))),
      {1}, {std::numeric_limits<int32_t>::min()});
  ExpectTensor<int32_t>(RunOk(OpCase("ReduceSumSquare", 13).In(Make<int32_t>({1}, {65536}))), {1},
                        {0});
  // Mean of int8 rows: (1 + 2 + 3) / 3 and (-4 - 5 - 6) / 3.
  ExpectTensor<int8_t>(RunOk(OpCase("ReduceMean", 13)
                                 .In(Make<int8_t>({2, 3}, {1, 2, 3, -4, -5, -6}))
                                 .Attr("axes", IntsAttr({1}))
                                 .Attr("keepdims", IntAttr(0))),
                       {2}, {2, -5});
  // 300 uint8 elements summing to 255: 255 / 300 truncates to 0 (the count does not fit uint8, so
  // dividing by it as uint8 would divide by 44, and by 256 elements by 0).
  for (int64_t n : {300, 256}) {
    Tensor many(DataType::kUint8, {n});
    std::fill_n(many.mutable_data<uint8_t>(), n, 0);
    many.mutable_data<uint8_t>()[7] = 255;
    ExpectTensor<uint8_t>(RunOk(OpCase("ReduceMean", 13).In(std::move(many))), {1}, {0});
  }
}

TEST(ReduceTest, Errors) {
  ExpectError(OpCase("ReduceSum", 13).In(Make<int64_t>({2}, {1, 2})).In(I64({1})),
              absl::StatusCode::kInvalidArgument, "axis 1 is out of range for rank 1");
  ExpectError(OpCase("ReduceSum", 13).In(Make<bool>({1}, {true})),
              absl::StatusCode::kInvalidArgument, "bool");
  ExpectError(
      OpCase("ReduceMean", 13).In(Make<int64_t>({2}, {1, 2})).Attr("axes", IntsAttr({0, -1})),
      absl::StatusCode::kInvalidArgument, "repeated");
  ExpectError(OpCase("ReduceSum", 13).In(Make<int64_t>({2}, {1, 2})).In(Make<int32_t>({1}, {0})),
              absl::StatusCode::kInvalidArgument, "must be int64");
}

TEST(ArgMaxTest, SpecExamples) {
  // test_argmax_keepdims_example: [[2,1],[3,10]], axis 1 -> [[0],[1]].
  ExpectTensor<int64_t>(
      RunOk(OpCase("ArgMax", 13).In(Make<float>({2, 2}, {2, 1, 3, 10})).Attr("axis", IntAttr(1))),
      {2, 1}, {0, 1});
  // test_argmax_default_axis_example: axis 0 -> [[1,1]].
  ExpectTensor<int64_t>(RunOk(OpCase("ArgMax", 13).In(Make<float>({2, 2}, {2, 1, 3, 10}))), {1, 2},
                        {1, 1});
  // test_argmax_no_keepdims_example: axis 1, keepdims 0 -> [0, 1].
  ExpectTensor<int64_t>(RunOk(OpCase("ArgMax", 13)
                                  .In(Make<float>({2, 2}, {2, 1, 3, 10}))
                                  .Attr("axis", IntAttr(1))
                                  .Attr("keepdims", IntAttr(0))),
                        {2}, {0, 1});
  // test_argmax_negative_axis_keepdims_example: axis -1 -> [[0],[1]].
  ExpectTensor<int64_t>(
      RunOk(OpCase("ArgMax", 13).In(Make<float>({2, 2}, {2, 1, 3, 10})).Attr("axis", IntAttr(-1))),
      {2, 1}, {0, 1});
}

// Rows long and short (the contiguous fast path takes 16 lanes at a time, then a tail), with
// ties, NaNs and infinities, against the definition: the first index of the extreme value, a NaN
// counting as the extreme (numpy's argmax/argmin).
TEST(ArgMaxTest, RandomRowsMatchTheDefinition) {
  std::mt19937 rng(23);
  const float inf = std::numeric_limits<float>::infinity();
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t rows = 1 + rng() % 3, n = 1 + rng() % 70;
    std::vector<float> data(rows * n);
    for (float& v : data) v = static_cast<float>(static_cast<int>(rng() % 9) - 4);  // many ties
    const int special = trial % 4;  // 0: none, 1: a NaN, 2: an infinity, 3: both
    if (special & 1) data[rng() % data.size()] = std::nanf("");
    if (special & 2) data[rng() % data.size()] = rng() % 2 ? inf : -inf;
    for (const bool max : {true, false}) {
      std::vector<int64_t> want(rows);
      for (int64_t r = 0; r < rows; ++r) {
        const float* p = data.data() + r * n;
        int64_t best = 0;
        for (int64_t k = 1; k < n; ++k) {
          if (std::isnan(p[best])) break;
          if (std::isnan(p[k]) || (max ? p[k] > p[best] : p[k] < p[best])) best = k;
        }
        want[r] = best;
      }
      SCOPED_TRACE(::testing::Message() << "trial " << trial << (max ? " ArgMax" : " ArgMin"));
      Tensor x(DataType::kFloat32, Shape{rows, n});
      std::copy(data.begin(), data.end(), x.mutable_data<float>());
      const Tensor got = RunOk(OpCase(max ? "ArgMax" : "ArgMin", 13)
                                   .In(std::move(x))
                                   .Attr("axis", IntAttr(1))
                                   .Attr("keepdims", IntAttr(0)));
      ASSERT_EQ(got.shape(), Shape{rows});
      for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(got.data<int64_t>()[r], want[r]) << "row " << r;
    }
  }
}

TEST(ArgMaxTest, SelectLastIndex) {
  // test_argmax_keepdims_example_select_last_index: [[2,2],[3,10]], axis 1 -> [[1],[1]].
  ExpectTensor<int64_t>(RunOk(OpCase("ArgMax", 12)
                                  .In(Make<float>({2, 2}, {2, 2, 3, 10}))
                                  .Attr("axis", IntAttr(1))
                                  .Attr("select_last_index", IntAttr(1))),
                        {2, 1}, {1, 1});
  ExpectTensor<int64_t>(
      RunOk(OpCase("ArgMax", 12).In(Make<float>({2, 2}, {2, 2, 3, 10})).Attr("axis", IntAttr(1))),
      {2, 1}, {0, 1});
  // test_argmin_keepdims_example_select_last_index: [[2,2],[3,10]], axis 1 -> [[1],[0]].
  ExpectTensor<int64_t>(RunOk(OpCase("ArgMin", 12)
                                  .In(Make<int64_t>({2, 2}, {2, 2, 3, 10}))
                                  .Attr("axis", IntAttr(1))
                                  .Attr("select_last_index", IntAttr(1))),
                        {2, 1}, {1, 0});
}

TEST(ArgMinTest, Basics) {
  // test_argmin_keepdims_example: [[2,1],[3,10]], axis 1 -> [[1],[0]].
  ExpectTensor<int64_t>(
      RunOk(OpCase("ArgMin", 13).In(Make<int32_t>({2, 2}, {2, 1, 3, 10})).Attr("axis", IntAttr(1))),
      {2, 1}, {1, 0});
  ExpectError(OpCase("ArgMin", 13).In(Tensor(DataType::kFloat32, {0, 2})),
              absl::StatusCode::kInvalidArgument, "empty axis 0");
  ExpectError(OpCase("ArgMin", 13).In(Make<float>({2}, {1, 2})).Attr("axis", IntAttr(2)),
              absl::StatusCode::kInvalidArgument, "axis 2 is out of range");
}

}  // namespace
}  // namespace loopserve::engine::native_test
