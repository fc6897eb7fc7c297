// Reference ConvTranspose and its shape rules; see reference.h.

#include <algorithm>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/reference/reference.h"

namespace loopserve::engine::reference {
namespace {

int64_t FloorDiv2(int64_t v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); }

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("ConvTranspose: ", message));
}

}  // namespace

absl::StatusOr<Shape> ConvTransposeShapes(const Shape& x, const Shape& w, const Shape* b,
                                          const ConvTransposeAttrs& attrs, Window* window) {
  if (w.rank() != x.rank() || x.rank() < 3) {
    return Invalid(absl::StrCat("input ", x.ToString(), " and weights ", w.ToString(),
                                " must have the same rank, at least 3"));
  }
  const int rank = x.rank() - 2;
  const size_t r = static_cast<size_t>(rank);
  const int64_t group = attrs.group;
  if (group < 1 || w[0] != x[1] || x[1] % group != 0) {
    return Invalid(absl::StrCat("weights ", w.ToString(), " do not match input channels ", x[1],
                                " / group ", group, " (need W[0] == C and C divisible by group)"));
  }
  const int64_t m = w[1] * group;
  if (b != nullptr && (b->rank() != 1 || (*b)[0] != m)) {
    return Invalid(absl::StrCat("bias of shape ", b->ToString(), " must be [", m, "]"));
  }
  const WindowAttrs& a = attrs.window;
  const absl::Span<const int64_t> kernel = w.dims().subspan(2);
  if (!a.kernel_shape.empty() &&
      !std::equal(kernel.begin(), kernel.end(), a.kernel_shape.begin(), a.kernel_shape.end())) {
    return Invalid(absl::StrCat("kernel_shape [", absl::StrJoin(a.kernel_shape, ","),
                                "] does not match the weights' spatial dims [",
                                absl::StrJoin(kernel, ","), "]"));
  }
  auto check_length = [&](const std::vector<int64_t>& v, size_t expected, const char* name) {
    if (v.empty() || v.size() == expected) return absl::OkStatus();
    return Invalid(absl::StrCat(name, " [", absl::StrJoin(v, ","), "] has ", v.size(),
                                " values, expected ", expected));
  };
  LS_RETURN_IF_ERROR(check_length(a.strides, r, "strides"));
  LS_RETURN_IF_ERROR(check_length(a.dilations, r, "dilations"));
  LS_RETURN_IF_ERROR(check_length(a.pads, 2 * r, "pads"));
  LS_RETURN_IF_ERROR(check_length(attrs.output_padding, r, "output_padding"));
  // output_shape lists the spatial dims (or, as some exporters write it, all dims).
  std::vector<int64_t> output_shape = attrs.output_shape;
  if (output_shape.size() == r + 2)
    output_shape.erase(output_shape.begin(), output_shape.begin() + 2);
  LS_RETURN_IF_ERROR(check_length(output_shape, r, "output_shape"));
  Window win;
  win.rank = rank;
  Shape::Dims out_dims = {x[0], m};
  for (int i = 0; i < rank; ++i) {
    const int64_t in = x[i + 2];
    const int64_t s = a.strides.empty() ? 1 : a.strides[i];
    const int64_t d = a.dilations.empty() ? 1 : a.dilations[i];
    const int64_t adj = attrs.output_padding.empty() ? 0 : attrs.output_padding[i];
    if (adj < 0 || adj > kMaxWindowAttr) {
      return Invalid(absl::StrCat("output_padding ", adj, " is out of range"));
    }
    const int64_t extent = (kernel[i] - 1) * d + 1;
    // What the input reaches before any padding: stride * (in - 1) + extent, plus output_padding.
    const int64_t full = s * std::max<int64_t>(in - 1, 0) + extent + adj;
    int64_t begin = 0, out = 0;
    const bool same = a.auto_pad == AutoPad::kSameUpper || a.auto_pad == AutoPad::kSameLower;
    if (!output_shape.empty() || same) {
      out = !output_shape.empty() ? output_shape[i] : in * s;
      if (out < 0 || out > kMaxElements) {
        return Invalid(absl::StrCat("output size ", out, " is out of range"));
      }
      const int64_t total = full - out;
      // The spec's split: SAME_UPPER puts the odd pad at the end, otherwise at the beginning.
      begin = a.auto_pad == AutoPad::kSameUpper ? FloorDiv2(total) : total - FloorDiv2(total);
    } else {
      int64_t end = 0;
      if (a.auto_pad == AutoPad::kNotSet && !a.pads.empty()) {
        begin = a.pads[i];
        end = a.pads[i + rank];
      }
      out = full - begin - end;
      if (out < 0) {
        return Invalid(absl::StrCat("pads ", begin, " + ", end, " exceed the output size ", full,
                                    " on spatial axis ", i));
      }
    }
    win.input.push_back(in);
    win.kernel.push_back(kernel[i]);
    win.strides.push_back(s);
    win.dilations.push_back(d);
    win.pads_begin.push_back(begin);
    // oneDNN's padding_r: what is cut from the end of the unpadded full extent (no adj).
    win.pads_end.push_back(full - adj - begin - out);
    win.output.push_back(out);
    out_dims.push_back(out);
  }
  LS_ASSIGN_OR_RETURN(Shape shape, ValidateDims(out_dims, "ConvTranspose output"));
  if (window != nullptr) *window = std::move(win);
  return shape;
}

