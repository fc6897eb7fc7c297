// Ops that work along one axis: CumSum, Hardmax, TopK.

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/native/register_families.h"
#include "engine/kernels/native/row_select.h"

namespace loopserve::engine::native {
namespace {

// The [outer, n, inner] view of a tensor around `axis`.
struct AxisView {
  int64_t outer;
  int64_t n;
  int64_t inner;
};

AxisView ViewAround(const Shape& shape, int axis) {
  return {shape.NumElements(0, axis), shape[axis], shape.NumElements(axis + 1, shape.rank())};
}

// CumSum(x, axis; exclusive, reverse): running sums along the axis given as a 1-element input.
class CumSumKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 2, 2));
    LS_ASSIGN_OR_RETURN(int64_t exclusive, init.node().GetInt("exclusive", 0));
    LS_ASSIGN_OR_RETURN(int64_t reverse, init.node().GetInt("reverse", 0));
    return std::unique_ptr<Kernel>(new CumSumKernel(exclusive != 0, reverse != 0));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const Tensor& a = ctx.input(1);
    if (a.NumElements() != 1 || (a.dtype() != DataType::kInt32 && a.dtype() != DataType::kInt64)) {
      return absl::InvalidArgumentError("axis must be an int32 or int64 scalar");
    }
    if (x.rank() == 0)
      return absl::InvalidArgumentError("cannot take the cumulative sum of a scalar");
    LS_ASSIGN_OR_RETURN(const int axis, NormalizeAxis(a.ScalarAsInt64(), x.rank()));
    const AxisView v = ViewAround(x.shape(), axis);
    const bool ok = DispatchNumeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      Tensor* y = ctx.output(0, x.dtype(), x.shape());
      const T* in = x.data<T>();
      T* out = y->mutable_data<T>();
      for (int64_t o = 0; o < v.outer; ++o) {
        for (int64_t i = 0; i < v.inner; ++i) {
          const int64_t base = o * v.n * v.inner + i;
          T acc{0};
          for (int64_t s = 0; s < v.n; ++s) {
            const int64_t k = reverse_ ? v.n - 1 - s : s;
            const int64_t at = base + k * v.inner;
            if (exclusive_) {
              out[at] = acc;
              acc = static_cast<T>(acc + in[at]);
            } else {
              acc = static_cast<T>(acc + in[at]);
              out[at] = acc;
            }
          }
        }
      }
    });
    if (!ok) return UnsupportedType("input", x.dtype());
    return absl::OkStatus();
  }

 private:
  CumSumKernel(bool exclusive, bool reverse) : exclusive_(exclusive), reverse_(reverse) {}
  bool exclusive_;
  bool reverse_;
};

// Hardmax(input; axis): 1 at the first maximum, 0 elsewhere. Before opset 13 the input is seen as
// a 2-D [prod(dims before axis), prod(dims from axis)] matrix; from 13 it works along the axis.
class HardmaxKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
    const bool coerce = init.node().opset < 13;
    LS_ASSIGN_OR_RETURN(int64_t axis, init.node().GetInt("axis", coerce ? 1 : -1));
    return std::unique_ptr<Kernel>(new HardmaxKernel(axis, coerce));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const int rank = x.rank();
    AxisView v{1, 1, 1};
    if (coerce_2d_) {
      if (axis_ < -rank || axis_ > rank) {
        return absl::InvalidArgumentError(
            absl::StrCat("axis ", axis_, " is out of range for rank ", rank));
      }
      const int axis = static_cast<int>(axis_ < 0 ? axis_ + rank : axis_);
      v = {x.shape().NumElements(0, axis), x.shape().NumElements(axis, rank), 1};
    } else {
      if (rank == 0) return absl::InvalidArgumentError("input must have rank >= 1");
      LS_ASSIGN_OR_RETURN(const int axis, NormalizeAxis(axis_, rank));
      v = ViewAround(x.shape(), axis);
    }
    bool ok = false;
    DispatchNumeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_floating_point_v<T>) {
        ok = true;
        Tensor* y = ctx.output(0, x.dtype(), x.shape());
        const T* in = x.data<T>();
        T* out = y->mutable_data<T>();
        std::fill_n(out, x.NumElements(), T{0});
        for (int64_t o = 0; o < v.outer; ++o) {
          for (int64_t i = 0; i < v.inner; ++i) {
            const int64_t base = o * v.n * v.inner + i;
            int64_t best = 0;
            for (int64_t k = 1; k < v.n; ++k) {
              if (in[base + best * v.inner] < in[base + k * v.inner]) best = k;
            }
            if (v.n > 0) out[base + best * v.inner] = T{1};
          }
        }
      }
    });
    if (!ok) return UnsupportedType("input", x.dtype());
    return absl::OkStatus();
  }

 private:
  HardmaxKernel(int64_t axis, bool coerce) : axis_(axis), coerce_2d_(coerce) {}
  int64_t axis_;
  bool coerce_2d_;
};

