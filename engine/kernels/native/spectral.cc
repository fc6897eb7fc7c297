// The signal ops of opset 17: DFT, STFT and MelWeightMatrix. Transforms run in double precision
// (an iterative radix-2 FFT for power-of-two lengths, a DFT over a precomputed twiddle table
// otherwise) and round once into the output type, so bins whose exact value is 0 come out as 0 to
// float precision rather than as float-rounding noise.

#include <cmath>
#include <complex>
#include <memory>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/native/register_families.h"

namespace loopserve::engine::native {
namespace {

using Complex = std::complex<double>;

// Longest transform accepted (the twiddle table and per-line buffers hold this many values).
constexpr int64_t kMaxLength = int64_t{1} << 24;

// A transform of one length and direction, reused while the length stays the same.
class Transform {
 public:
  void Prepare(int64_t n, bool inverse) {
    if (n == n_ && inverse == inverse_) return;
    n_ = n;
    inverse_ = inverse;
    const double sign = inverse ? 1.0 : -1.0;
    twiddles_.resize(n);
    for (int64_t k = 0; k < n; ++k) {
      const double angle = sign * 2.0 * M_PI * static_cast<double>(k) / static_cast<double>(n);
      twiddles_[k] = Complex(std::cos(angle), std::sin(angle));
    }
    power_of_two_ = n > 0 && (n & (n - 1)) == 0;
    buffer_.resize(n);
  }

  // out[k] = sum_j in[j] w^(jk) (/ n when inverse), k in [0, bins).
  void Run(const Complex* in, Complex* out, int64_t bins) {
    const int64_t n = n_;
    if (power_of_two_) {
      // Bit-reversed copy, then butterflies.
      for (int64_t i = 0, j = 0; i < n; ++i) {
        buffer_[j] = in[i];
        for (int64_t bit = n >> 1; bit > 0 && ((j ^= bit) & bit) == 0; bit >>= 1) {
        }
      }
      for (int64_t len = 2; len <= n; len <<= 1) {
        const int64_t step = n / len;
        for (int64_t start = 0; start < n; start += len) {
          for (int64_t k = 0; k < len / 2; ++k) {
            const Complex t = twiddles_[k * step] * buffer_[start + k + len / 2];
            const Complex u = buffer_[start + k];
            buffer_[start + k] = u + t;
            buffer_[start + k + len / 2] = u - t;
          }
        }
      }
      for (int64_t k = 0; k < bins; ++k) out[k] = buffer_[k];
    } else {
      for (int64_t k = 0; k < bins; ++k) {
        Complex acc = 0;
        int64_t index = 0;
        for (int64_t j = 0; j < n; ++j) {
          acc += in[j] * twiddles_[index];
          index += k;
          if (index >= n) index -= n;
        }
        out[k] = acc;
      }
    }
    if (inverse_) {
      for (int64_t k = 0; k < bins; ++k) out[k] /= static_cast<double>(n);
    }
  }

