#pragma once

// The recurrent layers (ONNX RNN / GRU / LSTM and the OpenVINO cells and sequences lowered onto
// them): their load-time description, the conversion of their weights into one canonical form,
// and the native implementation that runs every combination oneDNN's RNN primitives lack
// (other activations, clip, coupled input and forget gates, sequences of different lengths).
//
// The native implementation is vectorised where the time goes: the input projection of all time
// steps is one sgemm, each step's recurrent product one sgemm (or, for a batch of one with
// constant weights, the packed one-row kernel fed the input projection as its bias), and the gate
// nonlinearities the array functions of vector_math.h (AVX-512 / AVX2 by native::ActiveIsa).
// The standard LSTM (sigmoid, tanh, tanh) with constant weights recurs on LstmFusedStep instead:
// the recurrent product and the gate math of a step in one pass over R (lstm_fused.h).
// Nothing is allocated per step; the per-frame scratch is reused across runs.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/kernels/native/lstm_fused.h"
#include "engine/kernels/native/packed_gemv.h"
#include "engine/runtime/run_context.h"
#include "engine/tensor/tensor.h"

namespace loopserve::engine::native {

enum class RecurrentCell : uint8_t { kRnn, kGru, kLstm };

// Where time, batch and direction sit in X, Y and the states.
enum class RecurrentLayout : uint8_t {
  kSequenceMajor,     // ONNX layout 0: X [T,B,I], Y [T,D,B,H], states [D,B,H]
  kBatchMajor,        // ONNX layout 1: X [B,T,I], Y [B,T,D,H], states [B,D,H]
  kOpenVinoSequence,  // *Sequence-5:   X [B,T,I], Y [B,D,T,H], states [B,D,H]
  kOpenVinoCell,      // *Cell:         X [B,I],   no Y,        states [B,H]; weights without D
};

// One of ONNX's activation functions with its alpha and beta.
struct RecurrentActivation {
  enum class Kind : uint8_t {
    kSigmoid,
    kTanh,
    kRelu,
    kAffine,
    kLeakyRelu,
    kThresholdedRelu,
    kScaledTanh,
    kHardSigmoid,
    kElu,
    kSoftsign,
    kSoftplus,
  };
  Kind kind = Kind::kTanh;
  float alpha = 0;
  float beta = 0;
};

// Reads activation names (case-insensitive) with ONNX's alpha/beta rule: each list is consumed in
// order by the functions that take that parameter; missing values take the function's default.
absl::StatusOr<std::vector<RecurrentActivation>> ParseRecurrentActivations(
    const std::vector<std::string>& names, const std::vector<float>& alphas,
    const std::vector<float>& betas);

// Everything about a recurrent node that is fixed at load.
struct RecurrentSpec {
  RecurrentCell cell = RecurrentCell::kLstm;
  int num_directions = 1;
  bool reverse = false;  // a single direction that runs from the last step to the first
  int64_t hidden = 0;
  RecurrentLayout layout = RecurrentLayout::kSequenceMajor;
  // Per direction, one per gate function: RNN f; GRU f, g; LSTM f, g, h.
  std::vector<RecurrentActivation> activations;
  float clip = 0;  // > 0: every gate's pre-activation is clipped to [-clip, clip]
  bool input_forget = false;
  bool linear_before_reset = false;
  // The gate order of the node's W, R and B as letters: ONNX LSTM "iofc", OpenVINO "fico"
  // (LSTMCell-1's weights_format); GRU "zrh"; RNN "i".
  std::string gate_order;
  // B holds one bias per gate (OpenVINO: Wb + Rb; GRU with linear_before_reset one more, Rbh)
  // instead of ONNX's Wb followed by Rb.
  bool bias_summed = false;

