#include "engine/kernels/native/recurrent.h"

#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/vector_math.h"
#include "engine/runtime/thread_mode.h"

namespace loopserve::engine::native {
namespace {

using Kind = RecurrentActivation::Kind;

// The canonical gate letters (oneDNN's order) of each cell.
const char* CanonicalGates(RecurrentCell cell) {
  switch (cell) {
    case RecurrentCell::kLstm:
      return "ifco";
    case RecurrentCell::kGru:
      return "zrh";
    case RecurrentCell::kRnn:
      return "i";
  }
  return "";
}

// ONNX's (and OpenVINO's) peephole order i, o, f, read into the canonical i, f, o.
constexpr int kPeepholeSource[3] = {0, 2, 1};

struct ActivationInfo {
  const char* name;
  Kind kind;
  bool has_alpha;
  float alpha;
  bool has_beta;
  float beta;
};

// Defaults are those of the ONNX operators of the same names.
constexpr ActivationInfo kActivations[] = {
    {"sigmoid", Kind::kSigmoid, false, 0, false, 0},
    {"tanh", Kind::kTanh, false, 0, false, 0},
    {"relu", Kind::kRelu, false, 0, false, 0},
    {"affine", Kind::kAffine, true, 1.0f, true, 0.0f},
    {"leakyrelu", Kind::kLeakyRelu, true, 0.01f, false, 0},
    {"thresholdedrelu", Kind::kThresholdedRelu, true, 1.0f, false, 0},
    {"scaledtanh", Kind::kScaledTanh, true, 1.0f, true, 1.0f},
    {"hardsigmoid", Kind::kHardSigmoid, true, 0.2f, true, 0.5f},
    {"elu", Kind::kElu, true, 1.0f, false, 0},
    {"softsign", Kind::kSoftsign, false, 0, false, 0},
    {"softplus", Kind::kSoftplus, false, 0, false, 0},
};

void Clip(float* x, int64_t n, float clip) {
  if (clip <= 0) return;
  for (int64_t i = 0; i < n; ++i) x[i] = std::min(std::max(x[i], -clip), clip);
}

// The elementwise function (engine/ir/eltwise_fn.h) a kind is, with the activation's alpha and
// beta; kCount for the two the table has no row for.
EltwiseFn TableFunction(Kind kind) {
  switch (kind) {
    case Kind::kSigmoid:
      return EltwiseFn::kSigmoid;
    case Kind::kTanh:
      return EltwiseFn::kTanh;
    case Kind::kRelu:
      return EltwiseFn::kRelu;
    case Kind::kAffine:
      return EltwiseFn::kLinear;
    case Kind::kLeakyRelu:
      return EltwiseFn::kLeakyRelu;
    case Kind::kHardSigmoid:
      return EltwiseFn::kHardSigmoid;
    case Kind::kElu:
      return EltwiseFn::kElu;
    case Kind::kSoftsign:
      return EltwiseFn::kSoftsign;
    case Kind::kSoftplus:
      return EltwiseFn::kSoftplus;
    case Kind::kThresholdedRelu:
    case Kind::kScaledTanh:
      break;
  }
  return EltwiseFn::kCount;
}

// On the vector math (the CPU's ISA), like every elementwise function of the table.
void Activate(const RecurrentActivation& a, float* x, int64_t n) {
  switch (a.kind) {
    case Kind::kThresholdedRelu:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] > a.alpha ? x[i] : 0.0f;
      return;
    case Kind::kScaledTanh:
      UnaryF32(VecUnary::kLinear, x, x, n, a.beta, 0.0f);
      UnaryF32(VecUnary::kTanh, x, x, n);
      UnaryF32(VecUnary::kLinear, x, x, n, a.alpha, 0.0f);
      return;
    default:
      UnaryF32(TableFunction(a.kind), x, x, n, a.alpha, a.beta);
      return;
  }
}

// Row-major C = alpha A op(B) + beta C on oneDNN's sgemm (JIT, AVX-512/AVX2 by the CPU).
void Sgemm(bool transpose_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] *= beta;
    }
    return;
  }
  // oneDNN's sgemm forks the OpenMP team for any size; a small product (one step's projection
  // of a batch of one) runs faster than the fork on the calling thread alone.
  ScopedOneOpenMpThread one_thread(m * n * k < kOpenMpParallelWork);
  dnnl_sgemm('N', transpose_b ? 'T' : 'N', m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

// The transpose of rows [row0, row0 + rows) of the row-major [*, cols] `src`: [cols, rows].
Tensor TransposeRows(const float* src, int64_t row0, int64_t rows, int64_t cols) {
  Tensor t(DataType::kFloat32, Shape{cols, rows});
  float* dst = t.mutable_data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[(row0 + r) * cols + c];
  }
  return t;
}

