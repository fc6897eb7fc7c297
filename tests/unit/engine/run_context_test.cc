#include "engine/runtime/run_context.h"

#include "gtest/gtest.h"

namespace loopserve::engine {
namespace {

struct CountingResource : RunResource {
  CountingResource() { ++created; }
  ~CountingResource() override { ++destroyed; }
  int value = 0;
  static inline int created = 0;
  static inline int destroyed = 0;
};

struct OtherResource : RunResource {
  int value = 7;
};

TEST(RunContextTest, ResourceIsCreatedOncePerRunAndDestroyedWithIt) {
  const int created = CountingResource::created;
  const int destroyed = CountingResource::destroyed;
  {
    RunContext run{RunOptions()};
    CountingResource& first = run.Resource<CountingResource>();
    first.value = 42;
    CountingResource& again = run.Resource<CountingResource>();
    EXPECT_EQ(&first, &again);
    EXPECT_EQ(again.value, 42);
    // Another type has its own slot.
    EXPECT_EQ(run.Resource<OtherResource>().value, 7);
    EXPECT_EQ(run.Resource<CountingResource>().value, 42);
    EXPECT_EQ(CountingResource::created, created + 1);
  }
  EXPECT_EQ(CountingResource::destroyed, destroyed + 1);
  // A new run starts with a fresh resource.
  RunContext next{RunOptions()};
  EXPECT_EQ(next.Resource<CountingResource>().value, 0);
  EXPECT_EQ(CountingResource::created, created + 2);
}

}  // namespace
}  // namespace loopserve::engine
