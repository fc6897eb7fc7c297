#include <cstdint>
#include <string>
#include <type_traits>

#include "gtest/gtest.h"
#include "protocol/bytes.h"
#include "protocol/datatype.h"
#include "protocol/typed_contents.h"

namespace loopserve::protocol {
namespace {

// The KServe v2 protocol's tensor data types and their element sizes in bytes
// (kserve/docs/predict-api/v2/required_api.md, "Tensor Data Types"); BYTES is variable-length.
struct SpecRow {
  const char* name;
  int size;
  const char* contents_field;  // grpc_service.proto's InferTensorContents comment for the type
};
constexpr SpecRow kSpec[] = {
    {"BOOL", 1, "bool_contents"},
    {"UINT8", 1, "uint_contents"},
    {"UINT16", 2, "uint_contents"},
    {"UINT32", 4, "uint_contents"},
    {"UINT64", 8, "uint64_contents"},
    {"INT8", 1, "int_contents"},
    {"INT16", 2, "int_contents"},
    {"INT32", 4, "int_contents"},
    {"INT64", 8, "int64_contents"},
    {"FP16", 2, ""},
    {"FP32", 4, "fp32_contents"},
    {"FP64", 8, "fp64_contents"},
    {"BF16", 2, ""},
    {"BYTES", 0, "bytes_contents"},
};

TEST(DatatypeTest, EverySpecTypeParsesRoundTripsAndHasItsSizeAndField) {
  for (const SpecRow& row : kSpec) {
    const Datatype d = ParseDatatype(row.name);
    ASSERT_NE(d, Datatype::kInvalid) << row.name;
    EXPECT_EQ(DatatypeName(d), row.name);
    EXPECT_EQ(ElementSize(d), row.size) << row.name;
    EXPECT_EQ(ContentsFieldName(ContentsFieldOf(d)), row.contents_field) << row.name;
  }
}

TEST(DatatypeTest, NamesAreCaseSensitiveAndUnknownNamesAreInvalid) {
  for (const char* name : {"fp32", "", "FLOAT", "STRING", "INT128", "BYTES "}) {
    EXPECT_EQ(ParseDatatype(name), Datatype::kInvalid) << name;
  }
  EXPECT_EQ(DatatypeName(Datatype::kInvalid), "");
  EXPECT_EQ(ElementSize(Datatype::kInvalid), 0);
  EXPECT_EQ(ContentsFieldOf(Datatype::kInvalid), ContentsField::kNone);
}

TEST(DatatypeTest, VisitNumericGivesTheCppTypeOfEachNumericType) {
  for (const SpecRow& row : kSpec) {
    const Datatype d = ParseDatatype(row.name);
    int visited_size = -1;
    Datatype back = Datatype::kInvalid;
    const bool numeric = VisitNumeric(d, [&](auto tag) {
      using T = typename decltype(tag)::type;
      static_assert(std::is_arithmetic_v<T>);
      visited_size = static_cast<int>(sizeof(T));
      back = DatatypeOf<T>();
    });
    const std::string name = row.name;
    const bool expect_numeric = name != "FP16" && name != "BF16" && name != "BYTES";
    EXPECT_EQ(numeric, expect_numeric) << name;
    if (numeric) {
      EXPECT_EQ(visited_size, row.size) << name;
      EXPECT_EQ(back, d) << name;
    }
  }
  static_assert(DatatypeOf<float>() == Datatype::kFp32);
  static_assert(DatatypeOf<bool>() == Datatype::kBool);
  static_assert(DatatypeOf<std::string>() == Datatype::kInvalid);
}

TEST(TypedContentsTest, OtherFilledFieldFindsTheFirstFieldThatHoldsElements) {
  inference::InferTensorContents c;
  EXPECT_EQ(OtherFilledField(c, ContentsField::kNone), ContentsField::kNone);
  c.add_fp32_contents(1.f);
  EXPECT_EQ(OtherFilledField(c, ContentsField::kNone), ContentsField::kFp32);
  EXPECT_EQ(OtherFilledField(c, ContentsField::kFp32), ContentsField::kNone);
  c.add_bytes_contents("x");
  EXPECT_EQ(OtherFilledField(c, ContentsField::kFp32), ContentsField::kBytes);
  int seen = 0;
  EXPECT_TRUE(VisitContents(c, ContentsField::kFp32, [&](const auto& f) { seen = f.size(); }));
  EXPECT_EQ(seen, 1);
  EXPECT_FALSE(VisitContents(c, ContentsField::kBytes, [&](const auto&) { seen = -1; }));
  EXPECT_EQ(seen, 1);
  EXPECT_TRUE(VisitMutableContents(&c, ContentsField::kInt, [](auto* f) { f->Add(7); }));
  ASSERT_EQ(c.int_contents_size(), 1);
  EXPECT_EQ(c.int_contents(0), 7);
}

// The raw BYTES layout: a 4-byte little-endian length before each element (Triton's binary
// tensor data extension, "BYTES" data type).
TEST(BytesTest, AppendsLittleEndianLengthPrefixes) {
  std::string out;
  AppendBytesElement("abc", &out);
  AppendBytesElement("", &out);
  EXPECT_EQ(out, std::string("\x03\x00\x00\x00"
                             "abc"
                             "\x00\x00\x00\x00",
                             11));
  std::string big(300, 'z');
  std::string framed;
  AppendBytesElement(big, &framed);
  EXPECT_EQ(framed.substr(0, 4), std::string("\x2c\x01\x00\x00", 4));  // 300 = 0x12c
}

TEST(BytesTest, ReadsElementsAndReportsTruncationAndOverrun) {
  const std::string contents("\x02\x00\x00\x00hi\x00\x00\x00\x00", 10);
  BytesElement e = ReadBytesElement(contents, 0);
  ASSERT_EQ(e.error, BytesElement::Error::kNone);
  EXPECT_EQ(e.value, "hi");
  EXPECT_EQ(e.next, 6u);
  e = ReadBytesElement(contents, e.next);
  ASSERT_EQ(e.error, BytesElement::Error::kNone);
  EXPECT_EQ(e.value, "");
  EXPECT_EQ(e.next, 10u);

  EXPECT_EQ(ReadBytesElement(std::string("\x01\x00", 2), 0).error,
            BytesElement::Error::kTruncatedLength);
  EXPECT_EQ(ReadBytesElement(contents, 8).error, BytesElement::Error::kTruncatedLength);
  EXPECT_EQ(ReadBytesElement(contents, 99).error, BytesElement::Error::kTruncatedLength);
  // A length of 0xffffffff must not wrap around the end.
  const std::string hostile("\xff\xff\xff\xffxyz", 7);
  e = ReadBytesElement(hostile, 0);
  EXPECT_EQ(e.error, BytesElement::Error::kOverrun);
  EXPECT_EQ(e.length, 0xffffffffu);
}

}  // namespace
}  // namespace loopserve::protocol
