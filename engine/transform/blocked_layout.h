#pragma once

#include "engine/transform/pass.h"

namespace loopserve::engine::transform {

// Keeps chains of convolutions in the layout oneDNN's convolutions choose on this CPU (nChw16c on
// AVX-512 jit kernels, nChw8c on AVX2, nhwc where its brgemm kernels lead: Sapphire Rapids), with
// reorders only at the chain's edges, instead of a reorder into and out of that layout around
// every Conv (its kernel's staging: ~40% of PP-OCRv4's detector's oneDNN time).
//
// A blocked value is an explicit tensor of its own shape (dnnl/layout.h: [N, C / b, H, W, b] for
// nChw<b>c, [N, H, W, C] for nhwc) standing for the plain [N, C, H, W]. Only 4-D float32 values
// whose channel count C is known and a multiple of 16 are blocked (so neither block pads), and
// only these nodes touch one:
//   - a Conv with constant float32 4-D weights (fused post-ops: one-element constant operands
//     only) reads its input 0 blocked (attribute `_blocked_src` = 1) when C_in % 16 == 0 and writes
//     its result blocked (`_blocked_dst` = 1) when M % 16 == 0 and a reader takes it blocked; a
//     plain input or result is reordered inside the kernel (the chain's entry and exit);
//   - elementwise ops (activations; Add / Sub / Mul / Div / Max / Min; `_Elementwise`) whose
//     inputs are blocked values or one-element float32 constants: numpy broadcasting over the
//     held tensors is the plain op's, since every blocked operand has the same C;
//   - Concat along the channels (axis 1 or -3) of blocked values: the blocks (nhwc: the last
//     axis) concatenate.
// A blocked value that something else reads (another op, a subgraph, the graph's outputs) gets a
// `_BlockedToPlain` node right after its producer, writing the original value: the branch's edge.
// In the nhwc layout an elementwise op also takes a plain operand of known rank <= 4 (declared,
// or a Resize of a chain value: a feature pyramid's upsampled branch) through a `_PlainToBlocked`
// node. A chain whose reorders (plain Conv inputs and results, the two reorder nodes) would be
// as many as its Convs would make on their own (two each, none for a pointwise one) stays plain.
// The blocked copy is named "<value>/blocked"; `looprun --dump_plan` shows the Conv attributes.
class BlockedLayoutPass final : public Pass {
 public:
  const char* name() const override { return "blocked_layout"; }
  absl::Status Run(Graph& graph, const TransformContext& context,
                   std::vector<std::string>& log) const override;
};

// The internal op that reorders a blocked value into its plain layout [N, C, H, W].
inline constexpr char kBlockedToPlainOp[] = "_BlockedToPlain";
// The internal op that reorders a plain float32 tensor of rank <= 4 (left-padded with ones to
// [N, C, H, W]) into the chain's layout: an elementwise op's plain operand (nhwc only).
inline constexpr char kPlainToBlockedOp[] = "_PlainToBlocked";

}  // namespace loopserve::engine::transform
