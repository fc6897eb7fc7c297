// ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare and ArgMax/ArgMin.
//
// Reductions walk the input once in row-major order, accumulating into the output element each
// input element maps to (output stride 0 along reduced axes); that keeps them allocation-free and
// cache-friendly for any set of axes. float32 (all but LogSumExp) walks contiguous rows instead,
// each on vector_math (ReduceContiguousF32).

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "engine/kernels/native/elementwise.h"
#include "engine/kernels/native/register_families.h"
#include "engine/kernels/native/row_select.h"
#include "engine/kernels/native/saturate.h"
#include "engine/kernels/native/vector_math.h"

namespace loopserve::engine::native {
namespace {

enum class ReduceOp : uint8_t {
  kSum,
  kMean,
  kMax,
  kMin,
  kProd,
  kL1,         // sum |x|
  kL2,         // sqrt(sum x^2)
  kLogSum,     // log(sum x)
  kLogSumExp,  // log(sum exp(x))
  kSumSquare,  // sum x^2
};

template <typename T>
T Initial(ReduceOp op) {
  switch (op) {
    case ReduceOp::kProd:
      return T{1};
    case ReduceOp::kMax:
      if constexpr (std::numeric_limits<T>::has_infinity) {
        return -std::numeric_limits<T>::infinity();
      } else {
        return std::numeric_limits<T>::lowest();
      }
    case ReduceOp::kMin:
      if constexpr (std::numeric_limits<T>::has_infinity) {
        return std::numeric_limits<T>::infinity();
      } else {
        return std::numeric_limits<T>::max();
      }
    default:
      return T{0};
  }
}

template <typename T>
bool IsNan(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::isnan(v);
  } else {
    return false;
  }
}

// Integer sums, squares, products and |x| wrap modulo 2^bits like the integer types do: computed
// unsigned (at least `unsigned int` wide, past the promotion to int) so overflow is defined.
template <typename T>
using WrapT = std::make_unsigned_t<std::common_type_t<T, unsigned>>;

template <typename T>
T Add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<WrapT<T>>(a) + static_cast<WrapT<T>>(b));
  } else {
    return a + b;
  }
}

template <typename T>
T Mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<WrapT<T>>(a) * static_cast<WrapT<T>>(b));
  } else {
    return a * b;
  }
}

template <typename T>
T Abs(T v) {
  if constexpr (std::is_signed_v<T> && std::is_integral_v<T>) {
    return v < 0 ? static_cast<T>(WrapT<T>{0} - static_cast<WrapT<T>>(v)) : v;
  } else if constexpr (std::is_signed_v<T>) {
    return std::abs(v);
  } else {
    return v;
  }
}

// A double result (sqrt, log) stored as T: saturating for the integer types, where
// log(0) = -inf, NaN or an overflowing exp would make a plain static_cast undefined.
template <typename T>
T FromDouble(double v) {
  if constexpr (std::is_integral_v<T>) {
    return SaturatingCast<T>(v);
  } else {
    return static_cast<T>(v);
  }
}

template <ReduceOp kOp, typename T>
void Accumulate(T* out, const T* in, const Broadcast<2>& walk) {
  ForEachBroadcast<2>(walk, [&](int64_t i, const std::array<int64_t, 2>& off) {
    T& acc = out[off[1]];
    const T v = in[i];
    if constexpr (kOp == ReduceOp::kSum || kOp == ReduceOp::kMean || kOp == ReduceOp::kLogSum) {
      acc = Add(acc, v);
    } else if constexpr (kOp == ReduceOp::kL1) {
      acc = Add(acc, Abs(v));
    } else if constexpr (kOp == ReduceOp::kL2 || kOp == ReduceOp::kSumSquare) {
      acc = Add(acc, Mul(v, v));
    } else if constexpr (kOp == ReduceOp::kLogSumExp) {
      if constexpr (std::is_integral_v<T>) {
        acc = SaturatingCast<T>(static_cast<double>(acc) + std::exp(static_cast<double>(v)));
      } else {
        acc = static_cast<T>(acc + std::exp(v));
      }
    } else if constexpr (kOp == ReduceOp::kProd) {
      acc = Mul(acc, v);
    } else if constexpr (kOp == ReduceOp::kMax) {
      if (IsNan(v) || acc < v) acc = v;
    } else {
      if (IsNan(v) || v < acc) acc = v;
    }
  });
}