absl::Status ConvTranspose(const Tensor& x, const Tensor& w, const Tensor* b,
                           const ConvTransposeAttrs& attrs, Tensor& out) {
  if (!IsFloatingPoint(x.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("ConvTranspose does not support element type ", DataTypeName(x.dtype())));
  }
  if (w.dtype() != x.dtype() || (b != nullptr && b->dtype() != x.dtype())) {
    return Invalid("inputs have different element types");
  }
  Window win;
  LS_ASSIGN_OR_RETURN(
      const Shape out_shape,
      ConvTransposeShapes(x.shape(), w.shape(), b != nullptr ? &b->shape() : nullptr, attrs, &win));
  DispatchNumeric(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T>) {
      out.Resize(x.dtype(), out_shape);
      const int64_t batch = x.dim(0), channels = x.dim(1), m_total = out_shape[1];
      const int64_t c_group = channels / attrs.group, m_group = m_total / attrs.group;
      const int64_t in_size = x.shape().NumElements(2, x.rank());
      const int64_t out_size = out_shape.NumElements(2, out_shape.rank());
      const int64_t k_size = w.shape().NumElements(2, w.rank());
      T* po = out.mutable_data<T>();
      for (int64_t n = 0; n < batch; ++n) {
        for (int64_t mo = 0; mo < m_total; ++mo) {
          const T bias = b != nullptr ? b->data<T>()[mo] : T{0};
          std::fill_n(po + (n * m_total + mo) * out_size, out_size, bias);
        }
      }
      if (in_size == 0 || k_size == 0) return;
      const T* px = x.data<T>();
      const T* pw = w.data<T>();
      Shape::Dims i_index(win.rank, 0), k_index(win.rank, 0);
      // Scatter every input element through every kernel tap.
      for (int64_t i = 0; i < in_size; ++i) {
        int64_t rem = i;
        for (int d = win.rank - 1; d >= 0; --d) {
          i_index[d] = rem % win.input[d];
          rem /= win.input[d];
        }
        for (int64_t k = 0; k < k_size; ++k) {
          int64_t krem = k;
          int64_t o = 0;
          bool inside = true;
          for (int d = win.rank - 1; d >= 0; --d) {
            k_index[d] = krem % win.kernel[d];
            krem /= win.kernel[d];
          }
          for (int d = 0; d < win.rank && inside; ++d) {
            const int64_t pos =
                i_index[d] * win.strides[d] + k_index[d] * win.dilations[d] - win.pads_begin[d];
            inside = pos >= 0 && pos < win.output[d];
            o = o * win.output[d] + pos;
          }
          if (!inside) continue;
          for (int64_t n = 0; n < batch; ++n) {
            for (int64_t c = 0; c < channels; ++c) {
              const T xv = px[(n * channels + c) * in_size + i];
              const int64_t g = c / c_group;
              for (int64_t mm = 0; mm < m_group; ++mm) {
                const int64_t mo = g * m_group + mm;
                po[(n * m_total + mo) * out_size + o] += xv * pw[(c * m_group + mm) * k_size + k];
              }
            }
          }
        }
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace loopserve::engine::reference
