// Shape, Size, Reshape, Squeeze, Unsqueeze, Flatten: ops that only look at or rename dims. The
// reshaping ones copy the data (no aliasing: see IdentityKernel).

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/native/register_families.h"

namespace loopserve::engine::native {
namespace {

// Copies `x` into output 0 with `shape` (same element count).
void EmitReshaped(KernelContext& ctx, const Tensor& x, const Shape& shape) {
  // An input no one else reads (Step::takeable_inputs) moves to the output with its new shape:
  // the data stays where it is (a beam search's [beams, vocab] scores flattened for TopK).
  if (Tensor* y = ctx.TakeInput(0, 0); y != nullptr) {
    y->Reshape(shape);
    return;
  }
  CopyBytes(x, ctx.output(0, x.dtype(), shape));
}

class ShapeKernel final : public Kernel {
 public:
  bool AcceptsStringInputs() const override { return true; }
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
    const Node& node = init.node();
    LS_ASSIGN_OR_RETURN(int64_t start, node.GetInt("start", 0));
    std::optional<int64_t> end;
    if (node.FindAttribute("end") != nullptr) {
      LS_ASSIGN_OR_RETURN(end, node.GetInt("end", std::nullopt));
    }
    return std::unique_ptr<Kernel>(new ShapeKernel(start, end));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Shape& s = ctx.input(0).shape();
    const int64_t rank = s.rank();
    auto clamp = [rank](int64_t a) { return std::clamp(a < 0 ? a + rank : a, int64_t{0}, rank); };
    const int64_t begin = clamp(start_);
    const int64_t end = clamp(end_.value_or(rank));
    const int64_t n = std::max<int64_t>(end - begin, 0);
    Tensor* y = ctx.output(0, DataType::kInt64, Shape{n});
    int64_t* out = y->mutable_data<int64_t>();
    for (int64_t i = 0; i < n; ++i) out[i] = s[static_cast<int>(begin + i)];
    return absl::OkStatus();
  }

 private:
  ShapeKernel(int64_t start, std::optional<int64_t> end) : start_(start), end_(end) {}
  int64_t start_;
  std::optional<int64_t> end_;
};

class SizeKernel final : public Kernel {
 public:
  bool AcceptsStringInputs() const override { return true; }
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
    return std::unique_ptr<Kernel>(new SizeKernel());
  }
  absl::Status Run(KernelContext& ctx) const override {
    const int64_t n = ctx.input(0).NumElements();
    ctx.output(0, DataType::kInt64, Shape())->mutable_data<int64_t>()[0] = n;
    return absl::OkStatus();
  }
};

// Reshape: opset 1-4 take the target shape as the "shape" attribute, opset 5+ as input 1;
// opset 14 adds allowzero.
class ReshapeKernel final : public Kernel {
 public:
  bool AcceptsStringInputs() const override { return true; }
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init, ListFrom from) {
    const Node& node = init.node();
    auto kernel = std::unique_ptr<ReshapeKernel>(new ReshapeKernel());
    if (from == ListFrom::kAttribute) {
      LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
      LS_ASSIGN_OR_RETURN(auto shape, OptionalIntsAttribute(node, "shape"));
      if (!shape.has_value()) return absl::InvalidArgumentError("attribute 'shape' is required");
      kernel->attr_shape_ = *std::move(shape);
      kernel->from_attribute_ = true;
    } else {
      LS_RETURN_IF_ERROR(CheckArity(init, 2, 2));
      LS_ASSIGN_OR_RETURN(int64_t allowzero, node.GetInt("allowzero", 0));
      kernel->allowzero_ = allowzero != 0;
    }
    return std::unique_ptr<Kernel>(std::move(kernel));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    DimVector dims;
    if (from_attribute_) {
      dims = attr_shape_;
    } else {
      const Tensor& s = ctx.input(1);
      if (s.dtype() != DataType::kInt64) {
        return absl::InvalidArgumentError(
            absl::StrCat("input 'shape' must be int64, got ", DataTypeName(s.dtype())));
      }
      LS_RETURN_IF_ERROR(ReadIndexList(s, "input 'shape'", &dims));
    }
    int infer = -1;
    int64_t known = 1;
    bool has_zero = false;
    for (size_t i = 0; i < dims.size(); ++i) {
      int64_t& d = dims[i];
      if (d == -1) {
        if (infer >= 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("shape ", ListToString(dims), " has more than one -1"));
        }
        infer = static_cast<int>(i);
        continue;
      }
      if (d == 0 && !allowzero_) {
        if (static_cast<int>(i) >= x.rank()) {
          return absl::InvalidArgumentError(
              absl::StrCat("shape ", ListToString(dims), ": 0 at index ", i,
                           " copies a dim the input ", x.shape().ToString(), " does not have"));
        }
        d = x.dim(static_cast<int>(i));
      }
      if (d < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("shape ", ListToString(dims), " has the invalid dim ", d));
      }
      if (d == 0) has_zero = true;
      // Saturate: ValidateDims below rejects anything this large.
      known = (d != 0 && known > kMaxElements / d) ? kMaxElements + 1 : known * d;
    }
    const int64_t total = x.NumElements();
    if (infer >= 0) {
      if (allowzero_ && has_zero) {
        return absl::InvalidArgumentError(absl::StrCat(
            "shape ", ListToString(dims), " has both 0 and -1, which allowzero forbids"));
      }
      if (known == 0 || total % known != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("cannot reshape ", x.shape().ToString(), " to ", ListToString(dims)));
      }
      dims[infer] = total / known;
    }
    LS_ASSIGN_OR_RETURN(Shape shape, ValidateDims(dims, "reshape target"));
    if (shape.NumElements() != total) {
      return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", x.shape().ToString(), " (",
                                                     total, " elements) to ", shape.ToString()));
    }
    EmitReshaped(ctx, x, shape);
    return absl::OkStatus();
  }

 private:
  ReshapeKernel() = default;
  bool from_attribute_ = false;
  bool allowzero_ = false;
  DimVector attr_shape_;
};

