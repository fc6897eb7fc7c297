// The chain activation layout's helpers and `_BlockedToPlain`, the reorder at a blocked chain's
// edge (engine/transform/blocked_layout.h).

#include "engine/kernels/dnnl/layout.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/dnnl/dnnl_kernel.h"
#include "engine/kernels/dnnl/dnnl_util.h"
#include "engine/kernels/dnnl/kernels.h"

namespace loopserve::engine {

namespace {

dnnl::memory::format_tag Tag(ChainLayout layout) {
  switch (layout) {
    case ChainLayout::kNChw16c:
      return dnnl::memory::format_tag::nChw16c;
    case ChainLayout::kNChw8c:
      return dnnl::memory::format_tag::nChw8c;
    case ChainLayout::kNhwc:
      return dnnl::memory::format_tag::nhwc;
    case ChainLayout::kPlain:
      break;
  }
  return dnnl::memory::format_tag::nchw;
}

int64_t Block(ChainLayout layout) {
  return layout == ChainLayout::kNChw16c ? 16 : layout == ChainLayout::kNChw8c ? 8 : 1;
}

ChainLayout Probe() {
  try {
    using tag = dnnl::memory::format_tag;
    const dnnl::memory::dims x = {1, 64, 28, 28};
    const dnnl::memory::desc any(x, dnnl::memory::data_type::f32, tag::any);
    const dnnl::memory::desc w({64, 64, 3, 3}, dnnl::memory::data_type::f32, tag::any);
    const dnnl::convolution_forward::primitive_desc pd(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                        dnnl::algorithm::convolution_direct, any, w, any, {1, 1},
                                        {0, 0}, {1, 1}, {1, 1}),
        CpuEngine());
    for (ChainLayout layout : {ChainLayout::kNChw16c, ChainLayout::kNChw8c, ChainLayout::kNhwc}) {
      if (pd.src_desc() == dnnl::memory::desc(x, dnnl::memory::data_type::f32, Tag(layout))) {
        return layout;
      }
    }
  } catch (const dnnl::error&) {
  }
  return ChainLayout::kPlain;
}

}  // namespace

ChainLayout ActivationLayout() {
  static const ChainLayout layout = Probe();
  return layout;
}

const char* ChainLayoutName(ChainLayout layout) {
  switch (layout) {
    case ChainLayout::kNChw16c:
      return "nChw16c";
    case ChainLayout::kNChw8c:
      return "nChw8c";
    case ChainLayout::kNhwc:
      return "nhwc";
    case ChainLayout::kPlain:
      break;
  }
  return "nchw";
}

Shape ChainShape(const Shape& plain) {
  const ChainLayout layout = ActivationLayout();
  if (layout == ChainLayout::kNhwc) return Shape{plain[0], plain[2], plain[3], plain[1]};
  const int64_t b = Block(layout);
  return Shape{plain[0], plain[1] / b, plain[2], plain[3], b};
}

absl::StatusOr<Shape> PlainOfChain(const Shape& held) {
  const ChainLayout layout = ActivationLayout();
  if (layout == ChainLayout::kNhwc && held.rank() == 4) {
    return Shape{held[0], held[3], held[1], held[2]};
  }
  if (layout != ChainLayout::kNhwc && layout != ChainLayout::kPlain && held.rank() == 5 &&
      held[4] == Block(layout)) {
    return Shape{held[0], held[1] * held[4], held[2], held[3]};
  }
  return absl::InvalidArgumentError(absl::StrCat("expected a tensor in the ",
                                                 ChainLayoutName(layout), " layout, got shape ",
                                                 held.ToString()));
}

dnnl::memory::desc ChainDesc(const Shape& plain) {
  const dnnl::memory::dims dims(plain.dims().begin(), plain.dims().end());
  return dnnl::memory::desc(dims, dnnl::memory::data_type::f32, Tag(ActivationLayout()));
}

int64_t ChainChannelMultiple() { return Block(ActivationLayout()); }

int64_t ChainConcatAxis() { return ActivationLayout() == ChainLayout::kNhwc ? 3 : 1; }

