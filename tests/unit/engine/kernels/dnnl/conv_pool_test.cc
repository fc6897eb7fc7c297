// Conv and the pooling ops against the reference (random windows) and the spec's examples.

#include <random>

#include "engine/kernels/dnnl/dnnl_kernel.h"
#include "engine/kernels/reference/reference.h"
#include "gtest/gtest.h"
#include "tests/unit/engine/kernels/dnnl/test_util.h"

namespace loopserve::engine::testing {
namespace {

using Attributes = absl::flat_hash_map<std::string, Attribute>;

std::vector<float> Iota(int n, float start = 0) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

int64_t Pick(std::mt19937& rng, int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
}

// A random window over `rank` spatial dims with an input that fits it; `attrs` gets the node
// attributes and `window` the same for the reference.
Shape RandomWindow(std::mt19937& rng, int rank, bool dilations, bool pool, int64_t n, int64_t c,
                   reference::WindowAttrs& window, Attributes& attrs) {
  const char* pads[] = {"NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"};
  const std::string auto_pad = pads[rng() % 5];
  window = {};
  window.auto_pad = auto_pad == "NOTSET"       ? reference::AutoPad::kNotSet
                    : auto_pad == "VALID"      ? reference::AutoPad::kValid
                    : auto_pad == "SAME_UPPER" ? reference::AutoPad::kSameUpper
                                               : reference::AutoPad::kSameLower;
  Shape::Dims x = {n, c};
  std::vector<int64_t> begin, end;
  for (int i = 0; i < rank; ++i) {
    const int64_t k = Pick(rng, 1, 3);
    const int64_t d = dilations ? Pick(rng, 1, 2) : 1;
    const int64_t extent = (k - 1) * d + 1;
    window.kernel_shape.push_back(k);
    window.dilations.push_back(d);
    window.strides.push_back(Pick(rng, 1, 3));
    begin.push_back(Pick(rng, 0, extent - 1));
    end.push_back(Pick(rng, 0, extent - 1));
    x.push_back(extent + Pick(rng, 0, rank == 3 ? 2 : 5));
  }
  window.pads = begin;
  window.pads.insert(window.pads.end(), end.begin(), end.end());
  // SAME pads of a pool may reach the window extent, which pools reject: keep them explicit.
  if (pool && window.auto_pad != reference::AutoPad::kNotSet &&
      window.auto_pad != reference::AutoPad::kValid) {
    window.auto_pad = reference::AutoPad::kNotSet;
  }
  if (window.auto_pad == reference::AutoPad::kNotSet) {
    attrs["pads"] = IntsAttr(window.pads);
  } else {
    attrs["auto_pad"] =
        StringAttr(window.auto_pad == reference::AutoPad::kValid       ? "VALID"
                   : window.auto_pad == reference::AutoPad::kSameUpper ? "SAME_UPPER"
                                                                       : "SAME_LOWER");
  }
  attrs["strides"] = IntsAttr(window.strides);
  if (dilations) attrs["dilations"] = IntsAttr(window.dilations);
  return Shape(std::move(x));
}

TEST(ConvTest, RandomWindowsMatchReference) {
  std::mt19937 rng(21);
  for (int trial = 0; trial < 90; ++trial) {
    const int rank = 1 + trial % 3;
    const int64_t group = Pick(rng, 1, 3);
    const int64_t c = group * Pick(rng, 1, 3);
    const int64_t m = group * Pick(rng, 1, 3);
    reference::WindowAttrs window;
    Attributes attrs;
    const Shape x_shape = RandomWindow(rng, rank, /*dilations=*/true, /*pool=*/false,
                                       Pick(rng, 1, 2), c, window, attrs);
    Shape::Dims w_dims = {m, c / group};
    w_dims.insert(w_dims.end(), window.kernel_shape.begin(), window.kernel_shape.end());
    if (trial % 2) attrs["kernel_shape"] = IntsAttr(window.kernel_shape);
    attrs["group"] = IntAttr(group);
    const DataType type = trial % 7 == 0 ? DataType::kFloat64 : DataType::kFloat32;
    const Tensor x = RandomTensor(type, x_shape, rng);
    const Tensor w = RandomTensor(type, Shape(w_dims), rng);
    const Tensor b = RandomTensor(type, Shape{m}, rng);
    const Tensor* bias = trial % 3 ? &b : nullptr;
    SCOPED_TRACE(::testing::Message() << "x " << x_shape.ToString() << " w "
                                      << Shape(w_dims).ToString() << " group " << group);
    const int64_t created = DnnlPrimitiveCreationCount();
    absl::StatusOr<Tensor> actual = RunOnce("Conv", 11, {&x, &w, bias}, attrs);
    ASSERT_TRUE(actual.ok()) << actual.status();
    if (type == DataType::kFloat32) {
      EXPECT_EQ(DnnlPrimitiveCreationCount(), created + 1);
    }
    Tensor expected;
    ASSERT_TRUE(reference::Conv(x, w, bias, window, group, expected).ok());
    EXPECT_TRUE(TensorsNear(*actual, expected, 1e-4, 1e-4));
  }
}

// 1-D depthwise Convs (one input and one output channel per group), which run on oneDNN as 2-D
// with a height of 1: random channels, kernels, strides, dilations, pads, batch and bias.
TEST(ConvTest, DepthwiseOneDimensionalMatchesReference) {
  std::mt19937 rng(27);
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t c = Pick(rng, 2, 40);
    reference::WindowAttrs window;
    Attributes attrs;
    const Shape x_shape = RandomWindow(rng, 1, /*dilations=*/trial % 2 == 1, /*pool=*/false,
                                       Pick(rng, 1, 2), c, window, attrs);
    Shape::Dims w_dims = {c, 1, window.kernel_shape[0]};
    attrs["group"] = IntAttr(c);
    const Tensor x = RandomTensor(DataType::kFloat32, x_shape, rng);
    const Tensor w = RandomTensor(DataType::kFloat32, Shape(w_dims), rng);
    const Tensor b = RandomTensor(DataType::kFloat32, Shape{c}, rng);
    const Tensor* bias = trial % 3 ? &b : nullptr;
    SCOPED_TRACE(::testing::Message()
                 << "x " << x_shape.ToString() << " w " << Shape(w_dims).ToString());
    absl::StatusOr<Tensor> actual = RunOnce("Conv", 11, {&x, &w, bias}, attrs);
    ASSERT_TRUE(actual.ok()) << actual.status();
    Tensor expected;
    ASSERT_TRUE(reference::Conv(x, w, bias, window, c, expected).ok());
    EXPECT_TRUE(TensorsNear(*actual, expected, 1e-4, 1e-4));
  }
}

TEST(ConvTransposeTest, RandomWindowsMatchReference) {
  // oneDNN's deconvolution (constant and runtime weights, groups, strides, dilations, pads,
  // auto_pad) against the reference scatter; extended outputs (output_padding, an output_shape
  // past the input's reach) run on the reference and are checked by the spec examples below.
  std::mt19937 rng(33);
  for (int trial = 0; trial < 60; ++trial) {
    const int rank = 1 + trial % 3;
    const int64_t group = Pick(rng, 1, 2);
    const int64_t c = group * Pick(rng, 1, 3);
    const int64_t m = group * Pick(rng, 1, 3);
    reference::ConvTransposeAttrs ct;
    Attributes attrs;
    Shape::Dims x_dims = {Pick(rng, 1, 2), c};
    std::vector<int64_t> begin, end;
    for (int i = 0; i < rank; ++i) {
      const int64_t k = Pick(rng, 1, 3);
      const int64_t d = Pick(rng, 1, 2);
      ct.window.kernel_shape.push_back(k);
      ct.window.dilations.push_back(d);
      ct.window.strides.push_back(Pick(rng, 1, 3));
      begin.push_back(Pick(rng, 0, (k - 1) * d));
      end.push_back(Pick(rng, 0, (k - 1) * d));
      x_dims.push_back(Pick(rng, 1, rank == 3 ? 3 : 5));
    }
    const bool same = trial % 4 == 1;
    if (same) {
      ct.window.auto_pad = reference::AutoPad::kSameLower;
      attrs["auto_pad"] = StringAttr("SAME_LOWER");
    } else {
      ct.window.pads = begin;
      ct.window.pads.insert(ct.window.pads.end(), end.begin(), end.end());
      attrs["pads"] = IntsAttr(ct.window.pads);
    }
    ct.group = group;
    attrs["strides"] = IntsAttr(ct.window.strides);
    attrs["dilations"] = IntsAttr(ct.window.dilations);
    attrs["group"] = IntAttr(group);
    Shape::Dims w_dims = {c, m / group};
    w_dims.insert(w_dims.end(), ct.window.kernel_shape.begin(), ct.window.kernel_shape.end());
    const Tensor x = RandomTensor(DataType::kFloat32, Shape(x_dims), rng);
    const Tensor w = RandomTensor(DataType::kFloat32, Shape(w_dims), rng);
    const Tensor b = RandomTensor(DataType::kFloat32, Shape{m}, rng);
    const Tensor* bias = trial % 3 ? &b : nullptr;
    SCOPED_TRACE(::testing::Message() << "x " << Shape(x_dims).ToString() << " w "
                                      << Shape(w_dims).ToString() << " group " << group);
    Tensor expected;
    absl::Status ref = reference::ConvTranspose(x, w, bias, ct, expected);
    if (!ref.ok()) {
      // Pads larger than the output: the kernel must reject them too.
      EXPECT_FALSE(RunOnce("ConvTranspose", 11, {&x, &w, bias}, attrs).ok());
      continue;
    }
    const int64_t created = DnnlPrimitiveCreationCount();
    absl::StatusOr<Tensor> actual = RunOnce("ConvTranspose", 11, {&x, &w, bias}, attrs);
    ASSERT_TRUE(actual.ok()) << actual.status();
    if (expected.NumElements() > 0 && !same) {
      EXPECT_EQ(DnnlPrimitiveCreationCount(), created + 1);
    }
    EXPECT_TRUE(TensorsNear(*actual, expected, 1e-4, 1e-4));
  }
}

// oneDNN 2.6 has only its reference implementation (ref:any) for a dilated max pool: the step
// counts in RunStats::reference_steps although no kernel of ours ran its reference (the cliff it
// marks is oneDNN's). The names oneDNN gives its reference implementations are told apart from
// the optimized ones.
TEST(PoolTest, OneDnnReferenceImplementationIsCounted) {
  EXPECT_TRUE(IsDnnlReferenceImpl("ref:any"));
  EXPECT_TRUE(IsDnnlReferenceImpl("bnorm_ref:any"));
  EXPECT_TRUE(IsDnnlReferenceImpl("lrn_ref:any"));
  EXPECT_TRUE(IsDnnlReferenceImpl("ref_int8:any"));
  EXPECT_FALSE(IsDnnlReferenceImpl("jit:avx512_core"));
  EXPECT_FALSE(IsDnnlReferenceImpl("ncsp_bnorm:any"));
  EXPECT_FALSE(IsDnnlReferenceImpl("simple:any"));
  EXPECT_FALSE(IsDnnlReferenceImpl("x64:gemm:jit"));
  EXPECT_FALSE(IsDnnlReferenceImpl("brgconv:avx512_core"));
  EXPECT_FALSE(IsDnnlReferenceImpl(""));

  std::mt19937 rng(34);
  const Tensor x = RandomTensor(DataType::kFloat32, Shape{1, 4, 16, 16}, rng);
  const Attributes attrs = {{"kernel_shape", IntsAttr({2, 2})}, {"dilations", IntsAttr({2, 2})}};
  absl::StatusOr<std::unique_ptr<NodeRunner>> runner = NodeRunner::Create("MaxPool", 12, 1, attrs);
  ASSERT_TRUE(runner.ok()) << runner.status();
  const int64_t created = DnnlPrimitiveCreationCount();
  for (int run = 0; run < 2; ++run) {
    absl::StatusOr<const Tensor*> y = (*runner)->Run({&x});
    ASSERT_TRUE(y.ok()) << y.status();
  }
  EXPECT_EQ(DnnlPrimitiveCreationCount(), created + 1);  // oneDNN ran it, not our reference
  // Counted once for the step in this frame, as a step on our own reference kernels is.
  EXPECT_EQ((*runner)->stats().reference_steps, 1);

  // An undilated pool of the same input runs on a jit kernel: nothing counted.
  runner = NodeRunner::Create("MaxPool", 12, 1, {{"kernel_shape", IntsAttr({2, 2})}});
  ASSERT_TRUE(runner.ok()) << runner.status();
  ASSERT_TRUE((*runner)->Run({&x}).ok());
  EXPECT_EQ((*runner)->stats().reference_steps, 0);
}

TEST(ConvTransposeSpecTest, ValuesByHand) {
  // test_convtranspose_dilations: a 3x3 input, a 2x2 kernel dilated by 2.
  const Tensor x = MakeTensor<float>({1, 1, 3, 3}, {3, 8, 1, 9, 5, 7, 3, 2, 6});
  const Tensor w = MakeTensor<float>({1, 1, 2, 2}, {7, 2, 1, 9});
  absl::StatusOr<Tensor> dilated =
      RunOnce("ConvTranspose", 11, {&x, &w}, {{"dilations", IntsAttr({2, 2})}});
  ASSERT_TRUE(dilated.ok()) << dilated.status();
  EXPECT_TRUE(TensorsNear(
      *dilated, MakeTensor<float>({1, 1, 5, 5}, {21, 56, 13, 16, 2,  63, 35, 67, 10, 14, 24, 22, 76,
                                                 76, 21, 9,  5,  88, 45, 63, 3,  2,  33, 18, 54})));
  // test_convtranspose_pad: output_padding adds a zero row and column at the end; a stride 3 x 2
  // with a 3x3 ones kernel over the 0..8 ramp. Rows 0-2 come from input row 0, and so on.
  const Tensor ramp = MakeTensor<float>({1, 1, 3, 3}, Iota(9));
  const Tensor ones = MakeTensor<float>({1, 1, 3, 3}, std::vector<float>(9, 1.0f));
  absl::StatusOr<Tensor> padded =
      RunOnce("ConvTranspose", 11, {&ramp, &ones},
              {{"strides", IntsAttr({3, 2})}, {"output_padding", IntsAttr({1, 1})}});
  ASSERT_TRUE(padded.ok()) << padded.status();
  ASSERT_EQ(padded->shape(), Shape({1, 1, 10, 8}));
  const float row0[8] = {0, 0, 1, 1, 3, 2, 2, 0};
  const float row3[8] = {3, 3, 7, 4, 9, 5, 5, 0};
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(padded->data<float>()[j], row0[j]) << j;
    EXPECT_EQ(padded->data<float>()[3 * 8 + j], row3[j]) << j;
    EXPECT_EQ(padded->data<float>()[9 * 8 + j], 0.0f) << j;
  }
  // Bad weights: W[0] must be the input channels.
  const Tensor w_bad = MakeTensor<float>({2, 1, 3, 3}, std::vector<float>(18, 1.0f));
  absl::StatusOr<Tensor> bad = RunOnce("ConvTranspose", 11, {&ramp, &w_bad});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ConvSpecTest, ValuesByHand) {
  // test_basic_conv_with_padding / _without_padding: a 5x5 ramp under a 3x3 box of ones.
  const Tensor x = MakeTensor<float>({1, 1, 5, 5}, Iota(25));
  const Tensor w = MakeTensor<float>({1, 1, 3, 3}, std::vector<float>(9, 1.0f));
  absl::StatusOr<Tensor> padded = RunOnce(
      "Conv", 11, {&x, &w}, {{"kernel_shape", IntsAttr({3, 3})}, {"pads", IntsAttr({1, 1, 1, 1})}});
  ASSERT_TRUE(padded.ok()) << padded.status();
  EXPECT_TRUE(TensorsNear(
      *padded,
      MakeTensor<float>({1, 1, 5, 5}, {12,  21, 27, 33,  24,  33,  54,  63, 72,  51,  63,  99, 108,
                                       117, 81, 93, 144, 153, 162, 111, 72, 111, 117, 123, 84})));
  absl::StatusOr<Tensor> valid = RunOnce("Conv", 1, {&x, &w});
  ASSERT_TRUE(valid.ok()) << valid.status();
  EXPECT_TRUE(TensorsNear(
      *valid, MakeTensor<float>({1, 1, 3, 3}, {54, 63, 72, 99, 108, 117, 144, 153, 162})));
  // test_conv_with_strides_padding: 7x5 input, stride 2, pads 1.
  const Tensor x7 = MakeTensor<float>({1, 1, 7, 5}, Iota(35));
  absl::StatusOr<Tensor> strided = RunOnce(
      "Conv", 11, {&x7, &w}, {{"strides", IntsAttr({2, 2})}, {"pads", IntsAttr({1, 1, 1, 1})}});
  ASSERT_TRUE(strided.ok()) << strided.status();
  EXPECT_TRUE(TensorsNear(*strided, MakeTensor<float>({1, 1, 4, 3}, {12, 27, 24, 63, 108, 81, 123,
                                                                     198, 141, 112, 177, 124})));
  // Two groups with a bias: each output channel sees only its own input channel.
  const Tensor x2 = MakeTensor<float>({1, 2, 1, 2}, {1, 2, 3, 4});
  const Tensor w2 = MakeTensor<float>({2, 1, 1, 1}, {10, 100});
  const Tensor b2 = MakeTensor<float>({2}, {1, -1});
  absl::StatusOr<Tensor> grouped = RunOnce("Conv", 11, {&x2, &w2, &b2}, {{"group", IntAttr(2)}});
  ASSERT_TRUE(grouped.ok()) << grouped.status();
  EXPECT_TRUE(TensorsNear(*grouped, MakeTensor<float>({1, 2, 1, 2}, {11, 21, 299, 399})));
  // SAME_LOWER on 1-D, length 4, kernel 2: the pad goes first.
  const Tensor x1 = MakeTensor<float>({1, 1, 4}, {1, 2, 3, 4});
  const Tensor w1 = MakeTensor<float>({1, 1, 2}, {1, 10});
  absl::StatusOr<Tensor> lower =
      RunOnce("Conv", 11, {&x1, &w1}, {{"auto_pad", StringAttr("SAME_LOWER")}});
  ASSERT_TRUE(lower.ok()) << lower.status();
  EXPECT_TRUE(TensorsNear(*lower, MakeTensor<float>({1, 1, 4}, {10, 21, 32, 43})));
}

