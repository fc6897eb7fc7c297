// StringNormalizer and TfIdfVectorizer (over int32/int64 or string tokens).

#include <algorithm>
#include <cwctype>
#include <locale>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/native/register_families.h"

namespace loopserve::engine::native {
namespace {

absl::StatusOr<std::vector<std::string>> StringsAttribute(const Node& node,
                                                          const std::string& name) {
  const Attribute* a = node.FindAttribute(name);
  if (a == nullptr) return std::vector<std::string>{};
  if (a->type != Attribute::Type::kStrings) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute '", name, "' is not a list of strings"));
  }
  return a->strings;
}

// Case mapping of UTF-8 text by Unicode code point, with the ctype<wchar_t> facet of a UTF-8
// locale object (the process locale is left alone). The spec's `locale` attribute names the
// locale ("en_US" by default); when the system has no such locale, C.UTF-8's tables (the Unicode
// default case mappings) are used, and without those ASCII letters alone change case. Bytes that
// are not valid UTF-8 are kept as they are.
class CaseMapper {
 public:
  explicit CaseMapper(const std::string& locale_name) {
    for (const std::string& name : {locale_name + ".UTF-8", locale_name, std::string("C.UTF-8")}) {
      if (name.empty()) continue;
      try {
        locale_ = std::make_unique<std::locale>(name.c_str());
        facet_ = &std::use_facet<std::ctype<wchar_t>>(*locale_);
        return;
      } catch (const std::exception&) {
        // Try the next name.
      }
    }
  }

  void Map(const std::string& in, bool upper, std::string& out) const {
    out.clear();
    out.reserve(in.size());
    size_t i = 0;
    while (i < in.size()) {
      size_t length = 0;
      const int32_t cp = Decode(in, i, &length);
      if (cp < 0) {
        out.push_back(in[i++]);
        continue;
      }
      Encode(MapCodePoint(cp, upper), out);
      i += length;
    }
  }

 private:
  int32_t MapCodePoint(int32_t cp, bool upper) const {
    if (facet_ == nullptr) {
      if (upper && cp >= 'a' && cp <= 'z') return cp - 'a' + 'A';
      if (!upper && cp >= 'A' && cp <= 'Z') return cp - 'A' + 'a';
      return cp;
    }
    const wchar_t c = static_cast<wchar_t>(cp);
    return static_cast<int32_t>(upper ? facet_->toupper(c) : facet_->tolower(c));
  }