// Axes come from the "axes" attribute (ReduceSum before 13, the others before 18) or from the
// optional input 1 (with noop_with_empty_axes).
class ReduceKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init, ReduceOp op,
                                                        ListFrom from) {
    auto kernel = std::unique_ptr<ReduceKernel>(new ReduceKernel());
    kernel->op_ = op;
    kernel->from_ = from;
    const Node& node = init.node();
    LS_ASSIGN_OR_RETURN(int64_t keepdims, node.GetInt("keepdims", 1));
    kernel->keepdims_ = keepdims != 0;
    if (from == ListFrom::kAttribute) {
      LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
      LS_ASSIGN_OR_RETURN(kernel->attr_axes_, OptionalIntsAttribute(node, "axes"));
    } else {
      LS_RETURN_IF_ERROR(CheckArity(init, 1, 2));
      LS_ASSIGN_OR_RETURN(int64_t noop, node.GetInt("noop_with_empty_axes", 0));
      kernel->noop_with_empty_axes_ = noop != 0;
    }
    return std::unique_ptr<Kernel>(std::move(kernel));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const int rank = x.rank();
    DimVector axes;
    LS_RETURN_IF_ERROR(ReadAxes(ctx, axes));
    if (axes.empty() && noop_with_empty_axes_) {
      CopyBytes(x, ctx.output(0, x.dtype(), x.shape()));
      return absl::OkStatus();
    }
    LS_RETURN_IF_ERROR(NormalizeAxes(axes, rank, "axes"));
    absl::InlinedVector<bool, 8> reduced(rank, axes.empty());
    for (int64_t a : axes) reduced[a] = true;

    Shape out_shape;
    Broadcast<2> walk;
    const int64_t count = Layout(x, reduced, out_shape, walk);
    if (x.dtype() == DataType::kFloat32 && ReduceContiguousF32(x, reduced, count, out_shape, ctx)) {
      return absl::OkStatus();
    }
    walk.dims.assign(x.shape().dims().begin(), x.shape().dims().end());
    RowMajorStrides(x.shape(), &walk.strides[0]);
    walk.num_elements = x.NumElements();

    const bool ok = DispatchNumeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      Tensor* y = ctx.output(0, x.dtype(), out_shape);
      T* out = y->mutable_data<T>();
      const int64_t n_out = out_shape.NumElements();
      std::fill(out, out + n_out, Initial<T>(op_));
      AccumulateAll(out, n_out, x.data<T>(), walk);
      if (op_ == ReduceOp::kMean) DivideByCount(out, n_out, count);
    });
    if (!ok) return UnsupportedType("input", x.dtype());
    return absl::OkStatus();
  }

 private:
  ReduceKernel() = default;

  // The axes to reduce: the attribute (opset < 18 for most ops) or input 1; empty when none.
  absl::Status ReadAxes(KernelContext& ctx, DimVector& axes) const {
    if (from_ == ListFrom::kAttribute) {
      if (attr_axes_.has_value()) axes = *attr_axes_;
    } else if (ctx.has_input(1)) {
      if (ctx.input(1).dtype() != DataType::kInt64) {
        return absl::InvalidArgumentError(
            absl::StrCat("input 'axes' must be int64, got ", DataTypeName(ctx.input(1).dtype())));
      }
      LS_RETURN_IF_ERROR(ReadIndexList(ctx.input(1), "input 'axes'", &axes));
    }
    return absl::OkStatus();
  }

  // The output shape and, per input dim, the output stride (0 along reduced dims, in
  // walk.strides[1]). Returns how many input elements reduce into each output element.
  int64_t Layout(const Tensor& x, const absl::InlinedVector<bool, 8>& reduced, Shape& out_shape,
                 Broadcast<2>& walk) const {
    const int rank = x.rank();
    Shape::Dims& out_dims = out_shape.mutable_dims();
    walk.strides[1].resize(rank);
    int64_t count = 1;
    int64_t stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      if (reduced[d]) {
        count *= x.dim(d);
        walk.strides[1][d] = 0;
      } else {
        walk.strides[1][d] = stride;
        stride *= x.dim(d);
      }
    }
    for (int d = 0; d < rank; ++d) {
      if (!reduced[d]) {
        out_dims.push_back(x.dim(d));
      } else if (keepdims_) {
        out_dims.push_back(1);
      }
    }
    return count;
  }

  // Every input element into its output element, then the op's final transform (L2's sqrt, the
  // logs); the mean's division is DivideByCount.
  template <typename T>
  void AccumulateAll(T* out, int64_t n_out, const T* in, const Broadcast<2>& walk) const {
    switch (op_) {
      case ReduceOp::kSum:
        Accumulate<ReduceOp::kSum>(out, in, walk);
        break;
      case ReduceOp::kMean:
        Accumulate<ReduceOp::kMean>(out, in, walk);
        break;
      case ReduceOp::kMax:
        Accumulate<ReduceOp::kMax>(out, in, walk);
        break;
      case ReduceOp::kMin:
        Accumulate<ReduceOp::kMin>(out, in, walk);
        break;
      case ReduceOp::kProd:
        Accumulate<ReduceOp::kProd>(out, in, walk);
        break;
      case ReduceOp::kL1:
        Accumulate<ReduceOp::kL1>(out, in, walk);
        break;
      case ReduceOp::kL2:
        Accumulate<ReduceOp::kL2>(out, in, walk);
        for (int64_t i = 0; i < n_out; ++i) {
          out[i] = FromDouble<T>(std::sqrt(static_cast<double>(out[i])));
        }
        break;
      case ReduceOp::kLogSum:
        Accumulate<ReduceOp::kLogSum>(out, in, walk);
        for (int64_t i = 0; i < n_out; ++i) {
          out[i] = FromDouble<T>(std::log(static_cast<double>(out[i])));
        }
        break;
      case ReduceOp::kLogSumExp:
        Accumulate<ReduceOp::kLogSumExp>(out, in, walk);
        for (int64_t i = 0; i < n_out; ++i) {
          out[i] = FromDouble<T>(std::log(static_cast<double>(out[i])));
        }
        break;
      case ReduceOp::kSumSquare:
        Accumulate<ReduceOp::kSumSquare>(out, in, walk);
        break;
    }
  }

  // The mean: each accumulated sum divided by `count`.
  template <typename T>
  static void DivideByCount(T* out, int64_t n_out, int64_t count) {
    for (int64_t i = 0; i < n_out; ++i) {
      if (count == 0) {
        if constexpr (std::is_floating_point_v<T>) {
          out[i] = std::numeric_limits<T>::quiet_NaN();  // mean of nothing
        }
      } else if constexpr (std::is_integral_v<T>) {
        // Divided as int64 / uint64: static_cast<T>(count) can be 0 (256 uint8 elements).
        using Wide = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
        out[i] = static_cast<T>(static_cast<Wide>(out[i]) / static_cast<Wide>(count));
      } else {
        out[i] = static_cast<T>(out[i] / static_cast<T>(count));
      }
    }
  }

  // Every float32 reduction but LogSumExp, over any set of axes, on vector_math. The dims are
  // collapsed into alternating kept / reduced groups (size-1 dims dropped); the outer groups are
  // walked with an odometer; the innermost group is contiguous rows: reduced rows are reduced to
  // one value each (ReduceRowsF32, a block of rows per call) and combined into their output
  // elements; a kept row is combined elementwise into a row of the output (vector add / max /
  // min / mul). Returns false for LogSumExp and empty reductions.
  bool ReduceContiguousF32(const Tensor& x, const absl::InlinedVector<bool, 8>& reduced,
                           int64_t count, const Shape& out_shape, KernelContext& ctx) const {
    if (op_ == ReduceOp::kLogSumExp || count == 0) return false;
    const int rank = x.rank();
    absl::InlinedVector<int64_t, 8> size;
    absl::InlinedVector<bool, 8> red;
    for (int d = 0; d < rank; ++d) {
      if (x.dim(d) == 1) continue;
      if (!red.empty() && red.back() == reduced[d]) {
        size.back() *= x.dim(d);
      } else {
        size.push_back(x.dim(d));
        red.push_back(reduced[d]);
      }
    }
    if (size.empty()) size.push_back(1), red.push_back(false);
    Tensor* y = ctx.output(0, x.dtype(), out_shape);
    const int64_t n_out = out_shape.NumElements();
    if (n_out == 0) return true;
    const float* in = x.data<float>();
    float* out = y->mutable_data<float>();
    std::fill_n(out, n_out, Initial<float>(op_));
    const int groups = static_cast<int>(size.size());
    absl::InlinedVector<int64_t, 8> in_stride(groups), out_stride(groups);
    int64_t si = 1, so = 1;
    for (int g = groups - 1; g >= 0; --g) {
      in_stride[g] = si;
      si *= size[g];
      out_stride[g] = red[g] ? 0 : so;
      if (!red[g]) so *= size[g];
    }
    const int64_t inner = size[groups - 1];
    const bool inner_reduced = red[groups - 1];
    // Groups alternate: when the inner group is reduced, the one before it is kept, and its rows
    // reduce into consecutive outputs (one ReduceRowsF32 call for them all).
    const int walked = inner_reduced ? std::max(groups - 2, 0) : groups - 1;
    const int64_t rows = inner_reduced && groups >= 2 ? size[groups - 2] : 1;
    bool outer_reduced = false;
    for (int g = 0; g < walked; ++g) outer_reduced = outer_reduced || red[g];
    const bool needs_scratch = inner_reduced ? outer_reduced
                                             : (op_ == ReduceOp::kL1 || op_ == ReduceOp::kL2 ||
                                                op_ == ReduceOp::kSumSquare);
    std::vector<float> scratch(needs_scratch ? (inner_reduced ? rows : inner) : 0);
    absl::InlinedVector<int64_t, 8> coord(groups, 0);
    int64_t in_off = 0, out_off = 0;
    for (;;) {
      const float* row = in + in_off;
      if (inner_reduced) {
        float* dst = outer_reduced ? scratch.data() : out + out_off;
        ReduceRowsF32(RowOp(), row, rows, inner, dst);
        if (outer_reduced) {
          BinaryF32(CombineOp(), out + out_off, 1, dst, 1, out + out_off, rows);
        }
      } else {
        CombineRow(row, inner, scratch.data(), out + out_off);
      }
      int g = walked - 1;
      for (; g >= 0; --g) {
        in_off += in_stride[g];
        out_off += out_stride[g];
        if (++coord[g] < size[g]) break;
        in_off -= in_stride[g] * size[g];
        out_off -= out_stride[g] * size[g];
        coord[g] = 0;
      }
      if (g < 0) break;
    }
    switch (op_) {
      case ReduceOp::kMean:
        UnaryF32(VecUnary::kLinear, out, out, n_out, 1.0f / static_cast<float>(count), 0.0f);
        break;
      case ReduceOp::kL2:
        UnaryF32(VecUnary::kSqrt, out, out, n_out);
        break;
      case ReduceOp::kLogSum:
        UnaryF32(VecUnary::kLog, out, out, n_out);
        break;
      default:
        break;
    }
    return true;
  }

  // The row reduction ReduceRowsF32 computes for the op, and the elementwise op that combines
  // partial results.
  VecReduce RowOp() const {
    switch (op_) {
      case ReduceOp::kMax:
        return VecReduce::kMax;
      case ReduceOp::kMin:
        return VecReduce::kMin;
      case ReduceOp::kProd:
        return VecReduce::kProd;
      case ReduceOp::kL1:
        return VecReduce::kSumAbs;
      case ReduceOp::kL2:
      case ReduceOp::kSumSquare:
        return VecReduce::kSumSquare;
      default:  // Sum, Mean, LogSum
        return VecReduce::kSum;
    }
  }
  VecBinary CombineOp() const {
    switch (op_) {
      case ReduceOp::kMax:
        return VecBinary::kMax;
      case ReduceOp::kMin:
        return VecBinary::kMin;
      case ReduceOp::kProd:
        return VecBinary::kMul;
      default:
        return VecBinary::kAdd;
    }
  }

  // acc[i] = Combine(acc[i], f(row[i])) for i < n; `scratch` has n (f: |x|, x^2 or x).
  void CombineRow(const float* row, int64_t n, float* scratch, float* acc) const {
    switch (op_) {
      case ReduceOp::kMax:
        BinaryF32(VecBinary::kMax, acc, 1, row, 1, acc, n);
        return;
      case ReduceOp::kMin:
        BinaryF32(VecBinary::kMin, acc, 1, row, 1, acc, n);
        return;
      case ReduceOp::kProd:
        BinaryF32(VecBinary::kMul, acc, 1, row, 1, acc, n);
        return;
      case ReduceOp::kL1:
        UnaryF32(VecUnary::kAbs, row, scratch, n);
        BinaryF32(VecBinary::kAdd, acc, 1, scratch, 1, acc, n);
        return;
      case ReduceOp::kL2:
      case ReduceOp::kSumSquare:
        BinaryF32(VecBinary::kMul, row, 1, row, 1, scratch, n);
        BinaryF32(VecBinary::kAdd, acc, 1, scratch, 1, acc, n);
        return;
      default:
        BinaryF32(VecBinary::kAdd, acc, 1, row, 1, acc, n);
        return;
    }
  }

  ReduceOp op_ = ReduceOp::kSum;
  ListFrom from_ = ListFrom::kAttribute;
  bool keepdims_ = true;
  bool noop_with_empty_axes_ = false;
  std::optional<DimVector> attr_axes_;
};

