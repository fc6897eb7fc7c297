// Split: cuts a tensor into pieces along an axis.

#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/native/register_families.h"

namespace loopserve::engine::native {
namespace {

// Split(input, split?; axis, split, num_outputs): piece lengths come from the `split` attribute
// (opsets 2-12) or input (1, 13+); without them the axis is cut into equal pieces, one per output
// (opset 18 with num_outputs: ceil(dim / n) each, the last one shorter).
class SplitKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init, ListFrom from) {
    const Node& node = init.node();
    const int num_outputs = static_cast<int>(node.outputs.size());
    LS_RETURN_IF_ERROR(CheckArity(init, 1, from == ListFrom::kInput ? 2 : 1, 1 << 20));
    auto kernel = std::unique_ptr<SplitKernel>(new SplitKernel());
    LS_ASSIGN_OR_RETURN(kernel->axis_, node.GetInt("axis", 0));
    kernel->from_ = from;
    if (from == ListFrom::kAttribute) {
      LS_ASSIGN_OR_RETURN(kernel->attr_split_, OptionalIntsAttribute(node, "split"));
      if (kernel->attr_split_.has_value() &&
          static_cast<int>(kernel->attr_split_->size()) != num_outputs) {
        return absl::InvalidArgumentError(
            absl::StrCat("attribute split has ", kernel->attr_split_->size(),
                         " lengths but the node has ", num_outputs, " outputs"));
      }
    }
    if (node.opset >= 18) {
      const bool has_num = node.FindAttribute("num_outputs") != nullptr;
      if (has_num == init.has_input(1)) {
        return absl::InvalidArgumentError(
            "exactly one of input 'split' and attribute 'num_outputs' must be given");
      }
      if (has_num) {
        LS_ASSIGN_OR_RETURN(int64_t n, node.GetInt("num_outputs", std::nullopt));
        if (n != num_outputs) {
          return absl::InvalidArgumentError(absl::StrCat(
              "attribute num_outputs is ", n, " but the node has ", num_outputs, " outputs"));
        }
        kernel->uneven_ = true;
      }
    }
    return std::unique_ptr<Kernel>(std::move(kernel));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    if (x.rank() == 0) return absl::InvalidArgumentError("cannot split a scalar");
    LS_ASSIGN_OR_RETURN(const int axis, NormalizeAxis(axis_, x.rank()));
    const int64_t dim = x.dim(axis);
    const int n = ctx.num_outputs();
    DimVector lengths;
    if (from_ == ListFrom::kAttribute && attr_split_.has_value()) {
      lengths = *attr_split_;
    } else if (from_ == ListFrom::kInput && ctx.has_input(1)) {
      LS_RETURN_IF_ERROR(ReadIndexList(ctx.input(1), "input 'split'", &lengths));
      if (static_cast<int>(lengths.size()) != n) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input split has ", lengths.size(), " lengths but the node has ", n, " outputs"));
      }
    } else if (uneven_) {
      const int64_t piece = (dim + n - 1) / n;
      for (int k = 0; k < n; ++k)
        lengths.push_back(std::max<int64_t>(0, std::min(piece, dim - k * piece)));
    } else {
      if (dim % n != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "axis ", axis, " of size ", dim, " cannot be split evenly into ", n, " outputs"));
      }
      lengths.assign(n, dim / n);
    }
    int64_t sum = 0;
    for (int64_t len : lengths) {
      if (len < 0)
        return absl::InvalidArgumentError(absl::StrCat("split length ", len, " is negative"));
      if (len > dim) {  // also keeps the sum from overflowing
        return absl::InvalidArgumentError(
            absl::StrCat("split length ", len, " exceeds axis ", axis, " of size ", dim));
      }
      sum += len;
    }
    if (sum != dim) {
      return absl::InvalidArgumentError(absl::StrCat("split lengths ", ListToString(lengths),
                                                     " sum to ", sum, " but axis ", axis,
                                                     " has size ", dim));
    }
    const size_t elem = DataTypeSize(x.dtype());
    const int64_t outer = x.shape().NumElements(0, axis);
    const size_t inner = static_cast<size_t>(x.shape().NumElements(axis + 1, x.rank())) * elem;
    const char* src = static_cast<const char*>(x.raw_data());
    int64_t start = 0;
    for (int k = 0; k < n; ++k) {
      Shape shape = x.shape();
      shape[axis] = lengths[k];
      Tensor* y = ctx.output(k, x.dtype(), shape);
      char* dst = static_cast<char*>(y->mutable_raw_data());
      const size_t piece = static_cast<size_t>(lengths[k]) * inner;
      for (int64_t o = 0; o < outer && piece > 0; ++o) {
        std::memcpy(dst + o * piece, src + (o * dim + start) * inner, piece);
      }
      start += lengths[k];
    }
    return absl::OkStatus();
  }

 private:
  SplitKernel() = default;
  int64_t axis_ = 0;
  ListFrom from_ = ListFrom::kInput;
  std::optional<DimVector> attr_split_;
  bool uneven_ = false;
};

}  // namespace

void RegisterSplitKernels(KernelRegistry& registry) {
  registry.Register("Split", FactoryOf<SplitKernel>(ListFrom::kInput), 1, 1);
  registry.Register("Split", FactoryOf<SplitKernel>(ListFrom::kAttribute), 2, 12);
  registry.Register("Split", FactoryOf<SplitKernel>(ListFrom::kInput), 13);
}

}  // namespace loopserve::engine::native