// Whether every direction's functions are sigmoid, tanh, tanh (what LstmFusedStep computes).
bool StandardLstm(const RecurrentSpec& spec) {
  if (static_cast<int>(spec.activations.size()) != 3 * spec.num_directions) return false;
  for (int d = 0; d < spec.num_directions; ++d) {
    const RecurrentActivation* a = spec.activations.data() + 3 * d;
    if (a[0].kind != Kind::kSigmoid || a[1].kind != Kind::kTanh || a[2].kind != Kind::kTanh) {
      return false;
    }
  }
  return true;
}

// Checks that `t` is float32 [num_directions (absent in the cell layout), dims...].
absl::Status CheckWeightShape(const RecurrentSpec& spec, const Tensor& t, const char* name,
                              std::initializer_list<int64_t> dims) {
  Shape::Dims want;
  if (spec.layout != RecurrentLayout::kOpenVinoCell) want.push_back(spec.num_directions);
  want.insert(want.end(), dims.begin(), dims.end());
  if (t.dtype() != DataType::kFloat32 || t.shape() != Shape(want)) {
    return absl::InvalidArgumentError(absl::StrCat("input '", name, "' is ",
                                                   DataTypeName(t.dtype()), t.shape().ToString(),
                                                   ", expected float32", Shape(want).ToString()));
  }
  return absl::OkStatus();
}

// One direction's bias in canonical gate order, from `b` (summed per gate, or W's and R's
// biases side by side); linear_before_reset keeps R's h-gate bias apart after the gates.
void CanonicalBias(const RecurrentSpec& spec, const Tensor& b, const int* source, int64_t dir,
                   float* bias) {
  const int64_t h = spec.hidden;
  const int g = spec.gates();
  const int64_t gh = g * h;
  const int bias_gates = spec.bias_gates();
  const bool lbr = bias_gates > g;
  if (spec.bias_summed) {
    const float* src = b.data<float>() + dir * bias_gates * h;
    for (int k = 0; k < g; ++k) std::memcpy(bias + k * h, src + source[k] * h, sizeof(float) * h);
    if (lbr) std::memcpy(bias + g * h, src + g * h, sizeof(float) * h);
    return;
  }
  const float* wb = b.data<float>() + dir * 2 * gh;
  const float* rb = wb + gh;
  for (int k = 0; k < g; ++k) {
    const bool h_gate_of_lbr = lbr && k == 2;
    for (int64_t j = 0; j < h; ++j) {
      bias[k * h + j] = wb[source[k] * h + j] + (h_gate_of_lbr ? 0.0f : rb[source[k] * h + j]);
    }
  }
  if (lbr) std::memcpy(bias + g * h, rb + source[2] * h, sizeof(float) * h);
}