// ArgMax / ArgMin along one axis; the first extreme index unless select_last_index (opset 12+).
// NaN counts as the extreme value, as in numpy.
template <bool kMax>
class ArgKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1));
    const Node& node = init.node();
    LS_ASSIGN_OR_RETURN(int64_t axis, node.GetInt("axis", 0));
    LS_ASSIGN_OR_RETURN(int64_t keepdims, node.GetInt("keepdims", 1));
    LS_ASSIGN_OR_RETURN(int64_t last, node.GetInt("select_last_index", 0));
    return std::unique_ptr<Kernel>(new ArgKernel(axis, keepdims != 0, last != 0));
  }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const int rank = x.rank();
    const int rank_for_axis = std::max(rank, 1);
    LS_ASSIGN_OR_RETURN(const int axis, NormalizeAxis(axis_, rank_for_axis));
    const int64_t n = rank == 0 ? 1 : x.dim(axis);
    if (n == 0) {
      return absl::InvalidArgumentError(absl::StrCat("cannot take the arg", kMax ? "max" : "min",
                                                     " of an empty axis ", axis, " (shape ",
                                                     x.shape().ToString(), ")"));
    }
    Shape out_shape;
    Shape::Dims& dims = out_shape.mutable_dims();
    for (int d = 0; d < rank; ++d) {
      if (d != axis) {
        dims.push_back(x.dim(d));
      } else if (keepdims_) {
        dims.push_back(1);
      }
    }
    const int64_t outer = rank == 0 ? 1 : x.shape().NumElements(0, axis);
    const int64_t inner = rank == 0 ? 1 : x.shape().NumElements(axis + 1, rank);
    const bool ok = DispatchNumeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      Tensor* y = ctx.output(0, DataType::kInt64, out_shape);
      int64_t* out = y->mutable_data<int64_t>();
      const T* in = x.data<T>();
      if constexpr (std::is_floating_point_v<T>) {
        if (inner == 1 && !select_last_) {
          // Contiguous rows (the logits of a decoder): the branch-free two-pass form below is
          // several times faster than Better() per element; a row with a NaN takes the general
          // path.
          bool all_fast = true;
          for (int64_t o = 0; o < outer && all_fast; ++o) {
            all_fast = FirstExtremum(in + o * n, n, out + o);
          }
          if (all_fast) return;
        }
      }
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < inner; ++i) {
          const T* p = in + o * n * inner + i;
          T best = p[0];
          int64_t best_k = 0;
          for (int64_t k = 1; k < n; ++k) {
            const T v = p[k * inner];
            if (Better(v, best)) {
              best = v;
              best_k = k;
            }
          }
          out[o * inner + i] = best_k;
        }
      }
    });
    if (!ok) return UnsupportedType("input", x.dtype());
    return absl::OkStatus();
  }

 private:
  ArgKernel(int64_t axis, bool keepdims, bool last)
      : axis_(axis), keepdims_(keepdims), select_last_(last) {}

  // The first index of the row's maximum (minimum); false when the row holds a NaN or an
  // infinity (the general path handles those). The first pass keeps kLanes independent running
  // extremes, which the compiler turns into vector max/min instructions (one running value would
  // be a chain of dependent compares: 1024 logits took ~2 us); `poison` becomes NaN when any
  // element is NaN or infinite (v * 0).
  template <typename T>
  static bool FirstExtremum(const T* p, int64_t n, int64_t* index) {
    if constexpr (std::is_same_v<T, float>) {
      // AVX-512 / AVX2 by ActiveIsa(): 1024 logits in ~0.1 us against ~0.6 us for the loop below.
      *index = FirstExtremumIndexF32(p, n, kMax);
      return *index >= 0;
    }
    constexpr int kLanes = 16;
    T best = p[0];
    T poison = 0;
    int64_t k = 0;
    if (n >= kLanes) {
      T lane[kLanes];
      T lane_poison[kLanes];
      for (int j = 0; j < kLanes; ++j) {
        lane[j] = p[j];
        lane_poison[j] = 0;
      }
      for (; k + kLanes <= n; k += kLanes) {
        for (int j = 0; j < kLanes; ++j) {
          const T v = p[k + j];
          lane_poison[j] += v * T(0);
          if constexpr (kMax) {
            lane[j] = v > lane[j] ? v : lane[j];
          } else {
            lane[j] = v < lane[j] ? v : lane[j];
          }
        }
      }
      for (int j = 0; j < kLanes; ++j) {
        poison += lane_poison[j];
        if constexpr (kMax) {
          best = lane[j] > best ? lane[j] : best;
        } else {
          best = lane[j] < best ? lane[j] : best;
        }
      }
    }
    for (; k < n; ++k) {
      const T v = p[k];
      poison += v * T(0);
      if constexpr (kMax) {
        best = v > best ? v : best;
      } else {
        best = v < best ? v : best;
      }
    }
    if (poison != 0 || poison != poison) return false;
    for (k = 0; k < n; ++k) {
      if (p[k] == best) {
        *index = k;
        return true;
      }
    }
    return false;
  }

  // Whether v replaces the current best.
  template <typename T>
  bool Better(T v, T best) const {
    if (IsNan(best)) return select_last_ && IsNan(v);
    if (IsNan(v)) return true;
    if (select_last_) return kMax ? !(v < best) : !(best < v);
    return kMax ? best < v : v < best;
  }

  int64_t axis_;
  bool keepdims_;
  bool select_last_;
};