 private:
  int64_t n_ = -1;
  bool inverse_ = false;
  bool power_of_two_ = false;
  std::vector<Complex> twiddles_;
  std::vector<Complex> buffer_;
};

class SpectralState : public KernelState {
 public:
  Transform transform;
  std::vector<Complex> line;
  std::vector<Complex> bins;
};

absl::StatusOr<int64_t> ScalarInt(const Tensor& t, const char* what) {
  if (t.NumElements() != 1 || !IsInteger(t.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", what, "' must be one integer, got ", t.DebugString(4)));
  }
  return t.ScalarAsInt64();
}

// Element `i` of a float32/float64 tensor as double.
double Load(const Tensor& t, int64_t i) {
  return t.dtype() == DataType::kFloat32 ? t.data<float>()[i] : t.data<double>()[i];
}

void Store(Tensor& t, int64_t i, double v) {
  if (t.dtype() == DataType::kFloat32) {
    t.mutable_data<float>()[i] = static_cast<float>(v);
  } else {
    t.mutable_data<double>()[i] = v;
  }
}

bool IsSignalType(DataType t) { return t == DataType::kFloat32 || t == DataType::kFloat64; }

// DFT(input [batch, signal..., 1 | 2], dft_length?; axis, inverse, onesided).
class DftKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 2));
    const Node& node = init.node();
    auto kernel = std::unique_ptr<DftKernel>(new DftKernel());
    LS_ASSIGN_OR_RETURN(kernel->axis_, node.GetInt("axis", 1));
    LS_ASSIGN_OR_RETURN(const int64_t inverse, node.GetInt("inverse", 0));
    LS_ASSIGN_OR_RETURN(const int64_t onesided, node.GetInt("onesided", 0));
    kernel->inverse_ = inverse != 0;
    kernel->onesided_ = onesided != 0;
    return std::unique_ptr<Kernel>(std::move(kernel));
  }

  std::unique_ptr<KernelState> CreateState() const override {
    return std::make_unique<SpectralState>();
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    if (!IsSignalType(x.dtype())) return UnsupportedType("input", x.dtype());
    const int rank = x.rank();
    if (rank < 3 || (x.dim(rank - 1) != 1 && x.dim(rank - 1) != 2)) {
      return absl::InvalidArgumentError(absl::StrCat("input has shape ", x.shape().ToString(),
                                                     ", expected [batch, signal..., 1 or 2]"));
    }
    const bool complex_in = x.dim(rank - 1) == 2;
    const int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
    if (axis < 1 || axis > rank - 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("axis ", axis_, " is not a signal axis of rank-", rank, " input"));
    }
    const int64_t dim = x.dim(static_cast<int>(axis));
    int64_t n = dim;
    if (ctx.has_input(1)) {
      LS_ASSIGN_OR_RETURN(n, ScalarInt(ctx.input(1), "dft_length"));
    }
    if (n < 1 || n > kMaxLength) {
      return absl::InvalidArgumentError(absl::StrCat("dft_length ", n, " is out of range"));
    }
    if (onesided_ && complex_in) {
      return absl::InvalidArgumentError("onesided output needs a real input");
    }
    const int64_t bins = onesided_ ? n / 2 + 1 : n;
    Shape::Dims dims(x.shape().dims().begin(), x.shape().dims().end());
    dims[axis] = bins;
    dims[rank - 1] = 2;
    LS_ASSIGN_OR_RETURN(Shape out_shape, ValidateDims(dims, "output"));
    Tensor* y = ctx.output(0, x.dtype(), out_shape);
    SpectralState& state = *ctx.state<SpectralState>();
    state.transform.Prepare(n, inverse_);
    state.line.resize(n);
    state.bins.resize(bins);
    // Lines along `axis`: outer dims before it, inner dims after it (without the complex one).
    const int64_t outer = x.shape().NumElements(0, static_cast<int>(axis));
    const int64_t inner = x.shape().NumElements(static_cast<int>(axis) + 1, rank - 1);
    const int64_t comps = x.dim(rank - 1);
    const int64_t used = std::min(n, dim);
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          if (j >= used) {
            state.line[j] = 0;
            continue;
          }
          const int64_t at = ((o * dim + j) * inner + i) * comps;
          state.line[j] = Complex(Load(x, at), complex_in ? Load(x, at + 1) : 0.0);
        }
        state.transform.Run(state.line.data(), state.bins.data(), bins);
        for (int64_t k = 0; k < bins; ++k) {
          const int64_t at = ((o * bins + k) * inner + i) * 2;
          Store(*y, at, state.bins[k].real());
          Store(*y, at + 1, state.bins[k].imag());
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  DftKernel() = default;
  int64_t axis_ = 1;
  bool inverse_ = false;
  bool onesided_ = false;
};

