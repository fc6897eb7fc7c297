// GatherElements, GatherND, ScatterElements, ScatterND, OneHot, NonZero (ONNX spec examples).

#include <random>
#include <vector>

#include "tests/unit/engine/kernels/native/test_util.h"

namespace loopserve::engine::native_test {
namespace {

TEST(GatherElementsTest, SpecExamples) {
  ExpectTensor<float>(RunOk(OpCase("GatherElements", 13)
                                .In(Make<float>({2, 2}, {1, 2, 3, 4}))
                                .In(Make<int64_t>({2, 2}, {0, 0, 1, 0}))
                                .Attr("axis", IntAttr(1))),
                      {2, 2}, {1, 1, 4, 3});
  ExpectTensor<float>(RunOk(OpCase("GatherElements", 13)
                                .In(Make<float>({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}))
                                .In(Make<int32_t>({2, 3}, {1, 2, 0, 2, 0, 0}))
                                .Attr("axis", IntAttr(0))),
                      {2, 3}, {4, 8, 3, 7, 2, 3});
  ExpectTensor<float>(RunOk(OpCase("GatherElements", 13)
                                .In(Make<float>({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}))
                                .In(Make<int32_t>({2, 3}, {-1, -2, 0, -2, 0, 0}))
                                .Attr("axis", IntAttr(0))),
                      {2, 3}, {7, 5, 3, 4, 2, 3});
  ExpectError(OpCase("GatherElements", 13).In(Make<float>({2}, {1, 2})).In(Make<int64_t>({1}, {2})),
              absl::StatusCode::kInvalidArgument, "out of range");
}

TEST(GatherElementsTest, EveryAxisAgreesWithTheDefinition) {
  // data [4, 5, 6], indices [3, 5, 2] (smaller than data off the axis, a short last dim) holding
  // every valid value, negative ones included; int32 and int64 indices; each axis, counted from
  // either end: out[i, j, k] = data[i, j, k with the axis coordinate replaced by the index].
  const int64_t dims[3] = {4, 5, 6}, idims[3] = {3, 5, 2};
  std::mt19937 rng(27);
  for (int axis = -3; axis < 3; ++axis) {
    const int a = axis < 0 ? axis + 3 : axis;
    std::uniform_int_distribution<int64_t> pick(-dims[a], dims[a] - 1);
    std::vector<int64_t> index(idims[0] * idims[1] * idims[2]);
    for (int64_t& v : index) v = pick(rng);
    for (const bool wide : {false, true}) {
      Tensor data(DataType::kFloat32, Shape{dims[0], dims[1], dims[2]});
      for (int64_t i = 0; i < data.NumElements(); ++i) data.mutable_data<float>()[i] = i;
      Tensor idx(wide ? DataType::kInt64 : DataType::kInt32, Shape{idims[0], idims[1], idims[2]});
      for (size_t i = 0; i < index.size(); ++i) {
        if (wide) {
          idx.mutable_data<int64_t>()[i] = index[i];
        } else {
          idx.mutable_data<int32_t>()[i] = static_cast<int32_t>(index[i]);
        }
      }
      const Tensor y = RunOk(OpCase("GatherElements", 13)
                                 .In(std::move(data))
                                 .In(std::move(idx))
                                 .Attr("axis", IntAttr(axis)));
      ASSERT_EQ(y.shape(), (Shape{idims[0], idims[1], idims[2]}));
      for (int64_t i = 0; i < idims[0]; ++i) {
        for (int64_t j = 0; j < idims[1]; ++j) {
          for (int64_t k = 0; k < idims[2]; ++k) {
            const int64_t at = (i * idims[1] + j) * idims[2] + k;
            int64_t coord[3] = {i, j, k};
            coord[a] = index[at] < 0 ? index[at] + dims[a] : index[at];
            EXPECT_EQ(y.data<float>()[at], (coord[0] * dims[1] + coord[1]) * dims[2] + coord[2])
                << "axis " << axis << " at " << i << ", " << j << ", " << k;
          }
        }
      }
    }
  }
  // One bad index in the middle of a row: an error naming it.
  ExpectError(OpCase("GatherElements", 13)
                  .In(Make<float>({2, 3}, {1, 2, 3, 4, 5, 6}))
                  .In(Make<int64_t>({2, 2}, {0, 1, -4, 2}))
                  .Attr("axis", IntAttr(1)),
              absl::StatusCode::kInvalidArgument, "index -4 is out of range");
}

TEST(GatherNDTest, SpecExamples) {
  ExpectTensor<int32_t>(RunOk(OpCase("GatherND", 13)
                                  .In(Make<int32_t>({2, 2}, {0, 1, 2, 3}))
                                  .In(Make<int64_t>({2, 2}, {0, 0, 1, 1}))),
                        {2}, {0, 3});
  ExpectTensor<int32_t>(RunOk(OpCase("GatherND", 13)
                                  .In(Make<int32_t>({2, 2}, {0, 1, 2, 3}))
                                  .In(Make<int64_t>({2, 1}, {1, 0}))),
                        {2, 2}, {2, 3, 0, 1});
  ExpectTensor<int32_t>(RunOk(OpCase("GatherND", 13)
                                  .In(Make<int32_t>({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7}))
                                  .In(Make<int64_t>({2, 1}, {1, 0}))
                                  .Attr("batch_dims", IntAttr(1))),
                        {2, 2}, {2, 3, 4, 5});
  ExpectError(OpCase("GatherND", 13)
                  .In(Make<int32_t>({2, 2}, {0, 1, 2, 3}))
                  .In(Make<int64_t>({1, 3}, {0, 0, 0})),
              absl::StatusCode::kInvalidArgument, "last dim");
}

TEST(ScatterElementsTest, SpecExamplesAndReductions) {
  ExpectTensor<float>(RunOk(OpCase("ScatterElements", 16)
                                .In(Make<float>({1, 5}, {1, 2, 3, 4, 5}))
                                .In(Make<int64_t>({1, 2}, {1, 3}))
                                .In(Make<float>({1, 2}, {1.1f, 2.1f}))
                                .Attr("axis", IntAttr(1))),
                      {1, 5}, {1, 1.1f, 3, 2.1f, 5});
  ExpectTensor<float>(RunOk(OpCase("ScatterElements", 16)
                                .In(Make<float>({1, 5}, {1, 2, 3, 4, 5}))
                                .In(Make<int64_t>({1, 2}, {1, 1}))
                                .In(Make<float>({1, 2}, {1.1f, 2.1f}))
                                .Attr("axis", IntAttr(1))
                                .Attr("reduction", StringAttr("add"))),
                      {1, 5}, {1, 5.2f, 3, 4, 5});
  ExpectTensor<float>(RunOk(OpCase("ScatterElements", 11)
                                .In(Make<float>({3, 3}, {0, 0, 0, 0, 0, 0, 0, 0, 0}))
                                .In(Make<int64_t>({2, 3}, {1, 0, 2, 0, 2, 1}))
                                .In(Make<float>({2, 3}, {1, 1.1f, 1.2f, 2, 2.1f, 2.2f}))),
                      {3, 3}, {2, 1.1f, 0, 1, 0, 2.2f, 0, 2.1f, 1.2f});
  ExpectError(OpCase("ScatterElements", 11)
                  .In(Make<float>({2}, {1, 2}))
                  .In(Make<int64_t>({1}, {5}))
                  .In(Make<float>({1}, {1})),
              absl::StatusCode::kInvalidArgument, "out of range");
}

TEST(ScatterNDTest, SpecExample) {
  ExpectTensor<float>(RunOk(OpCase("ScatterND", 13)
                                .In(Make<float>({8}, {1, 2, 3, 4, 5, 6, 7, 8}))
                                .In(Make<int64_t>({4, 1}, {4, 3, 1, 7}))
                                .In(Make<float>({4}, {9, 10, 11, 12}))),
                      {8}, {1, 11, 3, 10, 9, 6, 7, 12});
  ExpectTensor<float>(RunOk(OpCase("ScatterND", 16)
                                .In(Make<float>({4}, {1, 2, 3, 4}))
                                .In(Make<int64_t>({2, 1}, {0, 0}))
                                .In(Make<float>({2}, {5, 6}))
                                .Attr("reduction", StringAttr("mul"))),
                      {4}, {30, 2, 3, 4});
  ExpectError(OpCase("ScatterND", 13)
                  .In(Make<float>({2}, {1, 2}))
                  .In(Make<int64_t>({1, 1}, {0}))
                  .In(Make<float>({2}, {1, 2})),
              absl::StatusCode::kInvalidArgument, "updates");
}

TEST(OneHotTest, AxesAndNegativeIndices) {
  ExpectTensor<float>(RunOk(OpCase("OneHot", 11)
                                .In(Make<int64_t>({2}, {0, -1}))
                                .In(Scalar<int64_t>(3))
                                .In(Make<float>({2}, {0, 1}))),
                      {2, 3}, {1, 0, 0, 0, 0, 1});
  ExpectTensor<int32_t>(RunOk(OpCase("OneHot", 11)
                                  .In(Make<float>({2}, {0, 2}))
                                  .In(Scalar<float>(3))
                                  .In(Make<int32_t>({2}, {-1, 5}))
                                  .Attr("axis", IntAttr(0))),
                        {3, 2}, {5, -1, -1, -1, -1, 5});
  ExpectError(OpCase("OneHot", 11)
                  .In(Make<int64_t>({1}, {0}))
                  .In(Scalar<int64_t>(0))
                  .In(Make<float>({2}, {0, 1})),
              absl::StatusCode::kInvalidArgument, "depth");
}

TEST(NonZeroTest, SpecExample) {
  ExpectTensor<int64_t>(
      RunOk(OpCase("NonZero", 13).In(Make<bool>({2, 2}, {true, false, true, true}))), {2, 3},
      {0, 1, 1, 0, 0, 1});
  ExpectTensor<int64_t>(RunOk(OpCase("NonZero", 13).In(Make<float>({3}, {0, 0, 0}))), {1, 0}, {});
}

}  // namespace
}  // namespace loopserve::engine::native_test