TEST(ConvSpecTest, EmptyAndInvalid) {
  const Tensor w = MakeTensor<float>({2, 1, 3, 3}, std::vector<float>(18, 1.0f));
  const Tensor empty(DataType::kFloat32, Shape{0, 1, 5, 5});
  absl::StatusOr<Tensor> y = RunOnce("Conv", 11, {&empty, &w});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (Shape{0, 2, 3, 3}));
  // No input channels: the output is the bias.
  const Tensor no_channels(DataType::kFloat32, Shape{1, 0, 2, 2});
  const Tensor w0(DataType::kFloat32, Shape{2, 0, 1, 1});
  const Tensor b = MakeTensor<float>({2}, {1, 2});
  absl::StatusOr<Tensor> bias_only = RunOnce("Conv", 11, {&no_channels, &w0, &b});
  ASSERT_TRUE(bias_only.ok()) << bias_only.status();
  EXPECT_TRUE(TensorsNear(*bias_only, MakeTensor<float>({1, 2, 2, 2}, {1, 1, 1, 1, 2, 2, 2, 2})));

  std::mt19937 rng(1);
  const Tensor x = RandomTensor(DataType::kFloat32, Shape{1, 4, 5, 5}, rng);
  const Tensor w4 = MakeTensor<float>({2, 2, 3, 3}, std::vector<float>(36, 1.0f));
  absl::StatusOr<Tensor> bad_group = RunOnce("Conv", 11, {&x, &w4}, {{"group", IntAttr(3)}});
  EXPECT_EQ(bad_group.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_group.status().message().find("input channels 4 / group 3"),
            absl::string_view::npos)
      << bad_group.status();
  absl::StatusOr<Tensor> bad_kernel =
      RunOnce("Conv", 11, {&x, &w4}, {{"group", IntAttr(2)}, {"kernel_shape", IntsAttr({2, 2})}});
  EXPECT_EQ(bad_kernel.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_kernel.status().message().find("kernel_shape [2,2]"), absl::string_view::npos)
      << bad_kernel.status();
  const std::vector<Attributes> hostile = {
      {{"group", IntAttr(2)}, {"pads", IntsAttr({-1, 0, 0, 0})}},
      {{"group", IntAttr(2)}, {"strides", IntsAttr({0, 1})}},
      {{"group", IntAttr(2)}, {"strides", IntsAttr({-2, 1})}},
      {{"group", IntAttr(2)}, {"dilations", IntsAttr({1, 0})}},
      {{"group", IntAttr(2)}, {"pads", IntsAttr({1, 1, 1})}},
      {{"group", IntAttr(2)}, {"pads", IntsAttr({100, 100, 100, 100})}},
      {{"group", IntAttr(2)}, {"dilations", IntsAttr({1000000, 1})}},
      {{"group", IntAttr(2)}, {"strides", IntsAttr({1, 1, 1})}},
      {{"group", IntAttr(0)}},
      {{"group", IntAttr(2)}, {"auto_pad", StringAttr("SAME")}},
  };
  for (const Attributes& attrs : hostile) {
    absl::StatusOr<Tensor> r = RunOnce("Conv", 11, {&x, &w4}, attrs);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  }
  const Tensor flat = MakeTensor<float>({1, 4}, {1, 2, 3, 4});
  EXPECT_EQ(RunOnce("Conv", 11, {&flat, &w4}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PoolTest, RandomWindowsMatchReference) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 120; ++trial) {
    const int rank = 1 + trial % 3;
    reference::PoolAttrs pool;
    const int kind = trial % 3;
    pool.kind = kind == 0   ? reference::PoolKind::kMax
                : kind == 1 ? reference::PoolKind::kAverage
                            : reference::PoolKind::kLp;
    Attributes attrs;
    const bool dilations = pool.kind == reference::PoolKind::kMax;
    const Shape x_shape = RandomWindow(rng, rank, dilations, /*pool=*/true, Pick(rng, 1, 2),
                                       Pick(rng, 1, 3), pool.window, attrs);
    attrs["kernel_shape"] = IntsAttr(pool.window.kernel_shape);
    pool.window.ceil_mode = rng() % 2;
    attrs["ceil_mode"] = IntAttr(pool.window.ceil_mode);
    if (pool.kind == reference::PoolKind::kAverage) {
      pool.count_include_pad = rng() % 2;
      attrs["count_include_pad"] = IntAttr(pool.count_include_pad);
    }
    if (pool.kind == reference::PoolKind::kLp) {
      pool.p = static_cast<float>(Pick(rng, 1, 3));
      attrs["p"] = IntAttr(static_cast<int64_t>(pool.p));
    }
    const char* op = kind == 0 ? "MaxPool" : kind == 1 ? "AveragePool" : "LpPool";
    const DataType type = trial % 10 == 0   ? DataType::kFloat64
                          : trial % 10 == 3 ? DataType::kUint8
                                            : DataType::kFloat32;
    if (type == DataType::kUint8 && pool.kind != reference::PoolKind::kMax) continue;
    const Tensor x = RandomTensor(type, x_shape, rng);
    SCOPED_TRACE(::testing::Message()
                 << op << " x " << x_shape.ToString() << " ceil " << pool.window.ceil_mode);
    absl::StatusOr<Tensor> actual = RunOnce(op, 12, {&x}, attrs);
    ASSERT_TRUE(actual.ok()) << actual.status();
    Tensor expected;
    ASSERT_TRUE(reference::Pool(x, pool, expected, nullptr).ok());
    EXPECT_TRUE(TensorsNear(*actual, expected, 1e-5, 1e-5));
  }
}