// The packed copies of R the steps use, when `pack` and the CPU allow: the fused LSTM step, else
// PackedGemv (GRU without linear_before_reset: its h gate apart).
void PackRecurrentWeights(const RecurrentSpec& spec, bool pack, RecurrentWeights& out) {
  const int64_t d = spec.num_directions;
  const int64_t h = spec.hidden;
  const int64_t gh = spec.gates() * h;
  out.packed_r.clear();
  out.packed_r_h.clear();
  out.fused_lstm.clear();
  // The fused step's packed copy of R is bounded like PackedGemv's (hidden <= 512), so a large
  // layer makes no second copy of R (16 MB at hidden 1024) and keeps the per-step sgemm.
  if (pack && spec.cell == RecurrentCell::kLstm && LstmFusedStep::Available() &&
      StandardLstm(spec) && h * gh <= PackedGemv::kMaxElements) {
    for (int64_t dir = 0; dir < d; ++dir) {
      out.fused_lstm.push_back(
          std::make_unique<LstmFusedStep>(out.r.data<float>() + dir * gh * h, h));
    }
    return;
  }
  if (pack && PackedGemv::Available() && h * gh <= PackedGemv::kMaxElements) {
    const bool split = spec.cell == RecurrentCell::kGru && !spec.linear_before_reset;
    for (int64_t dir = 0; dir < d; ++dir) {
      const float* rd = out.r.data<float>() + dir * gh * h;
      const int64_t rows = split ? 2 * h : gh;
      out.packed_r.push_back(std::make_unique<PackedGemv>(TransposeRows(rd, 0, rows, h),
                                                          PackedGemv::Activation::kNone));
      if (split) {
        out.packed_r_h.push_back(std::make_unique<PackedGemv>(TransposeRows(rd, 2 * h, h, h),
                                                              PackedGemv::Activation::kNone));
      }
    }
  }
}

}  // namespace

absl::StatusOr<std::vector<RecurrentActivation>> ParseRecurrentActivations(
    const std::vector<std::string>& names, const std::vector<float>& alphas,
    const std::vector<float>& betas) {
  std::vector<RecurrentActivation> out;
  size_t next_alpha = 0, next_beta = 0;
  for (const std::string& name : names) {
    const std::string lower = absl::AsciiStrToLower(name);
    const ActivationInfo* info = nullptr;
    for (const ActivationInfo& candidate : kActivations) {
      if (lower == candidate.name) info = &candidate;
    }
    if (info == nullptr) {
      return absl::UnimplementedError(absl::StrCat("activation '", name, "' is not supported"));
    }
    RecurrentActivation a;
    a.kind = info->kind;
    a.alpha = info->alpha;
    a.beta = info->beta;
    if (info->has_alpha && next_alpha < alphas.size()) a.alpha = alphas[next_alpha++];
    if (info->has_beta && next_beta < betas.size()) a.beta = betas[next_beta++];
    out.push_back(a);
  }
  return out;
}

absl::Status CanonicalRecurrentWeights(const RecurrentSpec& spec, const Tensor& w, const Tensor& r,
                                       const Tensor* b, const Tensor* p, bool pack,
                                       RecurrentWeights& out) {
  const bool cell = spec.layout == RecurrentLayout::kOpenVinoCell;
  const int64_t d = spec.num_directions;
  const int64_t h = spec.hidden;
  const int g = spec.gates();
  const int64_t gh = g * h;
  if (w.rank() != (cell ? 2 : 3)) {
    return absl::InvalidArgumentError(
        absl::StrCat("input 'W' has rank ", w.rank(), ", expected ", cell ? 2 : 3));
  }
  const int64_t input = w.dim(w.rank() - 1);
  LS_RETURN_IF_ERROR(CheckWeightShape(spec, w, "W", {gh, input}));
  LS_RETURN_IF_ERROR(CheckWeightShape(spec, r, "R", {gh, h}));
  const int bias_gates = spec.bias_gates();
  if (b != nullptr) {
    LS_RETURN_IF_ERROR(
        CheckWeightShape(spec, *b, "B", {spec.bias_summed ? bias_gates * h : 2 * gh}));
  }
  const bool peephole = p != nullptr && spec.cell == RecurrentCell::kLstm;
  if (peephole) LS_RETURN_IF_ERROR(CheckWeightShape(spec, *p, "P", {3 * h}));

  // Source gate index of each canonical gate.
  const std::string canonical = CanonicalGates(spec.cell);
  int source[4] = {};
  for (int k = 0; k < g; ++k) {
    source[k] = static_cast<int>(spec.gate_order.find(canonical[k]));
  }

  out.input_size = input;
  out.w.Resize(DataType::kFloat32, Shape{d, gh, input});
  out.r.Resize(DataType::kFloat32, Shape{d, gh, h});
  out.bias.Resize(DataType::kFloat32, Shape{d, bias_gates * h});
  std::fill_n(out.bias.mutable_data<float>(), out.bias.NumElements(), 0.0f);
  for (int64_t dir = 0; dir < d; ++dir) {
    for (int k = 0; k < g; ++k) {
      std::memcpy(out.w.mutable_data<float>() + (dir * gh + k * h) * input,
                  w.data<float>() + (dir * gh + source[k] * h) * input, sizeof(float) * h * input);
      std::memcpy(out.r.mutable_data<float>() + (dir * gh + k * h) * h,
                  r.data<float>() + (dir * gh + source[k] * h) * h, sizeof(float) * h * h);
    }
    if (b != nullptr) {
      CanonicalBias(spec, *b, source, dir, out.bias.mutable_data<float>() + dir * bias_gates * h);
    }
  }
  out.peephole = Tensor();
  if (peephole) {
    out.peephole.Resize(DataType::kFloat32, Shape{d, 3 * h});
    for (int64_t dir = 0; dir < d; ++dir) {
      for (int k = 0; k < 3; ++k) {
        std::memcpy(out.peephole.mutable_data<float>() + (dir * 3 + k) * h,
                    p->data<float>() + (dir * 3 + kPeepholeSource[k]) * h, sizeof(float) * h);
      }
    }
  }
  PackRecurrentWeights(spec, pack, out);
  return absl::OkStatus();
}

