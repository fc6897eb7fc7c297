// The signal ops of opset 17: DFT, STFT and MelWeightMatrix. Transforms run in double precision
// and round once into the output type, so bins whose exact value is 0 come out as 0 to float
// precision rather than as float-rounding noise. Every length takes O(n log n): a mixed-radix FFT
// (radix 4, 2, 3 and 5 butterflies, any other small factor by its own butterfly) and, for lengths
// with a prime factor above kMaxRadix, Bluestein's chirp-z transform over a power-of-two FFT. A
// real line of even length runs as a complex FFT of half the length (the even samples as real
// parts, the odd ones as imaginary parts) and one pass that separates the two halves' spectra.

#include <algorithm>
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

// The largest factor a butterfly of its own handles (O(p^2) per group of p); a length with a
// larger prime factor runs through Bluestein's algorithm instead.
constexpr int64_t kMaxRadix = 64;

// Longest transform Bluestein's algorithm takes: its buffers hold four times the next power of
// two above 2n complex doubles (512 MiB at this length).
constexpr int64_t kMaxBluesteinLength = int64_t{1} << 22;

// Complex products written out: std::complex's operator* checks for NaN and calls a library
// routine on the (here impossible) infinite cases, which keeps it from inlining.
inline Complex Mul(Complex a, Complex b) {
  return Complex(a.real() * b.real() - a.imag() * b.imag(),
                 a.real() * b.imag() + a.imag() * b.real());
}

// i * a (or -i * a when `sign` is negative).
inline Complex TimesI(Complex a, double sign) { return Complex(-sign * a.imag(), sign * a.real()); }

// A complex FFT of one length and direction (no 1/n scaling): out[k] = sum_j in[j] w^(jk),
// w = exp(-+2 pi i / n). Decimation in time, recursive over the factors (KISS FFT's order: the
// input is read with growing strides into its place, then each level's butterflies combine m-long
// sub-transforms). Not thread-safe: Run uses member scratch buffers.
class Fft {
 public:
  // Unimplemented for a length above kMaxBluesteinLength with a prime factor above kMaxRadix.
  absl::Status Prepare(int64_t n, bool inverse) {
    if (n == n_ && inverse == inverse_) return absl::OkStatus();
    n_ = -1;
    int64_t largest = 1;
    std::vector<int64_t> factors;
    int64_t rest = n;
    for (const int64_t p : {4, 2, 3, 5}) {
      while (rest % p == 0 && rest > 1) {
        factors.push_back(p);
        rest /= p;
      }
    }
    for (int64_t p = 7; rest > 1; p += 2) {
      if (p * p > rest) p = rest;
      while (rest % p == 0) {
        factors.push_back(p);
        largest = std::max(largest, p);
        rest /= p;
      }
    }
    if (largest > kMaxRadix && n > kMaxBluesteinLength) {
      return absl::UnimplementedError(absl::StrCat("a transform of length ", n, " (prime factor ",
                                                   largest, ") longer than ", kMaxBluesteinLength));
    }
    factors_ = std::move(factors);
    n_ = n;
    inverse_ = inverse;
    sign_ = inverse ? 1.0 : -1.0;
    twiddles_.resize(n);
    for (int64_t k = 0; k < n; ++k) twiddles_[k] = Root(k, n);
    bluestein_.reset();
    if (largest > kMaxRadix) PrepareBluestein();
    scratch_.resize(std::min<int64_t>(n, kMaxRadix));
    return absl::OkStatus();
  }

  // out[0..n) = the transform of in[0..n). `out` must not alias `in`.
  void Run(const Complex* in, Complex* out) {
    if (n_ == 1) {
      out[0] = in[0];
    } else if (bluestein_ != nullptr) {
      RunBluestein(in, out);
    } else {
      Work(out, in, 1, 0);
    }
  }

 private:
  // exp(sign 2 pi i k / n), with k reduced so the angle stays small and exact multiples of a
  // quarter turn come out exact.
  Complex Root(int64_t k, int64_t n) const {
    k %= n;
    if (4 * k == n) return Complex(0, sign_);
    if (2 * k == n) return Complex(-1, 0);
    if (4 * k == 3 * n) return Complex(0, -sign_);
    const double angle = sign_ * 2.0 * M_PI * static_cast<double>(k) / static_cast<double>(n);
    return Complex(std::cos(angle), std::sin(angle));
  }

