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
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/dnnl/dnnl_kernel.h"
#include "engine/kernels/dnnl/dnnl_util.h"
#include "engine/kernels/dnnl/kernels.h"
#include "engine/kernels/dnnl/window_attrs.h"
#include "engine/kernels/native/cpu_isa.h"
#include "engine/kernels/native/int8_gemm.h"
#include "engine/kernels/native/int8_gemm_dnnl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

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
  // The oneDNN path's memory objects and arguments for the primitive prepared last (rebound to
  // each run's buffers: no allocation per run).
  std::shared_ptr<const void> dnnl_prepared;
  std::unordered_map<int, dnnl::memory> reorder_args, conv_args;
  int32_t dnnl_zero = 0;
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

// y[c, p] = r[p, c] - w_zero[c] r[p, m] (r: positions x m + `ones` channels-last; y channels
// first): 16 positions of one channel per gather (oneDNN runs only on AVX-512 CPUs).
__attribute__((target("avx512f"))) void ChannelsFirst(const int32_t* r, int64_t positions,
                                                      int64_t m, bool ones, const int32_t* w_zero,
                                                      int32_t* y) {
  const int64_t m_out = m + (ones ? 1 : 0);
  const __m512i index =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int>(m_out)));
  // Masked gathers: GCC 12's unmasked form reads an undefined vector (-Werror=maybe-uninitialized).
  const __m512i zero = _mm512_setzero_si512();
  const __mmask16 all = 0xFFFF;
  int64_t q = 0;
  for (; q + 16 <= positions; q += 16) {
    const int32_t* rows = r + q * m_out;
    const __m512i sums = ones ? _mm512_mask_i32gather_epi32(zero, all, index, rows + m, 4) : zero;
    for (int64_t c = 0; c < m; ++c) {
      const __m512i v = _mm512_mask_i32gather_epi32(zero, all, index, rows + c, 4);
      _mm512_storeu_si512(
          y + c * positions + q,
          _mm512_sub_epi32(v, _mm512_mullo_epi32(_mm512_set1_epi32(w_zero[c]), sums)));
    }
  }
  for (; q < positions; ++q) {
    const uint32_t sum = ones ? static_cast<uint32_t>(r[q * m_out + m]) : 0;
    for (int64_t c = 0; c < m; ++c) {
      y[c * positions + q] = static_cast<int32_t>(static_cast<uint32_t>(r[q * m_out + c]) -
                                                  static_cast<uint32_t>(w_zero[c]) * sum);
    }
  }
}

// ConvInteger with constant weights, one group and a 2-D window on oneDNN's int8 convolution (AMX
// tiles `jit:avx512_core_amx_int8` / `brgconv:avx512_core_amx_int8`, or `brgconv:
// avx512_core_vnni`), which the native im2col product cannot match there. Measured on a 2-vCPU
// Sapphire Rapids, 1 thread, CPU time, uint8 x uint8 with zero points as ISNet's layers, the
// primitive alone: 64 -> 64
// channels 512 x 512 19.4 ms against the native 51.7 ms, 128 -> 32 at 256 x 256 3.0 against 19.0,
// 256 -> 256 at 32 x 32 0.48 against 2.8, 512 -> 512 at 16 x 16 0.63 against 3.3, 32 -> 32 at 64 x
// 64 (dilation 2) 0.07 against 0.31; whole layers (x moved to channels-last, the result back, see
// Usable) 64 -> 32 at 512 x 512 25.4 ms against 33.1, 128 -> 32 at 256 x 256 10.0 against 18.3, 512
// -> 512 at 16 x 16 1.04 against 3.3, 64 -> 64 at 512 x 512 52 against 53. oneDNN takes a runtime
// source zero point (its padding counts as the zero point, as ONNX's) but no weight zero point: the
// weights are moved to int8 (a uint8 w by -128, its zero point with it) and one more output channel
// of ones sums (x - x_zero) over each window, so that y[m] = conv(x - x_zero, w')[m] - w_zero'[m] *
// sum. Implementations that saturate 16-bit sums (`vpmaddubsw`: AVX2 / AVX-512 without VNNI) or
// `ref:` ones are refused; so is every CPU path below AVX-512 (ActiveIsa), where the native kernel
// runs. Thread-safe: primitives are prepared once per input shape under a mutex and then shared.
class DnnlIntConv {
 public:
  // Null when the node is not one the path takes.
  static std::unique_ptr<DnnlIntConv> Create(const KernelInit& init, int64_t group) {
    const Tensor* w = init.constant_input(1);
    const Tensor* w_zp = init.has_input(3) ? init.constant_input(3) : nullptr;
    if (w == nullptr || group != 1 || w->rank() != 4 || !Is8Bit(w->dtype()) ||
        (init.has_input(3) && w_zp == nullptr)) {
      return nullptr;
    }
    const int64_t m = w->dim(0);
    if (w_zp != nullptr &&
        (w_zp->dtype() != w->dtype() || (w_zp->NumElements() != 1 && w_zp->NumElements() != m))) {
      return nullptr;  // Run reports the error on the native path
    }
    return std::unique_ptr<DnnlIntConv>(new DnnlIntConv(*w, w_zp));
  }

