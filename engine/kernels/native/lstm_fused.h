#pragma once

// One LSTM time step with the recurrent product and the gate math fused: for each block of 16
// hidden units, the four gates' columns of h_prev R^T are accumulated in registers over a tile of
// batch rows, and while the tile is still in registers the step's input projection, the
// peepholes, clip, the sigmoid / tanh nonlinearities (the rational tanh of rational_tanh.h,
// sigmoid as 0.5 + 0.5 tanh(x / 2)) and the c / h update are applied; c and h are stored once.
// No gate array is written or read back, and the weights are read in one pass per row tile.
//
// R is packed once, at load, gate-interleaved: block j holds, for every k, the 16 columns of gate
// i, then f, c, o of hidden units [16 j, 16 j + 16) (zero past H). The blocks are visited in
// alternating order from one step to the next (`descending`): a 1 MB R (hidden 256) does not fit
// beside everything else in a 1 MB L2, and a cyclic sweep in one direction evicts each block just
// before it is needed again, while the reversed sweep starts on the blocks read last
// (bench/lstm_bound_bench.cc measures both).
//
// AVX-512 tiles of up to 6 rows x 4 gates (24 zmm accumulators); AVX2 (the same packing) tiles
// of 2 rows x 4 gates x 8 lanes, twice per block, and a single row as 4 gates x 16 lanes (so a
// batch-1 step reads each weight cache line once). Chosen at run time by native::ActiveIsa().
// Only the standard LSTM (sigmoid, tanh, tanh) runs here; other activations take the generic path.

#include <cstdint>

#include "engine/tensor/tensor.h"

namespace loopserve::engine::native {

class LstmFusedStep {
 public:
  static constexpr int64_t kBlock = 16;

  // Whether ActiveIsa() has a kernel (AVX-512F or AVX2 + FMA) and PackedGemv is enabled (the
  // switch tests and benchmarks use to compare against the generic path).
  static bool Available();

  // Packs r, the canonical [4 H, H] recurrent weights (gate order i f c o) of one direction.
  LstmFusedStep(const float* r, int64_t hidden);

  int64_t hidden() const { return h_; }
  int64_t blocks() const { return blocks_; }

  // What one step needs besides the weights. Row b of the batch: h_prev + b * H (read),
  // c + b * H (updated in place), h_next + b * H (written), projected[b] (the row's X W^T + bias,
  // 4 H values in gate order i f c o). Rows whose active[b] is 0 are neither read nor written
  // (`active` null: all rows run).
  struct Args {
    int64_t batch = 0;
    const float* h_prev = nullptr;
    float* c = nullptr;
    float* h_next = nullptr;
    const float* const* projected = nullptr;
    const uint8_t* active = nullptr;
    const float* peephole = nullptr;  // [3 H]: i f o, or null
    float clip = 0;                   // > 0: pre-activations clipped to [-clip, clip]
    bool input_forget = false;        // f = 1 - i
    bool descending = false;          // visit the blocks last to first
  };

  // Runs blocks [block_begin, block_end) of the step for every row. `h_next` must not alias
  // `h_prev`.
  void Run(const Args& args, int64_t block_begin, int64_t block_end) const;
  void Run(const Args& args) const { Run(args, 0, blocks_); }

 private:
  int64_t h_ = 0;
  int64_t blocks_ = 0;
  Tensor packed_;  // [blocks, H, 4, kBlock]
};

}  // namespace loopserve::engine::native