  void Work(Complex* out, const Complex* in, int64_t stride, size_t level) {
    const int64_t p = factors_[level];
    const int64_t m = n_ / (stride * p);
    if (m == 1) {
      for (int64_t q = 0; q < p; ++q) out[q] = in[q * stride];
    } else {
      for (int64_t q = 0; q < p; ++q) Work(out + q * m, in + q * stride, stride * p, level + 1);
    }
    switch (p) {
      case 2:
        Radix2(out, stride, m);
        break;
      case 3:
        Radix3(out, stride, m);
        break;
      case 4:
        Radix4(out, stride, m);
        break;
      case 5:
        Radix5(out, stride, m);
        break;
      default:
        RadixGeneric(out, stride, m, p);
        break;
    }
  }

  void Radix2(Complex* f, int64_t stride, int64_t m) const {
    for (int64_t u = 0; u < m; ++u) {
      const Complex t = Mul(f[u + m], twiddles_[u * stride]);
      f[u + m] = f[u] - t;
      f[u] += t;
    }
  }

  void Radix3(Complex* f, int64_t stride, int64_t m) const {
    const double half_sqrt3 = sign_ * 0.86602540378443864676;
    for (int64_t u = 0; u < m; ++u) {
      const Complex a1 = Mul(f[u + m], twiddles_[u * stride]);
      const Complex a2 = Mul(f[u + 2 * m], twiddles_[2 * u * stride]);
      const Complex s = a1 + a2;
      const Complex d = TimesI(a1 - a2, half_sqrt3);
      const Complex mid = f[u] - 0.5 * s;
      f[u] += s;
      f[u + m] = mid + d;
      f[u + 2 * m] = mid - d;
    }
  }

  void Radix4(Complex* f, int64_t stride, int64_t m) const {
    for (int64_t u = 0; u < m; ++u) {
      const Complex a1 = Mul(f[u + m], twiddles_[u * stride]);
      const Complex a2 = Mul(f[u + 2 * m], twiddles_[2 * u * stride]);
      const Complex a3 = Mul(f[u + 3 * m], twiddles_[3 * u * stride]);
      const Complex s02 = f[u] + a2, d02 = f[u] - a2;
      const Complex s13 = a1 + a3, d13 = TimesI(a1 - a3, sign_);
      f[u] = s02 + s13;
      f[u + m] = d02 + d13;
      f[u + 2 * m] = s02 - s13;
      f[u + 3 * m] = d02 - d13;
    }
  }

  void Radix5(Complex* f, int64_t stride, int64_t m) const {
    const double c1 = 0.30901699437494742410, c2 = -0.80901699437494742410;
    const double s1 = 0.95105651629515357212, s2 = 0.58778525229247312917;
    for (int64_t u = 0; u < m; ++u) {
      const Complex a0 = f[u];
      const Complex a1 = Mul(f[u + m], twiddles_[u * stride]);
      const Complex a2 = Mul(f[u + 2 * m], twiddles_[2 * u * stride]);
      const Complex a3 = Mul(f[u + 3 * m], twiddles_[3 * u * stride]);
      const Complex a4 = Mul(f[u + 4 * m], twiddles_[4 * u * stride]);
      const Complex t1 = a1 + a4, t2 = a2 + a3, t3 = a1 - a4, t4 = a2 - a3;
      const Complex r1 = a0 + c1 * t1 + c2 * t2, r2 = a0 + c2 * t1 + c1 * t2;
      const Complex i1 = TimesI(s1 * t3 + s2 * t4, sign_);
      const Complex i2 = TimesI(s2 * t3 - s1 * t4, sign_);
      f[u] = a0 + t1 + t2;
      f[u + m] = r1 + i1;
      f[u + 4 * m] = r1 - i1;
      f[u + 2 * m] = r2 + i2;
      f[u + 3 * m] = r2 - i2;
    }
  }

  // Any factor p: each group of p values (m apart) is twiddled and transformed directly.
  void RadixGeneric(Complex* f, int64_t stride, int64_t m, int64_t p) {
    for (int64_t u = 0; u < m; ++u) {
      for (int64_t q = 0; q < p; ++q) scratch_[q] = f[u + q * m];
      for (int64_t q1 = 0; q1 < p; ++q1) {
        const int64_t k = u + q1 * m;
        const int64_t step = (stride * k) % n_;
        Complex acc = scratch_[0];
        int64_t index = 0;
        for (int64_t q = 1; q < p; ++q) {
          index += step;
          if (index >= n_) index -= n_;
          acc += Mul(scratch_[q], twiddles_[index]);
        }
        f[k] = acc;
      }
    }
  }

