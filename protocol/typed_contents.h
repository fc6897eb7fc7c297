#pragma once

#include "absl/strings/string_view.h"
#include "proto/grpc_service.pb.h"
#include "protocol/datatype.h"

// InferTensorContents, the gRPC protocol's typed (non-raw) tensor fields, by ContentsField.
namespace loopserve::protocol {

// "int_contents" for kInt, ...; "" for kNone.
absl::string_view ContentsFieldName(ContentsField field);

// The first field of `contents` (in the proto's order) that holds elements and is not `except`;
// kNone when there is none. With `except` kNone: whether any typed field holds elements.
ContentsField OtherFilledField(const inference::InferTensorContents& contents,
                               ContentsField except);

// Calls `f(field)` with the repeated numeric field (bool included) that `field` names and returns
// true; false without calling `f` for kBytes and kNone.
template <typename F>
bool VisitContents(const inference::InferTensorContents& c, ContentsField field, F&& f) {
  switch (field) {
    case ContentsField::kBool:
      f(c.bool_contents());
      return true;
    case ContentsField::kInt:
      f(c.int_contents());
      return true;
    case ContentsField::kInt64:
      f(c.int64_contents());
      return true;
    case ContentsField::kUint:
      f(c.uint_contents());
      return true;
    case ContentsField::kUint64:
      f(c.uint64_contents());
      return true;
    case ContentsField::kFp32:
      f(c.fp32_contents());
      return true;
    case ContentsField::kFp64:
      f(c.fp64_contents());
      return true;
    default:
      return false;
  }
}

// As VisitContents, with the mutable field.
template <typename F>
bool VisitMutableContents(inference::InferTensorContents* c, ContentsField field, F&& f) {
  switch (field) {
    case ContentsField::kBool:
      f(c->mutable_bool_contents());
      return true;
    case ContentsField::kInt:
      f(c->mutable_int_contents());
      return true;
    case ContentsField::kInt64:
      f(c->mutable_int64_contents());
      return true;
    case ContentsField::kUint:
      f(c->mutable_uint_contents());
      return true;
    case ContentsField::kUint64:
      f(c->mutable_uint64_contents());
      return true;
    case ContentsField::kFp32:
      f(c->mutable_fp32_contents());
      return true;
    case ContentsField::kFp64:
      f(c->mutable_fp64_contents());
      return true;
    default:
      return false;
  }
}

}  // namespace loopserve::protocol