absl::StatusOr<RecurrentShape> ResolveRecurrentShape(const RecurrentSpec& spec, const Shape& x) {
  const bool cell = spec.layout == RecurrentLayout::kOpenVinoCell;
  if (x.rank() != (cell ? 2 : 3)) {
    return absl::InvalidArgumentError(
        absl::StrCat("input 'X' has shape ", x.ToString(), ", expected rank ", cell ? 2 : 3));
  }
  RecurrentShape s;
  const int64_t d = spec.num_directions;
  const int64_t h = spec.hidden;
  switch (spec.layout) {
    case RecurrentLayout::kSequenceMajor:
      s.steps = x[0];
      s.batch = x[1];
      s.input = x[2];
      s.x_t = s.batch * s.input;
      s.x_b = s.input;
      s.row_t = s.batch;
      s.row_b = 1;
      s.y_t = d * s.batch * h;
      s.y_d = s.batch * h;
      s.y_b = h;
      s.s_d = s.batch * h;
      s.s_b = h;
      break;
    case RecurrentLayout::kBatchMajor:
    case RecurrentLayout::kOpenVinoSequence:
      s.batch = x[0];
      s.steps = x[1];
      s.input = x[2];
      s.x_t = s.input;
      s.x_b = s.steps * s.input;
      s.row_t = 1;
      s.row_b = s.steps;
      if (spec.layout == RecurrentLayout::kBatchMajor) {
        s.y_t = d * h;
        s.y_d = h;
        s.y_b = s.steps * d * h;
      } else {
        s.y_t = h;
        s.y_d = s.steps * h;
        s.y_b = d * s.steps * h;
      }
      s.s_d = h;
      s.s_b = d * h;
      break;
    case RecurrentLayout::kOpenVinoCell:
      s.steps = 1;
      s.batch = x[0];
      s.input = x[1];
      s.x_t = 0;
      s.x_b = s.input;
      s.row_b = 1;
      s.s_b = h;
      break;
  }
  return s;
}

Shape RecurrentOutputShape(const RecurrentSpec& spec, const RecurrentShape& s) {
  const int64_t d = spec.num_directions;
  switch (spec.layout) {
    case RecurrentLayout::kSequenceMajor:
      return Shape{s.steps, d, s.batch, spec.hidden};
    case RecurrentLayout::kBatchMajor:
      return Shape{s.batch, s.steps, d, spec.hidden};
    case RecurrentLayout::kOpenVinoSequence:
      return Shape{s.batch, d, s.steps, spec.hidden};
    case RecurrentLayout::kOpenVinoCell:
      break;
  }
  return Shape{s.batch, spec.hidden};
}

Shape RecurrentStateShape(const RecurrentSpec& spec, const RecurrentShape& s) {
  const int64_t d = spec.num_directions;
  switch (spec.layout) {
    case RecurrentLayout::kSequenceMajor:
      return Shape{d, s.batch, spec.hidden};
    case RecurrentLayout::kBatchMajor:
    case RecurrentLayout::kOpenVinoSequence:
      return Shape{s.batch, d, spec.hidden};
    case RecurrentLayout::kOpenVinoCell:
      break;
  }
  return Shape{s.batch, spec.hidden};
}

