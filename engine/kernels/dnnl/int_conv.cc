// ConvInteger and QLinearConv: 8-bit convolutions with zero points (per tensor for x, per tensor
// or per output channel for w), accumulated in int32; QLinearConv requantises with
// x_scale * w_scale / y_scale, rounding half to even, and saturates to the type of y_zero_point.
//
// The accumulation is an 8-bit matrix product on native::Int8Gemm (VNNI / AVX2, exact in int32,
// zero points applied through row and column sums): the group's weights (A, moved into the
// scratch once per group and run) times the im2col of the input (B), a block of output rows at a
// time: the block's columns (about kColumnBytes) and their packed copy stay in the core's cache,
// where the whole im2col of a large image (576 x 262144 bytes for 64 channels of 512 x 512 and a
// 3 x 3 kernel) would go through memory twice. Padding holds x's zero point, so it contributes 0.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/dnnl/kernels.h"
#include "engine/kernels/dnnl/window_attrs.h"
#include "engine/kernels/native/int8_gemm.h"

namespace loopserve::engine {
namespace {

// The im2col bytes of one block (and as many again packed): within a core's L2 cache.
constexpr int64_t kColumnBytes = int64_t{256} << 10;

bool Is8Bit(DataType t) { return t == DataType::kInt8 || t == DataType::kUint8; }

int32_t At8(const Tensor& t, int64_t i) {
  return t.dtype() == DataType::kInt8 ? t.data<int8_t>()[i] : t.data<uint8_t>()[i];
}

class IntConvState : public KernelState {
 public:
  std::vector<uint8_t> columns;  // [Cg * K, block] im2col, bytes of x (x's zero point outside)
  std::vector<int32_t> acc;      // [Mg, block] for QLinearConv's requantisation
  native::Int8Gemm product;      // the block's im2col, packed
  native::Int8GemmScratch scratch;
};

// The inputs of one run. ConvInteger: x, w, x_zero_point?, w_zero_point?. QLinearConv: x,
// x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B?.
struct IntConvOperands {
  const Tensor* x = nullptr;
  const Tensor* w = nullptr;
  const Tensor* x_zp = nullptr;
  const Tensor* w_zp = nullptr;
  const Tensor* x_scale = nullptr;  // QLinearConv only, as the rest
  const Tensor* w_scale = nullptr;
  const Tensor* y_scale = nullptr;
  const Tensor* y_zp = nullptr;
  const Tensor* bias = nullptr;
};

absl::StatusOr<IntConvOperands> CheckOperands(KernelContext& ctx, bool qlinear) {
  IntConvOperands in;
  in.x = &ctx.input(0);
  in.w = &ctx.input(qlinear ? 3 : 1);
  const int x_zp_input = 2;  // the same slot in both ops
  const int w_zp_input = qlinear ? 5 : 3;
  in.x_zp = ctx.has_input(x_zp_input) ? &ctx.input(x_zp_input) : nullptr;
  in.w_zp = ctx.has_input(w_zp_input) ? &ctx.input(w_zp_input) : nullptr;
  const Tensor& x = *in.x;
  const Tensor& w = *in.w;
  if (!Is8Bit(x.dtype()) || !Is8Bit(w.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat("x (", DataTypeName(x.dtype()), ") and w (",
                                                   DataTypeName(w.dtype()),
                                                   ") must be int8 or uint8"));
  }
  if (w.rank() < 1) return absl::InvalidArgumentError("w must have an output channel dimension");
  const int64_t m_total = w.dim(0);
  if (in.x_zp != nullptr && (in.x_zp->dtype() != x.dtype() || in.x_zp->NumElements() != 1)) {
    return absl::InvalidArgumentError("x_zero_point must be one value of x's type");
  }
  if (in.w_zp != nullptr && (in.w_zp->dtype() != w.dtype() ||
                             (in.w_zp->NumElements() != 1 && in.w_zp->NumElements() != m_total))) {
    return absl::InvalidArgumentError(
        "w_zero_point must be one value of w's type, or one per output channel");
  }
  if (!qlinear) return in;
  in.x_scale = &ctx.input(1);
  in.w_scale = &ctx.input(4);
  in.y_scale = &ctx.input(6);
  in.y_zp = &ctx.input(7);
  in.bias = ctx.has_input(8) ? &ctx.input(8) : nullptr;
  for (const Tensor* s : {in.x_scale, in.y_scale}) {
    if (s->dtype() != DataType::kFloat32 || s->NumElements() != 1) {
      return absl::InvalidArgumentError("x_scale and y_scale must be one float32");
    }
  }
  if (in.w_scale->dtype() != DataType::kFloat32 ||
      (in.w_scale->NumElements() != 1 && in.w_scale->NumElements() != m_total)) {
    return absl::InvalidArgumentError("w_scale must be one float32, or one per output channel");
  }
  if (!Is8Bit(in.y_zp->dtype()) || in.y_zp->NumElements() != 1) {
    return absl::InvalidArgumentError("y_zero_point must be one int8 or uint8");
  }
  if (in.bias != nullptr && (in.bias->dtype() != DataType::kInt32 || in.bias->rank() != 1 ||
                             in.bias->dim(0) != m_total)) {
    return absl::InvalidArgumentError(absl::StrCat("B must be int32 [", m_total, "]"));
  }
  return in;
}

// The im2col of one image's channel group, a block of output rows at a time: an output row is the
// run of output positions along the last spatial dim (its input positions step by the stride).
class Im2col {
 public:
  Im2col(const reference::Window& win, int64_t c_group, uint8_t pad)
      : win_(win), c_group_(c_group), pad_(pad), last_(win.rank - 1) {
    k_size_ = 1;
    for (int d = 0; d < win.rank; ++d) k_size_ *= win.kernel[d];
    in_size_ = 1;
    for (int d = 0; d < win.rank; ++d) in_size_ *= win.input[d];
    row_length_ = win.output[last_];
    rows_ = 1;
    for (int d = 0; d < last_; ++d) rows_ *= win.output[d];
    if (row_length_ == 0) rows_ = 0;
  }

