// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (inference forms of the training losses).

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/native/index_util.h"
#include "engine/kernels/native/register_families.h"
#include "engine/kernels/native/vector_math.h"

namespace loopserve::engine::native {
namespace {

enum class LossReduction : uint8_t { kNone, kSum, kMean };

class LossState : public KernelState {
 public:
  std::vector<double> scratch;  // per-element losses and weights, reused across runs
  std::vector<float> row;       // one row's exponentials (float32 class rows)
  Tensor log_prob;              // SoftmaxCrossEntropyLoss's log-softmax when not an output
};

// out = log_softmax(in) along axis 1 of [n, c, d]. Float32 rows of contiguous classes (d == 1)
// take the vector max and exp-sum (`row` holds the exponentials); otherwise double per element.
template <typename T>
void LogSoftmax(const T* in, int64_t n, int64_t c, int64_t d, std::vector<float>& row, T* out) {
  if constexpr (std::is_same_v<T, float>) {
    if (d == 1 && c > 0) {
      row.resize(c);
      for (int64_t i = 0; i < n; ++i) {
        const float* x = in + i * c;
        const float mx = MaxF32(x, c);
        const double sum = ExpShiftSumF32(x, mx, row.data(), c);
        const float lse = static_cast<float>(mx + std::log(sum));
        for (int64_t k = 0; k < c; ++k) out[i * c + k] = x[k] - lse;
      }
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < d; ++j) {
      double mx = -INFINITY;
      for (int64_t k = 0; k < c; ++k) mx = std::max(mx, double(in[(i * c + k) * d + j]));
      double s = 0;
      for (int64_t k = 0; k < c; ++k) s += std::exp(double(in[(i * c + k) * d + j]) - mx);
      const double lse = mx + std::log(s);
      for (int64_t k = 0; k < c; ++k) {
        out[(i * c + k) * d + j] = static_cast<T>(double(in[(i * c + k) * d + j]) - lse);
      }
    }
  }
}

// Shared by both losses: for log-probabilities `logp` [N, C, d...] and labels [N, d...], the
// per-element loss -logp[n, label, d] * weight[label] (0 where label == ignore_index), reduced.
template <typename T>
absl::Status NllLoss(const T* logp, const Shape& shape, const Tensor& labels, const Tensor* weight,
                     std::optional<int64_t> ignore_index, LossReduction reduction,
                     std::vector<double>& scratch, KernelContext& ctx, DataType dtype) {
  const int64_t n = shape[0];
  const int64_t c = shape[1];
  const int64_t d = shape.NumElements(2, shape.rank());
  bool labels_ok = labels.rank() == shape.rank() - 1 && labels.dim(0) == n;
  for (int i = 1; labels_ok && i < labels.rank(); ++i) labels_ok = labels.dim(i) == shape[i + 1];
  if (!labels_ok) {
    return absl::InvalidArgumentError(absl::StrCat("labels ", labels.shape().ToString(),
                                                   " do not match input ", shape.ToString()));
  }
  if (weight != nullptr && (weight->rank() != 1 || weight->dim(0) != c)) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight must have shape [", c, "], got ", weight->shape().ToString()));
  }
  const int64_t count = n * d;
  scratch.resize(static_cast<size_t>(2 * count));
  double* loss = scratch.data();
  double* w = scratch.data() + count;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < d; ++j) {
      const int64_t e = i * d + j;
      const int64_t label = IndexAt(labels, e);
      if (ignore_index.has_value() && label == *ignore_index) {
        loss[e] = 0;
        w[e] = 0;
        continue;
      }
      if (label < 0 || label >= c) {
        return absl::InvalidArgumentError(
            absl::StrCat("label ", label, " is out of range for ", c, " classes"));
      }
      w[e] = weight != nullptr ? static_cast<double>(weight->data<T>()[label]) : 1.0;
      loss[e] = -static_cast<double>(logp[(i * c + label) * d + j]) * w[e];
    }
  }
  if (reduction == LossReduction::kNone) {
    T* out = ctx.output(0, dtype, labels.shape())->mutable_data<T>();
    for (int64_t e = 0; e < count; ++e) out[e] = static_cast<T>(loss[e]);
    return absl::OkStatus();
  }
  double sum = 0;
  double wsum = 0;
  for (int64_t e = 0; e < count; ++e) {
    sum += loss[e];
    wsum += w[e];
  }
  T* out = ctx.output(0, dtype, Shape{})->mutable_data<T>();
  out[0] = static_cast<T>(reduction == LossReduction::kSum ? sum : (wsum == 0 ? 0 : sum / wsum));
  return absl::OkStatus();
}

