#include "engine/ir/eltwise_fn.h"

#include <cstring>

namespace loopserve::engine {
namespace {

struct Row {
  const char* name;
  uint32_t flags;
};

constexpr Row kEltwiseRows[] = {
#define LS_ELTWISE_ROW(e, name, flags, expr) {name, flags},
    LS_ELTWISE_FNS(LS_ELTWISE_ROW)
#undef LS_ELTWISE_ROW
};
static_assert(sizeof(kEltwiseRows) / sizeof(kEltwiseRows[0]) == kNumEltwiseFns);

constexpr Row kArithRows[] = {
#define LS_ARITH_ROW(e, name, flags, expr) {name, flags},
    LS_ARITH_OPS(LS_ARITH_ROW)
#undef LS_ARITH_ROW
};
static_assert(sizeof(kArithRows) / sizeof(kArithRows[0]) == kNumArithOps);

// The index of the row named `name` with `flag`, or -1.
template <size_t N>
int Find(const Row (&rows)[N], const char* name, uint32_t flag) {
  for (size_t i = 0; i < N; ++i) {
    if ((rows[i].flags & flag) != 0 && std::strcmp(rows[i].name, name) == 0) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

}  // namespace

const char* EltwiseFnName(EltwiseFn fn) {
  const int i = static_cast<int>(fn);
  return i < kNumEltwiseFns ? kEltwiseRows[i].name : "?";
}

uint32_t EltwiseFnFlags(EltwiseFn fn) {
  const int i = static_cast<int>(fn);
  return i < kNumEltwiseFns ? kEltwiseRows[i].flags : 0;
}

const char* ArithOpName(ArithOp op) {
  const int i = static_cast<int>(op);
  return i < kNumArithOps ? kArithRows[i].name : "?";
}

uint32_t ArithOpFlags(ArithOp op) {
  const int i = static_cast<int>(op);
  return i < kNumArithOps ? kArithRows[i].flags : 0;
}

bool EltwiseFnOfOp(const char* op_type, uint32_t flag, EltwiseFn* fn) {
  const int i = Find(kEltwiseRows, op_type, flag);
  if (i < 0) return false;
  *fn = static_cast<EltwiseFn>(i);
  return true;
}

bool ArithOpOfOp(const char* op_type, uint32_t flag, ArithOp* op) {
  const int i = Find(kArithRows, op_type, flag);
  if (i < 0) return false;
  *op = static_cast<ArithOp>(i);
  return true;
}

}  // namespace loopserve::engine
