// ConvInteger and QLinearConv: 8-bit convolutions with zero points (per tensor for x, per tensor
// or per output channel for w), accumulated in int32; QLinearConv requantises with
// x_scale * w_scale / y_scale, rounding half to even, and saturates to the type of y_zero_point.
//
// The accumulation is an 8-bit matrix product on native::Int8Gemm (VNNI / AVX2, exact in int32,
// zero points applied through row and column sums): the group's weights (A, rows in place, zero
// points per row) times the im2col of the input (B, packed per image; padding holds x's zero
// point, so it contributes 0), over the frame's reused buffers.

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

bool Is8Bit(DataType t) { return t == DataType::kInt8 || t == DataType::kUint8; }

int32_t At8(const Tensor& t, int64_t i) {
  return t.dtype() == DataType::kInt8 ? t.data<int8_t>()[i] : t.data<uint8_t>()[i];
}

class IntConvState : public KernelState {
 public:
  std::vector<uint8_t> columns;  // [Cg * K, P] im2col, bytes of x (x's zero point outside)
  std::vector<int32_t> acc;      // [Mg, P] per image and group
  native::Int8Gemm product;      // the im2col, packed
  native::Int8GemmScratch scratch;
};

class IntConvKernel final : public Kernel {
 public:
  IntConvKernel(reference::WindowAttrs attrs, int64_t group, bool qlinear)
      : attrs_(std::move(attrs)), group_(group), qlinear_(qlinear) {}

  std::unique_ptr<KernelState> CreateState() const override {
    return std::make_unique<IntConvState>();
  }