  int64_t depth() const { return c_group_ * k_size_; }  // the product's k
  int64_t rows() const { return rows_; }                // output rows per image
  int64_t row_length() const { return row_length_; }    // positions per output row

  // columns[(c * K + k) * block + (r - row_begin) * row_length + o] = the input byte under tap k
  // of output position o of row r in channel c of `group` (the group's first channel plane), or
  // the pad byte; block = (row_end - row_begin) * row_length.
  void Fill(const uint8_t* group, int64_t row_begin, int64_t row_end, uint8_t* columns) const {
    const int64_t block = (row_end - row_begin) * row_length_;
    Shape::Dims k_index(win_.rank), out_index(win_.rank);
    for (int64_t k = 0; k < k_size_; ++k) {
      int64_t krem = k;
      for (int d = last_; d >= 0; --d) {
        k_index[d] = krem % win_.kernel[d];
        krem /= win_.kernel[d];
      }
      const int64_t first = k_index[last_] * win_.dilations[last_] - win_.pads_begin[last_];
      const int64_t step = win_.strides[last_];
      // o in [lo, hi) reads inside the input row: 0 <= o * step + first < input[last].
      const int64_t lo = std::min(row_length_, first >= 0 ? 0 : (-first + step - 1) / step);
      const int64_t hi =
          std::max(lo, std::min(row_length_, win_.input[last_] - first <= 0
                                                 ? 0
                                                 : (win_.input[last_] - first + step - 1) / step));
      for (int64_t row = row_begin; row < row_end; ++row) {
        // The outer dims' part of the input offset, once per row (the same for every channel).
        int64_t rem = row, offset = 0;
        bool inside = true;
        for (int d = last_ - 1; d >= 0; --d) {
          out_index[d] = rem % win_.output[d];
          rem /= win_.output[d];
        }
        for (int d = 0; d < last_; ++d) {
          const int64_t pos =
              out_index[d] * win_.strides[d] - win_.pads_begin[d] + k_index[d] * win_.dilations[d];
          inside = inside && pos >= 0 && pos < win_.input[d];
          offset = offset * win_.input[d] + pos;
        }
        for (int64_t c = 0; c < c_group_; ++c) {
          uint8_t* dst = columns + (c * k_size_ + k) * block + (row - row_begin) * row_length_;
          if (!inside) {
            std::memset(dst, pad_, row_length_);
            continue;
          }
          const uint8_t* src = group + c * in_size_ + offset * win_.input[last_] + first;
          if (lo > 0) std::memset(dst, pad_, lo);
          if (step == 1) {
            std::memcpy(dst + lo, src + lo, hi - lo);
          } else {
            for (int64_t o = lo; o < hi; ++o) dst[o] = src[o * step];
          }
          if (hi < row_length_) std::memset(dst + hi, pad_, row_length_ - hi);
        }
      }
    }
  }

