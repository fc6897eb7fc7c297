// Reference Conv and pooling, and the window rules they share with the oneDNN kernels; see
// reference.h.

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/reference/reference.h"
#include "engine/tensor/dtype.h"

namespace loopserve::engine::reference {
namespace {

absl::Status CheckRange(absl::string_view op, absl::string_view name,
                        const std::vector<int64_t>& values, int64_t min) {
  for (int64_t v : values) {
    if (v < min || v > kMaxWindowAttr) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " [",
                                                     absl::StrJoin(values, ","), "] must be in [",
                                                     min, ", ", kMaxWindowAttr, "]"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckLength(absl::string_view op, absl::string_view name,
                         const std::vector<int64_t>& values, size_t expected) {
  if (values.empty() || values.size() == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " [", absl::StrJoin(values, ","),
                                                 "] has ", values.size(), " values, expected ",
                                                 expected, " for the input's spatial rank"));
}

// Calls fn(index) for every multi-index of `dims` in row-major order (dims all > 0).
template <typename Fn>
void ForEachIndex(absl::Span<const int64_t> dims, Fn&& fn) {
  Shape::Dims index(dims.size(), 0);
  while (true) {
    fn(absl::Span<const int64_t>(index));
    int d = static_cast<int>(dims.size()) - 1;
    for (; d >= 0; --d) {
      if (++index[d] < dims[d]) break;
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

absl::Status UnsupportedType(absl::string_view op, DataType type) {
  return absl::InvalidArgumentError(
      absl::StrCat(op, " does not support element type ", DataTypeName(type)));
}

}  // namespace

absl::Status ValidateWindowAttrs(const WindowAttrs& attrs, absl::string_view op) {
  LS_RETURN_IF_ERROR(CheckRange(op, "kernel_shape", attrs.kernel_shape, 1));
  LS_RETURN_IF_ERROR(CheckRange(op, "strides", attrs.strides, 1));
  LS_RETURN_IF_ERROR(CheckRange(op, "dilations", attrs.dilations, 1));
  LS_RETURN_IF_ERROR(CheckRange(op, "pads", attrs.pads, 0));
  if (attrs.pads.size() % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": pads [", absl::StrJoin(attrs.pads, ","),
                                                   "] must have an even number of values"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Window> ResolveWindow(const Shape& x, absl::Span<const int64_t> kernel,
                                     const WindowAttrs& attrs, bool pool, absl::string_view op) {
  if (x.rank() < 3) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": input of shape ", x.ToString(),
                                                   " must have rank >= 3 ([N, C, spatial...])"));
  }
  const int rank = x.rank() - 2;
  const size_t r = static_cast<size_t>(rank);
  if (kernel.size() != r) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": kernel shape [",
                                                   absl::StrJoin(kernel, ","), "] does not match ",
                                                   rank, " spatial dims of input ", x.ToString()));
  }
  LS_RETURN_IF_ERROR(CheckLength(op, "strides", attrs.strides, r));
  LS_RETURN_IF_ERROR(CheckLength(op, "dilations", attrs.dilations, r));
  LS_RETURN_IF_ERROR(CheckLength(op, "pads", attrs.pads, 2 * r));
  Window w;
  w.rank = rank;
  for (int i = 0; i < rank; ++i) {
    w.input.push_back(x[i + 2]);
    w.kernel.push_back(kernel[i]);
    w.strides.push_back(attrs.strides.empty() ? 1 : attrs.strides[i]);
    w.dilations.push_back(attrs.dilations.empty() ? 1 : attrs.dilations[i]);
    int64_t begin = 0;
    int64_t end = 0;
    if (attrs.auto_pad == AutoPad::kNotSet) {
      if (!attrs.pads.empty()) {
        begin = attrs.pads[i];
        end = attrs.pads[i + rank];
      }
    } else if (attrs.auto_pad != AutoPad::kValid) {
      // SAME: the output has ceil(in / stride) elements; the odd pad goes to the end (SAME_UPPER)
      // or the beginning (SAME_LOWER).
      const int64_t out = (w.input[i] + w.strides[i] - 1) / w.strides[i];
      const int64_t total =
          std::max<int64_t>(0, (out - 1) * w.strides[i] + w.extent(i) - w.input[i]);
      const int64_t small = total / 2;
      begin = attrs.auto_pad == AutoPad::kSameUpper ? small : total - small;
      end = total - begin;
    }
    w.pads_begin.push_back(begin);
    w.pads_end.push_back(end);
  }
  for (int i = 0; i < rank; ++i) {
    const int64_t extent = w.extent(i);
    const int64_t padded = w.input[i] + w.pads_begin[i] + w.pads_end[i];
    const int64_t largest_pad = std::max(w.pads_begin[i], w.pads_end[i]);
    if (pool && largest_pad >= extent) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": pad ", largest_pad, " on spatial axis ",
                                                     i, " must be smaller than the window extent ",
                                                     extent));
    }
    if (!pool && largest_pad >= extent && largest_pad > w.input[i]) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": pad ", largest_pad, " on spatial axis ",
                                                     i, " exceeds both the input size ", w.input[i],
                                                     " and the kernel extent ", extent));
    }
    if (padded < extent) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": kernel extent ", extent, " (kernel ", w.kernel[i], ", dilation ", w.dilations[i],
          ") exceeds the padded input size ", padded, " on spatial axis ", i));
    }
    const int64_t span = padded - extent;
    w.output.push_back(
        (attrs.ceil_mode ? (span + w.strides[i] - 1) / w.strides[i] : span / w.strides[i]) + 1);
  }
  return w;
}