  // Whether this run can take the path (x 8-bit, the CPU at AVX-512, a primitive for its shape).
  // Below 64 input channels on a large image the layout moves cost more than AMX saves (32 -> 32
  // channels at 256 x 256: 5.2 ms against the native 4.2; at 64 x 64 with dilation 2 0.17 against
  // 0.31), so those stay native.
  bool Usable(const Tensor& x, const reference::Window& win) const {
    if (native::ActiveIsa() != native::Isa::kAvx512 || !Is8Bit(x.dtype()) || x.rank() != 4) {
      return false;
    }
    const int64_t positions = win.output[0] * win.output[1];
    return (x.dim(1) >= kMinChannels || positions <= kMaxSmallChannelPositions) &&
           Prepare(x, win) != nullptr;
  }
  static constexpr int64_t kMinChannels = 64;
  static constexpr int64_t kMaxSmallChannelPositions = 64 * 64;

  absl::Status Run(const Tensor& x, const Tensor* x_zp, const reference::Window& win, Tensor& y,
                   IntConvState& state, RunContext& run) const {
    std::shared_ptr<const Prepared> p = Prepare(x, win);
    if (p == nullptr) return absl::InternalError("no oneDNN int8 convolution for this shape");
    const int64_t batch = x.dim(0), m = m_, m_out = m_ + (ones_ ? 1 : 0);
    const int64_t positions = y.shape().NumElements(2, 4);
    // x channels-last and the result in the run's staging area (shared by every step, not held
    // per node: a 64-channel 512 x 512 layer stages 85 MB).
    DnnlRunResource& resource = run.Resource<DnnlRunResource>();
    const size_t x_bytes = (static_cast<size_t>(x.NumElements()) + 63) / 64 * 64;
    const size_t y_bytes = static_cast<size_t>(batch * positions * m_out) * sizeof(int32_t);
    uint8_t* staging = static_cast<uint8_t*>(resource.Staging(x_bytes + y_bytes));
    const int32_t* result = reinterpret_cast<const int32_t*>(staging + x_bytes);
    try {
      if (state.dnnl_prepared != p) {
        state.reorder_args = {
            {DNNL_ARG_FROM, dnnl::memory(p->x_nchw, CpuEngine(), DNNL_MEMORY_NONE)},
            {DNNL_ARG_TO, dnnl::memory(p->x_nhwc, CpuEngine(), DNNL_MEMORY_NONE)}};
        state.conv_args = {
            {DNNL_ARG_SRC, state.reorder_args[DNNL_ARG_TO]},
            {DNNL_ARG_WEIGHTS, p->weights},
            {DNNL_ARG_DST, dnnl::memory(p->y_nhwc, CpuEngine(), DNNL_MEMORY_NONE)},
            {DNNL_ARG_SCRATCHPAD, dnnl::memory(p->scratchpad, CpuEngine(), DNNL_MEMORY_NONE)},
            {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC,
             dnnl::memory(
                 dnnl::memory::desc({1}, dnnl::memory::data_type::s32, dnnl::memory::format_tag::x),
                 CpuEngine(), &state.dnnl_zero)}};
        state.dnnl_prepared = p;
      }
      state.dnnl_zero = x_zp != nullptr ? At8(*x_zp, 0) : 0;
      const size_t pad_bytes = p->scratchpad.get_size();
      state.reorder_args[DNNL_ARG_FROM].set_data_handle(const_cast<void*>(x.raw_data()));
      state.reorder_args[DNNL_ARG_TO].set_data_handle(staging);
      state.conv_args[DNNL_ARG_DST].set_data_handle(staging + x_bytes);
      state.conv_args[DNNL_ARG_SCRATCHPAD].set_data_handle(
          pad_bytes > 0 ? resource.Scratchpad(pad_bytes) : nullptr);
      p->to_nhwc.execute(resource.stream(), state.reorder_args);
      p->conv.execute(resource.stream(), state.conv_args);
      resource.stream().wait();
    } catch (const dnnl::error& e) {
      return FromDnnlError(e);
    }
    int32_t* out = y.mutable_data<int32_t>();
    for (int64_t n = 0; n < batch; ++n) {
      ChannelsFirst(result + n * positions * m_out, positions, m, ones_, w_zero_.data(),
                    out + n * m * positions);
    }
    return absl::OkStatus();
  }

