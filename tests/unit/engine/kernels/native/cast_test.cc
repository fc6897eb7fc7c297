// Cast (and the conversions it must get right).

#include <cstring>
#include <limits>

#include "tests/unit/engine/kernels/native/test_util.h"

namespace loopserve::engine::native_test {
namespace {

// ONNX TensorProto.DataType codes.
constexpr int64_t kFloat = 1, kUint8 = 2, kInt32 = 6, kInt64 = 7, kBool = 9, kFloat16 = 10,
                  kDouble = 11, kBFloat16 = 16;

TEST(CastTest, FloatToIntTruncates) {
  ExpectTensor<int64_t>(RunOk(OpCase("Cast", 13)
                                  .In(Make<float>({4}, {1.9f, -1.9f, 0.5f, -0.0f}))
                                  .Attr("to", IntAttr(kInt64))),
                        {4}, {1, -1, 0, 0});
  ExpectTensor<int32_t>(
      RunOk(OpCase("Cast", 13).In(Make<double>({2}, {2.99, -7.5})).Attr("to", IntAttr(kInt32))),
      {2}, {2, -7});
}

TEST(CastTest, ToAndFromBool) {
  ExpectTensor<bool>(RunOk(OpCase("Cast", 13)
                               .In(Make<float>({4}, {0.0f, -0.0f, 0.1f, -3}))
                               .Attr("to", IntAttr(kBool))),
                     {4}, {false, false, true, true});
  ExpectTensor<bool>(RunOk(OpCase("Cast", 13).In(I64({0, 256, -1})).Attr("to", IntAttr(kBool))),
                     {3}, {false, true, true});
  ExpectTensor<float>(
      RunOk(OpCase("Cast", 13).In(Make<bool>({2}, {true, false})).Attr("to", IntAttr(kFloat))), {2},
      {1, 0});
  ExpectTensor<int64_t>(
      RunOk(OpCase("Cast", 13).In(Make<bool>({2}, {true, false})).Attr("to", IntAttr(kInt64))), {2},
      {1, 0});
}

TEST(CastTest, IntegerConversions) {
  // int64 -> uint8 wraps modulo 256 (as numpy's astype).
  ExpectTensor<uint8_t>(RunOk(OpCase("Cast", 13).In(I64({257, -1})).Attr("to", IntAttr(kUint8))),
                        {2}, {1, 255});
  ExpectTensor<double>(
      RunOk(OpCase("Cast", 13).In(I64({int64_t{1} << 53, -3})).Attr("to", IntAttr(kDouble))), {2},
      {9007199254740992.0, -3.0});
  // Same type: a copy; empty tensors are fine.
  ExpectTensor<int64_t>(
      RunOk(OpCase("Cast", 13).In(Tensor(DataType::kInt64, {0, 2})).Attr("to", IntAttr(kInt64))),
      {0, 2}, {});
}

TEST(CastTest, Float16AndBFloat16) {
  // 1.0 = 0x3c00 half, 0x3f80 bfloat16; -2.5 = 0xc100 half, 0xc020 bfloat16.
  Tensor h =
      RunOk(OpCase("Cast", 13).In(Make<float>({2}, {1.0f, -2.5f})).Attr("to", IntAttr(kFloat16)));
  ASSERT_EQ(h.dtype(), DataType::kFloat16);
  EXPECT_EQ(h.data<uint16_t>()[0], 0x3c00);
  EXPECT_EQ(h.data<uint16_t>()[1], 0xc100);
  Tensor b =
      RunOk(OpCase("Cast", 13).In(Make<float>({2}, {1.0f, -2.5f})).Attr("to", IntAttr(kBFloat16)));
  ASSERT_EQ(b.dtype(), DataType::kBFloat16);
  EXPECT_EQ(b.data<uint16_t>()[0], 0x3f80);
  EXPECT_EQ(b.data<uint16_t>()[1], 0xc020);
  // Back: half 0x3555 is 0.333251953125; 0x0001 is the smallest subnormal 2^-24.
  Tensor in(DataType::kFloat16, Shape{2});
  in.mutable_data<uint16_t>()[0] = 0x3555;
  in.mutable_data<uint16_t>()[1] = 0x0001;
  ExpectTensor<float>(RunOk(OpCase("Cast", 13).In(std::move(in)).Attr("to", IntAttr(kFloat))), {2},
                      {0.333251953125f, 5.9604644775390625e-08f});
  // 65520 and above round to infinity (0x7c00).
  Tensor inf =
      RunOk(OpCase("Cast", 13).In(Make<float>({1}, {70000.0f})).Attr("to", IntAttr(kFloat16)));
  EXPECT_EQ(inf.data<uint16_t>()[0], 0x7c00);
}

TEST(CastTest, Opset1StringTo) {
  ExpectTensor<int32_t>(
      RunOk(OpCase("Cast", 1).In(Make<float>({1}, {3.7f})).Attr("to", StringAttr("INT32"))), {1},
      {3});
}

TEST(CastTest, Errors) {
  ExpectError(OpCase("Cast", 13).In(I64({1})).Attr("to", IntAttr(14)),
              absl::StatusCode::kUnimplemented, "element type COMPLEX64");
  ExpectError(OpCase("Cast", 13).In(I64({1})), absl::StatusCode::kInvalidArgument,
              "'to' is required");
}

}  // namespace
}  // namespace loopserve::engine::native_test