 private:
  const reference::Window& win_;
  const int64_t c_group_;
  const uint8_t pad_;
  const int last_;
  int64_t k_size_, in_size_, row_length_, rows_;
};

// QLinearConv's epilogue for output channel `mo`: y = saturate(round_half_even((acc + B) *
// x_scale * w_scale / y_scale) + y_zero_point), `count` values of one row of acc into y.
void Requantize(const IntConvOperands& in, int64_t mo, const int32_t* acc, int64_t count, void* y) {
  const double scale = static_cast<double>(in.x_scale->data<float>()[0]) *
                       in.w_scale->data<float>()[in.w_scale->NumElements() == 1 ? 0 : mo] /
                       in.y_scale->data<float>()[0];
  const int32_t b = in.bias != nullptr ? in.bias->data<int32_t>()[mo] : 0;
  const int32_t yz = At8(*in.y_zp, 0);
  const bool is_signed = in.y_zp->dtype() == DataType::kInt8;
  const double lo = is_signed ? -128 : 0, hi = is_signed ? 127 : 255;
  for (int64_t p = 0; p < count; ++p) {
    const double q = std::nearbyint(static_cast<double>(acc[p] + b) * scale) + yz;
    // NaN (a zero y_scale on a zero sum) is the lowest value, as in QLinearMatMul and
    // QuantizeLinear (converting NaN to an integer is undefined).
    const double v = std::isnan(q) ? lo : std::min(std::max(q, lo), hi);
    if (is_signed) {
      static_cast<int8_t*>(y)[p] = static_cast<int8_t>(v);
    } else {
      static_cast<uint8_t*>(y)[p] = static_cast<uint8_t>(v);
    }
  }
}

class IntConvKernel final : public Kernel {
 public:
  IntConvKernel(reference::WindowAttrs attrs, int64_t group, bool qlinear)
      : attrs_(std::move(attrs)), group_(group), qlinear_(qlinear) {}

  std::unique_ptr<KernelState> CreateState() const override {
    return std::make_unique<IntConvState>();
  }

  absl::Status Run(KernelContext& ctx) const override {
    LS_ASSIGN_OR_RETURN(const IntConvOperands in, CheckOperands(ctx, qlinear_));
    reference::Window win;
    LS_ASSIGN_OR_RETURN(
        const Shape out_shape,
        reference::ConvShapes(in.x->shape(), in.w->shape(), nullptr, attrs_, group_, &win));
    if (win.rank < 1) return absl::InvalidArgumentError("x must have a spatial dimension");
    Tensor* y = ctx.output(0, qlinear_ ? in.y_zp->dtype() : DataType::kInt32, out_shape);
    if (y->NumElements() == 0) return absl::OkStatus();
    for (int64_t n = 0; n < in.x->dim(0); ++n) {
      for (int64_t g = 0; g < group_; ++g)
        ConvolveGroup(in, win, n, g, *y, *ctx.state<IntConvState>());
    }
    return absl::OkStatus();
  }

