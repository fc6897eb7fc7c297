#include "protocol/typed_contents.h"

namespace loopserve::protocol {
namespace {

struct Field {
  ContentsField field;
  absl::string_view name;
  int (inference::InferTensorContents::*size)() const;
};

constexpr Field kFields[] = {
    {ContentsField::kBool, "bool_contents", &inference::InferTensorContents::bool_contents_size},
    {ContentsField::kInt, "int_contents", &inference::InferTensorContents::int_contents_size},
    {ContentsField::kInt64, "int64_contents", &inference::InferTensorContents::int64_contents_size},
    {ContentsField::kUint, "uint_contents", &inference::InferTensorContents::uint_contents_size},
    {ContentsField::kUint64, "uint64_contents",
     &inference::InferTensorContents::uint64_contents_size},
    {ContentsField::kFp32, "fp32_contents", &inference::InferTensorContents::fp32_contents_size},
    {ContentsField::kFp64, "fp64_contents", &inference::InferTensorContents::fp64_contents_size},
    {ContentsField::kBytes, "bytes_contents", &inference::InferTensorContents::bytes_contents_size},
};

}  // namespace

absl::string_view ContentsFieldName(ContentsField field) {
  for (const Field& f : kFields) {
    if (f.field == field) return f.name;
  }
  return "";
}

ContentsField OtherFilledField(const inference::InferTensorContents& contents,
                               ContentsField except) {
  for (const Field& f : kFields) {
    if (f.field != except && (contents.*f.size)() > 0) return f.field;
  }
  return ContentsField::kNone;
}

}  // namespace loopserve::protocol