void RegisterReduce(KernelRegistry& registry, const char* name, ReduceOp op, int input_since) {
  registry.Register(name, FactoryOf<ReduceKernel>(op, ListFrom::kAttribute), 1, input_since - 1);
  registry.Register(name, FactoryOf<ReduceKernel>(op, ListFrom::kInput), input_since);
}

}  // namespace

void RegisterReduceKernels(KernelRegistry& registry) {
  RegisterReduce(registry, "ReduceSum", ReduceOp::kSum, 13);
  RegisterReduce(registry, "ReduceMean", ReduceOp::kMean, 18);
  RegisterReduce(registry, "ReduceMax", ReduceOp::kMax, 18);
  RegisterReduce(registry, "ReduceMin", ReduceOp::kMin, 18);
  RegisterReduce(registry, "ReduceProd", ReduceOp::kProd, 18);
  RegisterReduce(registry, "ReduceL1", ReduceOp::kL1, 18);
  RegisterReduce(registry, "ReduceL2", ReduceOp::kL2, 18);
  RegisterReduce(registry, "ReduceLogSum", ReduceOp::kLogSum, 18);
  RegisterReduce(registry, "ReduceLogSumExp", ReduceOp::kLogSumExp, 18);
  RegisterReduce(registry, "ReduceSumSquare", ReduceOp::kSumSquare, 18);
  registry.Register("ArgMax", FactoryOf<ArgKernel<true>>());
  registry.Register("ArgMin", FactoryOf<ArgKernel<false>>());
}

}  // namespace loopserve::engine::native
