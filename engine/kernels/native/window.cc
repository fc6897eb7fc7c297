// EyeLike and the window generators HannWindow, HammingWindow, BlackmanWindow.

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/native/register_families.h"

namespace loopserve::engine::native {
namespace {

// The element type an attribute names by ONNX code: numeric types and bool (the 16-bit float
// storage types are not computed on).
absl::StatusOr<DataType> NumericType(int64_t code) {
  LS_ASSIGN_OR_RETURN(DataType type, DataTypeFromOnnx(code));
  if (type == DataType::kFloat16 || type == DataType::kBFloat16) {
    return absl::UnimplementedError(
        absl::StrCat("element type ", DataTypeName(type), " is not supported here"));
  }
  return type;
}

// EyeLike(input; dtype, k): a matrix of input's 2-D shape with ones on diagonal k.
class EyeLikeKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
    DataType dtype = DataType::kUndefined;
    if (init.node().FindAttribute("dtype") != nullptr) {
      LS_ASSIGN_OR_RETURN(int64_t code, init.node().GetInt("dtype", std::nullopt));
      LS_ASSIGN_OR_RETURN(dtype, NumericType(code));
    }
    LS_ASSIGN_OR_RETURN(int64_t k, init.node().GetInt("k", 0));
    return std::unique_ptr<Kernel>(new EyeLikeKernel(dtype, k));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    if (x.rank() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("input must be 2-D, got ", x.shape().ToString()));
    }
    const DataType dtype = dtype_ == DataType::kUndefined ? x.dtype() : dtype_;
    const int64_t rows = x.dim(0);
    const int64_t cols = x.dim(1);
    const bool ok = DispatchNumericOrBool(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* out = ctx.output(0, dtype, x.shape())->mutable_data<T>();
      std::fill_n(out, rows * cols, T{0});
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t j = i + k_;
        if (j >= 0 && j < cols) out[i * cols + j] = T{1};
      }
    });
    if (!ok) return UnsupportedType("output", dtype);
    return absl::OkStatus();
  }

 private:
  EyeLikeKernel(DataType dtype, int64_t k) : dtype_(dtype), k_(k) {}
  DataType dtype_;
  int64_t k_;
};

enum class Window : uint8_t { kHann, kHamming, kBlackman };

// <Name>Window(size; periodic, output_datatype): the window's `size` samples; periodic windows use
// a period of size, symmetric ones size - 1.
class WindowKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init, Window window) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
    LS_ASSIGN_OR_RETURN(int64_t periodic, init.node().GetInt("periodic", 1));
    LS_ASSIGN_OR_RETURN(int64_t code, init.node().GetInt("output_datatype", 1));
    LS_ASSIGN_OR_RETURN(DataType dtype, NumericType(code));
    if (dtype == DataType::kBool)
      return absl::InvalidArgumentError("output_datatype cannot be bool");
    return std::unique_ptr<Kernel>(new WindowKernel(window, periodic != 0, dtype));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& s = ctx.input(0);
    if (s.NumElements() != 1 || !IsInteger(s.dtype())) {
      return absl::InvalidArgumentError("size must be an integer scalar");
    }
    const int64_t size = s.ScalarAsInt64();
    if (size < 0 || size > kMaxElements) {
      return absl::InvalidArgumentError(absl::StrCat("size ", size, " is out of range"));
    }
    const double period = static_cast<double>(periodic_ ? size : size - 1);
    const double pi = 3.14159265358979323846;
    DispatchNumeric(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* out = ctx.output(0, dtype_, Shape{size})->mutable_data<T>();
      for (int64_t i = 0; i < size; ++i) {
        const double a = period > 0 ? 2 * pi * static_cast<double>(i) / period : 0;
        double v = 0;
        switch (window_) {
          case Window::kHann:
            v = 0.5 - 0.5 * std::cos(a);
            break;
          case Window::kHamming:
            v = 25.0 / 46.0 - 21.0 / 46.0 * std::cos(a);
            break;
          case Window::kBlackman:
            v = 0.42 - 0.5 * std::cos(a) + 0.08 * std::cos(2 * a);
            break;
        }
        out[i] = static_cast<T>(v);
      }
    });
    return absl::OkStatus();
  }

 private:
  WindowKernel(Window window, bool periodic, DataType dtype)
      : window_(window), periodic_(periodic), dtype_(dtype) {}
  Window window_;
  bool periodic_;
  DataType dtype_;
};

}  // namespace

void RegisterWindowKernels(KernelRegistry& registry) {
  registry.Register("EyeLike", FactoryOf<EyeLikeKernel>(), 9);
  registry.Register("HannWindow", FactoryOf<WindowKernel>(Window::kHann), 17);
  registry.Register("HammingWindow", FactoryOf<WindowKernel>(Window::kHamming), 17);
  registry.Register("BlackmanWindow", FactoryOf<WindowKernel>(Window::kBlackman), 17);
}

}  // namespace loopserve::engine::native
