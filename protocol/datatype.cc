#include "protocol/datatype.h"

#include <utility>

namespace loopserve::protocol {
namespace {

struct Entry {
  absl::string_view name;
  Datatype datatype;
  int size;
  ContentsField field;
};

constexpr Entry kTable[] = {
    {"BOOL", Datatype::kBool, 1, ContentsField::kBool},
    {"UINT8", Datatype::kUint8, 1, ContentsField::kUint},
    {"UINT16", Datatype::kUint16, 2, ContentsField::kUint},
    {"UINT32", Datatype::kUint32, 4, ContentsField::kUint},
    {"UINT64", Datatype::kUint64, 8, ContentsField::kUint64},
    {"INT8", Datatype::kInt8, 1, ContentsField::kInt},
    {"INT16", Datatype::kInt16, 2, ContentsField::kInt},
    {"INT32", Datatype::kInt32, 4, ContentsField::kInt},
    {"INT64", Datatype::kInt64, 8, ContentsField::kInt64},
    {"FP16", Datatype::kFp16, 2, ContentsField::kNone},
    {"FP32", Datatype::kFp32, 4, ContentsField::kFp32},
    {"FP64", Datatype::kFp64, 8, ContentsField::kFp64},
    {"BF16", Datatype::kBf16, 2, ContentsField::kNone},
    {"BYTES", Datatype::kBytes, 0, ContentsField::kBytes},
};

const Entry* Find(Datatype datatype) {
  for (const Entry& e : kTable) {
    if (e.datatype == datatype) return &e;
  }
  return nullptr;
}

}  // namespace

Datatype ParseDatatype(absl::string_view name) {
  for (const Entry& e : kTable) {
    if (e.name == name) return e.datatype;
  }
  return Datatype::kInvalid;
}

absl::string_view DatatypeName(Datatype datatype) {
  const Entry* e = Find(datatype);
  return e == nullptr ? absl::string_view() : e->name;
}

int ElementSize(Datatype datatype) {
  const Entry* e = Find(datatype);
  return e == nullptr ? 0 : e->size;
}

ContentsField ContentsFieldOf(Datatype datatype) {
  const Entry* e = Find(datatype);
  return e == nullptr ? ContentsField::kNone : e->field;
}

}  // namespace loopserve::protocol