// NegativeLogLikelihoodLoss(input [N,C,d...], target [N,d...], weight? [C]; reduction,
// ignore_index) and SoftmaxCrossEntropyLoss(scores, labels, weights?; same attributes) ->
// (output, log_prob?), which first takes the log-softmax of scores along axis 1.
class LossKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init, bool softmax) {
    LS_RETURN_IF_ERROR(CheckArity(init, 2, 3, softmax ? 2 : 1));
    const Node& node = init.node();
    auto kernel = std::unique_ptr<LossKernel>(new LossKernel());
    kernel->softmax_ = softmax;
    LS_ASSIGN_OR_RETURN(std::string r, node.GetString("reduction", std::string("mean")));
    if (r == "none") {
      kernel->reduction_ = LossReduction::kNone;
    } else if (r == "sum") {
      kernel->reduction_ = LossReduction::kSum;
    } else if (r == "mean") {
      kernel->reduction_ = LossReduction::kMean;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown reduction '", r, "'"));
    }
    if (node.FindAttribute("ignore_index") != nullptr) {
      LS_ASSIGN_OR_RETURN(int64_t ignore, node.GetInt("ignore_index", std::nullopt));
      kernel->ignore_index_ = ignore;
    }
    return std::unique_ptr<Kernel>(std::move(kernel));
  }
  std::unique_ptr<KernelState> CreateState() const override {
    return std::make_unique<LossState>();
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const Tensor& labels = ctx.input(1);
    LS_RETURN_IF_ERROR(CheckIndexType(labels, "labels"));
    if (x.rank() < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("input must be [N, C, ...], got ", x.shape().ToString()));
    }
    const Tensor* weight = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    if (weight != nullptr && weight->dtype() != x.dtype()) {
      return TypeMismatch("weight", weight->dtype(), "input", x.dtype());
    }
    LossState& state = *ctx.state<LossState>();
    std::vector<double>& scratch = state.scratch;
    absl::Status status;
    bool ok = false;
    DispatchNumeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_floating_point_v<T>) {
        ok = true;
        const T* logp = x.data<T>();
        if (softmax_) {
          // log_prob goes to output 1 when the node has it, else to the state's scratch tensor.
          Tensor* lp = &state.log_prob;
          if (ctx.num_outputs() > 1) {
            lp = ctx.output(1, x.dtype(), x.shape());
          } else {
            lp->Resize(x.dtype(), x.shape());
          }
          T* out = lp->mutable_data<T>();
          LogSoftmax(x.data<T>(), x.dim(0), x.dim(1), x.shape().NumElements(2, x.rank()), state.row,
                     out);
          logp = out;
        }
        status = NllLoss<T>(logp, x.shape(), labels, weight, ignore_index_, reduction_, scratch,
                            ctx, x.dtype());
      }
    });
    if (!ok) return UnsupportedType("input", x.dtype());
    return status;
  }

 private:
  LossKernel() = default;
  bool softmax_ = false;
  LossReduction reduction_ = LossReduction::kMean;
  std::optional<int64_t> ignore_index_;
};

}  // namespace

void RegisterLossKernels(KernelRegistry& registry) {
  registry.Register("NegativeLogLikelihoodLoss", FactoryOf<LossKernel>(false), 12);
  registry.Register("SoftmaxCrossEntropyLoss", FactoryOf<LossKernel>(true), 12);
}

}  // namespace loopserve::engine::native