TEST(PoolTest, OneDnnRunsTheCommonCases) {
  std::mt19937 rng(2);
  const Tensor x = RandomTensor(DataType::kFloat32, Shape{2, 3, 6, 7}, rng);
  const std::vector<std::pair<const char*, Attributes>> cases = {
      {"MaxPool", {{"kernel_shape", IntsAttr({3, 3})}, {"strides", IntsAttr({2, 2})}}},
      {"MaxPool",
       {{"kernel_shape", IntsAttr({3, 2})},
        {"ceil_mode", IntAttr(1)},
        {"strides", IntsAttr({2, 2})}}},
      {"MaxPool", {{"kernel_shape", IntsAttr({2, 2})}, {"dilations", IntsAttr({2, 2})}}},
      {"AveragePool", {{"kernel_shape", IntsAttr({3, 3})}, {"pads", IntsAttr({1, 1, 1, 1})}}},
      {"AveragePool",
       {{"kernel_shape", IntsAttr({3, 3})},
        {"pads", IntsAttr({1, 1, 1, 1})},
        {"count_include_pad", IntAttr(1)}}},
      {"GlobalMaxPool", {}},
      {"GlobalAveragePool", {}},
  };
  for (const auto& [op, attrs] : cases) {
    SCOPED_TRACE(op);
    const int64_t created = DnnlPrimitiveCreationCount();
    absl::StatusOr<Tensor> y = RunOnce(op, 12, {&x}, attrs);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ(DnnlPrimitiveCreationCount(), created + 1);
  }
}

