#include "engine/kernels/native/elementwise_chain.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/kernels/native/vector_math_isa.h"

namespace loopserve::engine::native {
namespace {

// Rows shorter than this go to chain_rows a block at a time.
constexpr int64_t kShortRow = 256;

}  // namespace

ElementwiseChain::ElementwiseChain(int num_operands, std::vector<ChainStep> steps)
    : num_operands_(num_operands), steps_(std::move(steps)) {
  packed_.resize(steps_.size() * sizeof(vecmath::ChainOp));
  auto* ops = reinterpret_cast<vecmath::ChainOp*>(packed_.data());
  for (size_t k = 0; k < steps_.size(); ++k) {
    const ChainStep& s = steps_[k];
    ops[k].kind = s.kind == ChainStep::Kind::kUnary ? 0 : 1;
    ops[k].op = static_cast<uint8_t>(
        s.kind == ChainStep::Kind::kUnary ? static_cast<int>(s.unary) : static_cast<int>(s.binary));
    ops[k].operand = static_cast<uint8_t>(s.operand < 0 ? 0 : s.operand);
    ops[k].operand_first = s.operand_first ? 1 : 0;
    ops[k].alpha = s.alpha;
    ops[k].beta = s.beta;
  }
}

absl::StatusOr<ElementwiseChain::Prepared> ElementwiseChain::Prepare(
    absl::Span<const Shape* const> shapes) const {
  if (static_cast<int>(shapes.size()) != num_operands_ || num_operands_ < 1 ||
      num_operands_ > kMaxOperands) {
    return absl::InvalidArgumentError(
        absl::StrCat("an elementwise chain of ", num_operands_, " operands got ", shapes.size()));
  }
  Prepared prepared;
  prepared.output = *shapes[0];
  for (size_t i = 1; i < shapes.size(); ++i) {
    absl::StatusOr<Shape> out = BroadcastShapes(prepared.output, *shapes[i]);
    if (!out.ok()) return out.status();
    prepared.output = *std::move(out);
  }
  if (prepared.output.NumElements() > 0) {
    prepared.layout = reference::MakeBroadcastLayout(prepared.output, shapes);
  }
  return prepared;
}

void ElementwiseChain::Run(const Prepared& prepared, absl::Span<const float* const> operands,
                           float* out) const {
  if (prepared.output.NumElements() == 0) return;
  const reference::BroadcastLayout& layout = prepared.layout;
  const int64_t row = layout.dims.back();
  int64_t inner[kMaxOperands];
  for (int i = 0; i < num_operands_; ++i) inner[i] = layout.strides[i].back();
  if (const vecmath::Table* table = vecmath::ActiveTable()) {
    // Every step in registers: one load of each operand and one store per vector.
    const auto* ops = reinterpret_cast<const vecmath::ChainOp*>(packed_.data());
    const int num_ops = static_cast<int>(steps_.size());
    const float* rows[kMaxOperands];
    if (layout.rank() >= 2 && row < kShortRow) {
      // Short rows (the last dim of a [B, D, 16] state): one call per block of rows along the
      // second-innermost dim, so the walk and the call are paid per block, not per row.
      const int r = layout.rank();
      int64_t row_strides[kMaxOperands];
      for (int i = 0; i < num_operands_; ++i) row_strides[i] = layout.strides[i][r - 2];
      const int64_t count = layout.dims[r - 2];
      reference::ForEachInner(layout, 2, [&](int64_t out_offset, const int64_t* in_offsets) {
        for (int i = 0; i < num_operands_; ++i) rows[i] = operands[i] + in_offsets[i];
        table->chain_rows(ops, num_ops, rows, inner, row_strides, num_operands_, out + out_offset,
                          row, count);
      });
      return;
    }
    reference::ForEachRow(layout, [&](int64_t out_offset, const int64_t* in_offsets) {
      for (int i = 0; i < num_operands_; ++i) rows[i] = operands[i] + in_offsets[i];
      table->chain_row(ops, num_ops, rows, inner, out + out_offset, row);
    });
    return;
  }
  reference::ForEachRow(layout, [&](int64_t out_offset, const int64_t* in_offsets) {
    float* y = out + out_offset;
    size_t first = 0;
    const float* x0 = operands[0] + in_offsets[0];
    // The first step reads operand 0 directly; later steps work on `y` in place.
    if (!steps_.empty() && steps_[0].kind == ChainStep::Kind::kBinary) {
      const ChainStep& s = steps_[0];
      const float* xo = operands[s.operand] + in_offsets[s.operand];
      if (s.operand_first) {
        BinaryF32(s.binary, xo, inner[s.operand], x0, inner[0], y, row);
      } else {
        BinaryF32(s.binary, x0, inner[0], xo, inner[s.operand], y, row);
      }
      first = 1;
    } else if (!steps_.empty()) {
      const ChainStep& s = steps_[0];
      if (inner[0] == 1) {
        UnaryF32(s.unary, x0, y, row, s.alpha, s.beta);
      } else {
        for (int64_t j = 0; j < row; ++j) y[j] = x0[0];
        UnaryF32(s.unary, y, y, row, s.alpha, s.beta);
      }
      first = 1;
    } else if (y != x0) {
      if (inner[0] == 1) {
        std::memmove(y, x0, static_cast<size_t>(row) * sizeof(float));
      } else {
        for (int64_t j = 0; j < row; ++j) y[j] = x0[0];
      }
    }
    for (size_t k = first; k < steps_.size(); ++k) {
      const ChainStep& s = steps_[k];
      if (s.kind == ChainStep::Kind::kUnary) {
        UnaryF32(s.unary, y, y, row, s.alpha, s.beta);
      } else {
        const float* xo = operands[s.operand] + in_offsets[s.operand];
        if (s.operand_first) {
          BinaryF32(s.binary, xo, inner[s.operand], y, 1, y, row);
        } else {
          BinaryF32(s.binary, y, 1, xo, inner[s.operand], y, row);
        }
      }
    }
  });
}

}  // namespace loopserve::engine::native
