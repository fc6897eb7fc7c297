#include "engine/tools/onnx_tensor_io.h"

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace loopserve::tools {
namespace {

using engine::DataType;
using engine::Tensor;
using engine::Value;
using engine::ValueKind;
using engine::ValueType;

template <typename T>
std::vector<T> Elements(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.NumElements());
}

template <typename T>
std::string RawBytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("onnx_tensor_io_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

TEST(TensorFromProtoTest, RawFloat) {
  onnx::TensorProto proto;
  proto.set_data_type(onnx::TensorProto::FLOAT);
  proto.add_dims(2);
  proto.add_dims(3);
  proto.set_raw_data(RawBytes<float>({1, 2, 3, 4, 5, 6}));
  auto t = TensorFromProto(proto, "x");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->dtype(), DataType::kFloat32);
  EXPECT_EQ(t->shape(), engine::Shape({2, 3}));
  EXPECT_EQ(Elements<float>(*t), (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST(TensorFromProtoTest, ScalarAndEmpty) {
  onnx::TensorProto scalar;
  scalar.set_data_type(onnx::TensorProto::INT64);
  scalar.add_int64_data(7);
  auto s = TensorFromProto(scalar, "s");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->rank(), 0);
  EXPECT_EQ(Elements<int64_t>(*s), std::vector<int64_t>{7});

  onnx::TensorProto empty;
  empty.set_data_type(onnx::TensorProto::FLOAT);
  empty.add_dims(0);
  empty.add_dims(3);
  auto e = TensorFromProto(empty, "e");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->NumElements(), 0);
}

TEST(TensorFromProtoTest, TypedFields) {
  onnx::TensorProto i8;
  i8.set_data_type(onnx::TensorProto::INT8);
  i8.add_dims(3);
  for (int v : {-128, 0, 127}) i8.add_int32_data(v);
  auto a = TensorFromProto(i8, "i8");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(Elements<int8_t>(*a), (std::vector<int8_t>{-128, 0, 127}));

  onnx::TensorProto b;
  b.set_data_type(onnx::TensorProto::BOOL);
  b.add_dims(2);
  b.add_int32_data(1);
  b.add_int32_data(0);
  auto bt = TensorFromProto(b, "b");
  ASSERT_TRUE(bt.ok()) << bt.status();
  EXPECT_EQ(Elements<bool>(*bt), (std::vector<bool>{true, false}));

  onnx::TensorProto h;
  h.set_data_type(onnx::TensorProto::FLOAT16);
  h.add_dims(1);
  h.add_int32_data(0x3c00);  // 1.0
  auto ht = TensorFromProto(h, "h");
  ASSERT_TRUE(ht.ok()) << ht.status();
  EXPECT_EQ(ht->dtype(), DataType::kFloat16);
  EXPECT_EQ(Elements<uint16_t>(*ht), std::vector<uint16_t>{0x3c00});

  onnx::TensorProto u32;
  u32.set_data_type(onnx::TensorProto::UINT32);
  u32.add_dims(1);
  u32.add_uint64_data(4000000000u);
  auto ut = TensorFromProto(u32, "u32");
  ASSERT_TRUE(ut.ok()) << ut.status();
  EXPECT_EQ(Elements<uint32_t>(*ut), std::vector<uint32_t>{4000000000u});

  onnx::TensorProto d;
  d.set_data_type(onnx::TensorProto::DOUBLE);
  d.add_dims(2);
  d.add_double_data(0.5);
  d.add_double_data(-2);
  auto dt = TensorFromProto(d, "d");
  ASSERT_TRUE(dt.ok()) << dt.status();
  EXPECT_EQ(Elements<double>(*dt), (std::vector<double>{0.5, -2}));
}

TEST(TensorFromProtoTest, RejectsMalformed) {
  onnx::TensorProto short_raw;
  short_raw.set_data_type(onnx::TensorProto::FLOAT);
  short_raw.add_dims(4);
  short_raw.set_raw_data(RawBytes<float>({1, 2, 3}));
  auto a = TensorFromProto(short_raw, "'in.pb'");
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("'in.pb'"), absl::string_view::npos);

  onnx::TensorProto wrong_count;
  wrong_count.set_data_type(onnx::TensorProto::INT64);
  wrong_count.add_dims(2);
  wrong_count.add_int64_data(1);
  EXPECT_EQ(TensorFromProto(wrong_count, "w").status().code(), absl::StatusCode::kInvalidArgument);

  onnx::TensorProto negative;
  negative.set_data_type(onnx::TensorProto::FLOAT);
  negative.add_dims(-1);
  EXPECT_EQ(TensorFromProto(negative, "n").status().code(), absl::StatusCode::kInvalidArgument);

  onnx::TensorProto huge;
  huge.set_data_type(onnx::TensorProto::FLOAT);
  for (int i = 0; i < 4; ++i) huge.add_dims(int64_t{1} << 20);
  EXPECT_EQ(TensorFromProto(huge, "h").status().code(), absl::StatusCode::kInvalidArgument);

  // Strings live in string_data: raw bytes or a wrong count are malformed.
  onnx::TensorProto strings;
  strings.set_data_type(onnx::TensorProto::STRING);
  strings.add_dims(2);
  strings.add_string_data("a");
  EXPECT_EQ(TensorFromProto(strings, "s").status().code(), absl::StatusCode::kInvalidArgument);
  strings.set_raw_data("ab");
  EXPECT_EQ(TensorFromProto(strings, "s").status().code(), absl::StatusCode::kInvalidArgument);

  onnx::TensorProto complex;
  complex.set_data_type(onnx::TensorProto::COMPLEX64);
  EXPECT_EQ(TensorFromProto(complex, "c").status().code(), absl::StatusCode::kUnimplemented);
}

TEST(TensorToProtoTest, RoundTripsEveryType) {
  for (DataType type :
       {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
        DataType::kInt8, DataType::kUint8, DataType::kInt16, DataType::kUint16, DataType::kInt32,
        DataType::kUint32, DataType::kInt64, DataType::kUint64, DataType::kBool}) {
    Tensor t(type, engine::Shape({2, 2}));
    auto* bytes = static_cast<uint8_t*>(t.mutable_raw_data());
    for (size_t i = 0; i < t.ByteSize(); ++i) bytes[i] = static_cast<uint8_t>(i % 2);
    const onnx::TensorProto proto = TensorToProto(t, "y");
    EXPECT_EQ(proto.name(), "y");
    auto back = TensorFromProto(proto, "y");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->dtype(), type);
    EXPECT_EQ(back->shape(), t.shape());
    EXPECT_EQ(std::memcmp(back->raw_data(), t.raw_data(), t.ByteSize()), 0);
  }
}

