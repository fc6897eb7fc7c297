// RecycledBuffers (engine/runtime/recycled_buffers.h), the execution frame's free buffers in
// capacity order: Take returns the smallest buffer at least as large as asked (the same buffer a
// scan for the best fit finds, checked against one over random puts and takes), the oldest among
// equals, nothing when all are smaller; buffers keep their memory through Put and Take; and a
// steady cycle of puts and takes allocates nothing once warm.

#include "engine/runtime/recycled_buffers.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/engine/operator_new_counter.h"

namespace loopserve::engine {
namespace {

Tensor Buffer(int64_t floats) { return Tensor(DataType::kFloat32, Shape{floats}); }

TEST(RecycledBuffersTest, TakesTheSmallestLargeEnough) {
  RecycledBuffers buffers;
  EXPECT_TRUE(buffers.empty());
  for (const int64_t floats : {64, 16, 256, 32}) buffers.Put(Buffer(floats));
  EXPECT_EQ(buffers.size(), 4u);
  Tensor out;
  ASSERT_TRUE(buffers.Take(100, &out));  // 32 floats = 128 bytes is the best fit
  EXPECT_EQ(out.capacity(), Buffer(32).capacity());
  ASSERT_TRUE(buffers.Take(Buffer(64).capacity(), &out));  // exactly the size asked
  EXPECT_EQ(out.capacity(), Buffer(64).capacity());
  Tensor untouched = Buffer(3);
  const void* memory = untouched.raw_data();
  EXPECT_FALSE(buffers.Take(Buffer(256).capacity() + 1, &untouched));  // all smaller
  EXPECT_EQ(untouched.raw_data(), memory);
  EXPECT_EQ(buffers.size(), 2u);
  ASSERT_TRUE(buffers.Take(1, &out));
  EXPECT_EQ(out.capacity(), Buffer(16).capacity());
  ASSERT_TRUE(buffers.Take(1, &out));
  EXPECT_EQ(out.capacity(), Buffer(256).capacity());
  EXPECT_TRUE(buffers.empty());
  EXPECT_FALSE(buffers.Take(1, &out));
}

TEST(RecycledBuffersTest, KeepsTheMemoryAndTakesTheOldestOfEquals) {
  RecycledBuffers buffers;
  Tensor first = Buffer(40);
  Tensor second = Buffer(40);
  const void* first_memory = first.raw_data();
  const void* second_memory = second.raw_data();
  buffers.Put(std::move(first));
  buffers.Put(std::move(second));
  Tensor out;
  ASSERT_TRUE(buffers.Take(1, &out));
  EXPECT_EQ(out.raw_data(), first_memory);
  ASSERT_TRUE(buffers.Take(1, &out));
  EXPECT_EQ(out.raw_data(), second_memory);
}

// Random puts and takes against the linear best-fit scan the frame used before (a list of
// capacities: the smallest >= wanted).
TEST(RecycledBuffersTest, MatchesABestFitScan) {
  std::mt19937 rng(27);
  RecycledBuffers buffers;
  std::vector<size_t> model;
  for (int step = 0; step < 4000; ++step) {
    if (model.empty() || rng() % 2 == 0) {
      Tensor t = Buffer(1 + static_cast<int64_t>(rng() % 300));
      model.push_back(t.capacity());
      buffers.Put(std::move(t));
    } else {
      const size_t wanted = 1 + rng() % (Buffer(320).capacity());
      size_t best = model.size();
      for (size_t i = 0; i < model.size(); ++i) {
        if (model[i] >= wanted && (best == model.size() || model[i] < model[best])) best = i;
      }
      Tensor out;
      const bool taken = buffers.Take(wanted, &out);
      ASSERT_EQ(taken, best != model.size()) << "step " << step;
      if (!taken) continue;
      ASSERT_EQ(out.capacity(), model[best]) << "step " << step;
      model.erase(model.begin() + static_cast<std::ptrdiff_t>(best));
    }
    ASSERT_EQ(buffers.size(), model.size());
  }
}

// A frame's steady state: the same buffers released and taken every run. After the first round
// the bookkeeping has all the room it needs.
TEST(RecycledBuffersTest, SteadyStateAllocatesNothing) {
  RecycledBuffers buffers;
  std::vector<Tensor> live;
  for (const int64_t floats : {512, 64, 4096, 64, 1024, 8}) live.push_back(Buffer(floats));
  auto round = [&] {
    for (Tensor& t : live) buffers.Put(std::move(t));
    for (Tensor& t : live) ASSERT_TRUE(buffers.Take(1, &t));
  };
  round();
  const int64_t before = OperatorNewCount();
  for (int i = 0; i < 10; ++i) round();
  EXPECT_EQ(OperatorNewCount(), before);
}

}  // namespace
}  // namespace loopserve::engine
