// String tensors through the kernels that take them: Cast to and from strings, StringNormalizer,
// TfIdfVectorizer, the element-moving ops; and the executor turning strings away from the others.
// Expected values are the spec's examples or worked out by hand.

#include <limits>
#include <string>

#include "tests/unit/engine/kernels/native/test_util.h"

namespace loopserve::engine::native_test {
namespace {

constexpr int64_t kFloat = 1, kInt64 = 7, kString = 8, kFloat16 = 10, kDouble = 11;

Tensor Strings(const Shape& shape, std::initializer_list<std::string> values) {
  return Make<std::string>(shape, values);
}

TEST(StringCastTest, NumbersToShortestPlainText) {
  const float inf = std::numeric_limits<float>::infinity();
  ExpectTensor<std::string>(
      RunOk(OpCase("Cast", 13)
                .In(Make<float>({7}, {0.1f, 0.039187793f, -2.5f, 1e20f, std::nanf(""), inf, -inf}))
                .Attr("to", IntAttr(kString))),
      {7}, {"0.1", "0.039187793", "-2.5", "1e+20", "NaN", "INF", "-INF"});
  ExpectTensor<std::string>(
      RunOk(OpCase("Cast", 13).In(Make<double>({2}, {0.1, 1.0 / 3})).Attr("to", IntAttr(kString))),
      {2}, {"0.1", "0.3333333333333333"});
  ExpectTensor<std::string>(
      RunOk(OpCase("Cast", 13).In(I64({-3, int64_t{1} << 40})).Attr("to", IntAttr(kString))), {2},
      {"-3", "1099511627776"});
  ExpectTensor<std::string>(
      RunOk(OpCase("Cast", 13).In(Make<bool>({2}, {true, false})).Attr("to", IntAttr(kString))),
      {2}, {"1", "0"});
}

TEST(StringCastTest, TextToNumbers) {
  // The spec's forms: plain and scientific numbers, case-insensitive INF, +INF, -INF and NaN.
  ExpectTensor<float>(
      RunOk(OpCase("Cast", 13)
                .In(Strings({8}, {"3.14", "1e-5", "1E8", "+INF", "inf", "-Inf", "NaN", " 7 "}))
                .Attr("to", IntAttr(kFloat))),
      {8},
      {3.14f, 1e-5f, 1e8f, std::numeric_limits<float>::infinity(),
       std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
       std::nanf(""), 7.0f});
  ExpectTensor<double>(
      RunOk(OpCase("Cast", 13).In(Strings({1}, {"0.1"})).Attr("to", IntAttr(kDouble))), {1}, {0.1});
  // "converting string "100.5" to an integer may result 100" (the spec).
  ExpectTensor<int64_t>(
      RunOk(
          OpCase("Cast", 13).In(Strings({3}, {"100", "-7", "100.5"})).Attr("to", IntAttr(kInt64))),
      {3}, {100, -7, 100});
  Tensor half = RunOk(OpCase("Cast", 13).In(Strings({1}, {"1"})).Attr("to", IntAttr(kFloat16)));
  ASSERT_EQ(half.dtype(), DataType::kFloat16);
  EXPECT_EQ(half.data<uint16_t>()[0], 0x3c00);
  ExpectError(
      OpCase("Cast", 13).In(Strings({2}, {"1", "Hello World!"})).Attr("to", IntAttr(kFloat)),
      absl::StatusCode::kInvalidArgument, "is not a number");
}

TEST(StringCastTest, CastLikeAndRoundTrip) {
  ExpectTensor<std::string>(
      RunOk(OpCase("CastLike", 15).In(Make<float>({2}, {1.5f, -0.25f})).In(Strings({1}, {""}))),
      {2}, {"1.5", "-0.25"});
  ExpectTensor<std::string>(
      RunOk(OpCase("Cast", 13).In(Strings({2}, {"a", "b"})).Attr("to", IntAttr(kString))), {2},
      {"a", "b"});
}

TEST(StringNormalizerTest, SpecBehaviour) {
  // Stop words removed case-insensitively by default, the rest upper-cased; [1, C] stays 2-D.
  ExpectTensor<std::string>(
      RunOk(OpCase("StringNormalizer", 10)
                .In(Strings({1, 4}, {"Monday", "tuesday", "MONDAY", "wednesday"}))
                .Attr("case_change_action", StringAttr("UPPER"))
                .Attr("stopwords",
                      [] {
                        Attribute a;
                        a.type = Attribute::Type::kStrings;
                        a.strings = {"monday"};
                        return a;
                      }())),
      {1, 2}, {"TUESDAY", "WEDNESDAY"});
  // Case-sensitive: only the exact spelling is a stop word; NONE keeps the case.
  Attribute stop;
  stop.type = Attribute::Type::kStrings;
  stop.strings = {"monday"};
  ExpectTensor<std::string>(RunOk(OpCase("StringNormalizer", 10)
                                      .In(Strings({3}, {"Monday", "monday", "x"}))
                                      .Attr("is_case_sensitive", IntAttr(1))
                                      .Attr("stopwords", stop)),
                            {2}, {"Monday", "x"});
  // Everything removed: one empty string, [1] for [C] input.
  ExpectTensor<std::string>(RunOk(OpCase("StringNormalizer", 10)
                                      .In(Strings({2}, {"monday", "MONDAY"}))
                                      .Attr("stopwords", stop)),
                            {1}, {""});
  ExpectError(OpCase("StringNormalizer", 10).In(Strings({2, 2}, {"a", "b", "c", "d"})),
              absl::StatusCode::kInvalidArgument, "expected [C] or [1, C]");
  ExpectError(OpCase("StringNormalizer", 10)
                  .In(Strings({1}, {"a"}))
                  .Attr("case_change_action", StringAttr("TITLE")),
              absl::StatusCode::kInvalidArgument, "case_change_action");
  ExpectError(OpCase("StringNormalizer", 10).In(I64({1})), absl::StatusCode::kInvalidArgument,
              "int64");
}

TEST(StringNormalizerTest, Utf8CaseMapping) {
  // Upper- and lower-case of Latin-1 and Greek letters by code point; bytes that are not UTF-8
  // pass through untouched.
  ExpectTensor<std::string>(RunOk(OpCase("StringNormalizer", 10)
                                      .In(Strings({2}, {"\xc3\xa4\xc3\xb6 \xce\xb1\xce\xb2"
                                                        "c",
                                                        "x\xff\xc3"}))
                                      .Attr("case_change_action", StringAttr("UPPER"))),
                            {2},
                            {"\xc3\x84\xc3\x96 \xce\x91\xce\x92"
                             "C",
                             "X\xff\xc3"});
  ExpectTensor<std::string>(RunOk(OpCase("StringNormalizer", 10)
                                      .In(Strings({1}, {"\xc3\x84Z\xce\xa3"}))
                                      .Attr("case_change_action", StringAttr("LOWER"))),
                            {1}, {"\xc3\xa4z\xcf\x83"});
}

Attribute Ints(std::vector<int64_t> v) { return IntsAttr(std::move(v)); }

TEST(TfIdfVectorizerTest, SpecExampleSkipGrams) {
  // The spec's example: [94, 17, 36, 12, 28] with 2 skips gives the 2-grams [94, 12] and
  // [17, 28]; without skips [94, 17], [17, 36], [36, 12], [12, 28]. max_skip_count 2 counts
  // skips 0, 1 and 2. Pool: 1-gram 36; 2-grams [94, 12], [17, 28], [94, 17], [5, 6].
  OpCase c("TfIdfVectorizer", 9);
  c.In(I64({94, 17, 36, 12, 28}))
      .Attr("min_gram_length", IntAttr(1))
      .Attr("max_gram_length", IntAttr(2))
      .Attr("max_skip_count", IntAttr(2))
      .Attr("mode", StringAttr("TF"))
      .Attr("ngram_counts", Ints({0, 1}))
      .Attr("ngram_indexes", Ints({4, 0, 1, 2, 3}))
      .Attr("pool_int64s", Ints({36, 94, 12, 17, 28, 94, 17, 5, 6}));
  ExpectTensor<float>(RunOk(c), {5}, {1, 1, 1, 0, 1});
  // 2-grams only (min 2): the 1-gram's slot stays 0.
  c.Attr("min_gram_length", IntAttr(2));
  ExpectTensor<float>(RunOk(c), {5}, {1, 1, 1, 0, 0});
}

TEST(TfIdfVectorizerTest, WeightsModesAndStrings) {
  // Rows of a batch count separately; "a a b" with the pool 1-grams a, b.
  Attribute weights;
  weights.type = Attribute::Type::kFloats;
  weights.floats = {0.5f, 2.0f};
  Attribute pool;
  pool.type = Attribute::Type::kStrings;
  pool.strings = {"a", "b"};
  struct ModeCase {
    const char* mode;
    float expected[4];
  };
  for (const ModeCase& m : {ModeCase{"TF", {2, 1, 0, 1}}, ModeCase{"IDF", {0.5f, 2, 0, 2}},
                            ModeCase{"TFIDF", {1, 2, 0, 2}}}) {
    const std::string mode = m.mode;
    const float* expected = m.expected;
    OpCase c("TfIdfVectorizer", 9);
    c.In(Strings({2, 3}, {"a", "a", "b", "c", "b", "c"}))
        .Attr("min_gram_length", IntAttr(1))
        .Attr("max_gram_length", IntAttr(1))
        .Attr("max_skip_count", IntAttr(0))
        .Attr("mode", StringAttr(mode))
        .Attr("ngram_counts", Ints({0}))
        .Attr("ngram_indexes", Ints({0, 1}))
        .Attr("pool_strings", pool)
        .Attr("weights", weights);
    Tensor y = RunOk(c);
    ASSERT_EQ(y.shape(), Shape({2, 2})) << mode;
    for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(y.data<float>()[i], expected[i]) << mode << i;
  }
}

TEST(TfIdfVectorizerTest, RejectsInconsistentAttributes) {
  OpCase c("TfIdfVectorizer", 9);
  c.In(I64({1, 2}))
      .Attr("min_gram_length", IntAttr(2))
      .Attr("max_gram_length", IntAttr(2))
      .Attr("max_skip_count", IntAttr(0))
      .Attr("mode", StringAttr("TF"))
      .Attr("ngram_counts", Ints({0, 0}))
      .Attr("ngram_indexes", Ints({0}))
      .Attr("pool_int64s", Ints({1, 2, 3}));  // 3 items cannot be 2-grams
  ExpectError(c, absl::StatusCode::kInvalidArgument, "ngram_counts");
  c.Attr("pool_int64s", Ints({1, 2})).Attr("mode", StringAttr("BM25"));
  ExpectError(c, absl::StatusCode::kInvalidArgument, "mode");
  c.Attr("mode", StringAttr("TF")).Attr("ngram_indexes", Ints({0, 1}));
  ExpectError(c, absl::StatusCode::kInvalidArgument, "ngram_indexes");
  // A string input for an integer pool.
  c.Attr("ngram_indexes", Ints({0}));
  c.inputs[0] = Strings({2}, {"1", "2"});
  ExpectError(c, absl::StatusCode::kInvalidArgument, "pool holds integers");
}

TEST(StringTensorTest, ElementMovingOps) {
  ExpectTensor<std::string>(RunOk(OpCase("Identity", 16).In(Strings({2}, {"x", "yz"}))), {2},
                            {"x", "yz"});
  ExpectTensor<std::string>(
      RunOk(OpCase("Reshape", 14).In(Strings({2, 2}, {"a", "b", "c", "d"})).In(I64({4}))), {4},
      {"a", "b", "c", "d"});
  ExpectTensor<std::string>(RunOk(OpCase("Gather", 13)
                                      .In(Strings({2, 2}, {"a", "b", "c", "d"}))
                                      .In(I64({1, -2, 1}))
                                      .Attr("axis", IntAttr(0))),
                            {3, 2}, {"c", "d", "a", "b", "c", "d"});
  ExpectTensor<std::string>(RunOk(OpCase("Concat", 13)
                                      .In(Strings({2, 1}, {"a", "b"}))
                                      .In(Strings({2, 2}, {"c", "d", "e", "f"}))
                                      .Attr("axis", IntAttr(1))),
                            {2, 3}, {"a", "c", "d", "b", "e", "f"});
  ExpectTensor<int64_t>(RunOk(OpCase("Shape", 15).In(Strings({3, 1}, {"a", "b", "c"}))), {2},
                        {3, 1});
}

TEST(StringTensorTest, OpsWithoutStringSupportRejectThem) {
  ExpectError(OpCase("Transpose", 13).In(Strings({1, 2}, {"a", "b"})),
              absl::StatusCode::kUnimplemented, "holds strings");
  ExpectError(OpCase("Add", 14).In(Strings({1}, {"a"})).In(Strings({1}, {"b"})),
              absl::StatusCode::kUnimplemented, "holds strings");
  ExpectError(OpCase("Slice", 13).In(Strings({2}, {"a", "b"})).In(I64({0})).In(I64({1})),
              absl::StatusCode::kUnimplemented, "holds strings");
}

}  // namespace
}  // namespace loopserve::engine::native_test