TEST(TensorToProtoTest, RoundTripsStrings) {
  Tensor t(DataType::kString, engine::Shape({2}));
  t.mutable_data<std::string>()[0] = "hello";
  t.mutable_data<std::string>()[1] = std::string("a\0b", 3);
  const onnx::TensorProto proto = TensorToProto(t, "s");
  ASSERT_EQ(proto.string_data_size(), 2);
  EXPECT_EQ(proto.string_data(1), std::string("a\0b", 3));
  auto back = TensorFromProto(proto, "s");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->dtype(), DataType::kString);
  EXPECT_EQ(back->data<std::string>()[0], "hello");
  EXPECT_EQ(back->data<std::string>()[1], std::string("a\0b", 3));
}

TEST(ValueFileTest, SequenceAndOptionalRoundTrip) {
  TempDir dir;
  Value seq;
  seq.mutable_sequence().emplace_back(DataType::kInt32, engine::Shape({2}));
  seq.mutable_sequence()[0].mutable_data<int32_t>()[0] = 4;
  seq.mutable_sequence()[0].mutable_data<int32_t>()[1] = 5;
  ValueType seq_type;
  seq_type.kind = ValueKind::kSequence;
  ASSERT_TRUE(WriteValueFile(dir.File("s.pb"), "s", seq, seq_type).ok());
  std::string name;
  auto read = ReadValueFile(dir.File("s.pb"), seq_type, &name);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(name, "s");
  ASSERT_TRUE(read->is_sequence());
  ASSERT_EQ(read->sequence().size(), 1u);
  EXPECT_EQ(Elements<int32_t>(read->sequence()[0]), (std::vector<int32_t>{4, 5}));

  ValueType opt_type;
  opt_type.kind = ValueKind::kOptional;
  ASSERT_TRUE(WriteValueFile(dir.File("o.pb"), "o", Value(), opt_type).ok());
  auto empty = ReadValueFile(dir.File("o.pb"), opt_type);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->is_none());

  ASSERT_TRUE(WriteValueFile(dir.File("os.pb"), "o", seq, opt_type).ok());
  auto full = ReadValueFile(dir.File("os.pb"), opt_type);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_TRUE(full->is_sequence());
}

TEST(ValueFileTest, Uint16FileFeedsDeclaredBFloat16) {
  TempDir dir;
  Tensor t(DataType::kUint16, engine::Shape({1}));
  t.mutable_data<uint16_t>()[0] = 0x3f80;  // bfloat16 1.0
  ValueType plain;
  ASSERT_TRUE(WriteValueFile(dir.File("b.pb"), "b", Value(std::move(t)), plain).ok());
  ValueType declared;
  declared.dtype = DataType::kBFloat16;
  auto v = ReadValueFile(dir.File("b.pb"), declared);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->tensor().dtype(), DataType::kBFloat16);
  EXPECT_EQ(v->tensor().data<uint16_t>()[0], 0x3f80);
}

TEST(ValueFileTest, ErrorsNameTheFile) {
  TempDir dir;
  auto missing = ReadValueFile(dir.File("missing.pb"), ValueType());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("missing.pb"), absl::string_view::npos);

  std::ofstream(dir.File("bad.pb"), std::ios::binary) << "\xff\xff\xff";
  auto bad = ReadValueFile(dir.File("bad.pb"), ValueType());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("bad.pb"), absl::string_view::npos);
}

}  // namespace
}  // namespace loopserve::tools