absl::StatusOr<Shape> ConvShapes(const Shape& x, const Shape& w, const Shape* b,
                                 const WindowAttrs& attrs, int64_t group, Window* window) {
  if (w.rank() != x.rank() || x.rank() < 3) {
    return absl::InvalidArgumentError(absl::StrCat("Conv: input ", x.ToString(), " and weights ",
                                                   w.ToString(),
                                                   " must have the same rank, at least 3"));
  }
  const absl::Span<const int64_t> kernel = w.dims().subspan(2);
  if (!attrs.kernel_shape.empty() &&
      !std::equal(kernel.begin(), kernel.end(), attrs.kernel_shape.begin(),
                  attrs.kernel_shape.end())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Conv: kernel_shape [", absl::StrJoin(attrs.kernel_shape, ","),
        "] does not match the weights' spatial dims [", absl::StrJoin(kernel, ","), "]"));
  }
  if (group < 1 || x[1] != w[1] * group || w[0] % group != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Conv: weights ", w.ToString(), " do not match input channels ", x[1],
                     " / group ", group, " (need W[1] * group == C and W[0] divisible by group)"));
  }
  if (b != nullptr && (b->rank() != 1 || (*b)[0] != w[0])) {
    return absl::InvalidArgumentError(
        absl::StrCat("Conv: bias of shape ", b->ToString(), " must be [", w[0], "]"));
  }
  LS_ASSIGN_OR_RETURN(Window resolved, ResolveWindow(x, kernel, attrs, /*pool=*/false, "Conv"));
  Shape::Dims out = {x[0], w[0]};
  out.insert(out.end(), resolved.output.begin(), resolved.output.end());
  LS_ASSIGN_OR_RETURN(Shape shape, ValidateDims(out, "Conv output"));
  if (window != nullptr) *window = std::move(resolved);
  return shape;
}

absl::StatusOr<Shape> GlobalPoolShape(const Shape& x, absl::string_view op) {
  if (x.rank() < 3) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": input of shape ", x.ToString(),
                                                   " must have rank >= 3 ([N, C, spatial...])"));
  }
  Shape::Dims out(x.rank(), 1);
  out[0] = x[0];
  out[1] = x[1];
  Shape shape(std::move(out));
  if (shape.NumElements() > 0 && x.NumElements(2, x.rank()) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": input of shape ", x.ToString(), " has an empty spatial extent"));
  }
  return shape;
}