 private:
  // Output channels [g * Mg, (g + 1) * Mg) of image n, a block of output rows at a time.
  void ConvolveGroup(const IntConvOperands& in, const reference::Window& win, int64_t n, int64_t g,
                     Tensor& y, IntConvState& state) const {
    const Tensor& x = *in.x;
    const Tensor& w = *in.w;
    const int64_t channels = x.dim(1), c_group = channels / group_;
    const int64_t m_total = w.dim(0), m_group = m_total / group_;
    const int64_t in_size = x.shape().NumElements(2, x.rank());
    const int64_t positions = y.shape().NumElements(2, y.rank());
    const bool x_signed = x.dtype() == DataType::kInt8;
    const bool w_signed = w.dtype() == DataType::kInt8;
    // Padding holds x's zero point, so that it adds nothing once the zero point is subtracted.
    const uint8_t pad =
        in.x_zp != nullptr ? static_cast<const uint8_t*>(in.x_zp->raw_data())[0] : uint8_t{0};
    native::Int8ZeroPoint x_zero;  // per tensor
    if (in.x_zp != nullptr) x_zero = {in.x_zp->raw_data(), x_signed, 1};
    // The weight zero points per output channel: per row of the product's A.
    native::Int8ZeroPoint w_zero;
    if (in.w_zp != nullptr) {
      const bool per_channel = in.w_zp->NumElements() != 1;
      w_zero = {static_cast<const uint8_t*>(in.w_zp->raw_data()) + (per_channel ? g * m_group : 0),
                w_signed, per_channel ? m_group : 1};
    }
    const Im2col im2col(win, c_group, pad);
    const int64_t depth = im2col.depth();
    const int64_t block_rows = std::clamp<int64_t>(
        kColumnBytes / std::max<int64_t>(1, depth * im2col.row_length()), 1, im2col.rows());
    const uint8_t* image =
        static_cast<const uint8_t*>(x.raw_data()) + (n * channels + g * c_group) * in_size;
    const uint8_t* weights = static_cast<const uint8_t*>(w.raw_data()) + g * m_group * depth;
    const int64_t y_first = (n * m_total + g * m_group) * positions;  // element of y
    bool prepared = false;
    for (int64_t row = 0; row < im2col.rows(); row += block_rows) {
      const int64_t row_end = std::min(im2col.rows(), row + block_rows);
      const int64_t block = (row_end - row) * im2col.row_length();
      const int64_t p0 = row * im2col.row_length();
      state.columns.resize(static_cast<size_t>(depth * block));
      im2col.Fill(image, row, row_end, state.columns.data());
      // acc[m, p] = (w[m, :] - w_zero[m]) (columns[:, p] - x_zero).
      state.product.Repack(state.columns.data(), x_signed, depth, block);
      if (!prepared || !state.product.Prepared(state.scratch, m_group)) {
        state.product.PrepareA(weights, w_signed, m_group, w_zero, state.scratch);
        prepared = true;
      }
      if (!qlinear_) {
        state.product.RunPrepared(m_group, x_zero, y.mutable_data<int32_t>() + y_first + p0,
                                  positions, state.scratch);
        continue;
      }
      state.acc.resize(static_cast<size_t>(m_group * block));
      state.product.RunPrepared(m_group, x_zero, state.acc.data(), block, state.scratch);
      for (int64_t m = 0; m < m_group; ++m) {  // y is one byte per element
        Requantize(in, g * m_group + m, state.acc.data() + m * block, block,
                   static_cast<uint8_t*>(y.mutable_raw_data()) + y_first + m * positions + p0);
      }
    }
  }

  const reference::WindowAttrs attrs_;
  const int64_t group_;
  const bool qlinear_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateIntConv(const KernelInit& init, bool qlinear) {
  const Node& node = init.node();
  const int min_inputs = qlinear ? 8 : 2, max_inputs = qlinear ? 9 : 4;
  if (init.num_inputs() < min_inputs || init.num_inputs() > max_inputs ||
      node.outputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("expected ", min_inputs, " to ", max_inputs,
                                                   " inputs and 1 output, got ", init.num_inputs(),
                                                   " and ", node.outputs.size()));
  }
  for (int i = 0; i < min_inputs; ++i) {
    if (!init.has_input(i))
      return absl::InvalidArgumentError(absl::StrCat("input ", i, " is required"));
  }
  LS_ASSIGN_OR_RETURN(reference::WindowAttrs attrs,
                      ParseWindowAttrs(node, /*require_kernel_shape=*/false));
  LS_ASSIGN_OR_RETURN(const int64_t group, node.GetInt("group", 1));
  if (group < 1 || group > reference::kMaxWindowAttr) {
    return absl::InvalidArgumentError(absl::StrCat("group ", group, " must be positive"));
  }
  return std::unique_ptr<Kernel>(new IntConvKernel(std::move(attrs), group, qlinear));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateConvIntegerKernel(const KernelInit& init) {
  return CreateIntConv(init, /*qlinear=*/false);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateQLinearConvKernel(const KernelInit& init) {
  return CreateIntConv(init, /*qlinear=*/true);
}

}  // namespace loopserve::engine
