#include "engine/kernels/registry.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loopserve::engine {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<std::unique_ptr<Kernel>> NoKernel(const KernelInit&) {
  return absl::UnimplementedError("test factory");
}

TEST(KernelRegistryTest, BuiltinTableHasNoOverlaps) {
  const KernelRegistry& registry = KernelRegistry::Builtin();
  EXPECT_TRUE(registry.status().ok()) << registry.status();
  EXPECT_NE(registry.Find("Loop", 16), nullptr);
  EXPECT_NE(registry.Find("MatMul", 13), nullptr);
  EXPECT_EQ(registry.Find("NoSuchOp", 13), nullptr);
}

TEST(KernelRegistryTest, DisjointOpsetRangesAreFine) {
  KernelRegistry registry;
  registry.Register("Op", NoKernel, 1, 6);
  registry.Register("Op", NoKernel, 7, 12);
  registry.Register("Op", NoKernel, 13);
  EXPECT_TRUE(registry.status().ok()) << registry.status();
  EXPECT_NE(registry.Find("Op", 6), nullptr);
  EXPECT_NE(registry.Find("Op", 7), nullptr);
  EXPECT_NE(registry.Find("Op", 20), nullptr);
  EXPECT_NE(registry.Find("Op", 6), registry.Find("Op", 7));
  EXPECT_EQ(registry.Find("Op", 0), nullptr);
}

TEST(KernelRegistryTest, OverlappingOpsetRangesAreAnError) {
  KernelRegistry registry;
  registry.Register("Op", NoKernel, 1, 12);
  registry.Register("Op", NoKernel, 11);
  EXPECT_EQ(registry.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(registry.status().message()),
              HasSubstr("'Op' registered twice for overlapping opsets [1, 12] and [11, ...]"));
  // The first registration stays; the conflicting one is dropped.
  EXPECT_NE(registry.Find("Op", 12), nullptr);
  EXPECT_EQ(registry.Find("Op", 13), nullptr);
}

TEST(KernelRegistryTest, SameRangeTwiceIsAnError) {
  KernelRegistry registry;
  registry.Register("Add", NoKernel);
  registry.Register("Add", NoKernel);
  EXPECT_FALSE(registry.status().ok());
}

}  // namespace
}  // namespace loopserve::engine