  // The code point starting at in[i] and its byte length, or -1 for an invalid sequence.
  static int32_t Decode(const std::string& in, size_t i, size_t* length) {
    const auto b0 = static_cast<uint8_t>(in[i]);
    if (b0 < 0x80) {
      *length = 1;
      return b0;
    }
    int n = 0;
    int32_t cp = 0;
    if ((b0 & 0xe0) == 0xc0) {
      n = 2;
      cp = b0 & 0x1f;
    } else if ((b0 & 0xf0) == 0xe0) {
      n = 3;
      cp = b0 & 0x0f;
    } else if ((b0 & 0xf8) == 0xf0) {
      n = 4;
      cp = b0 & 0x07;
    } else {
      return -1;
    }
    if (i + n > in.size()) return -1;
    for (int k = 1; k < n; ++k) {
      const auto b = static_cast<uint8_t>(in[i + k]);
      if ((b & 0xc0) != 0x80) return -1;
      cp = (cp << 6) | (b & 0x3f);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not valid UTF-8.
    static constexpr int32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return -1;
    *length = static_cast<size_t>(n);
    return cp;
  }

  static void Encode(int32_t cp, std::string& out) {
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xe0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else {
      out.push_back(static_cast<char>(0xf0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
  }

  std::unique_ptr<std::locale> locale_;
  const std::ctype<wchar_t>* facet_ = nullptr;
};

// StringNormalizer(X [C] or [1, C]): drops the stop words (compared case-insensitively unless
// is_case_sensitive), then lower- or upper-cases what remains (case_change_action). All dropped:
// one empty string, shape [1] or [1, 1].
class StringNormalizerKernel final : public Kernel {
 public:
  bool AcceptsStringInputs() const override { return true; }

  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
    const Node& node = init.node();
    LS_ASSIGN_OR_RETURN(std::string action, node.GetString("case_change_action", "NONE"));
    LS_ASSIGN_OR_RETURN(int64_t sensitive, node.GetInt("is_case_sensitive", 0));
    LS_ASSIGN_OR_RETURN(std::string locale, node.GetString("locale", "en_US"));
    LS_ASSIGN_OR_RETURN(std::vector<std::string> stopwords, StringsAttribute(node, "stopwords"));
    auto kernel = std::unique_ptr<StringNormalizerKernel>(new StringNormalizerKernel(locale));
    if (action == "LOWER") {
      kernel->action_ = Action::kLower;
    } else if (action == "UPPER") {
      kernel->action_ = Action::kUpper;
    } else if (action != "NONE") {
      return absl::InvalidArgumentError(
          absl::StrCat("case_change_action '", action, "' is not one of LOWER, UPPER, NONE"));
    }
    kernel->case_sensitive_ = sensitive != 0;
    std::string folded;
    for (const std::string& w : stopwords) {
      if (kernel->case_sensitive_) {
        kernel->stopwords_.insert(w);
      } else {
        kernel->mapper_.Map(w, /*upper=*/false, folded);
        kernel->stopwords_.insert(folded);
      }
    }
    return std::unique_ptr<Kernel>(std::move(kernel));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DataType::kString) return UnsupportedType("input 'X'", x.dtype());
    const bool two_d = x.rank() == 2;
    if (!(x.rank() == 1 || (two_d && x.dim(0) == 1))) {
      return absl::InvalidArgumentError(
          absl::StrCat("input 'X' has shape ", x.shape().ToString(), ", expected [C] or [1, C]"));
    }
    const std::string* in = x.data<std::string>();
    const int64_t n = x.NumElements();
    std::string folded;
    int64_t kept = 0;
    // Pass 1 counts what stays (the output shape), pass 2 writes it.
    auto keep = [&](const std::string& s) {
      if (stopwords_.empty()) return true;
      if (case_sensitive_) return !stopwords_.contains(s);
      mapper_.Map(s, /*upper=*/false, folded);
      return !stopwords_.contains(folded);
    };
    for (int64_t i = 0; i < n; ++i) kept += keep(in[i]) ? 1 : 0;
    const int64_t out_n = std::max<int64_t>(kept, 1);
    Tensor* y = ctx.output(0, DataType::kString, two_d ? Shape{1, out_n} : Shape{out_n});
    std::string* out = y->mutable_data<std::string>();
    if (kept == 0) {
      out[0].clear();
      return absl::OkStatus();
    }
    int64_t j = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (!keep(in[i])) continue;
      if (action_ == Action::kNone) {
        out[j++] = in[i];
      } else {
        mapper_.Map(in[i], action_ == Action::kUpper, out[j++]);
      }
    }
    return absl::OkStatus();
  }

 private:
  enum class Action : uint8_t { kNone, kLower, kUpper };
  explicit StringNormalizerKernel(const std::string& locale) : mapper_(locale) {}

  CaseMapper mapper_;
  Action action_ = Action::kNone;
  bool case_sensitive_ = false;
  absl::flat_hash_set<std::string> stopwords_;  // lower-cased unless case_sensitive_
};

// TfIdfVectorizer(X [C] or [N, C] of int32/int64 or strings): counts, per row, the pool's
// n-grams of min_gram_length..max_gram_length items taken every (skip + 1) positions for every
// skip up to max_skip_count (1-grams once per position), and writes
// Y[row, ngram_indexes[i]] = count (TF), min(count, 1) * weight (IDF) or count * weight (TFIDF).
class TfIdfKernel final : public Kernel {
 public:
  bool AcceptsStringInputs() const override { return true; }

  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
    const Node& node = init.node();
    auto kernel = std::unique_ptr<TfIdfKernel>(new TfIdfKernel());
    LS_ASSIGN_OR_RETURN(kernel->min_n_, node.GetInt("min_gram_length", std::nullopt));
    LS_ASSIGN_OR_RETURN(kernel->max_n_, node.GetInt("max_gram_length", std::nullopt));
    LS_ASSIGN_OR_RETURN(kernel->max_skip_, node.GetInt("max_skip_count", std::nullopt));
    LS_ASSIGN_OR_RETURN(std::string mode, node.GetString("mode", std::nullopt));
    LS_ASSIGN_OR_RETURN(std::vector<int64_t> counts, node.GetInts("ngram_counts", std::nullopt));
    LS_ASSIGN_OR_RETURN(std::vector<int64_t> indexes, node.GetInts("ngram_indexes", std::nullopt));
    LS_ASSIGN_OR_RETURN(std::vector<int64_t> pool_ints,
                        node.GetInts("pool_int64s", std::vector<int64_t>{}));
    LS_ASSIGN_OR_RETURN(std::vector<std::string> pool_strings,
                        StringsAttribute(node, "pool_strings"));
    const Attribute* weights = node.FindAttribute("weights");
    if (mode == "TF") {
      kernel->mode_ = Mode::kTf;
    } else if (mode == "IDF") {
      kernel->mode_ = Mode::kIdf;
    } else if (mode == "TFIDF") {
      kernel->mode_ = Mode::kTfIdf;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("mode '", mode, "' is not one of TF, IDF, TFIDF"));
    }
    constexpr int64_t kMaxGram = 64;
    if (kernel->min_n_ < 1 || kernel->max_n_ < kernel->min_n_ || kernel->max_n_ > kMaxGram ||
        kernel->max_skip_ < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("min_gram_length ", kernel->min_n_, ", max_gram_length ", kernel->max_n_,
                       " and max_skip_count ", kernel->max_skip_, " are not a valid range"));
    }
    if (pool_ints.empty() == pool_strings.empty() && !(pool_ints.empty() && indexes.empty())) {
      return absl::InvalidArgumentError("exactly one of pool_int64s and pool_strings is needed");
    }
    kernel->strings_ = !pool_strings.empty();
    const int64_t pool_size = kernel->strings_ ? static_cast<int64_t>(pool_strings.size())
                                               : static_cast<int64_t>(pool_ints.size());
    // Group the pool into n-grams: ngram_counts[k] is where the (k+1)-grams start.
    int64_t ngram = 0;
    for (size_t k = 0; k < counts.size(); ++k) {
      const int64_t n = static_cast<int64_t>(k) + 1;
      const int64_t begin = counts[k];
      const int64_t end = k + 1 < counts.size() ? counts[k + 1] : pool_size;
      if (begin < 0 || end < begin || end > pool_size || (end - begin) % n != 0) {
        return absl::InvalidArgumentError(absl::StrCat("ngram_counts ", ListToString(counts),
                                                       " does not split a pool of ", pool_size,
                                                       " items into n-grams"));
      }
      for (int64_t at = begin; at < end; at += n, ++ngram) {
        int node_index = 0;
        for (int64_t i = 0; i < n; ++i) {
          node_index = kernel->strings_ ? kernel->Child(node_index, pool_strings[at + i])
                                        : kernel->Child(node_index, pool_ints[at + i]);
        }
        kernel->trie_[node_index].ngram = static_cast<int>(ngram);
      }
    }
    if (static_cast<int64_t>(indexes.size()) != ngram) {
      return absl::InvalidArgumentError(
          absl::StrCat("ngram_indexes has ", indexes.size(), " entries for ", ngram, " n-grams"));
    }
    int64_t width = 0;
    for (int64_t i : indexes) {
      if (i < 0 || i >= kMaxElements) {
        return absl::InvalidArgumentError(absl::StrCat("ngram_indexes holds ", i));
      }
      width = std::max(width, i + 1);
    }
    kernel->width_ = width;
    kernel->indexes_ = std::move(indexes);
    kernel->weights_.assign(ngram, 1.0f);
    if (weights != nullptr) {
      if (weights->type != Attribute::Type::kFloats ||
          static_cast<int64_t>(weights->floats.size()) != ngram) {
        return absl::InvalidArgumentError(
            absl::StrCat("weights must hold one float per n-gram (", ngram, ")"));
      }
      kernel->weights_ = weights->floats;
    }
    return std::unique_ptr<Kernel>(std::move(kernel));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const bool string_input = x.dtype() == DataType::kString;
    if (string_input != strings_ ||
        !(string_input || x.dtype() == DataType::kInt32 || x.dtype() == DataType::kInt64)) {
      return absl::InvalidArgumentError(
          absl::StrCat("input 'X' has element type ", DataTypeName(x.dtype()),
                       " but the pool holds ", strings_ ? "strings" : "integers"));
    }
    if (x.rank() != 1 && x.rank() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("input 'X' has shape ", x.shape().ToString(), ", expected [C] or [N, C]"));
    }
    const int64_t rows = x.rank() == 2 ? x.dim(0) : 1;
    const int64_t cols = x.dim(x.rank() - 1);
    Tensor* y =
        ctx.output(0, DataType::kFloat32, x.rank() == 2 ? Shape{rows, width_} : Shape{width_});
    float* out = y->mutable_data<float>();
    std::fill_n(out, y->NumElements(), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      float* row_out = out + r * width_;
      // Counts accumulate in the output row (by n-gram output index) and are weighted after.
      auto count = [&](int ngram) { row_out[indexes_[ngram]] += 1.0f; };
      if (min_n_ == 1) {
        for (int64_t i = 0; i < cols; ++i) {
          const int node = Lookup(0, x, r * cols + i);
          if (node >= 0 && trie_[node].ngram >= 0) count(trie_[node].ngram);
        }
      }
      if (max_n_ >= 2) {
        for (int64_t skip = 0; skip <= max_skip_; ++skip) {
          const int64_t step = skip + 1;
          for (int64_t start = 0; start < cols; ++start) {
            int node = 0;
            for (int64_t n = 1, at = start; n <= max_n_ && at < cols; ++n, at += step) {
              node = Lookup(node, x, r * cols + at);
              if (node < 0) break;
              if (n >= 2 && n >= min_n_ && trie_[node].ngram >= 0) count(trie_[node].ngram);
            }
            // Longer n-grams would start past the row: later starts only shorten them.
            if (start + step >= cols) break;
          }
        }
      }
      for (size_t g = 0; g < indexes_.size(); ++g) {
        float& v = row_out[indexes_[g]];
        if (mode_ == Mode::kIdf) {
          v = std::min(v, 1.0f) * weights_[g];
        } else if (mode_ == Mode::kTfIdf) {
          v *= weights_[g];
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  enum class Mode : uint8_t { kTf, kIdf, kTfIdf };
  struct TrieNode {
    absl::flat_hash_map<int64_t, int> int_children;
    absl::flat_hash_map<std::string, int> string_children;
    int ngram = -1;  // the n-gram ending here, or -1
  };

  TfIdfKernel() : trie_(1) {}

  int Child(int node, int64_t key) {
    auto [it, inserted] = trie_[node].int_children.emplace(key, static_cast<int>(trie_.size()));
    if (inserted) trie_.emplace_back();
    return it->second;
  }
  int Child(int node, const std::string& key) {
    auto [it, inserted] = trie_[node].string_children.emplace(key, static_cast<int>(trie_.size()));
    if (inserted) trie_.emplace_back();
    return it->second;
  }

  // The trie node after `node` for element `i` of x, or -1.
  int Lookup(int node, const Tensor& x, int64_t i) const {
    const TrieNode& t = trie_[node];
    if (strings_) {
      auto it = t.string_children.find(x.data<std::string>()[i]);
      return it == t.string_children.end() ? -1 : it->second;
    }
    const int64_t key = x.dtype() == DataType::kInt64 ? x.data<int64_t>()[i] : x.data<int32_t>()[i];
    auto it = t.int_children.find(key);
    return it == t.int_children.end() ? -1 : it->second;
  }

  int64_t min_n_ = 1, max_n_ = 1, max_skip_ = 0;
  Mode mode_ = Mode::kTf;
  bool strings_ = false;
  int64_t width_ = 0;
  std::vector<int64_t> indexes_;
  std::vector<float> weights_;
  std::vector<TrieNode> trie_;
};

}  // namespace

void RegisterStringKernels(KernelRegistry& registry) {
  registry.Register("StringNormalizer", FactoryOf<StringNormalizerKernel>());
  registry.Register("TfIdfVectorizer", FactoryOf<TfIdfKernel>());
}

}  // namespace loopserve::engine::native