// Squeeze / Unsqueeze: "axes" attribute before opset 13, input 1 from opset 13 (optional for
// Squeeze, required for Unsqueeze).
class SqueezeKernel final : public Kernel {
 public:
  bool AcceptsStringInputs() const override { return true; }
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init, bool unsqueeze,
                                                        ListFrom from) {
    const Node& node = init.node();
    auto kernel = std::unique_ptr<SqueezeKernel>(new SqueezeKernel());
    kernel->unsqueeze_ = unsqueeze;
    if (from == ListFrom::kAttribute) {
      LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
      LS_ASSIGN_OR_RETURN(kernel->attr_axes_, OptionalIntsAttribute(node, "axes"));
      if (kernel->unsqueeze_ && !kernel->attr_axes_.has_value()) {
        return absl::InvalidArgumentError("attribute 'axes' is required");
      }
    } else {
      LS_RETURN_IF_ERROR(CheckArity(init, kernel->unsqueeze_ ? 2 : 1, 2));
      kernel->axes_input_ = true;
    }
    return std::unique_ptr<Kernel>(std::move(kernel));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    DimVector axes;
    bool have_axes = false;
    if (axes_input_) {
      if (ctx.has_input(1)) {
        LS_RETURN_IF_ERROR(ReadIndexList(ctx.input(1), "input 'axes'", &axes));
        have_axes = true;
      }
    } else if (attr_axes_.has_value()) {
      axes = *attr_axes_;
      have_axes = true;
    }
    Shape shape;
    Shape::Dims& dims = shape.mutable_dims();
    if (unsqueeze_) {
      const int out_rank = x.rank() + static_cast<int>(axes.size());
      LS_RETURN_IF_ERROR(NormalizeAxes(axes, out_rank, "axes"));
      dims.resize(out_rank);
      int in = 0;
      for (int d = 0; d < out_rank; ++d) {
        const bool inserted = std::find(axes.begin(), axes.end(), d) != axes.end();
        dims[d] = inserted ? 1 : x.dim(in++);
      }
    } else {
      LS_RETURN_IF_ERROR(NormalizeAxes(axes, x.rank(), "axes"));
      for (int64_t a : axes) {
        if (x.dim(static_cast<int>(a)) != 1) {
          return absl::InvalidArgumentError(absl::StrCat("cannot squeeze axis ", a, " of shape ",
                                                         x.shape().ToString(),
                                                         ": its size is not 1"));
        }
      }
      for (int d = 0; d < x.rank(); ++d) {
        const bool squeezed = have_axes && !axes.empty()
                                  ? std::find(axes.begin(), axes.end(), d) != axes.end()
                                  : x.dim(d) == 1;
        if (!squeezed) dims.push_back(x.dim(d));
      }
    }
    EmitReshaped(ctx, x, shape);
    return absl::OkStatus();
  }

 private:
  SqueezeKernel() = default;
  bool unsqueeze_ = false;
  bool axes_input_ = false;
  std::optional<DimVector> attr_axes_;
};

class FlattenKernel final : public Kernel {
 public:
  bool AcceptsStringInputs() const override { return true; }
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
    LS_ASSIGN_OR_RETURN(int64_t axis, init.node().GetInt("axis", 1));
    if (axis < 0 && init.node().opset < 11) {
      return absl::InvalidArgumentError(absl::StrCat("axis ", axis, " is negative, which opset ",
                                                     init.node().opset, " does not allow"));
    }
    return std::unique_ptr<Kernel>(new FlattenKernel(axis));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const int rank = x.rank();
    if (axis_ < -rank || axis_ > rank) {
      return absl::InvalidArgumentError(
          absl::StrCat("axis ", axis_, " is out of range for rank ", rank));
    }
    const int axis = static_cast<int>(axis_ < 0 ? axis_ + rank : axis_);
    EmitReshaped(ctx, x, Shape{x.shape().NumElements(0, axis), x.shape().NumElements(axis, rank)});
    return absl::OkStatus();
  }

 private:
  explicit FlattenKernel(int64_t axis) : axis_(axis) {}
  int64_t axis_;
};

}  // namespace

void RegisterShapeKernels(KernelRegistry& registry) {
  registry.Register("Shape", FactoryOf<ShapeKernel>());
  registry.Register("Size", FactoryOf<SizeKernel>());
  registry.Register("Reshape", FactoryOf<ReshapeKernel>(ListFrom::kAttribute), 1, 4);
  registry.Register("Reshape", FactoryOf<ReshapeKernel>(ListFrom::kInput), 5);
  registry.Register("Squeeze", FactoryOf<SqueezeKernel>(false, ListFrom::kAttribute), 1, 12);
  registry.Register("Squeeze", FactoryOf<SqueezeKernel>(false, ListFrom::kInput), 13);
  registry.Register("Unsqueeze", FactoryOf<SqueezeKernel>(true, ListFrom::kAttribute), 1, 12);
  registry.Register("Unsqueeze", FactoryOf<SqueezeKernel>(true, ListFrom::kInput), 13);
  registry.Register("Flatten", FactoryOf<FlattenKernel>());
}

}  // namespace loopserve::engine::native
