// GatherElements, GatherND, ScatterElements, ScatterND, OneHot, NonZero (ONNX spec examples).

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