  // Bluestein: jk = (j^2 + k^2 - (k - j)^2) / 2 turns the transform into a convolution with the
  // chirp c[t] = exp(-+pi i t^2 / n), done by a power-of-two FFT of length >= 2n - 1.
  void PrepareBluestein() {
    int64_t m = 1;
    while (m < 2 * n_ - 1) m <<= 1;
    bluestein_ = std::make_unique<Fft>();
    bluestein_->Prepare(m, /*inverse=*/false).IgnoreError();  // a power of two
    chirp_.resize(n_);
    for (int64_t j = 0; j < n_; ++j) {
      // t^2 mod 2n keeps the angle exact for large t.
      const int64_t t2 = static_cast<int64_t>((static_cast<__int128>(j) * j) % (2 * n_));
      const double angle = sign_ * M_PI * static_cast<double>(t2) / static_cast<double>(n_);
      chirp_[j] = Complex(std::cos(angle), std::sin(angle));
    }
    std::vector<Complex> b(m, Complex(0, 0));
    for (int64_t t = 0; t < n_; ++t) {
      b[t] = std::conj(chirp_[t]);
      if (t > 0) b[m - t] = b[t];
    }
    kernel_spectrum_.resize(m);
    bluestein_->Run(b.data(), kernel_spectrum_.data());
    const double scale = 1.0 / static_cast<double>(m);
    for (Complex& v : kernel_spectrum_) v *= scale;
    work_a_.resize(m);
    work_b_.resize(m);
  }

  void RunBluestein(const Complex* in, Complex* out) {
    const int64_t m = static_cast<int64_t>(work_a_.size());
    for (int64_t j = 0; j < n_; ++j) work_a_[j] = Mul(in[j], chirp_[j]);
    std::fill(work_a_.begin() + n_, work_a_.end(), Complex(0, 0));
    bluestein_->Run(work_a_.data(), work_b_.data());
    // The inverse transform as conj(FFT(conj(.))); the 1/m is in kernel_spectrum_.
    for (int64_t k = 0; k < m; ++k) work_b_[k] = std::conj(Mul(work_b_[k], kernel_spectrum_[k]));
    bluestein_->Run(work_b_.data(), work_a_.data());
    for (int64_t k = 0; k < n_; ++k) out[k] = Mul(std::conj(work_a_[k]), chirp_[k]);
  }

  int64_t n_ = -1;
  bool inverse_ = false;
  double sign_ = -1.0;
  std::vector<Complex> twiddles_;
  std::vector<int64_t> factors_;
  std::vector<Complex> scratch_;
  std::unique_ptr<Fft> bluestein_;
  std::vector<Complex> chirp_, kernel_spectrum_, work_a_, work_b_;
};

// The transform of lines of one length: bins [0, bins) of each, scaled by 1/n when inverse.
class Transform {
 public:
  absl::Status Prepare(int64_t n, bool inverse, bool real) {
    if (n == n_ && inverse == inverse_ && real == real_) return absl::OkStatus();
    n_ = -1;
    inverse_ = inverse;
    real_ = real;
    // A real line: the forward transform (the inverse one is its conjugate over n), packed into
    // a complex one of half the length when n is even.
    packed_ = real && n % 2 == 0 && n >= 4;
    if (packed_) {
      const int64_t half = n / 2;
      LS_RETURN_IF_ERROR(fft_.Prepare(half, /*inverse=*/false));
      split_.resize(half + 1);
      for (int64_t k = 0; k <= half; ++k) {
        const double angle = -2.0 * M_PI * static_cast<double>(k) / static_cast<double>(n);
        split_[k] = Complex(std::cos(angle), std::sin(angle));
      }
      split_[0] = Complex(1, 0);
      if (half % 2 == 0) split_[half / 2] = Complex(0, -1);
      split_[half] = Complex(-1, 0);
      packed_in_.resize(half);
      packed_out_.resize(half);
    } else {
      LS_RETURN_IF_ERROR(fft_.Prepare(n, inverse && !real));
    }
    spectrum_.resize(n);
    n_ = n;
    return absl::OkStatus();
  }