absl::Status Conv(const Tensor& x, const Tensor& w, const Tensor* b, const WindowAttrs& attrs,
                  int64_t group, Tensor& out) {
  if (!IsFloatingPoint(x.dtype())) return UnsupportedType("Conv", x.dtype());
  if (w.dtype() != x.dtype() || (b != nullptr && b->dtype() != x.dtype())) {
    return absl::InvalidArgumentError("Conv: inputs have different element types");
  }
  Window win;
  LS_ASSIGN_OR_RETURN(
      const Shape out_shape,
      ConvShapes(x.shape(), w.shape(), b != nullptr ? &b->shape() : nullptr, attrs, group, &win));
  DispatchNumeric(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T>) {
      out.Resize(x.dtype(), out_shape);
      if (out.NumElements() == 0) return;
      const int64_t n_batch = x.dim(0), channels = x.dim(1), m_total = w.dim(0);
      const int64_t c_group = channels / group, m_group = m_total / group;
      const int64_t in_size = x.shape().NumElements(2, x.rank());
      const int64_t out_size = out_shape.NumElements(2, out_shape.rank());
      const int64_t k_size = w.shape().NumElements(2, w.rank());
      const T* px = x.data<T>();
      const T* pw = w.data<T>();
      T* po = out.mutable_data<T>();
      Shape::Dims in_index(win.rank);
      for (int64_t n = 0; n < n_batch; ++n) {
        for (int64_t m = 0; m < m_total; ++m) {
          const int64_t g = m / m_group;
          int64_t o = (n * m_total + m) * out_size;
          ForEachIndex(win.output, [&](absl::Span<const int64_t> out_index) {
            double acc = b != nullptr ? static_cast<double>(b->data<T>()[m]) : 0.0;
            int64_t k = 0;
            ForEachIndex(win.kernel, [&](absl::Span<const int64_t> k_index) {
              int64_t offset = 0;
              bool inside = true;
              for (int i = 0; i < win.rank; ++i) {
                const int64_t pos = out_index[i] * win.strides[i] - win.pads_begin[i] +
                                    k_index[i] * win.dilations[i];
                if (pos < 0 || pos >= win.input[i]) inside = false;
                offset = offset * win.input[i] + pos;
              }
              if (inside) {
                for (int64_t c = 0; c < c_group; ++c) {
                  acc +=
                      static_cast<double>(px[(n * channels + g * c_group + c) * in_size + offset]) *
                      static_cast<double>(pw[(m * c_group + c) * k_size + k]);
                }
              }
              ++k;
            });
            po[o++] = static_cast<T>(acc);
          });
        }
      }
    }
  });
  return absl::OkStatus();
}