namespace {

// The two edge kernels of a chain: one oneDNN reorder from input 0 to output 0.
class ChainReorderKernel : public DnnlKernel {
 public:
  ChainReorderKernel() : DnnlKernel(/*num_inputs=*/1, /*required_inputs=*/1) {}

 protected:
  bool UsesDnnl(DataType type) const override { return type == DataType::kFloat32; }
  // `prepared` becomes the reorder `from` -> `to` (a kExecute op).
  static void SetReorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to,
                         PreparedOp& prepared) {
    const dnnl::reorder::primitive_desc pd(CpuEngine(), from, CpuEngine(), to,
                                           UserScratchpadAttr());
    prepared.primitive = dnnl::reorder(pd);
    prepared.bindings = {{DNNL_ARG_FROM, BufferSource::kInput0, from},
                         {DNNL_ARG_TO, BufferSource::kOutput, to}};
    AddScratchpad(pd, prepared);
  }
};

// `_BlockedToPlain`: one oneDNN reorder from the blocked tensor into its plain layout.
class BlockedToPlainKernel final : public ChainReorderKernel {
 protected:
  absl::StatusOr<std::unique_ptr<PreparedOp>> Prepare(
      DataType type, absl::Span<const Shape* const> shapes) const override {
    LS_ASSIGN_OR_RETURN(Shape plain, PlainOfChain(*shapes[0]));
    auto prepared = std::make_unique<PreparedOp>();
    prepared->output_shape = plain;
    if (plain.NumElements() == 0) {
      prepared->mode = PreparedOp::Mode::kEmpty;
      return prepared;
    }
    SetReorder(ChainDesc(plain), Desc(plain.dims(), type), *prepared);
    return prepared;
  }

  // The pass blocks float32 values only; any other type here is a broken graph.
  absl::Status RunReference(KernelContext& ctx) const override {
    return absl::InvalidArgumentError(
        absl::StrCat("a blocked tensor must be float32, got ", DataTypeName(ctx.input(0).dtype())));
  }
};

// `_PlainToBlocked`: one oneDNN reorder from a plain float32 tensor of rank <= 4 (read as
// [N, C, H, W] with ones in front) into the chain's layout.
class PlainToBlockedKernel final : public ChainReorderKernel {
 protected:
  absl::StatusOr<std::unique_ptr<PreparedOp>> Prepare(
      DataType type, absl::Span<const Shape* const> shapes) const override {
    const Shape& x = *shapes[0];
    if (x.rank() > 4) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a tensor joining a blocked chain has rank 4 at most, got shape ", x.ToString()));
    }
    std::vector<int64_t> dims(4 - x.rank(), 1);
    dims.insert(dims.end(), x.dims().begin(), x.dims().end());
    const Shape plain{absl::Span<const int64_t>(dims)};
    if (plain[1] % ChainChannelMultiple() != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("a tensor joining a ", ChainLayoutName(ActivationLayout()),
                       " chain has a channel count that is a "
                       "multiple of ",
                       ChainChannelMultiple(), ", got ", x.ToString()));
    }
    auto prepared = std::make_unique<PreparedOp>();
    prepared->output_shape = ChainShape(plain);
    if (plain.NumElements() == 0) {
      prepared->mode = PreparedOp::Mode::kEmpty;
      return prepared;
    }
    SetReorder(Desc(plain.dims(), type), ChainDesc(plain), *prepared);
    return prepared;
  }

  absl::Status RunReference(KernelContext& ctx) const override {
    return absl::InvalidArgumentError(
        absl::StrCat("a tensor joining a blocked chain must be float32, got ",
                     DataTypeName(ctx.input(0).dtype())));
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreatePlainToBlockedKernel(const KernelInit& init) {
  if (init.num_inputs() != 1 || init.node().outputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("expected 1 input and 1 output, got ",
                                                   init.num_inputs(), " and ",
                                                   init.node().outputs.size()));
  }
  return std::make_unique<PlainToBlockedKernel>();
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateBlockedToPlainKernel(const KernelInit& init) {
  if (init.num_inputs() != 1 || init.node().outputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("expected 1 input and 1 output, got ",
                                                   init.num_inputs(), " and ",
                                                   init.node().outputs.size()));
  }
  return std::make_unique<BlockedToPlainKernel>();
}

}  // namespace loopserve::engine