namespace {

// One direction of one run: the time loop over a batch, on the scratch buffers.
class DirectionRunner {
 public:
  DirectionRunner(const RecurrentSpec& spec, const RecurrentWeights& weights,
                  const RecurrentShape& shape, const RecurrentIo& io, RecurrentScratch& scratch,
                  int dir, InterruptPacer* pacer)
      : pacer_(pacer),
        spec_(spec),
        weights_(weights),
        s_(shape),
        io_(io),
        scratch_(scratch),
        dir_(dir),
        h_(spec.hidden),
        gh_(spec.gates() * spec.hidden),
        reverse_(spec.num_directions == 2 ? dir == 1 : spec.reverse),
        acts_(spec.activations.data() + dir * spec.functions()),
        w_(weights.w.data<float>() + dir * gh_ * weights.input_size),
        r_(weights.r.data<float>() + dir * gh_ * spec.hidden),
        bias_(weights.bias.data<float>() + dir * spec.bias_gates() * spec.hidden),
        peephole_(weights.peephole.defined()
                      ? weights.peephole.data<float>() + dir * 3 * spec.hidden
                      : nullptr) {}

  // False when the pacer says the run must stop.
  bool Run() {
    const int64_t t_steps = s_.steps, batch = s_.batch, h = h_;
    if (!Project()) return false;
    float* h_prev = scratch_.h[0].mutable_data<float>();
    float* h_next = scratch_.h[1].mutable_data<float>();
    float* c = spec_.cell == RecurrentCell::kLstm ? scratch_.c.mutable_data<float>() : nullptr;
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t at = dir_ * s_.s_d + b * s_.s_b;
      if (io_.h0 != nullptr) {
        std::memcpy(h_prev + b * h, io_.h0 + at, sizeof(float) * h);
      } else {
        std::fill_n(h_prev + b * h, h, 0.0f);
      }
      if (c != nullptr) {
        if (io_.c0 != nullptr) {
          std::memcpy(c + b * h, io_.c0 + at, sizeof(float) * h);
        } else {
          std::fill_n(c + b * h, h, 0.0f);
        }
      }
    }
    const float* projected = scratch_.projected.data<float>();
    float* gates = scratch_.gates.mutable_data<float>();
    const LstmFusedStep* fused = spec_.cell == RecurrentCell::kLstm && !weights_.fused_lstm.empty()
                                     ? weights_.fused_lstm[dir_].get()
                                     : nullptr;
    const bool packed = fused == nullptr && batch == 1 && !weights_.packed_r.empty();
    LstmFusedStep::Args fused_args;
    if (fused != nullptr) {
      fused_args.batch = batch;
      fused_args.c = c;
      fused_args.projected = scratch_.projected_rows.data();
      fused_args.active = io_.lengths != nullptr ? scratch_.active.data() : nullptr;
      fused_args.peephole = peephole_;
      fused_args.clip = spec_.clip;
      fused_args.input_forget = spec_.input_forget;
    }
    for (int64_t step = 0; step < t_steps; ++step) {
      bool any = false;
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t length = Length(b);
        scratch_.active[b] = step < length;
        if (step >= length) {
          std::fill_n(gates + b * gh_, gh_, 0.0f);
          continue;
        }
        any = true;
        const int64_t t = reverse_ ? length - 1 - step : step;
        if (fused != nullptr) {
          scratch_.projected_rows[b] = projected + Row(t, b) * gh_;
        } else if (!packed) {
          std::memcpy(gates + b * gh_, projected + Row(t, b) * gh_, sizeof(float) * gh_);
        }
      }
      if (!any) break;  // every sequence has ended
      if (fused != nullptr) {
        fused_args.h_prev = h_prev;
        fused_args.h_next = h_next;
        // Alternate sweeps: the blocks read last are still in cache (lstm_fused.h).
        fused_args.descending = (step & 1) != 0;
        fused->Run(fused_args);
      } else {
        Recur(packed,
              packed ? projected + Row(reverse_ ? Length(0) - 1 - step : step, 0) * gh_ : nullptr,
              h_prev, h_next);
      }
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t length = Length(b);
        float* hn = h_next + b * h;
        if (step >= length) {
          std::memcpy(hn, h_prev + b * h, sizeof(float) * h);
          continue;
        }
        const int64_t t = reverse_ ? length - 1 - step : step;
        if (io_.y != nullptr) {
          std::memcpy(io_.y + t * s_.y_t + dir_ * s_.y_d + b * s_.y_b, hn, sizeof(float) * h);
        }
      }
      std::swap(h_prev, h_next);
      // The step read the recurrent weights once per batch entry.
      if (pacer_ != nullptr &&
          !pacer_->Produced(static_cast<size_t>(batch * gh_ * h) * sizeof(float))) {
        return false;
      }
    }
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t at = dir_ * s_.s_d + b * s_.s_b;
      if (io_.y_h != nullptr) std::memcpy(io_.y_h + at, h_prev + b * h, sizeof(float) * h);
      if (io_.y_c != nullptr && c != nullptr) {
        std::memcpy(io_.y_c + at, c + b * h, sizeof(float) * h);
      }
    }
    return true;
  }

 private:
  int64_t Length(int64_t b) const { return io_.lengths != nullptr ? io_.lengths[b] : s_.steps; }
  // The row of X (and of the projection) holding step t of batch entry b.
  int64_t Row(int64_t t, int64_t b) const { return t * s_.row_t + b * s_.row_b; }

  // projected = X W^T + bias, for every step at once (the bias of GRU's Rbh is not in it). With a
  // pacer, in pieces of rows, a check after each; false when the run must stop.
  bool Project() {
    const int64_t rows = s_.steps * s_.batch;
    float* out = scratch_.projected.mutable_data<float>();
    const size_t row_bytes =
        static_cast<size_t>(gh_ * std::max<int64_t>(s_.input, 1)) * sizeof(float);
    // Pieces of at most about 2^28 multiply-adds (2-3 ms) and kChunkBytes of output, at least 64
    // rows: each sgemm call packs all of W again (64-row pieces of hidden 512's 4 MB W: 8% more
    // CPU time for the whole layer), and a narrow input makes the output the larger cost.
    const int64_t by_work = (int64_t{1} << 28) / std::max<int64_t>(gh_ * s_.input, 1);
    const int64_t by_output = static_cast<int64_t>(InterruptPacer::kChunkBytes / sizeof(float)) /
                              std::max<int64_t>(gh_, 1);
    const int64_t per_piece = pacer_ == nullptr
                                  ? std::max<int64_t>(rows, 1)
                                  : std::max<int64_t>(64, std::min(by_work, by_output));
    for (int64_t begin = 0; begin < rows; begin += per_piece) {
      const int64_t n = std::min(per_piece, rows - begin);
      Sgemm(true, n, gh_, s_.input, io_.x + begin * s_.input, s_.input, w_, s_.input, 0.0f,
            out + begin * gh_, gh_);
      for (int64_t row = begin; row < begin + n; ++row) {
        float* o = out + row * gh_;
        BinaryF32(VecBinary::kAdd, o, 1, bias_, 1, o, gh_);
      }
      if (pacer_ != nullptr && !pacer_->Produced(static_cast<size_t>(n) * row_bytes)) return false;
    }
    return true;
  }

  // One step: the recurrent products and the gate math, h_next from h_prev (and c in place).
  // With `packed` (batch 1), `projected_row` is the step's input projection.
  void Recur(bool packed, const float* projected_row, const float* h_prev, float* h_next) {
    if (spec_.cell == RecurrentCell::kGru) {
      if (spec_.linear_before_reset) {
        RecurGruLinearBeforeReset(packed, projected_row, h_prev, h_next);
      } else {
        RecurGru(packed, projected_row, h_prev, h_next);
      }
      return;
    }
    const int64_t batch = s_.batch, h = h_;
    float* gates = scratch_.gates.mutable_data<float>();
    if (packed) {
      weights_.packed_r[dir_]->Run(h_prev, projected_row, gates);
    } else {
      Sgemm(true, batch, gh_, h, h_prev, h, r_, h, 1.0f, gates, gh_);
    }
    if (spec_.cell == RecurrentCell::kRnn) {
      RnnGates(gates, h_next);
    } else {
      LstmGates(gates, h_next);
    }
  }

  // The GRU step: z, r from h_prev; then the h gate from r (.) h_prev.
  void RecurGru(bool packed, const float* projected_row, const float* h_prev, float* h_next) {
    const int64_t batch = s_.batch, h = h_;
    float* gates = scratch_.gates.mutable_data<float>();
    const uint8_t* active = scratch_.active.data();
    float* product = scratch_.gated.mutable_data<float>();  // [B, H]
    if (packed) {
      weights_.packed_r[dir_]->Run(h_prev, projected_row, gates);
    } else {
      Sgemm(true, batch, 2 * h, h, h_prev, h, r_, h, 1.0f, gates, gh_);
    }
    for (int64_t b = 0; b < batch; ++b) {
      if (!active[b]) continue;
      float* g = gates + b * gh_;
      Clip(g, 2 * h, spec_.clip);
      Activate(acts_[0], g, 2 * h);
      const float* rg = g + h;
      for (int64_t j = 0; j < h; ++j) product[b * h + j] = rg[j] * h_prev[b * h + j];
    }
    if (packed) {
      weights_.packed_r_h[dir_]->Run(product, projected_row + 2 * h, gates + 2 * h);
    } else {
      Sgemm(true, batch, h, h, product, h, r_ + 2 * h * h, h, 1.0f, gates + 2 * h, gh_);
    }
    for (int64_t b = 0; b < batch; ++b) {
      if (!active[b]) continue;
      float* g = gates + b * gh_;
      float* hh = g + 2 * h;
      Clip(hh, h, spec_.clip);
      Activate(acts_[1], hh, h);
      const float* z = g;
      const float* hp = h_prev + b * h;
      float* hn = h_next + b * h;
      for (int64_t j = 0; j < h; ++j) hn[j] = (1.0f - z[j]) * hh[j] + z[j] * hp[j];
    }
  }

  // The GRU step with linear_before_reset: product = h_prev R^T (all gates); z, r take their
  // part, the h gate r (.) (part + Rbh).
  void RecurGruLinearBeforeReset(bool packed, const float* projected_row, const float* h_prev,
                                 float* h_next) {
    const int64_t batch = s_.batch, h = h_;
    float* gates = scratch_.gates.mutable_data<float>();
    const uint8_t* active = scratch_.active.data();
    float* product = scratch_.gated.mutable_data<float>();  // [B, G*H]
    if (packed) {
      weights_.packed_r[dir_]->Run(h_prev, nullptr, product);
      std::memcpy(gates, projected_row, sizeof(float) * gh_);
    } else {
      Sgemm(true, batch, gh_, h, h_prev, h, r_, h, 0.0f, product, gh_);
    }
    const float* rbh = bias_ + 3 * h;
    for (int64_t b = 0; b < batch; ++b) {
      if (!active[b]) continue;
      float* g = gates + b * gh_;
      const float* p = product + b * gh_;
      for (int64_t j = 0; j < 2 * h; ++j) g[j] += p[j];
      Clip(g, 2 * h, spec_.clip);
      Activate(acts_[0], g, 2 * h);
      const float* rg = g + h;
      float* hh = g + 2 * h;
      for (int64_t j = 0; j < h; ++j) hh[j] += rg[j] * (p[2 * h + j] + rbh[j]);
      Clip(hh, h, spec_.clip);
      Activate(acts_[1], hh, h);
      const float* hp = h_prev + b * h;
      float* hn = h_next + b * h;
      for (int64_t j = 0; j < h; ++j) hn[j] = (1.0f - g[j]) * hh[j] + g[j] * hp[j];
    }
  }

  // The RNN's gate math over the products in `gates`: h_next = f(gates).
  void RnnGates(float* gates, float* h_next) {
    const int64_t batch = s_.batch, h = h_;
    const uint8_t* active = scratch_.active.data();
    for (int64_t b = 0; b < batch; ++b) {
      if (!active[b]) continue;
      float* g = gates + b * gh_;
      Clip(g, h, spec_.clip);
      Activate(acts_[0], g, h);
      std::memcpy(h_next + b * h, g, sizeof(float) * h);
    }
  }

  // The LSTM's gate math over the products in `gates` (i, f, c, o): c in place, h_next.
  void LstmGates(float* gates, float* h_next) {
    const int64_t batch = s_.batch, h = h_;
    const uint8_t* active = scratch_.active.data();
    float* c = scratch_.c.mutable_data<float>();
    for (int64_t b = 0; b < batch; ++b) {
      if (!active[b]) continue;
      float* gi = gates + b * gh_;
      float* gf = gi + h;
      float* gc = gi + 2 * h;
      float* go = gi + 3 * h;
      float* cb = c + b * h;
      // The spec clips "the input of activations": after the peephole term is added.
      if (peephole_ != nullptr) {
        for (int64_t j = 0; j < h; ++j) gi[j] += peephole_[j] * cb[j];
      }
      Clip(gi, h, spec_.clip);
      Activate(acts_[0], gi, h);
      if (spec_.input_forget) {
        // Coupled gates (ONNX Runtime's reading of input_forget): f = 1 - i.
        for (int64_t j = 0; j < h; ++j) gf[j] = 1.0f - gi[j];
      } else {
        if (peephole_ != nullptr) {
          for (int64_t j = 0; j < h; ++j) gf[j] += peephole_[h + j] * cb[j];
        }
        Clip(gf, h, spec_.clip);
        Activate(acts_[0], gf, h);
      }
      Clip(gc, h, spec_.clip);
      Activate(acts_[1], gc, h);
      for (int64_t j = 0; j < h; ++j) cb[j] = gf[j] * cb[j] + gi[j] * gc[j];
      if (peephole_ != nullptr) {
        for (int64_t j = 0; j < h; ++j) go[j] += peephole_[2 * h + j] * cb[j];
      }
      Clip(go, h, spec_.clip);
      Activate(acts_[0], go, h);
      std::memcpy(gc, cb, sizeof(float) * h);
      Activate(acts_[2], gc, h);
      float* hn = h_next + b * h;
      for (int64_t j = 0; j < h; ++j) hn[j] = go[j] * gc[j];
    }
  }

  InterruptPacer* const pacer_;
  const RecurrentSpec& spec_;
  const RecurrentWeights& weights_;
  const RecurrentShape& s_;
  const RecurrentIo& io_;
  RecurrentScratch& scratch_;
  const int dir_;
  const int64_t h_;
  const int64_t gh_;
  const bool reverse_;
  const RecurrentActivation* acts_;
  const float* w_;
  const float* r_;
  const float* bias_;
  const float* peephole_;
};

}  // namespace