class TopKState : public KernelState {
 public:
  std::vector<int64_t> order;                   // index scratch for one row, reused across runs
  std::vector<std::pair<float, int64_t>> best;  // TopKByThreshold's, for float rows
};

// The k largest (`largest`) or smallest elements of a contiguous row of n, in order, equal values
// by lower index first, into out_v / out_i, by one pass that keeps the best k seen so far sorted
// and compares each further element with the worst of them (NextCandidateF32: whole AVX-512 /
// AVX2 vectors at a time; on random data O(k log(n / k)) elements ever enter). False, having
// written nothing, when the row holds a NaN (the caller sorts it instead). A beam search's TopK
// over beams x vocabulary logits (k 16 of 16000): 8% of beam_k16_h512's time in std::partial_sort.
// Past this k, sorted insertion into the kept list (O(k) an entry) can cost more than the sort
// on rows whose elements mostly enter (ascending scores).
constexpr int64_t kMaxThresholdK = 256;

bool TopKByThreshold(const float* row, int64_t n, int64_t k, bool largest, float* out_v,
                     int64_t* out_i, std::vector<std::pair<float, int64_t>>& best) {
  using T = float;
  // `a` ranks before `b` (a from a lower index than b when equal).
  auto ranks_before = [largest](T a, T b) { return largest ? b < a : a < b; };
  best.clear();
  for (int64_t j = 0; j < k; ++j) {
    const T v = row[j];
    if (v != v) return false;
    auto at = std::upper_bound(best.begin(), best.end(), v, [&](T value, const auto& entry) {
      return ranks_before(value, entry.first);
    });
    best.insert(at, {v, j});
  }
  // An element enters only if it ranks strictly before the worst kept: an equal one comes from a
  // higher index and ranks after it.
  // It replaces the worst and moves up past the kept ones it ranks before (an insertion step
  // from the back: a new entry usually lands near the bottom, so this moves few entries and its
  // branches predict better than a binary search's).
  auto admit = [&](int64_t j) {
    const T v = row[j];
    if (v != v) return false;
    if (!ranks_before(v, best.back().first)) return true;
    size_t at = best.size() - 1;
    while (at > 0 && ranks_before(v, best[at - 1].first)) {
      best[at] = best[at - 1];
      --at;
    }
    best[at] = {v, j};
    return true;
  };
  // Whole vectors of the rest are compared with the worst kept value; only the elements that
  // rank before it (or NaNs) stop the scan.
  for (int64_t j = NextCandidateF32(row, k, n, best.back().first, largest); j < n;
       j = NextCandidateF32(row, j + 1, n, best.back().first, largest)) {
    if (!admit(j)) return false;
  }
  for (int64_t e = 0; e < k; ++e) {
    out_v[e] = best[e].first;
    out_i[e] = best[e].second;
  }
  return true;
}

