#pragma once

// Status propagation macros. Abseil 20220623 ships none, so we keep these two.

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define LS_STATUS_CONCAT_INNER_(a, b) a##b
#define LS_STATUS_CONCAT_(a, b) LS_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status) and returns it from the enclosing function if not OK.
#define LS_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::absl::Status ls_status_ = (expr);      \
    if (!ls_status_.ok()) return ls_status_; \
  } while (0)

// `LS_ASSIGN_OR_RETURN(auto x, Foo());` declares/assigns `x` from an absl::StatusOr, or returns
// its status from the enclosing function.
#define LS_ASSIGN_OR_RETURN(lhs, rexpr) \
  LS_ASSIGN_OR_RETURN_IMPL_(LS_STATUS_CONCAT_(ls_statusor_, __LINE__), lhs, rexpr)

#define LS_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr)    \
  auto statusor = (rexpr);                                 \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

namespace loopserve {

// Returns `status` with `prefix` prepended to its message (same code). OK stays OK.
absl::Status Annotate(const absl::Status& status, absl::string_view prefix);

}  // namespace loopserve