  // `line` holds the n values (imaginary parts 0 for a real line); writes out[0..bins).
  void Run(const Complex* line, Complex* out, int64_t bins) {
    const int64_t n = n_;
    if (packed_) {
      const int64_t half = n / 2;
      for (int64_t j = 0; j < half; ++j) {
        packed_in_[j] = Complex(line[2 * j].real(), line[2 * j + 1].real());
      }
      fft_.Run(packed_in_.data(), packed_out_.data());
      // Z = E + i O, E and O the spectra of the even and odd samples:
      // X[k] = E[k] + w^k O[k], E[k] = (Z[k] + conj Z[half-k]) / 2, O[k] = (Z[k] - conj Z[half-k])
      // / 2i.
      const int64_t upto = std::min(bins, half + 1);
      for (int64_t k = 0; k < upto; ++k) {
        const Complex z = packed_out_[k == half ? 0 : k];
        const Complex zc = std::conj(packed_out_[k == 0 ? 0 : half - k]);
        const Complex even = 0.5 * (z + zc);
        const Complex odd = TimesI(0.5 * (z - zc), -1.0);
        out[k] = even + Mul(split_[k], odd);
      }
      for (int64_t k = half + 1; k < bins; ++k) out[k] = std::conj(out[n - k]);
    } else {
      fft_.Run(line, spectrum_.data());
      std::copy(spectrum_.begin(), spectrum_.begin() + bins, out);
    }
    if (inverse_) {
      const double scale = 1.0 / static_cast<double>(n);
      const bool conjugate = real_;  // forward transform of a real line, conjugated
      for (int64_t k = 0; k < bins; ++k) {
        out[k] = conjugate ? std::conj(out[k]) * scale : out[k] * scale;
      }
    }
  }

 private:
  int64_t n_ = -1;
  bool inverse_ = false;
  bool real_ = false;
  bool packed_ = false;
  Fft fft_;
  std::vector<Complex> split_;
  std::vector<Complex> packed_in_, packed_out_, spectrum_;
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

// line[j] = in[j * stride] (+ i in[j * stride + 1] when complex), times window[j] if given.
template <typename T>
void Gather(const T* in, int64_t stride, int64_t count, bool complex_in, const T* window,
            Complex* line) {
  for (int64_t j = 0; j < count; ++j) {
    const double scale = window != nullptr ? static_cast<double>(window[j]) : 1.0;
    const double re = static_cast<double>(in[j * stride]) * scale;
    const double im = complex_in ? static_cast<double>(in[j * stride + 1]) * scale : 0.0;
    line[j] = Complex(re, im);
  }
}

// out[k * stride] = bins[k].real(), out[k * stride + 1] = bins[k].imag().
template <typename T>
void Scatter(const Complex* bins, int64_t count, int64_t stride, T* out) {
  for (int64_t k = 0; k < count; ++k) {
    out[k * stride] = static_cast<T>(bins[k].real());
    out[k * stride + 1] = static_cast<T>(bins[k].imag());
  }
}

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
    LS_RETURN_IF_ERROR(state.transform.Prepare(n, inverse_, /*real=*/!complex_in));
    state.line.resize(n);
    state.bins.resize(bins);
    // Lines along `axis`: outer dims before it, inner dims after it (without the complex one).
    const int64_t outer = x.shape().NumElements(0, static_cast<int>(axis));
    const int64_t inner = x.shape().NumElements(static_cast<int>(axis) + 1, rank - 1);
    const int64_t comps = x.dim(rank - 1);
    const int64_t used = std::min(n, dim);
    auto run = [&](auto* in, auto* out) {
      using T = std::remove_const_t<std::remove_pointer_t<decltype(in)>>;
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < inner; ++i) {
          Gather(in + (o * dim * inner + i) * comps, inner * comps, used, complex_in,
                 static_cast<const T*>(nullptr), state.line.data());
          std::fill(state.line.begin() + used, state.line.end(), Complex(0, 0));
          state.transform.Run(state.line.data(), state.bins.data(), bins);
          Scatter(state.bins.data(), bins, inner * 2, out + (o * bins * inner + i) * 2);
        }
      }
    };
    if (x.dtype() == DataType::kFloat32) {
      run(x.data<float>(), y->mutable_data<float>());
    } else {
      run(x.data<double>(), y->mutable_data<double>());
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
    LS_RETURN_IF_ERROR(state.transform.Prepare(length, /*inverse=*/false, /*real=*/!complex_in));
    state.line.resize(length);
    state.bins.resize(bins);
    const int64_t comps = x.dim(2);
    auto run = [&](auto* in, auto* out) {
      using T = std::remove_const_t<std::remove_pointer_t<decltype(in)>>;
      const T* w = window != nullptr ? window->data<T>() : nullptr;
      for (int64_t b = 0; b < x.dim(0); ++b) {
        for (int64_t f = 0; f < frames; ++f) {
          Gather(in + (b * x.dim(1) + f * step) * comps, comps, length, complex_in, w,
                 state.line.data());
          state.transform.Run(state.line.data(), state.bins.data(), bins);
          Scatter(state.bins.data(), bins, 2, out + (b * frames + f) * bins * 2);
        }
      }
    };
    if (x.dtype() == DataType::kFloat32) {
      run(x.data<float>(), y->mutable_data<float>());
    } else {
      run(x.data<double>(), y->mutable_data<double>());
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
