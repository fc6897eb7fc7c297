#include "engine/tensor/tensor.h"

#include "engine/tensor/memory_budget.h"
#include "engine/tensor/scalar_like.h"
#include "engine/tensor/shape.h"
#include "engine/tensor/value.h"
#include "gtest/gtest.h"

namespace loopserve::engine {
namespace {

TEST(ShapeTest, ValidateDimsRejectsNegativeAndOverflow) {
  EXPECT_TRUE(ValidateDims({2, 3}, "t").ok());
  EXPECT_TRUE(ValidateDims({0, 1 << 30}, "t").ok());
  EXPECT_EQ(ValidateDims({2, -1}, "t").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateDims({int64_t{1} << 32, int64_t{1} << 32}, "t").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ShapeTest, LongShapesAreAbbreviated) {
  EXPECT_EQ(DimsToString({2, -1, 3}), "[2,?,3]");
  const std::vector<int64_t> dims(200001, 1);
  const std::string text = DimsToString(dims);
  EXPECT_EQ(text, "[1,1,1,1,1,1,1,1,1,1,1,1,1,1,...,1,1] (rank 200001)");
  auto status = ValidateDims(std::vector<int64_t>(100, int64_t{1} << 20), "input 'x'").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(status.message().size(), 200u);
}

// ONNX Runtime's leniency: [1] fed for a declared scalar, or a scalar for a declared [1], and
// nothing else (other one-element shapes, dynamic dims, longer vectors stay mismatches).
TEST(ShapeTest, ScalarLikeMatchIsOnlyScalarAndVectorOfOne) {
  EXPECT_TRUE(IsScalarLikeMatch(Shape{1}, {}));
  EXPECT_TRUE(IsScalarLikeMatch(Shape{}, {1}));
  EXPECT_FALSE(IsScalarLikeMatch(Shape{}, {}));    // already equal: nothing to adopt
  EXPECT_FALSE(IsScalarLikeMatch(Shape{1}, {1}));  // likewise
  EXPECT_FALSE(IsScalarLikeMatch(Shape{2}, {}));
  EXPECT_FALSE(IsScalarLikeMatch(Shape{1, 1}, {}));
  EXPECT_FALSE(IsScalarLikeMatch(Shape{}, {1, 1}));
  EXPECT_FALSE(IsScalarLikeMatch(Shape{}, {-1}));
  EXPECT_FALSE(IsScalarLikeMatch(Shape{}, {2}));
  EXPECT_FALSE(IsScalarLikeMatch(Shape{0}, {}));
}

// Every owned buffer is charged to the thread's budget and credited when freed; an allocation past
// the limit throws before anything is allocated, and the budget is untouched by it.
TEST(MemoryBudgetTest, ChargesAllocationsAndRefusesPastTheLimit) {
  MemoryBudget budget(1 << 20);
  {
    ScopedMemoryBudget scope(&budget);
    const int64_t allocations = TensorAllocationCount();
    Tensor a(DataType::kFloat32, Shape{1000});  // 4000 bytes, rounded to 64
    EXPECT_EQ(budget.used(), 4032);
    Tensor b(DataType::kUint8, Shape{100});
    EXPECT_EQ(budget.used(), 4032 + 128);
    EXPECT_THROW(Tensor(DataType::kFloat32, Shape{1 << 20}), MemoryBudgetExceeded);
    EXPECT_EQ(budget.used(), 4032 + 128);
    EXPECT_EQ(TensorAllocationCount(), allocations + 3);
    b = Tensor();
    EXPECT_EQ(budget.used(), 4032);
    // A move keeps the charge with the buffer; an absurd shape fails as out of memory instead of
    // wrapping around to a small buffer.
    Tensor c = std::move(a);
    EXPECT_EQ(budget.used(), 4032);
    EXPECT_THROW(c.Resize(DataType::kFloat32, Shape{int64_t{1} << 32, int64_t{1} << 32}),
                 std::bad_alloc);
    EXPECT_EQ(budget.used(), 0);
    EXPECT_EQ(budget.peak(), 4032 + 128);
  }
  EXPECT_EQ(CurrentMemoryBudget(), nullptr);
  // Without a budget nothing is charged, and a tensor freed outside its budget's scope is fine.
  Tensor d(DataType::kFloat32, Shape{10});
  EXPECT_EQ(budget.used(), 0);
  EXPECT_THROW(Tensor(DataType::kInt64, Shape{int64_t{1} << 40, 1 << 10}), std::bad_alloc);
}

TEST(ShapeTest, BroadcastFollowsNumpy) {
  auto s = BroadcastShapes(Shape{2, 1, 3}, Shape{4, 1});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, (Shape{2, 4, 3}));
  EXPECT_FALSE(BroadcastShapes(Shape{2, 3}, Shape{4}).ok());
  EXPECT_EQ(*BroadcastShapes(Shape{}, Shape{5}), Shape{5});
}

TEST(ShapeTest, NormalizeAxis) {
  EXPECT_EQ(*NormalizeAxis(-1, 3), 2);
  EXPECT_EQ(*NormalizeAxis(0, 3), 0);
  EXPECT_FALSE(NormalizeAxis(3, 3).ok());
  EXPECT_FALSE(NormalizeAxis(-4, 3).ok());
}

TEST(TensorTest, ResizeReusesCapacity) {
  Tensor t(DataType::kFloat32, Shape{16});
  const void* data = t.raw_data();
  const int64_t allocations = TensorAllocationCount();
  t.Resize(DataType::kInt32, Shape{4, 2});
  EXPECT_EQ(t.raw_data(), data);
  t.Resize(DataType::kFloat32, Shape{16});
  EXPECT_EQ(TensorAllocationCount(), allocations);
  t.Resize(DataType::kFloat64, Shape{1000});
  EXPECT_EQ(TensorAllocationCount(), allocations + 1);
}

// A freed buffer of 256 KB or more is kept and handed to the next tensor of about its size (no new
// pages from the kernel); one more than twice as large is not handed to a small request; the limit
// bounds what is kept and 0 frees it all.
TEST(TensorTest, LargeBuffersAreReused) {
  SetTensorBufferCacheBytes(0);
  SetTensorBufferCacheBytes(kDefaultTensorBufferCacheBytes);
  const void* first = nullptr;
  {
    Tensor big(DataType::kFloat32, Shape{1 << 20});  // 4 MB
    first = big.raw_data();
  }
  EXPECT_GE(TensorBufferCachedBytes(), size_t{4} << 20);
  {
    Tensor small(DataType::kFloat32, Shape{3 << 17});  // 1.5 MB: the 4 MB block would waste >half
    EXPECT_NE(small.raw_data(), first);
    Tensor again(DataType::kFloat32, Shape{(1 << 20) - 16});
    EXPECT_EQ(again.raw_data(), first);
    again.mutable_data<float>()[(1 << 20) - 17] = 1.0f;  // the whole buffer is usable
  }
  // Under 1 MB too: a 1,024,000-byte buffer (a [2000, 128] float scan output) is kept.
  SetTensorBufferCacheBytes(0);
  SetTensorBufferCacheBytes(kDefaultTensorBufferCacheBytes);
  { Tensor t(DataType::kFloat32, Shape{256000}); }
  EXPECT_GE(TensorBufferCachedBytes(), size_t{1024000});
  {
    Tensor again(DataType::kFloat32, Shape{256000});
    EXPECT_EQ(TensorBufferCachedBytes(), 0u);  // taken from the cache
  }
  SetTensorBufferCacheBytes(size_t{5} << 20);
  EXPECT_LE(TensorBufferCachedBytes(), size_t{5} << 20);
  SetTensorBufferCacheBytes(0);
  EXPECT_EQ(TensorBufferCachedBytes(), 0u);
  { Tensor big(DataType::kFloat32, Shape{1 << 20}); }
  EXPECT_EQ(TensorBufferCachedBytes(), 0u);
  SetTensorBufferCacheBytes(kDefaultTensorBufferCacheBytes);
}

TEST(TensorTest, ViewIsReplacedByOwnedBufferOnResize) {
  const float source[2] = {1, 2};
  Tensor v = Tensor::View(DataType::kFloat32, Shape{2}, source);
  EXPECT_TRUE(v.is_view());
  EXPECT_EQ(v.capacity(), 0u);
  v.Resize(DataType::kFloat32, Shape{2});
  EXPECT_FALSE(v.is_view());
  EXPECT_NE(v.raw_data(), static_cast<const void*>(source));
}

TEST(TensorTest, ResizeKeepingDataPreservesPrefix) {
  Tensor t(DataType::kInt64, Shape{2});
  t.mutable_data<int64_t>()[0] = 7;
  t.mutable_data<int64_t>()[1] = 9;
  t.ResizeKeepingData(Shape{100}, 0);
  EXPECT_EQ(t.data<int64_t>()[0], 7);
  EXPECT_EQ(t.data<int64_t>()[1], 9);
  EXPECT_GE(t.capacity(), 800u);
}

TEST(TensorTest, CopyFromAndSwapValues) {
  Tensor a(DataType::kInt32, Shape{3});
  for (int i = 0; i < 3; ++i) a.mutable_data<int32_t>()[i] = i + 1;
  Value va(std::move(a));
  Value vb;
  vb.CopyFrom(va);
  EXPECT_EQ(vb.tensor().data<int32_t>()[2], 3);
  EXPECT_NE(vb.tensor().raw_data(), va.tensor().raw_data());
  const void* pa = va.tensor().raw_data();
  swap(va, vb);
  EXPECT_EQ(vb.tensor().raw_data(), pa);
}

// Strings long enough to live on the heap (past libstdc++'s 15-byte inline buffer), so a byte copy
// or a missed destructor would show as a double free or a leak under ASan/valgrind.
std::string Long(char c) { return std::string(40, c); }

TEST(StringTensorTest, ResizeConstructsEmptyStringsAndReleasesThem) {
  Tensor t(DataType::kString, Shape{3});
  ASSERT_EQ(t.dtype(), DataType::kString);
  for (const std::string& s : t.span<std::string>()) EXPECT_TRUE(s.empty());
  t.mutable_data<std::string>()[1] = Long('a');
  // Same size again: the old strings are destroyed and fresh empty ones made.
  t.Resize(DataType::kString, Shape{3});
  EXPECT_TRUE(t.data<std::string>()[1].empty());
  t.mutable_data<std::string>()[2] = Long('b');
  // Another element type: the strings go before the buffer is reused as bytes.
  t.Resize(DataType::kFloat32, Shape{3});
  t.mutable_data<float>()[0] = 1.5f;
  EXPECT_EQ(t.data<float>()[0], 1.5f);
}

TEST(StringTensorTest, CopyFromIsDeepAndResizeKeepingDataMovesStrings) {
  Tensor a(DataType::kString, Shape{2});
  a.mutable_data<std::string>()[0] = Long('x');
  a.mutable_data<std::string>()[1] = "y";
  Tensor b;
  b.CopyFrom(a);
  a.mutable_data<std::string>()[0] = "changed";
  EXPECT_EQ(b.data<std::string>()[0], Long('x'));
  EXPECT_EQ(b.data<std::string>()[1], "y");
  // Grow past the capacity (reallocation moves the strings), then within it, then shrink.
  b.ResizeKeepingData(Shape{64}, 0);
  EXPECT_EQ(b.data<std::string>()[0], Long('x'));
  EXPECT_TRUE(b.data<std::string>()[63].empty());
  b.mutable_data<std::string>()[63] = Long('z');
  b.ResizeKeepingData(Shape{1}, 0);
  EXPECT_EQ(b.data<std::string>()[0], Long('x'));
  b.ResizeKeepingData(Shape{3}, 0);
  EXPECT_TRUE(b.data<std::string>()[2].empty());
}

TEST(StringTensorTest, MovesSwapsAndViews) {
  Tensor a(DataType::kString, Shape{1});
  a.mutable_data<std::string>()[0] = Long('m');
  Tensor view = Tensor::ViewOf(a);
  EXPECT_EQ(view.data<std::string>()[0], Long('m'));
  Tensor moved = std::move(a);
  EXPECT_EQ(moved.data<std::string>()[0], Long('m'));
  Tensor other(DataType::kString, Shape{2});
  swap(moved, other);
  EXPECT_EQ(other.data<std::string>()[0], Long('m'));
  EXPECT_EQ(moved.NumElements(), 2);
  Value v(std::move(other));
  Value w;
  w.CopyFrom(v);
  EXPECT_EQ(w.tensor().data<std::string>()[0], Long('m'));
  // CopyElements assigns strings element by element.
  Tensor dst(DataType::kString, Shape{3});
  CopyElements(DataType::kString, w.tensor().raw_data(), 0, dst.mutable_raw_data(), 2, 1);
  EXPECT_EQ(dst.data<std::string>()[2], Long('m'));
  EXPECT_EQ(dst.DebugString(), "string[3]{\"\", \"\", \"" + Long('m') + "\"}");
}

}  // namespace
}  // namespace loopserve::engine
