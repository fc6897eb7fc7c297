// Ops on the last two dims: Trilu and Det.

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/native/register_families.h"

namespace loopserve::engine::native {
namespace {

// Trilu(input, k?; upper): keeps the upper (j - i >= k) or lower (j - i <= k) triangle of each
// matrix in the last two dims and zeroes the rest.
class TriluKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 2));
    LS_ASSIGN_OR_RETURN(int64_t upper, init.node().GetInt("upper", 1));
    return std::unique_ptr<Kernel>(new TriluKernel(upper != 0));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    if (x.rank() < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("input must have rank >= 2, got shape ", x.shape().ToString()));
    }
    int64_t k = 0;
    if (ctx.has_input(1)) {
      const Tensor& kt = ctx.input(1);
      if (kt.NumElements() != 1 || kt.dtype() != DataType::kInt64) {
        return absl::InvalidArgumentError("k must be an int64 scalar");
      }
      k = kt.ScalarAsInt64();
    }
    const int64_t rows = x.dim(x.rank() - 2);
    const int64_t cols = x.dim(x.rank() - 1);
    const int64_t mats = x.shape().NumElements(0, x.rank() - 2);
    Tensor* y = ctx.output(0, x.dtype(), x.shape());
    DispatchBySize(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* in = x.data<T>();
      T* out = y->mutable_data<T>();
      for (int64_t m = 0; m < mats; ++m) {
        for (int64_t i = 0; i < rows; ++i) {
          for (int64_t j = 0; j < cols; ++j) {
            const int64_t at = (m * rows + i) * cols + j;
            const bool keep = upper_ ? j - i >= k : j - i <= k;
            out[at] = keep ? in[at] : T{0};
          }
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  explicit TriluKernel(bool upper) : upper_(upper) {}
  bool upper_;
};

class DetState : public KernelState {
 public:
  std::vector<double> lu;  // one matrix, reused across runs
};

// Det(X): determinants of the square matrices in the last two dims, by LU decomposition with
// partial pivoting (in double).
class DetKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
    return std::unique_ptr<Kernel>(new DetKernel());
  }
  std::unique_ptr<KernelState> CreateState() const override { return std::make_unique<DetState>(); }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const int rank = x.rank();
    if (rank < 2 || x.dim(rank - 1) != x.dim(rank - 2)) {
      return absl::InvalidArgumentError(
          absl::StrCat("input must be square matrices [..., M, M], got ", x.shape().ToString()));
    }
    const int64_t m = x.dim(rank - 1);
    Shape out_shape(x.shape().dims().subspan(0, rank - 2));
    std::vector<double>& a = ctx.state<DetState>()->lu;
    a.resize(static_cast<size_t>(m * m));
    bool ok = false;
    DispatchNumeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_floating_point_v<T>) {
        ok = true;
        Tensor* y = ctx.output(0, x.dtype(), out_shape);
        const T* in = x.data<T>();
        T* out = y->mutable_data<T>();
        const int64_t mats = out_shape.NumElements();
        for (int64_t n = 0; n < mats; ++n) {
          for (int64_t e = 0; e < m * m; ++e) a[e] = static_cast<double>(in[n * m * m + e]);
          double det = 1;
          for (int64_t c = 0; c < m && det != 0; ++c) {
            int64_t pivot = c;
            for (int64_t r = c + 1; r < m; ++r) {
              if (std::fabs(a[r * m + c]) > std::fabs(a[pivot * m + c])) pivot = r;
            }
            if (a[pivot * m + c] == 0) {
              det = 0;
              break;
            }
            if (pivot != c) {
              for (int64_t j = 0; j < m; ++j) std::swap(a[c * m + j], a[pivot * m + j]);
              det = -det;
            }
            det *= a[c * m + c];
            for (int64_t r = c + 1; r < m; ++r) {
              const double f = a[r * m + c] / a[c * m + c];
              for (int64_t j = c; j < m; ++j) a[r * m + j] -= f * a[c * m + j];
            }
          }
          out[n] = static_cast<T>(det);
        }
      }
    });
    if (!ok) return UnsupportedType("input", x.dtype());
    return absl::OkStatus();
  }
};

}  // namespace

void RegisterMatrixKernels(KernelRegistry& registry) {
  registry.Register("Trilu", FactoryOf<TriluKernel>(), 14);
  registry.Register("Det", FactoryOf<DetKernel>(), 11);
}

}  // namespace loopserve::engine::native