TEST(PoolTest, GlobalPoolsMatchReference) {
  std::mt19937 rng(9);
  for (int trial = 0; trial < 30; ++trial) {
    const Shape shape = RandomShape(rng, 3, 6, 5);
    const bool max = trial % 2;
    const DataType type = trial % 5 == 0 ? DataType::kFloat64 : DataType::kFloat32;
    const Tensor x = RandomTensor(type, shape, rng);
    SCOPED_TRACE(shape.ToString());
    absl::StatusOr<Tensor> actual = RunOnce(max ? "GlobalMaxPool" : "GlobalAveragePool", 1, {&x});
    if (shape.NumElements(0, 2) > 0 && shape.NumElements(2, shape.rank()) == 0) {
      EXPECT_EQ(actual.status().code(), absl::StatusCode::kInvalidArgument);
      continue;
    }
    ASSERT_TRUE(actual.ok()) << actual.status();
    Tensor expected;
    ASSERT_TRUE(reference::GlobalPool(
                    max ? reference::PoolKind::kMax : reference::PoolKind::kAverage, x, expected)
                    .ok());
    EXPECT_TRUE(TensorsNear(*actual, expected, 1e-5, 1e-6));
  }
}

TEST(PoolSpecTest, ValuesByHand) {
  const Tensor x = MakeTensor<float>({1, 1, 4, 4}, Iota(16, 1));
  // test_maxpool_2d_ceil / test_averagepool_2d_ceil.
  const Attributes ceil = {
      {"kernel_shape", IntsAttr({3, 3})}, {"strides", IntsAttr({2, 2})}, {"ceil_mode", IntAttr(1)}};
  absl::StatusOr<Tensor> max = RunOnce("MaxPool", 12, {&x}, ceil);
  ASSERT_TRUE(max.ok()) << max.status();
  EXPECT_TRUE(TensorsNear(*max, MakeTensor<float>({1, 1, 2, 2}, {11, 12, 15, 16})));
  absl::StatusOr<Tensor> avg = RunOnce("AveragePool", 11, {&x}, ceil);
  ASSERT_TRUE(avg.ok()) << avg.status();
  EXPECT_TRUE(TensorsNear(*avg, MakeTensor<float>({1, 1, 2, 2}, {6, 7.5f, 12, 13.5f})));
  // test_maxpool_2d_dilations.
  absl::StatusOr<Tensor> dilated = RunOnce(
      "MaxPool", 12, {&x}, {{"kernel_shape", IntsAttr({2, 2})}, {"dilations", IntsAttr({2, 2})}});
  ASSERT_TRUE(dilated.ok()) << dilated.status();
  EXPECT_TRUE(TensorsNear(*dilated, MakeTensor<float>({1, 1, 2, 2}, {11, 12, 15, 16})));
  // count_include_pad: the corner window holds 1, 2, 5, 6 and five pads.
  const Attributes padded = {{"kernel_shape", IntsAttr({3, 3})},
                             {"pads", IntsAttr({1, 1, 1, 1})},
                             {"strides", IntsAttr({3, 3})},
                             {"count_include_pad", IntAttr(1)}};
  absl::StatusOr<Tensor> include = RunOnce("AveragePool", 11, {&x}, padded);
  ASSERT_TRUE(include.ok()) << include.status();
  EXPECT_TRUE(TensorsNear(
      *include, MakeTensor<float>({1, 1, 2, 2}, {14.0f / 9, 22.0f / 9, 46.0f / 9, 54.0f / 9})));
  // Global pools.
  absl::StatusOr<Tensor> gavg = RunOnce("GlobalAveragePool", 1, {&x});
  ASSERT_TRUE(gavg.ok()) << gavg.status();
  EXPECT_TRUE(TensorsNear(*gavg, MakeTensor<float>({1, 1, 1, 1}, {8.5f})));
  // LpPool p = 2 over [3, 4]: 5.
  const Tensor v = MakeTensor<float>({1, 1, 2}, {3, -4});
  absl::StatusOr<Tensor> lp = RunOnce("LpPool", 11, {&v}, {{"kernel_shape", IntsAttr({2})}});
  ASSERT_TRUE(lp.ok()) << lp.status();
  EXPECT_TRUE(TensorsNear(*lp, MakeTensor<float>({1, 1, 1}, {5})));
}