  int gates() const {
    return cell == RecurrentCell::kLstm ? 4 : cell == RecurrentCell::kGru ? 3 : 1;
  }
  int functions() const {
    return cell == RecurrentCell::kLstm ? 3 : cell == RecurrentCell::kGru ? 2 : 1;
  }
  // Gates of the canonical bias: one per gate, plus Rbh for GRU with linear_before_reset.
  int bias_gates() const {
    return gates() + (cell == RecurrentCell::kGru && linear_before_reset ? 1 : 0);
  }
};

// Weights in the canonical form both implementations read, for all directions: the gate order of
// oneDNN (LSTM i f c o; GRU z r h; RNN one gate) and
//   w        [D, G*H, I]
//   r        [D, G*H, H]
//   bias     [D, G'*H]  Wb + Rb per gate; GRU with linear_before_reset: z, r, Wbh, then Rbh
//   peephole [D, 3*H]   i f o (LSTM with P only; else undefined)
struct RecurrentWeights {
  int64_t input_size = 0;
  Tensor w;
  Tensor r;
  Tensor bias;
  Tensor peephole;
  // Batch-1 recurrent products on the packed kernel (PackedGemv::Available()), per direction:
  // all gates' R^T, or for GRU without linear_before_reset the z|r part and the h part apart.
  std::vector<std::unique_ptr<PackedGemv>> packed_r;
  std::vector<std::unique_ptr<PackedGemv>> packed_r_h;
  // The standard LSTM's fused steps (LstmFusedStep::Available(), 4 H x H at most
  // PackedGemv::kMaxElements), per direction; when present, packed_r is not built.
  std::vector<std::unique_ptr<LstmFusedStep>> fused_lstm;
};

// Converts the node's W [D?, G*H, I], R [D?, G*H, H], B and P (null when absent) into the
// canonical form; `pack` also prepares the batch-1 packed products or the fused LSTM steps.
// InvalidArgument naming the input whose shape does not fit the spec.
absl::Status CanonicalRecurrentWeights(const RecurrentSpec& spec, const Tensor& w, const Tensor& r,
                                       const Tensor* b, const Tensor* p, bool pack,
                                       RecurrentWeights& out);

// A layer's run-time extents and the element strides of its tensors.
struct RecurrentShape {
  int64_t steps = 0;  // T
  int64_t batch = 0;  // B
  int64_t input = 0;  // I
  // Element offsets of step t / batch b / direction d in X, Y and the state tensors, and the row
  // offsets of step t / batch b among X's rows of I elements.
  int64_t x_t = 0, x_b = 0;
  int64_t row_t = 0, row_b = 0;
  int64_t y_t = 0, y_b = 0, y_d = 0;
  int64_t s_b = 0, s_d = 0;
};

// T, B and I from X's shape under the spec's layout, with the strides of every tensor;
// InvalidArgument when X has the wrong rank.
absl::StatusOr<RecurrentShape> ResolveRecurrentShape(const RecurrentSpec& spec, const Shape& x);
// The shapes of Y and of the final states for `shape`.
Shape RecurrentOutputShape(const RecurrentSpec& spec, const RecurrentShape& shape);
Shape RecurrentStateShape(const RecurrentSpec& spec, const RecurrentShape& shape);

// The native implementation's per-frame buffers (reused from run to run).
struct RecurrentScratch {
  Tensor projected;             // [T*B, G*H]: X W^T + bias of one direction
  Tensor gates;                 // [B, G*H]
  Tensor h[2];                  // [B, H]: previous and next hidden state
  Tensor c;                     // [B, H]
  Tensor gated;                 // [B, G*H]: GRU's r (.) h, or its recurrent product
  std::vector<uint8_t> active;  // [B]: whether entry b's sequence runs at the current step
  std::vector<const float*> projected_rows;  // [B]: the fused LSTM step's input projections
};

// The tensors of one run. `lengths` is null or holds B sequence lengths within [0, T]; y, y_h,
// y_c may be null (omitted outputs).
struct RecurrentIo {
  const float* x = nullptr;
  const int32_t* lengths = nullptr;
  const float* h0 = nullptr;
  const float* c0 = nullptr;
  float* y = nullptr;
  float* y_h = nullptr;
  float* y_c = nullptr;
};

// Runs the layer. Outputs past a sequence's length are zeros; the final states are those of the
// last step each sequence ran (the initial state for an empty sequence). With a `pacer`, the run's
// deadline and cancellation are checked between pieces of the input projection and every few
// steps (about kChunkBytes of weights read), and its status returned when the run must stop.
absl::Status RunNativeRecurrent(const RecurrentSpec& spec, const RecurrentWeights& weights,
                                const RecurrentShape& shape, const RecurrentIo& io,
                                RecurrentScratch& scratch, InterruptPacer* pacer = nullptr);

}  // namespace loopserve::engine::native