 private:
  struct Prepared {
    dnnl::convolution_forward conv;
    dnnl::reorder to_nhwc;
    dnnl::memory::desc x_nchw, x_nhwc, y_nhwc, scratchpad;
    dnnl::memory weights;  // w' (and the ones channel) in the primitive's layout
  };
  // What a prepared primitive was made for: x's dims and type, the window.
  struct Key {
    Shape::Dims dims;
    DataType type;
    Shape::Dims strides, dilations, pads_begin, pads_end;
    bool operator==(const Key& o) const {
      return dims == o.dims && type == o.type && strides == o.strides && dilations == o.dilations &&
             pads_begin == o.pads_begin && pads_end == o.pads_end;
    }
  };

  DnnlIntConv(const Tensor& w, const Tensor* w_zp) : m_(w.dim(0)) {
    const bool w_signed = w.dtype() == DataType::kInt8;
    const int64_t per_channel = w.NumElements() / m_;
    w_zero_.resize(m_);
    for (int64_t c = 0; c < m_; ++c) {
      const int32_t z = w_zp == nullptr ? 0 : At8(*w_zp, w_zp->NumElements() == 1 ? 0 : c);
      w_zero_[c] = z - (w_signed ? 0 : 128);
      ones_ = ones_ || w_zero_[c] != 0;
    }
    w_dims_ = {m_ + (ones_ ? 1 : 0), w.dim(1), w.dim(2), w.dim(3)};
    weights_.assign(static_cast<size_t>(w_dims_[0] * per_channel), 1);  // the ones channel
    const uint8_t flip = w_signed ? 0 : 0x80;
    const uint8_t* src = static_cast<const uint8_t*>(w.raw_data());
    for (int64_t i = 0; i < m_ * per_channel; ++i) weights_[i] = static_cast<int8_t>(src[i] ^ flip);
  }

