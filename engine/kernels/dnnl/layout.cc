// The blocked activation layout's helpers and `_BlockedToPlain`, the reorder at a blocked chain's
// edge (engine/transform/blocked_layout.h).

#include "engine/kernels/dnnl/layout.h"

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/dnnl/dnnl_kernel.h"
#include "engine/kernels/dnnl/dnnl_util.h"
#include "engine/kernels/dnnl/kernels.h"

namespace loopserve::engine {

int64_t BlockedLayoutBlock() {
  static const int64_t block = [] {
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    return isa == dnnl::cpu_isa::avx512_core || isa == dnnl::cpu_isa::avx512_core_vnni ||
                   isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx
               ? int64_t{16}
               : int64_t{8};
  }();
  return block;
}

Shape BlockedShape(const Shape& plain, int64_t block) {
  return Shape{plain[0], plain[1] / block, plain[2], plain[3], block};
}

absl::StatusOr<Shape> PlainOfBlocked(const Shape& blocked) {
  if (blocked.rank() != 5 || (blocked[4] != 8 && blocked[4] != 16)) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a blocked [N, C / b, H, W, b] tensor (b 8 or 16), got shape ",
                     blocked.ToString()));
  }
  return Shape{blocked[0], blocked[1] * blocked[4], blocked[2], blocked[3]};
}

dnnl::memory::desc BlockedDesc(const Shape& plain, int64_t block) {
  const dnnl::memory::dims dims(plain.dims().begin(), plain.dims().end());
  return dnnl::memory::desc(
      dims, dnnl::memory::data_type::f32,
      block == 16 ? dnnl::memory::format_tag::nChw16c : dnnl::memory::format_tag::nChw8c);
}

namespace {

// `_BlockedToPlain`: one oneDNN reorder from the blocked tensor into its plain layout.
class BlockedToPlainKernel final : public DnnlKernel {
 public:
  BlockedToPlainKernel() : DnnlKernel(/*num_inputs=*/1, /*required_inputs=*/1) {}

 protected:
  bool UsesDnnl(DataType type) const override { return type == DataType::kFloat32; }

  absl::StatusOr<std::unique_ptr<PreparedOp>> Prepare(
      DataType type, absl::Span<const Shape* const> shapes) const override {
    LS_ASSIGN_OR_RETURN(Shape plain, PlainOfBlocked(*shapes[0]));
    auto prepared = std::make_unique<PreparedOp>();
    prepared->output_shape = plain;
    if (plain.NumElements() == 0) {
      prepared->mode = PreparedOp::Mode::kEmpty;
      return prepared;
    }
    const dnnl::memory::desc from = BlockedDesc(plain, (*shapes[0])[4]);
    const dnnl::memory::desc to = Desc(plain.dims(), type);
    const dnnl::reorder::primitive_desc pd(CpuEngine(), from, CpuEngine(), to,
                                           UserScratchpadAttr());
    prepared->primitive = dnnl::reorder(pd);
    prepared->bindings = {{DNNL_ARG_FROM, BufferSource::kInput0, from},
                          {DNNL_ARG_TO, BufferSource::kOutput, to}};
    AddScratchpad(pd, *prepared);
    return prepared;
  }

  // The pass blocks float32 values only; any other type here is a broken graph.
  absl::Status RunReference(KernelContext& ctx) const override {
    return absl::InvalidArgumentError(
        absl::StrCat("a blocked tensor must be float32, got ", DataTypeName(ctx.input(0).dtype())));
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateBlockedToPlainKernel(const KernelInit& init) {
  if (init.num_inputs() != 1 || init.node().outputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("expected 1 input and 1 output, got ",
                                                   init.num_inputs(), " and ",
                                                   init.node().outputs.size()));
  }
  return std::make_unique<BlockedToPlainKernel>();
}

}  // namespace loopserve::engine
