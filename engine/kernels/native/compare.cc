// Comparisons (Equal, Less, Greater, LessOrEqual, GreaterOrEqual) and logical ops (Not, And, Or,
// Xor). All produce bool; binary ones broadcast (numpy rules, or the "broadcast"/"axis"
// attributes before opset 7).

#include "engine/kernels/native/elementwise.h"
#include "engine/kernels/native/register_families.h"

namespace loopserve::engine::native {
namespace {

struct ComparePolicy {
  template <typename T>
  using Out = bool;
};

// Equal also compares bools; the ordering comparisons take numbers only.
struct EqualOp : ComparePolicy {
  template <typename T>
  static constexpr bool Accepts() {
    return true;
  }
  template <typename T>
  static bool Apply(T a, T b) {
    return a == b;
  }
};
struct LessOp : ComparePolicy {
  template <typename T>
  static constexpr bool Accepts() {
    return !kIsBool<T>;
  }
  template <typename T>
  static bool Apply(T a, T b) {
    return a < b;
  }
};
struct GreaterOp : ComparePolicy {
  template <typename T>
  static constexpr bool Accepts() {
    return !kIsBool<T>;
  }
  template <typename T>
  static bool Apply(T a, T b) {
    return a > b;
  }
};
struct LessOrEqualOp : ComparePolicy {
  template <typename T>
  static constexpr bool Accepts() {
    return !kIsBool<T>;
  }
  template <typename T>
  static bool Apply(T a, T b) {
    return a <= b;
  }
};
struct GreaterOrEqualOp : ComparePolicy {
  template <typename T>
  static constexpr bool Accepts() {
    return !kIsBool<T>;
  }
  template <typename T>
  static bool Apply(T a, T b) {
    return a >= b;
  }
};

struct LogicalPolicy {
  template <typename T>
  using Out = bool;
  template <typename T>
  static constexpr bool Accepts() {
    return kIsBool<T>;
  }
};
struct AndOp : LogicalPolicy {
  static bool Apply(bool a, bool b) { return a && b; }
};
struct OrOp : LogicalPolicy {
  static bool Apply(bool a, bool b) { return a || b; }
};
struct XorOp : LogicalPolicy {
  static bool Apply(bool a, bool b) { return a != b; }
};
struct NotOp : LogicalPolicy {
  static bool Apply(bool a) { return !a; }
};

// Registers a binary op whose opsets below 7 use the legacy broadcast attributes.
template <typename Op>
void RegisterBinary(KernelRegistry& registry, const char* name, int since) {
  if (since < 7) registry.Register(name, FactoryOf<BinaryKernel<Op>>(true), since, 6);
  registry.Register(name, FactoryOf<BinaryKernel<Op>>(false), std::max(since, 7));
}

}  // namespace

void RegisterCompareKernels(KernelRegistry& registry) {
  RegisterBinary<EqualOp>(registry, "Equal", 1);
  RegisterBinary<LessOp>(registry, "Less", 1);
  RegisterBinary<GreaterOp>(registry, "Greater", 1);
  RegisterBinary<LessOrEqualOp>(registry, "LessOrEqual", 12);
  RegisterBinary<GreaterOrEqualOp>(registry, "GreaterOrEqual", 12);
  RegisterBinary<AndOp>(registry, "And", 1);
  RegisterBinary<OrOp>(registry, "Or", 1);
  RegisterBinary<XorOp>(registry, "Xor", 1);
  registry.Register("Not", FactoryOf<UnaryKernel<NotOp>>());
}

}  // namespace loopserve::engine::native