absl::Status RunNativeRecurrent(const RecurrentSpec& spec, const RecurrentWeights& weights,
                                const RecurrentShape& shape, const RecurrentIo& io,
                                RecurrentScratch& scratch, InterruptPacer* pacer) {
  const int64_t h = spec.hidden;
  const int64_t gh = spec.gates() * h;
  scratch.projected.Resize(DataType::kFloat32, Shape{shape.steps * shape.batch, gh});
  scratch.gates.Resize(DataType::kFloat32, Shape{shape.batch, gh});
  scratch.h[0].Resize(DataType::kFloat32, Shape{shape.batch, h});
  scratch.h[1].Resize(DataType::kFloat32, Shape{shape.batch, h});
  scratch.c.Resize(DataType::kFloat32, Shape{shape.batch, h});
  scratch.gated.Resize(DataType::kFloat32, Shape{shape.batch, gh});
  scratch.active.resize(shape.batch);
  scratch.projected_rows.resize(shape.batch);
  if (io.y != nullptr && (io.lengths != nullptr || shape.batch == 0)) {
    const int64_t n = shape.steps * shape.batch * spec.num_directions * h;
    std::fill_n(io.y, n, 0.0f);
  }
  for (int dir = 0; dir < spec.num_directions; ++dir) {
    if (!DirectionRunner(spec, weights, shape, io, scratch, dir, pacer).Run()) {
      return pacer->status();
    }
  }
  return absl::OkStatus();
}

}  // namespace loopserve::engine::native