TEST(PoolSpecTest, MaxPoolIndices) {
  const Tensor x = MakeTensor<float>({1, 1, 5, 5}, Iota(25, 1));
  // test_maxpool_with_argmax_2d_precomputed_pads.
  absl::StatusOr<std::vector<Tensor>> padded =
      RunOnceOutputs("MaxPool", 12, {&x},
                     {{"kernel_shape", IntsAttr({5, 5})}, {"pads", IntsAttr({2, 2, 2, 2})}}, 2);
  ASSERT_TRUE(padded.ok()) << padded.status();
  EXPECT_TRUE(TensorsNear(
      (*padded)[0],
      MakeTensor<float>({1, 1, 5, 5}, {13, 14, 15, 15, 15, 18, 19, 20, 20, 20, 23, 24, 25,
                                       25, 25, 23, 24, 25, 25, 25, 23, 24, 25, 25, 25})));
  EXPECT_TRUE(TensorsNear(
      (*padded)[1],
      MakeTensor<int64_t>({1, 1, 5, 5}, {12, 13, 14, 14, 14, 17, 18, 19, 19, 19, 22, 23, 24,
                                         24, 24, 22, 23, 24, 24, 24, 22, 23, 24, 24, 24})));
  // test_maxpool_with_argmax_2d_precomputed_strides: column-major indices.
  absl::StatusOr<std::vector<Tensor>> strided = RunOnceOutputs("MaxPool", 12, {&x},
                                                               {{"kernel_shape", IntsAttr({2, 2})},
                                                                {"strides", IntsAttr({2, 2})},
                                                                {"storage_order", IntAttr(1)}},
                                                               2);
  ASSERT_TRUE(strided.ok()) << strided.status();
  EXPECT_TRUE(TensorsNear((*strided)[0], MakeTensor<float>({1, 1, 2, 2}, {7, 9, 17, 19})));
  EXPECT_TRUE(TensorsNear((*strided)[1], MakeTensor<int64_t>({1, 1, 2, 2}, {6, 16, 8, 18})));
}