  std::shared_ptr<const Prepared> Prepare(const Tensor& x, const reference::Window& win) const {
    Key key{Shape::Dims(x.shape().dims().begin(), x.shape().dims().end()),
            x.dtype(),
            win.strides,
            win.dilations,
            win.pads_begin,
            win.pads_end};
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [k, p] : prepared_) {
        if (k == key) return p;
      }
    }
    std::shared_ptr<Prepared> p;
    try {
      using dt = dnnl::memory::data_type;
      using tag = dnnl::memory::format_tag;
      const dt x_type = x.dtype() == DataType::kInt8 ? dt::s8 : dt::u8;
      const dnnl::memory::dims x_dims(key.dims.begin(), key.dims.end());
      const dnnl::memory::dims y_dims = {x.dim(0), w_dims_[0], win.output[0], win.output[1]};
      auto prepared = std::make_shared<Prepared>();
      prepared->x_nchw = dnnl::memory::desc(x_dims, x_type, tag::nchw);
      prepared->x_nhwc = dnnl::memory::desc(x_dims, x_type, tag::nhwc);
      prepared->y_nhwc = dnnl::memory::desc(y_dims, dt::s32, tag::nhwc);
      const DnnlWindow w = ToDnnlWindow(win);
      dnnl::primitive_attr attr;
      attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      const dnnl::memory::dims w_dims(w_dims_.begin(), w_dims_.end());
      const dnnl::convolution_forward::primitive_desc pd(
          dnnl::convolution_forward::desc(
              dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
              prepared->x_nhwc, dnnl::memory::desc(w_dims, dt::s8, tag::any), prepared->y_nhwc,
              w.strides, w.dilations, w.padding_l, w.padding_r),
          attr, CpuEngine());
      const std::string impl = pd.impl_info_str();
      if (impl.find("amx") != std::string::npos || impl.find("vnni") != std::string::npos) {
        prepared->conv = dnnl::convolution_forward(pd);
        prepared->to_nhwc = dnnl::reorder(dnnl::reorder::primitive_desc(
            CpuEngine(), prepared->x_nchw, CpuEngine(), prepared->x_nhwc));
        CountDnnlPrimitiveCreation();
        prepared->scratchpad = pd.scratchpad_desc();
        dnnl::memory plain(dnnl::memory::desc(w_dims, dt::s8, tag::oihw), CpuEngine(),
                           const_cast<int8_t*>(weights_.data()));
        prepared->weights = dnnl::memory(pd.weights_desc(), CpuEngine());
        dnnl::stream stream(CpuEngine());
        dnnl::reorder(plain, prepared->weights).execute(stream, plain, prepared->weights);
        stream.wait();
        p = std::move(prepared);
      }
    } catch (const dnnl::error&) {
      p = nullptr;  // no primitive: the native kernel runs it
    }
    absl::MutexLock lock(&mu_);
    for (const auto& [k, q] : prepared_) {
      if (k == key) return q;  // another thread prepared it meanwhile
    }
    prepared_.emplace_back(std::move(key), p);
    return p;
  }

  const int64_t m_;
  bool ones_ = false;            // a channel of ones for the weight zero points
  std::vector<int32_t> w_zero_;  // per output channel, moved with w
  Shape::Dims w_dims_;           // [M (+ 1), C, kh, kw]
  std::vector<int8_t> weights_;  // w' (+ ones), oihw
  mutable absl::Mutex mu_;
  mutable std::vector<std::pair<Key, std::shared_ptr<const Prepared>>> prepared_
      ABSL_GUARDED_BY(mu_);
};

class IntConvKernel final : public Kernel {
 public:
  IntConvKernel(reference::WindowAttrs attrs, int64_t group, bool qlinear,
                std::unique_ptr<DnnlIntConv> dnnl)
      : attrs_(std::move(attrs)), group_(group), qlinear_(qlinear), dnnl_(std::move(dnnl)) {}

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
    if (dnnl_ != nullptr && native::DnnlInt8Gemm::Enabled() && dnnl_->Usable(*in.x, win)) {
      return dnnl_->Run(*in.x, in.x_zp, win, *y, *ctx.state<IntConvState>(), ctx.run_context());
    }
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
  const std::unique_ptr<const DnnlIntConv> dnnl_;  // null: the native kernel only
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
  std::unique_ptr<DnnlIntConv> dnnl = qlinear ? nullptr : DnnlIntConv::Create(init, group);
  return std::unique_ptr<Kernel>(
      new IntConvKernel(std::move(attrs), group, qlinear, std::move(dnnl)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateConvIntegerKernel(const KernelInit& init) {
  return CreateIntConv(init, /*qlinear=*/false);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateQLinearConvKernel(const KernelInit& init) {
  return CreateIntConv(init, /*qlinear=*/true);
}

}  // namespace loopserve::engine
