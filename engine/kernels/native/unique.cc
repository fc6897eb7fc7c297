// Unique: the distinct elements (or slices along an axis) of a tensor, with first-occurrence
// indices, inverse indices and counts.

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/native/register_families.h"

namespace loopserve::engine::native {
namespace {

class UniqueState : public KernelState {
 public:
  std::vector<int64_t> order;    // slice ids sorted (or in first-occurrence order)
  std::vector<int64_t> first;    // per unique slice: its first occurrence
  std::vector<int64_t> inverse;  // per slice: its unique id
  std::vector<int64_t> counts;
  std::vector<int64_t> pos, tmp_first, tmp_counts;  // for sorted=0
};

// Unique(X; axis, sorted) -> (Y, indices?, inverse_indices?, counts?). Without `axis` X is
// flattened. sorted=1 orders the unique values ascending (slices lexicographically), sorted=0
// keeps first-occurrence order.
class UniqueKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1, 4));
    std::optional<int64_t> axis;
    if (init.node().FindAttribute("axis") != nullptr) {
      LS_ASSIGN_OR_RETURN(int64_t a, init.node().GetInt("axis", std::nullopt));
      axis = a;
    }
    LS_ASSIGN_OR_RETURN(int64_t sorted, init.node().GetInt("sorted", 1));
    return std::unique_ptr<Kernel>(new UniqueKernel(axis, sorted != 0));
  }
  std::unique_ptr<KernelState> CreateState() const override {
    return std::make_unique<UniqueState>();
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    int axis = 0;
    int64_t outer = 1, n = x.NumElements(), inner = 1;
    if (axis_.has_value()) {
      if (x.rank() == 0) return absl::InvalidArgumentError("cannot take unique slices of a scalar");
      LS_ASSIGN_OR_RETURN(axis, NormalizeAxis(*axis_, x.rank()));
      outer = x.shape().NumElements(0, axis);
      n = x.dim(axis);
      inner = x.shape().NumElements(axis + 1, x.rank());
    }
    UniqueState& s = *ctx.state<UniqueState>();
    absl::Status status;
    const bool ok = DispatchNumericOrBool(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* in = x.data<T>();
      // Three-way comparison of slices a and b.
      auto compare = [&](int64_t a, int64_t b) {
        for (int64_t o = 0; o < outer; ++o) {
          const T* pa = in + (o * n + a) * inner;
          const T* pb = in + (o * n + b) * inner;
          for (int64_t i = 0; i < inner; ++i) {
            if (pa[i] < pb[i]) return -1;
            if (pb[i] < pa[i]) return 1;
          }
        }
        return 0;
      };
      s.order.resize(n);
      for (int64_t i = 0; i < n; ++i) s.order[i] = i;
      std::stable_sort(s.order.begin(), s.order.end(),
                       [&](int64_t a, int64_t b) { return compare(a, b) < 0; });
      // Group equal slices (their first occurrence leads each group after the stable sort).
      s.first.clear();
      s.counts.clear();
      s.inverse.assign(n, 0);
      for (int64_t k = 0; k < n; ++k) {
        const int64_t id = s.order[k];
        if (k == 0 || compare(s.order[k - 1], id) != 0) {
          s.first.push_back(id);
          s.counts.push_back(0);
        }
        s.inverse[id] = static_cast<int64_t>(s.first.size()) - 1;
        ++s.counts.back();
      }
      const int64_t u = static_cast<int64_t>(s.first.size());
      if (!sorted_) {
        // Renumber the groups by first occurrence: pos[g] is group g's new position.
        s.order.resize(u);
        for (int64_t g = 0; g < u; ++g) s.order[g] = g;
        std::sort(s.order.begin(), s.order.end(),
                  [&](int64_t a, int64_t b) { return s.first[a] < s.first[b]; });
        s.pos.resize(u);
        for (int64_t r = 0; r < u; ++r) s.pos[s.order[r]] = r;
        s.tmp_first.resize(u);
        s.tmp_counts.resize(u);
        for (int64_t g = 0; g < u; ++g) {
          s.tmp_first[s.pos[g]] = s.first[g];
          s.tmp_counts[s.pos[g]] = s.counts[g];
        }
        for (int64_t i = 0; i < n; ++i) s.inverse[i] = s.pos[s.inverse[i]];
        s.first.swap(s.tmp_first);
        s.counts.swap(s.tmp_counts);
      }
      Shape y_shape{u};
      if (axis_.has_value()) {
        y_shape = x.shape();
        y_shape[axis] = u;
      }
      T* y = ctx.output(0, x.dtype(), y_shape)->mutable_data<T>();
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t g = 0; g < u; ++g) {
          std::memcpy(y + (o * u + g) * inner, in + (o * n + s.first[g]) * inner,
                      static_cast<size_t>(inner) * sizeof(T));
        }
      }
      auto write = [&](int k, const std::vector<int64_t>& v) {
        if (ctx.num_outputs() <= k) return;
        Tensor* t = ctx.output(k, DataType::kInt64, Shape{static_cast<int64_t>(v.size())});
        std::copy(v.begin(), v.end(), t->mutable_data<int64_t>());
      };
      write(1, s.first);
      write(2, s.inverse);
      write(3, s.counts);
    });
    if (!ok) return UnsupportedType("input", x.dtype());
    return status;
  }

 private:
  UniqueKernel(std::optional<int64_t> axis, bool sorted) : axis_(axis), sorted_(sorted) {}
  std::optional<int64_t> axis_;
  bool sorted_;
};

}  // namespace

void RegisterUniqueKernels(KernelRegistry& registry) {
  registry.Register("Unique", FactoryOf<UniqueKernel>(), 11);
}

}  // namespace loopserve::engine::native