  absl::Status Run(KernelContext& ctx) const override {
    // ConvInteger: x, w, x_zero_point?, w_zero_point?. QLinearConv: x, x_scale, x_zero_point, w,
    // w_scale, w_zero_point, y_scale, y_zero_point, B?.
    const Tensor& x = ctx.input(0);
    const Tensor& w = ctx.input(qlinear_ ? 3 : 1);
    const int x_zp_input = 2;  // the same slot in both ops
    const int w_zp_input = qlinear_ ? 5 : 3;
    const Tensor* x_zp = ctx.has_input(x_zp_input) ? &ctx.input(x_zp_input) : nullptr;
    const Tensor* w_zp = ctx.has_input(w_zp_input) ? &ctx.input(w_zp_input) : nullptr;
    if (!Is8Bit(x.dtype()) || !Is8Bit(w.dtype())) {
      return absl::InvalidArgumentError(absl::StrCat("x (", DataTypeName(x.dtype()), ") and w (",
                                                     DataTypeName(w.dtype()),
                                                     ") must be int8 or uint8"));
    }
    reference::Window win;
    LS_ASSIGN_OR_RETURN(const Shape out_shape,
                        reference::ConvShapes(x.shape(), w.shape(), nullptr, attrs_, group_, &win));
    const int64_t m_total = w.dim(0);
    if (x_zp != nullptr && (x_zp->dtype() != x.dtype() || x_zp->NumElements() != 1)) {
      return absl::InvalidArgumentError("x_zero_point must be one value of x's type");
    }
    if (w_zp != nullptr && (w_zp->dtype() != w.dtype() ||
                            (w_zp->NumElements() != 1 && w_zp->NumElements() != m_total))) {
      return absl::InvalidArgumentError(
          "w_zero_point must be one value of w's type, or one per output channel");
    }
    // Requantisation: scales and the output's zero point.
    const Tensor* x_scale = nullptr;
    const Tensor* w_scale = nullptr;
    const Tensor* y_scale = nullptr;
    const Tensor* y_zp = nullptr;
    const Tensor* bias = nullptr;
    if (qlinear_) {
      x_scale = &ctx.input(1);
      w_scale = &ctx.input(4);
      y_scale = &ctx.input(6);
      y_zp = &ctx.input(7);
      bias = ctx.has_input(8) ? &ctx.input(8) : nullptr;
      for (const Tensor* s : {x_scale, y_scale}) {
        if (s->dtype() != DataType::kFloat32 || s->NumElements() != 1) {
          return absl::InvalidArgumentError("x_scale and y_scale must be one float32");
        }
      }
      if (w_scale->dtype() != DataType::kFloat32 ||
          (w_scale->NumElements() != 1 && w_scale->NumElements() != m_total)) {
        return absl::InvalidArgumentError("w_scale must be one float32, or one per output channel");
      }
      if (!Is8Bit(y_zp->dtype()) || y_zp->NumElements() != 1) {
        return absl::InvalidArgumentError("y_zero_point must be one int8 or uint8");
      }
      if (bias != nullptr &&
          (bias->dtype() != DataType::kInt32 || bias->rank() != 1 || bias->dim(0) != m_total)) {
        return absl::InvalidArgumentError(absl::StrCat("B must be int32 [", m_total, "]"));
      }
    }
    Tensor* y = ctx.output(0, qlinear_ ? y_zp->dtype() : DataType::kInt32, out_shape);
    if (y->NumElements() == 0) return absl::OkStatus();

    IntConvState& state = *ctx.state<IntConvState>();
    const int64_t batch = x.dim(0), channels = x.dim(1);
    const int64_t c_group = channels / group_, m_group = m_total / group_;
    const int64_t k_size = w.shape().NumElements(2, w.rank());
    const int64_t rows = c_group * k_size;  // per group: input channels x kernel taps
    const int64_t positions = out_shape.NumElements(2, out_shape.rank());
    const int64_t in_size = x.shape().NumElements(2, x.rank());
    const bool x_signed = x.dtype() == DataType::kInt8;
    const bool w_signed = w.dtype() == DataType::kInt8;
    const uint8_t* x_bytes = static_cast<const uint8_t*>(x.raw_data());
    const uint8_t* w_bytes = static_cast<const uint8_t*>(w.raw_data());
    // Padding holds x's zero point, so that it adds nothing once the zero point is subtracted.
    const uint8_t pad =
        x_zp != nullptr ? static_cast<const uint8_t*>(x_zp->raw_data())[0] : uint8_t{0};
    native::Int8ZeroPoint x_zero;  // per tensor
    if (x_zp != nullptr) x_zero = {x_zp->raw_data(), x_signed, 1};
    state.columns.resize(static_cast<size_t>(positions * rows));
    state.acc.resize(static_cast<size_t>(positions * m_group));
    Shape::Dims out_index(win.rank), k_index(win.rank);
    if (win.rank < 1) return absl::InvalidArgumentError("x must have a spatial dimension");
    const int last = win.rank - 1;
    const int64_t out_last = win.output[last];
    const int64_t outer_rows = out_last == 0 ? 0 : positions / out_last;
    for (int64_t g = 0; g < group_; ++g) {
      // The weight zero points per output channel: per row of the product's A.
      native::Int8ZeroPoint w_zero;
      if (w_zp != nullptr) {
        const bool per_channel = w_zp->NumElements() != 1;
        w_zero = {static_cast<const uint8_t*>(w_zp->raw_data()) + (per_channel ? g * m_group : 0),
                  w_signed, per_channel ? m_group : 1};
      }
      for (int64_t n = 0; n < batch; ++n) {
        // im2col of this image's group: column p holds the taps of output position p.
        for (int64_t c = 0; c < c_group; ++c) {
          const int64_t plane = (n * channels + g * c_group + c) * in_size;
          for (int64_t k = 0; k < k_size; ++k) {
            int64_t krem = k;
            for (int d = win.rank - 1; d >= 0; --d) {
              k_index[d] = krem % win.kernel[d];
              krem /= win.kernel[d];
            }
            uint8_t* col = state.columns.data() + (c * k_size + k) * positions;
            // Output positions row by row along the last dim (its input positions step by the
            // stride): the outer dims' part of the offset once per row, the in-range run of a
            // stride-1 row copied whole.
            const int64_t first = k_index[last] * win.dilations[last] - win.pads_begin[last];
            const int64_t step = win.strides[last];
            // o in [lo, hi) reads inside the input row: 0 <= o * step + first < input[last].
            const int64_t lo = std::min(out_last, first >= 0 ? 0 : (-first + step - 1) / step);
            const int64_t hi =
                std::max(lo, std::min(out_last, win.input[last] - first <= 0
                                                    ? 0
                                                    : (win.input[last] - first + step - 1) / step));
            for (int64_t row = 0; row < outer_rows; ++row) {
              int64_t rem = row, offset = 0;
              bool inside = true;
              for (int d = last - 1; d >= 0; --d) {
                out_index[d] = rem % win.output[d];
                rem /= win.output[d];
              }
              for (int d = 0; d < last; ++d) {
                const int64_t pos = out_index[d] * win.strides[d] - win.pads_begin[d] +
                                    k_index[d] * win.dilations[d];
                inside = inside && pos >= 0 && pos < win.input[d];
                offset = offset * win.input[d] + pos;
              }
              uint8_t* dst = col + row * out_last;
              if (!inside) {
                std::memset(dst, pad, out_last);
                continue;
              }
              const uint8_t* src = x_bytes + plane + offset * win.input[last] + first;
              if (lo > 0) std::memset(dst, pad, lo);
              if (step == 1) {
                std::memcpy(dst + lo, src + lo, hi - lo);
              } else {
                for (int64_t o = lo; o < hi; ++o) dst[o] = src[o * step];
              }
              if (hi < out_last) std::memset(dst + hi, pad, out_last - hi);
            }
          }
        }
        // acc[m, p] = (w[m, :] - w_zero[m]) (columns[:, p] - x_zero): the group's weights as A
        // (rows in place), the im2col packed as B.
        state.product.Repack(state.columns.data(), x_signed, rows, positions);
        state.product.Run(w_bytes + g * m_group * rows, w_signed, m_group, w_zero, x_zero,
                          state.acc.data(), state.scratch);
        for (int64_t m = 0; m < m_group; ++m) {
          const int64_t mo = g * m_group + m;
          const int64_t at = (n * m_total + mo) * positions;
          const int32_t* acc = state.acc.data() + m * positions;
          if (!qlinear_) {
            std::copy(acc, acc + positions, y->mutable_data<int32_t>() + at);
            continue;
          }
          const double scale = static_cast<double>(x_scale->data<float>()[0]) *
                               w_scale->data<float>()[w_scale->NumElements() == 1 ? 0 : mo] /
                               y_scale->data<float>()[0];
          const int32_t b = bias != nullptr ? bias->data<int32_t>()[mo] : 0;
          const int32_t yz = At8(*y_zp, 0);
          const bool is_signed = y_zp->dtype() == DataType::kInt8;
          const double lo = is_signed ? -128 : 0, hi = is_signed ? 127 : 255;
          for (int64_t p = 0; p < positions; ++p) {
            const double q = std::nearbyint(static_cast<double>(acc[p] + b) * scale) + yz;
            // NaN (a zero y_scale on a zero sum) is the lowest value, as in QLinearMatMul and
            // QuantizeLinear (converting NaN to an integer is undefined).
            const double v = std::isnan(q) ? lo : std::min(std::max(q, lo), hi);
            if (is_signed) {
              y->mutable_data<int8_t>()[at + p] = static_cast<int8_t>(v);
            } else {
              y->mutable_data<uint8_t>()[at + p] = static_cast<uint8_t>(v);
            }
          }
        }
      }
    }
    return absl::OkStatus();
  }

 private:
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
