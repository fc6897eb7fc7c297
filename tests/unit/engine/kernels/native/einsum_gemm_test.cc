// Einsum's batched-GEMM lowering (two float32 operands, no diagonals) against a reference written
// here: a double-precision loop over every label combination, straight from the definition.
// Random data, odd sizes, every role a label can take (batch, M, N, K, summed in one operand only),
// operands and outputs in permuted orders, and an ellipsis that broadcasts.

#include <map>
#include <random>
#include <string>
#include <vector>

#include "tests/unit/engine/kernels/native/test_util.h"

namespace loopserve::engine::native_test {
namespace {

Tensor Copy(const Tensor& t) {
  Tensor c;
  c.CopyFrom(t);
  return c;
}

Tensor Random(const std::vector<int64_t>& dims, std::mt19937& rng) {
  Shape shape;
  for (int64_t d : dims) shape.mutable_dims().push_back(d);
  Tensor t(DataType::kFloat32, shape);
  std::uniform_real_distribution<float> u(-1, 1);
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.NumElements(); ++i) p[i] = u(rng);
  return t;
}

// sum over all label values of a[labels a] * b[labels b], at out[labels out]; explicit labels only
// (letters), sizes from `extent`.
std::vector<double> Reference(const std::string& ta, const std::string& tb, const std::string& to,
                              const Tensor& a, const Tensor& b, std::map<char, int64_t> extent) {
  std::vector<char> labels;
  for (const auto& [c, e] : extent) labels.push_back(c);
  auto offset = [&](const std::string& term, const Tensor& t, const std::map<char, int64_t>& v) {
    int64_t off = 0;
    for (size_t i = 0; i < term.size(); ++i) {
      const int64_t d = term[i] == '.' ? 0 : v.at(term[i]);
      off = off * t.dim(static_cast<int>(i)) + (t.dim(static_cast<int>(i)) == 1 ? 0 : d);
    }
    return off;
  };
  int64_t out_n = 1;
  for (char c : to) out_n *= extent[c];
  std::vector<double> out(out_n, 0.0);
  std::map<char, int64_t> v;
  for (char c : labels) v[c] = 0;
  for (;;) {
    int64_t o = 0;
    for (char c : to) o = o * extent[c] + v[c];
    out[o] +=
        static_cast<double>(a.data<float>()[offset(ta, a, v)]) * b.data<float>()[offset(tb, b, v)];
    int j = static_cast<int>(labels.size()) - 1;
    for (; j >= 0; --j) {
      if (++v[labels[j]] < extent[labels[j]]) break;
      v[labels[j]] = 0;
    }
    if (j < 0) break;
  }
  return out;
}

struct Case {
  std::string a, b, out;  // terms, letters only (the tensor ranks match)
};

TEST(EinsumGemmTest, MatchesTheDefinition) {
  std::mt19937 rng(27);
  const std::map<char, int64_t> extent = {{'b', 3}, {'h', 2}, {'i', 7}, {'j', 5},
                                          {'k', 9}, {'l', 4}, {'q', 6}, {'d', 11}};
  const std::vector<Case> cases = {
      {"ij", "jk", "ik"}, {"bij", "bjk", "bik"}, {"ij", "kj", "ik"},       {"ji", "jk", "ik"},
      {"ji", "kj", "ki"}, {"bij", "bjk", "ibk"}, {"bhqd", "bhkd", "bhqk"}, {"bhqk", "bhkd", "bqhd"},
      {"i", "j", "ij"},   {"i", "i", ""},        {"ij", "j", "i"},         {"bi", "bi", "b"},
      {"ij", "jk", "i"},  {"ijl", "jk", "ik"},   {"bi", "bj", "bij"},      {"ijk", "jkl", "li"},
      {"qi", "qj", "ji"}, {"dbi", "bj", "jbd"},
  };
  for (const Case& c : cases) {
    std::vector<int64_t> da, db, dout;
    for (char x : c.a) da.push_back(extent.at(x));
    for (char x : c.b) db.push_back(extent.at(x));
    for (char x : c.out) dout.push_back(extent.at(x));
    std::map<char, int64_t> used;
    for (char x : c.a + c.b) used[x] = extent.at(x);
    Tensor a = Random(da, rng), b = Random(db, rng);
    const std::vector<double> want = Reference(c.a, c.b, c.out, a, b, used);
    const std::string eq = c.a + "," + c.b + "->" + c.out;
    Tensor y = RunOk(OpCase("Einsum", 12).In(Copy(a)).In(Copy(b)).Attr("equation", StringAttr(eq)));
    ASSERT_EQ(y.NumElements(), static_cast<int64_t>(want.size())) << eq;
    ASSERT_EQ(y.rank(), static_cast<int>(dout.size())) << eq;
    for (size_t i = 0; i < dout.size(); ++i) ASSERT_EQ(y.dim(static_cast<int>(i)), dout[i]) << eq;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(y.data<float>()[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << eq << " @" << i;
    }
  }
}

// One operand: transposes and sums (the reference multiplies by a scalar 1).
TEST(EinsumGemmTest, OneOperandTransposesAndSums) {
  std::mt19937 rng(31);
  const std::map<char, int64_t> extent = {{'b', 3}, {'h', 2}, {'i', 7}, {'j', 5},
                                          {'k', 9}, {'q', 6}, {'d', 11}};
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"ij", "ji"},  {"bij", "jbi"},   {"ijk", "i"},   {"ijk", ""},
      {"ijk", "kj"}, {"bhqd", "bqhd"}, {"bhqd", "hd"}, {"i", "i"}};
  Tensor one(DataType::kFloat32, Shape{});
  one.mutable_data<float>()[0] = 1.0f;
  for (const auto& [term, out] : cases) {
    std::vector<int64_t> dims;
    std::map<char, int64_t> used;
    for (char x : term) dims.push_back(extent.at(x)), used[x] = extent.at(x);
    Tensor a = Random(dims, rng);
    const std::vector<double> want = Reference(term, "", out, a, one, used);
    const std::string eq = term + "->" + out;
    Tensor y = RunOk(OpCase("Einsum", 12).In(Copy(a)).Attr("equation", StringAttr(eq)));
    ASSERT_EQ(y.NumElements(), static_cast<int64_t>(want.size())) << eq;
    ASSERT_EQ(y.rank(), static_cast<int>(out.size())) << eq;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(y.data<float>()[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << eq << " @" << i;
    }
  }
}

TEST(EinsumGemmTest, EllipsisBroadcastsAndEmptySums) {
  std::mt19937 rng(5);
  // "...ij,...jk->...ik" with the batch [3, 1] against [1, 4]: broadcast to [3, 4].
  Tensor a = Random({3, 1, 2, 5}, rng), b = Random({1, 4, 5, 3}, rng);
  Tensor y = RunOk(OpCase("Einsum", 12)
                       .In(Copy(a))
                       .In(Copy(b))
                       .Attr("equation", StringAttr("...ij,...jk->...ik")));
  ASSERT_EQ(y.shape(), Shape({3, 4, 2, 3}));
  for (int64_t p = 0; p < 3; ++p) {
    for (int64_t q = 0; q < 4; ++q) {
      for (int64_t i = 0; i < 2; ++i) {
        for (int64_t k = 0; k < 3; ++k) {
          double s = 0;
          for (int64_t j = 0; j < 5; ++j) {
            s += static_cast<double>(a.data<float>()[(p * 2 + i) * 5 + j]) *
                 b.data<float>()[(q * 5 + j) * 3 + k];
          }
          EXPECT_NEAR(y.data<float>()[((p * 4 + q) * 2 + i) * 3 + k], s, 1e-5);
        }
      }
    }
  }
  // A contracted label of extent 0: the output is zeros.
  ExpectTensor<float>(RunOk(OpCase("Einsum", 12)
                                .In(Tensor(DataType::kFloat32, {2, 0}))
                                .In(Tensor(DataType::kFloat32, {0, 2}))
                                .Attr("equation", StringAttr("ij,jk->ik"))),
                      {2, 2}, {0, 0, 0, 0});
}

}  // namespace
}  // namespace loopserve::engine::native_test