absl::Status Pool(const Tensor& x, const PoolAttrs& attrs, Tensor& out, Tensor* indices) {
  const char* op = attrs.kind == PoolKind::kMax       ? "MaxPool"
                   : attrs.kind == PoolKind::kAverage ? "AveragePool"
                                                      : "LpPool";
  if (attrs.kind != PoolKind::kMax && !IsFloatingPoint(x.dtype())) {
    return UnsupportedType(op, x.dtype());
  }
  LS_ASSIGN_OR_RETURN(const Window win, ResolveWindow(x.shape(), attrs.window.kernel_shape,
                                                      attrs.window, /*pool=*/true, op));
  Shape::Dims out_dims = {x.dim(0), x.dim(1)};
  out_dims.insert(out_dims.end(), win.output.begin(), win.output.end());
  LS_ASSIGN_OR_RETURN(const Shape out_shape, ValidateDims(out_dims, "pool output"));
  const bool supported = DispatchNumeric(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    out.Resize(x.dtype(), out_shape);
    if (indices != nullptr) indices->Resize(DataType::kInt64, out_shape);
    if (out.NumElements() == 0) return;
    const int64_t planes = x.dim(0) * x.dim(1);
    const int64_t in_size = x.shape().NumElements(2, x.rank());
    const T* px = x.data<T>();
    T* po = out.mutable_data<T>();
    int64_t* pi = indices != nullptr ? indices->mutable_data<int64_t>() : nullptr;
    int64_t o = 0;
    for (int64_t plane = 0; plane < planes; ++plane) {
      const T* in = px + plane * in_size;
      ForEachIndex(win.output, [&](absl::Span<const int64_t> out_index) {
        double acc = attrs.kind == PoolKind::kMax ? -std::numeric_limits<double>::infinity() : 0;
        T best = std::numeric_limits<T>::lowest();
        int64_t best_offset = -1;
        int64_t count = 0;
        int64_t padded_count = 0;
        ForEachIndex(win.kernel, [&](absl::Span<const int64_t> k_index) {
          int64_t offset = 0;
          int64_t col_offset = 0;
          int64_t col_stride = 1;
          bool inside = true;
          bool inside_pads = true;
          for (int i = 0; i < win.rank; ++i) {
            const int64_t pos =
                out_index[i] * win.strides[i] - win.pads_begin[i] + k_index[i] * win.dilations[i];
            if (pos < 0 || pos >= win.input[i]) inside = false;
            if (pos >= win.input[i] + win.pads_end[i]) inside_pads = false;
            offset = offset * win.input[i] + pos;
            col_offset += pos * col_stride;
            col_stride *= win.input[i];
          }
          if (inside_pads) ++padded_count;
          if (!inside) return;
          ++count;
          const T v = in[offset];
          switch (attrs.kind) {
            case PoolKind::kMax:
              if (best_offset < 0 || v > best) {
                best = v;
                best_offset = attrs.storage_order == 1 ? col_offset : offset;
              }
              break;
            case PoolKind::kAverage:
              acc += static_cast<double>(v);
              break;
            case PoolKind::kLp:
              acc += std::pow(std::abs(static_cast<double>(v)), static_cast<double>(attrs.p));
              break;
          }
        });
        switch (attrs.kind) {
          case PoolKind::kMax:
            po[o] = best;
            if (pi != nullptr) pi[o] = best_offset < 0 ? -1 : plane * in_size + best_offset;
            break;
          case PoolKind::kAverage: {
            const int64_t divisor = attrs.count_include_pad ? padded_count : count;
            po[o] = static_cast<T>(divisor == 0 ? 0.0 : acc / static_cast<double>(divisor));
            break;
          }
          case PoolKind::kLp:
            po[o] = static_cast<T>(std::pow(acc, 1.0 / static_cast<double>(attrs.p)));
            break;
        }
        ++o;
      });
    }
  });
  if (!supported) return UnsupportedType(op, x.dtype());
  return absl::OkStatus();
}

absl::Status GlobalPool(PoolKind kind, const Tensor& x, Tensor& out) {
  const char* op = kind == PoolKind::kMax ? "GlobalMaxPool" : "GlobalAveragePool";
  if (kind != PoolKind::kMax && !IsFloatingPoint(x.dtype())) return UnsupportedType(op, x.dtype());
  LS_ASSIGN_OR_RETURN(const Shape out_shape, GlobalPoolShape(x.shape(), op));
  const bool supported = DispatchNumeric(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    out.Resize(x.dtype(), out_shape);
    const int64_t planes = out.NumElements();
    const int64_t size = x.shape().NumElements(2, x.rank());
    const T* px = x.data<T>();
    T* po = out.mutable_data<T>();
    for (int64_t plane = 0; plane < planes; ++plane) {
      const T* in = px + plane * size;
      if (kind == PoolKind::kMax) {
        po[plane] = *std::max_element(in, in + size);
      } else {
        double sum = 0;
        for (int64_t i = 0; i < size; ++i) sum += static_cast<double>(in[i]);
        po[plane] = static_cast<T>(sum / static_cast<double>(size));
      }
    }
  });
  if (!supported) return UnsupportedType(op, x.dtype());
  return absl::OkStatus();
}

}  // namespace loopserve::engine::reference