// STFT(signal [batch, length, 1 | 2], frame_step, window? [frame_length], frame_length?;
// onesided) -> [batch, frames, bins, 2].
class StftKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 2, 4));
    LS_ASSIGN_OR_RETURN(const int64_t onesided, init.node().GetInt("onesided", 1));
    return std::unique_ptr<Kernel>(new StftKernel(onesided != 0));
  }

  std::unique_ptr<KernelState> CreateState() const override {
    return std::make_unique<SpectralState>();
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    if (!IsSignalType(x.dtype())) return UnsupportedType("signal", x.dtype());
    if (x.rank() != 3 || (x.dim(2) != 1 && x.dim(2) != 2)) {
      return absl::InvalidArgumentError(absl::StrCat("signal has shape ", x.shape().ToString(),
                                                     ", expected [batch, length, 1 or 2]"));
    }
    const bool complex_in = x.dim(2) == 2;
    LS_ASSIGN_OR_RETURN(const int64_t step, ScalarInt(ctx.input(1), "frame_step"));
    const Tensor* window = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    int64_t length = -1;
    if (ctx.has_input(3)) {
      LS_ASSIGN_OR_RETURN(length, ScalarInt(ctx.input(3), "frame_length"));
    }
    if (window != nullptr) {
      if (window->rank() != 1 || window->dtype() != x.dtype()) {
        return absl::InvalidArgumentError(absl::StrCat("window ", window->DebugString(4),
                                                       " must be a 1-D tensor of the signal's "
                                                       "type"));
      }
      if (length >= 0 && length != window->dim(0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "frame_length ", length, " differs from the window's length ", window->dim(0)));
      }
      length = window->dim(0);
    }
    if (length < 1 || length > kMaxLength || length > x.dim(1) || step < 1) {
      return absl::InvalidArgumentError(absl::StrCat("frame_length ", length, " and frame_step ",
                                                     step, " do not fit a signal of ", x.dim(1),
                                                     " samples"));
    }
    if (onesided_ && complex_in) {
      return absl::InvalidArgumentError("onesided output needs a real signal");
    }
    const int64_t frames = (x.dim(1) - length) / step + 1;
    const int64_t bins = onesided_ ? length / 2 + 1 : length;
    Tensor* y = ctx.output(0, x.dtype(), Shape{x.dim(0), frames, bins, 2});
    SpectralState& state = *ctx.state<SpectralState>();
    state.transform.Prepare(length, /*inverse=*/false);
    state.line.resize(length);
    state.bins.resize(bins);
    const int64_t comps = x.dim(2);
    for (int64_t b = 0; b < x.dim(0); ++b) {
      for (int64_t f = 0; f < frames; ++f) {
        for (int64_t j = 0; j < length; ++j) {
          const int64_t at = (b * x.dim(1) + f * step + j) * comps;
          const double scale = window != nullptr ? Load(*window, j) : 1.0;
          state.line[j] = Complex(Load(x, at) * scale, complex_in ? Load(x, at + 1) * scale : 0.0);
        }
        state.transform.Run(state.line.data(), state.bins.data(), bins);
        for (int64_t k = 0; k < bins; ++k) {
          const int64_t at = ((b * frames + f) * bins + k) * 2;
          Store(*y, at, state.bins[k].real());
          Store(*y, at + 1, state.bins[k].imag());
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  explicit StftKernel(bool onesided) : onesided_(onesided) {}
  bool onesided_;
};

// MelWeightMatrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz;
// output_datatype) -> [dft_length / 2 + 1, num_mel_bins]: triangular filters between mel-spaced
// edges, as the operator's reference computes them (edges floored to DFT bins).
class MelWeightMatrixKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 5, 5));
    LS_ASSIGN_OR_RETURN(const int64_t code, init.node().GetInt("output_datatype", 1));
    LS_ASSIGN_OR_RETURN(const DataType type, DataTypeFromOnnx(code));
    if (!IsFloatingPoint(type)) {
      return absl::InvalidArgumentError(
          absl::StrCat("output_datatype ", DataTypeName(type), " is not float32 or float64"));
    }
    return std::unique_ptr<Kernel>(new MelWeightMatrixKernel(type));
  }

  absl::Status Run(KernelContext& ctx) const override {
    LS_ASSIGN_OR_RETURN(const int64_t mel_bins, ScalarInt(ctx.input(0), "num_mel_bins"));
    LS_ASSIGN_OR_RETURN(const int64_t dft_length, ScalarInt(ctx.input(1), "dft_length"));
    LS_ASSIGN_OR_RETURN(const int64_t sample_rate, ScalarInt(ctx.input(2), "sample_rate"));
    for (int i : {3, 4}) {
      if (ctx.input(i).NumElements() != 1 || !IsSignalType(ctx.input(i).dtype())) {
        return absl::InvalidArgumentError(
            absl::StrCat("input ", i, " must be one float, got ", ctx.input(i).DebugString(4)));
      }
    }
    const double lower = Load(ctx.input(3), 0);
    const double upper = Load(ctx.input(4), 0);
    constexpr int64_t kMaxBins = int64_t{1} << 16;
    if (mel_bins < 1 || mel_bins > kMaxBins || dft_length < 1 || dft_length > kMaxLength ||
        sample_rate < 1 || !(lower >= 0) || !(upper > lower)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "num_mel_bins ", mel_bins, ", dft_length ", dft_length, ", sample_rate ", sample_rate,
          " and the edges ", lower, " to ", upper, " Hz do not make a mel filter bank"));
    }
    const int64_t spectrogram_bins = dft_length / 2 + 1;
    Tensor* y = ctx.output(0, type_, Shape{spectrogram_bins, mel_bins});
    for (int64_t i = 0; i < y->NumElements(); ++i) Store(*y, i, 0.0);
    auto to_mel = [](double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); };
    const double low_mel = to_mel(lower);
    const double step = (to_mel(upper) - low_mel) / static_cast<double>(mel_bins + 2);
    std::vector<int64_t> edges(mel_bins + 2);
    for (int64_t k = 0; k < mel_bins + 2; ++k) {
      const double hz = 700.0 * (std::pow(10.0, (k * step + low_mel) / 2595.0) - 1.0);
      const double bin = std::floor(static_cast<double>(dft_length + 1) * hz / sample_rate);
      edges[k] = static_cast<int64_t>(
          std::min(std::max(bin, 0.0), static_cast<double>(spectrogram_bins - 1)));
    }
    for (int64_t i = 0; i < mel_bins; ++i) {
      const int64_t left = edges[i], center = edges[i + 1], right = edges[i + 2];
      if (center == left) {
        Store(*y, center * mel_bins + i, 1.0);
      } else {
        for (int64_t j = left; j <= center; ++j) {
          Store(*y, j * mel_bins + i,
                static_cast<double>(j - left) / static_cast<double>(center - left));
        }
      }
      for (int64_t j = center; j < right; ++j) {
        Store(*y, j * mel_bins + i,
              static_cast<double>(right - j) / static_cast<double>(right - center));
      }
    }
    return absl::OkStatus();
  }

 private:
  explicit MelWeightMatrixKernel(DataType type) : type_(type) {}
  DataType type_;
};

}  // namespace

void RegisterSpectralKernels(KernelRegistry& registry) {
  registry.Register("DFT", FactoryOf<DftKernel>(), 17);
  registry.Register("STFT", FactoryOf<StftKernel>(), 17);
  registry.Register("MelWeightMatrix", FactoryOf<MelWeightMatrixKernel>(), 17);
}

}  // namespace loopserve::engine::native