TEST(PoolSpecTest, EmptyAndInvalid) {
  const Tensor empty(DataType::kFloat32, Shape{0, 3, 4, 4});
  absl::StatusOr<Tensor> y = RunOnce("MaxPool", 12, {&empty}, {{"kernel_shape", IntsAttr({2, 2})}});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (Shape{0, 3, 3, 3}));
  absl::StatusOr<Tensor> g = RunOnce("GlobalAveragePool", 1, {&empty});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->shape(), (Shape{0, 3, 1, 1}));

  const Tensor x = MakeTensor<float>({1, 1, 4, 4}, Iota(16));
  const std::vector<Attributes> hostile = {
      {},                                                                      // no kernel_shape
      {{"kernel_shape", IntsAttr({0, 2})}},                                    // empty kernel
      {{"kernel_shape", IntsAttr({100, 100})}},                                // kernel > input
      {{"kernel_shape", IntsAttr({2, 2})}, {"pads", IntsAttr({2, 0, 0, 0})}},  // pad >= kernel
      {{"kernel_shape", IntsAttr({2, 2})}, {"pads", IntsAttr({-1, 0, 0, 0})}},
      {{"kernel_shape", IntsAttr({2, 2})}, {"strides", IntsAttr({0, 0})}},
      {{"kernel_shape", IntsAttr({2, 2, 2})}},  // rank mismatch
      {{"kernel_shape", IntsAttr({2, 2})}, {"storage_order", IntAttr(2)}},
  };
  for (const Attributes& attrs : hostile) {
    absl::StatusOr<Tensor> r = RunOnce("MaxPool", 12, {&x}, attrs);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  }
  const Tensor ints = MakeTensor<int32_t>({1, 1, 2, 2}, {1, 2, 3, 4});
  EXPECT_EQ(
      RunOnce("AveragePool", 11, {&ints}, {{"kernel_shape", IntsAttr({2, 2})}}).status().code(),
      absl::StatusCode::kInvalidArgument);
  const Tensor no_spatial(DataType::kFloat32, Shape{1, 2, 0});
  EXPECT_EQ(RunOnce("GlobalMaxPool", 1, {&no_spatial}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace loopserve::engine::testing