// TopK(X, K; axis, largest, sorted): the K largest (or smallest) elements along the axis and their
// int64 indices; equal values keep the lower index first. K is an attribute before opset 10.
class TopKKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    const Node& node = init.node();
    const bool k_attr = node.opset < 10;
    LS_RETURN_IF_ERROR(CheckArity(init, k_attr ? 1 : 2, k_attr ? 1 : 2, 2));
    if (node.outputs.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("expects 2 outputs (Values, Indices), got ", node.outputs.size()));
    }
    auto kernel = std::unique_ptr<TopKKernel>(new TopKKernel());
    LS_ASSIGN_OR_RETURN(kernel->axis_, node.GetInt("axis", -1));
    LS_ASSIGN_OR_RETURN(int64_t largest, node.GetInt("largest", 1));
    kernel->largest_ = largest != 0;
    if (k_attr) {
      LS_ASSIGN_OR_RETURN(kernel->attr_k_, node.GetInt("k", std::nullopt));
    }
    return std::unique_ptr<Kernel>(std::move(kernel));
  }

  std::unique_ptr<KernelState> CreateState() const override {
    return std::make_unique<TopKState>();
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    int64_t k = attr_k_;
    if (attr_k_ < 0) {
      const Tensor& kt = ctx.input(1);
      if (kt.NumElements() != 1 || !IsInteger(kt.dtype())) {
        return absl::InvalidArgumentError("K must be a 1-element integer tensor");
      }
      k = kt.ScalarAsInt64();
    }
    if (x.rank() == 0) return absl::InvalidArgumentError("input must have rank >= 1");
    LS_ASSIGN_OR_RETURN(const int axis, NormalizeAxis(axis_, x.rank()));
    const AxisView v = ViewAround(x.shape(), axis);
    if (k < 0 || k > v.n) {
      return absl::InvalidArgumentError(
          absl::StrCat("K = ", k, " is out of range for axis ", axis, " of size ", v.n));
    }
    Shape out_shape = x.shape();
    out_shape[axis] = k;
    std::vector<int64_t>& order = ctx.state<TopKState>()->order;
    order.resize(v.n);
    const bool ok = DispatchNumeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      Tensor* values = ctx.output(0, x.dtype(), out_shape);
      Tensor* indices = ctx.output(1, DataType::kInt64, out_shape);
      const T* in = x.data<T>();
      T* out_v = values->mutable_data<T>();
      int64_t* out_i = indices->mutable_data<int64_t>();
      for (int64_t o = 0; o < v.outer; ++o) {
        if constexpr (std::is_same_v<T, float>) {
          if (v.inner == 1 && k > 0 && k * 8 <= v.n && k <= kMaxThresholdK &&
              TopKByThreshold(in + o * v.n, v.n, k, largest_, out_v + o * k, out_i + o * k,
                              ctx.state<TopKState>()->best)) {
            continue;
          }
        }
        for (int64_t i = 0; i < v.inner; ++i) {
          const T* row = in + o * v.n * v.inner + i;
          for (int64_t j = 0; j < v.n; ++j) order[j] = j;
          auto before = [&](int64_t a, int64_t b) {
            const T va = row[a * v.inner];
            const T vb = row[b * v.inner];
            if (va == vb) return a < b;
            return largest_ ? vb < va : va < vb;
          };
          std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
          const int64_t out_base = o * k * v.inner + i;
          for (int64_t j = 0; j < k; ++j) {
            out_v[out_base + j * v.inner] = row[order[j] * v.inner];
            out_i[out_base + j * v.inner] = order[j];
          }
        }
      }
    });
    if (!ok) return UnsupportedType("input", x.dtype());
    return absl::OkStatus();
  }

 private:
  TopKKernel() = default;
  int64_t axis_ = -1;
  bool largest_ = true;
  int64_t attr_k_ = -1;  // -1: K is input 1
};

}  // namespace

void RegisterAxisKernels(KernelRegistry& registry) {
  registry.Register("CumSum", FactoryOf<CumSumKernel>(), 11);
  registry.Register("Hardmax", FactoryOf<HardmaxKernel>());
  registry.Register("TopK", FactoryOf<TopKKernel>());
}

}  // namespace loopserve::engine::native
