// Einsum. A float32 equation of two operands without diagonals (the matmul-like ones: "ij,jk",
// "bij,bjk->bik", "bhqd,bhkd->bhqk", "i,j->ij", ...) is lowered onto batched GEMM: every label is
// a batch (both operands and the output), M (A and the output), N (B and the output) or K (both
// operands, contracted) dim; the operands are gathered into [batch, M, K] and [batch, K, N] (in
// place when already laid out so, or transposed), multiplied by oneDNN's sgemm per batch, and the
// [batch, M, N] product is scattered into the output's label order. A float32 equation of one
// operand without diagonals ("ij->ji", "bij->bj", "ij->") is a strided gather into the output's
// order, or vector row sums / adds when labels are summed. Everything else takes the
// general implementation: every label of the equation becomes one loop dimension; the kernel walks
// all label combinations once, multiplying the input elements and accumulating into the output
// element (contracted labels have output stride 0). Repeated labels in one operand take
// diagonals; "..." broadcasts like numpy.

#include <dnnl.h>

#include <cctype>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/native/register_families.h"
#include "engine/kernels/native/vector_math.h"

namespace loopserve::engine::native {
namespace {

// Label ids: 0-51 for a-zA-Z, kEllipsis for "...".
constexpr int kEllipsis = -1;
using Labels = absl::InlinedVector<int, 8>;
// Loop dims: 52 letters + up to 8 ellipsis dims (ids 52..59).
constexpr int kMaxDims = 60;

int LabelId(char c) { return std::islower(c) ? c - 'a' : c - 'A' + 26; }

absl::StatusOr<Labels> ParseTerm(absl::string_view term) {
  Labels labels;
  for (size_t i = 0; i < term.size(); ++i) {
    const char c = term[i];
    if (c == ' ') continue;
    if (c == '.') {
      if (term.substr(i, 3) != "...") return absl::InvalidArgumentError("malformed ellipsis");
      for (int l : labels) {
        if (l == kEllipsis) return absl::InvalidArgumentError("more than one ellipsis in a term");
      }
      labels.push_back(kEllipsis);
      i += 2;
      continue;
    }
    if (!std::isalpha(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError(absl::StrCat("invalid label '", std::string(1, c), "'"));
    }
    labels.push_back(LabelId(c));
  }
  return labels;
}

// Per-frame scratch of the Einsum kernel.
class ScratchState : public KernelState {
 public:
  std::vector<float> scratch;
};

class EinsumKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 1, 1 << 20));
    LS_ASSIGN_OR_RETURN(std::string equation, init.node().GetString("equation", std::nullopt));
    auto kernel = std::unique_ptr<EinsumKernel>(new EinsumKernel());
    std::string lhs = equation;
    const size_t arrow = equation.find("->");
    if (arrow != std::string::npos) {
      lhs = equation.substr(0, arrow);
      LS_ASSIGN_OR_RETURN(kernel->output_, ParseTerm(equation.substr(arrow + 2)));
      kernel->explicit_output_ = true;
    }
    for (absl::string_view term : absl::StrSplit(lhs, ',')) {
      LS_ASSIGN_OR_RETURN(Labels labels, ParseTerm(term));
      for (size_t i = 0; i < labels.size(); ++i) {
        if (std::find(labels.begin() + i + 1, labels.end(), labels[i]) != labels.end()) {
          kernel->has_diagonal_ = true;
        }
      }
      kernel->inputs_.push_back(labels);
    }
    if (static_cast<int>(kernel->inputs_.size()) != init.num_inputs()) {
      return absl::InvalidArgumentError(absl::StrCat("equation '", equation, "' has ",
                                                     kernel->inputs_.size(), " operands, the node ",
                                                     init.num_inputs(), " inputs"));
    }
    if (!kernel->explicit_output_) {
      // Implicit output: the ellipsis dims, then the labels used exactly once, alphabetically.
      int count[52] = {};
      bool ellipsis = false;
      for (const Labels& t : kernel->inputs_) {
        for (int l : t) {
          if (l == kEllipsis) {
            ellipsis = true;
          } else {
            ++count[l];
          }
        }
      }
      if (ellipsis) kernel->output_.push_back(kEllipsis);
      for (int l = 0; l < 52; ++l) {
        if (count[l] == 1) kernel->output_.push_back(l);
      }
    }
    return std::unique_ptr<Kernel>(std::move(kernel));
  }

  std::unique_ptr<KernelState> CreateState() const override {
    return std::make_unique<ScratchState>();
  }

  absl::Status Run(KernelContext& ctx) const override {
    // The transposed operands' buffer, kept in the frame's state (one per frame, so concurrent
    // runs never share it) so that steady-state runs and Loop iterations do not allocate.
    std::vector<float>& scratch = ctx.state<ScratchState>()->scratch;
    const int n = ctx.num_inputs();
    const DataType dtype = ctx.input(0).dtype();
    LoopDims dims;
    LS_RETURN_IF_ERROR(BindInputs(ctx, dims));
    LS_RETURN_IF_ERROR(BindOutput(dims));
    if (n == 1 && dtype == DataType::kFloat32 && !has_diagonal_) {
      Tensor* y = ctx.output(0, dtype, dims.out_shape);
      float* out = y->mutable_data<float>();
      if (ctx.input(0).NumElements() == 0) {
        std::fill_n(out, y->NumElements(), 0.0f);
        return absl::OkStatus();
      }
      TransposeSum(ctx.input(0).data<float>(), dims.loop, dims.size, dims.strides[0],
                   dims.out_stride, out);
      return absl::OkStatus();
    }
    if (n == 2 && dtype == DataType::kFloat32 && !has_diagonal_) {
      Tensor* y = ctx.output(0, dtype, dims.out_shape);
      float* out = y->mutable_data<float>();
      if (ctx.input(0).NumElements() == 0 || ctx.input(1).NumElements() == 0) {
        std::fill_n(out, y->NumElements(), 0.0f);  // an empty sum (or an empty output)
        return absl::OkStatus();
      }
      return Gemm(ctx.input(0).data<float>(), ctx.input(1).data<float>(), dims.loop, dims.size,
                  dims.strides[0], dims.strides[1], dims.out_stride, out, scratch);
    }
    const bool ok = DispatchNumeric(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      RunGeneral<T>(ctx, dims);
    });
    if (!ok) return UnsupportedType("input 0", dtype);
    return absl::OkStatus();
  }

 private:
  // The loop over the equation's labels, as one run's shapes bind it.
  struct LoopDims {
    LoopDims() {
      std::fill_n(size, kMaxDims, int64_t{1});
      out_stride.fill(0);
    }

    int64_t size[kMaxDims];
    bool used[kMaxDims] = {};
    int ellipsis_rank = 0;
    absl::InlinedVector<std::array<int64_t, kMaxDims>, 4> strides;  // per input, per loop dim
    Shape out_shape;
    std::array<int64_t, kMaxDims> out_stride;
    Labels loop;  // the loop dims that are used, outermost first
  };

  // Binds every input's dims to its labels: their extents, and each input's stride per loop dim.
  absl::Status BindInputs(KernelContext& ctx, LoopDims& dims) const {
    const int n = ctx.num_inputs();
    const DataType dtype = ctx.input(0).dtype();
    for (int k = 0; k < n; ++k) {
      const Tensor& t = ctx.input(k);
      if (t.dtype() != dtype)
        return TypeMismatch(absl::StrCat("input ", k), t.dtype(), "input 0", dtype);
      const Labels& labels = inputs_[k];
      const bool has_ellipsis = std::find(labels.begin(), labels.end(), kEllipsis) != labels.end();
      const int explicit_dims = static_cast<int>(labels.size()) - (has_ellipsis ? 1 : 0);
      const int er = t.rank() - explicit_dims;
      if (er < 0 || (!has_ellipsis && er != 0) || er > 8) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input ", k, " has shape ", t.shape().ToString(), ", which does not match its term"));
      }
      dims.ellipsis_rank = std::max(dims.ellipsis_rank, er);
    }
    dims.strides.resize(n);
    for (int k = 0; k < n; ++k) {
      const Tensor& t = ctx.input(k);
      dims.strides[k].fill(0);
      DimVector st;
      RowMajorStrides(t.shape(), &st);
      const Labels& labels = inputs_[k];
      const bool has_ellipsis = std::find(labels.begin(), labels.end(), kEllipsis) != labels.end();
      const int er = t.rank() - (static_cast<int>(labels.size()) - (has_ellipsis ? 1 : 0));
      int d = 0;
      for (int l : labels) {
        if (l == kEllipsis) {
          for (int e = 0; e < er; ++e, ++d) {
            const int id = 52 + (dims.ellipsis_rank - er) + e;
            LS_RETURN_IF_ERROR(
                Bind(id, t.dim(d), st[d], dims.size, dims.used, dims.strides[k], true));
          }
          continue;
        }
        LS_RETURN_IF_ERROR(Bind(l, t.dim(d), st[d], dims.size, dims.used, dims.strides[k], false));
        ++d;
      }
    }
    return absl::OkStatus();
  }

  // The output's shape and strides, and the loop (used dims only).
  absl::Status BindOutput(LoopDims& dims) const {
    Labels out_ids;
    for (int l : output_) {
      if (l == kEllipsis) {
        for (int e = 0; e < dims.ellipsis_rank; ++e) out_ids.push_back(52 + e);
      } else {
        if (!dims.used[l]) {
          return absl::InvalidArgumentError("an output label does not appear in the inputs");
        }
        out_ids.push_back(l);
      }
    }
    for (int id : out_ids) dims.out_shape.mutable_dims().push_back(dims.size[id]);
    int64_t s = 1;
    for (int i = static_cast<int>(out_ids.size()) - 1; i >= 0; --i) {
      dims.out_stride[out_ids[i]] = s;
      s *= dims.size[out_ids[i]];
    }
    for (int id = 0; id < kMaxDims; ++id) {
      if (dims.used[id] || dims.size[id] != 1) dims.loop.push_back(id);
    }
    return absl::OkStatus();
  }

  // The general implementation: walks every label combination once, accumulating the inputs'
  // product into the output element.
  template <typename T>
  static void RunGeneral(KernelContext& ctx, const LoopDims& dims) {
    const int n = ctx.num_inputs();
    const Labels& loop = dims.loop;
    int64_t total = 1;
    for (int id : loop) total *= dims.size[id];
    Tensor* y = ctx.output(0, ctx.input(0).dtype(), dims.out_shape);
    T* out = y->mutable_data<T>();
    std::fill_n(out, dims.out_shape.NumElements(), T{0});
    absl::InlinedVector<const T*, 4> in(n);
    for (int k = 0; k < n; ++k) in[k] = ctx.input(k).template data<T>();
    absl::InlinedVector<int64_t, 4> off(n, 0);
    int64_t o = 0;
    absl::InlinedVector<int64_t, 16> coord(loop.size(), 0);
    for (int64_t it = 0; it < total; ++it) {
      T p = in[0][off[0]];
      for (int k = 1; k < n; ++k) p = static_cast<T>(p * in[k][off[k]]);
      out[o] = static_cast<T>(out[o] + p);
      for (int j = static_cast<int>(loop.size()) - 1; j >= 0; --j) {
        const int id = loop[j];
        if (++coord[j] < dims.size[id]) {
          for (int k = 0; k < n; ++k) off[k] += dims.strides[k][id];
          o += dims.out_stride[id];
          break;
        }
        for (int k = 0; k < n; ++k) off[k] -= dims.strides[k][id] * (dims.size[id] - 1);
        o -= dims.out_stride[id] * (dims.size[id] - 1);
        coord[j] = 0;
      }
    }
  }

  EinsumKernel() = default;

  // Records that loop dim `id` has extent `dim` with element stride `stride` in one input. A
  // broadcast (ellipsis) dim of extent 1 adapts to the others.
  static absl::Status Bind(int id, int64_t dim, int64_t stride, int64_t* size, bool* used,
                           std::array<int64_t, 60>& in_strides, bool broadcast) {
    if (broadcast && dim == 1) {
      used[id] = true;
      return absl::OkStatus();
    }
    if (used[id] && size[id] != dim && !(broadcast && size[id] == 1)) {
      return absl::InvalidArgumentError(absl::StrCat("a label has sizes ", size[id], " and ", dim));
    }
    used[id] = true;
    size[id] = dim;
    in_strides[id] += stride;  // a repeated label walks the diagonal
    return absl::OkStatus();
  }

  using Strides = std::array<int64_t, 60>;

  // dst[i] for i in the row-major order of dims `ids` (extents `size`) = src at the offset the
  // per-dim strides `st` give: a strided gather; the inner dim is a tight loop.
  static void Gather(const float* src, const Labels& ids, const int64_t* size, const Strides& st,
                     float* dst) {
    if (ids.empty()) {
      *dst = *src;
      return;
    }
    const int inner = ids.back();
    const int64_t n_in = size[inner];
    const int64_t s_in = st[inner];
    int64_t outer = 1;
    for (size_t j = 0; j + 1 < ids.size(); ++j) outer *= size[ids[j]];
    absl::InlinedVector<int64_t, 8> coord(ids.size(), 0);
    int64_t off = 0;
    for (int64_t o = 0; o < outer; ++o, dst += n_in) {
      if (s_in == 1) {
        std::copy_n(src + off, n_in, dst);
      } else {
        for (int64_t i = 0; i < n_in; ++i) dst[i] = src[off + i * s_in];
      }
      for (int j = static_cast<int>(ids.size()) - 2; j >= 0; --j) {
        const int id = ids[j];
        if (++coord[j] < size[id]) {
          off += st[id];
          break;
        }
        off -= st[id] * (size[id] - 1);
        coord[j] = 0;
      }
    }
  }

  // Whether the strides `st` lay dims `ids` out row-major and contiguous.
  static bool RowMajor(const Labels& ids, const int64_t* size, const Strides& st) {
    int64_t s = 1;
    for (int j = static_cast<int>(ids.size()) - 1; j >= 0; --j) {
      if (size[ids[j]] != 1 && st[ids[j]] != s) return false;
      s *= size[ids[j]];
    }
    return true;
  }

  // A one-operand float32 equation without diagonals: a transpose (a strided gather into the
  // output's order), or, when labels are summed, a walk over the input in its own order adding
  // contiguous rows into the output with vector code.
  static void TransposeSum(const float* x, const Labels& loop, const int64_t* size,
                           const Strides& sx, const Strides& so, float* out) {
    Labels kept, summed;
    int64_t n_out = 1, k = 1;
    for (int id : loop) {
      if (size[id] == 1) continue;
      if (so[id] != 0) {
        kept.push_back(id), n_out *= size[id];
      } else {
        summed.push_back(id), k *= size[id];
      }
    }
    std::sort(kept.begin(), kept.end(), [&](int a, int b) { return so[a] > so[b]; });
    if (summed.empty()) {
      Gather(x, kept, size, sx, out);
      return;
    }
    // Sums: walk the input in its own order (dims by stride), the innermost dim a contiguous
    // row that is either summed (a vector sum into one output) or kept (a vector add into the
    // output row when that is contiguous too).
    Labels order = kept;
    order.insert(order.end(), summed.begin(), summed.end());
    std::sort(order.begin(), order.end(), [&](int a, int b) { return sx[a] > sx[b]; });
    std::fill_n(out, n_out, 0.0f);
    const int inner = order.back();
    const int64_t len = size[inner];
    absl::InlinedVector<int64_t, 8> coord(order.size(), 0);
    int64_t xi = 0, oi = 0;
    for (;;) {
      const float* row = x + xi;
      if (so[inner] == 0 && sx[inner] == 1) {
        out[oi] += SumF32(row, len);
      } else if (so[inner] == 1 && sx[inner] == 1) {
        BinaryF32(VecBinary::kAdd, out + oi, 1, row, 1, out + oi, len);
      } else {
        for (int64_t i = 0; i < len; ++i) out[oi + i * so[inner]] += row[i * sx[inner]];
      }
      int j = static_cast<int>(order.size()) - 2;
      for (; j >= 0; --j) {
        const int id = order[j];
        xi += sx[id];
        oi += so[id];
        if (++coord[j] < size[id]) break;
        xi -= sx[id] * size[id];
        oi -= so[id] * size[id];
        coord[j] = 0;
      }
      if (j < 0) break;
    }
  }

  // The batched-GEMM lowering of a two-operand float32 equation without diagonals.
  static absl::Status Gemm(const float* a, const float* b, const Labels& loop, const int64_t* size,
                           const Strides& sa, const Strides& sb, const Strides& so, float* out,
                           std::vector<float>& scratch) {
    Labels batch, m_ids, n_ids, k_ids, a_only, b_only;
    int64_t nb = 1, m = 1, n = 1, k = 1;
    for (int id : loop) {
      if (size[id] == 1) continue;
      const bool in_a = sa[id] != 0, in_b = sb[id] != 0, in_o = so[id] != 0;
      if (in_a && in_b && in_o) {
        batch.push_back(id), nb *= size[id];
      } else if (in_a && in_b) {
        k_ids.push_back(id), k *= size[id];
      } else if (in_a && in_o) {
        m_ids.push_back(id), m *= size[id];
      } else if (in_b && in_o) {
        n_ids.push_back(id), n *= size[id];
      } else if (in_a) {
        a_only.push_back(id), k *= size[id];  // summed: a K dim B is constant along
      } else if (in_b) {
        b_only.push_back(id), k *= size[id];
      }
    }
    // A as [batch, M, K] (or [batch, K, M], transposed), B as [batch, K, N] (or [batch, N, K]).
    // A dim summed in one operand only is a K dim along which the other operand repeats (stride
    // 0), so the gathers read it there too.
    Labels k_all = k_ids;
    k_all.insert(k_all.end(), a_only.begin(), a_only.end());
    k_all.insert(k_all.end(), b_only.begin(), b_only.end());
    auto cat = [](std::initializer_list<const Labels*> parts) {
      Labels r;
      for (const Labels* p : parts) r.insert(r.end(), p->begin(), p->end());
      return r;
    };
    const Labels a_mk = cat({&batch, &m_ids, &k_all}), a_km = cat({&batch, &k_all, &m_ids});
    const Labels b_kn = cat({&batch, &k_all, &n_ids}), b_nk = cat({&batch, &n_ids, &k_all});
    const Labels o_mn = cat({&batch, &m_ids, &n_ids});
    const bool a_only_none = a_only.empty() && b_only.empty();
    size_t need = 0;
    bool ta = false, tb = false;
    const bool a_direct =
        a_only_none && (RowMajor(a_mk, size, sa) || (ta = RowMajor(a_km, size, sa)));
    if (!a_direct) ta = false, need += nb * m * k;
    const bool b_direct =
        a_only_none && (RowMajor(b_kn, size, sb) || (tb = RowMajor(b_nk, size, sb)));
    if (!b_direct) tb = false, need += nb * k * n;
    const bool o_direct = RowMajor(o_mn, size, so);
    if (!o_direct) need += nb * m * n;
    scratch.resize(need);
    float* next = scratch.data();
    const float* pa = a;
    if (!a_direct) {
      Gather(a, a_mk, size, sa, next);
      pa = next, next += nb * m * k;
    }
    const float* pb = b;
    if (!b_direct) {
      Gather(b, b_kn, size, sb, next);
      pb = next, next += nb * k * n;
    }
    float* pc = o_direct ? out : next;
    const int64_t lda = ta ? m : k, ldb = tb ? k : n;
    for (int64_t i = 0; i < nb; ++i) {
      const dnnl_status_t status =
          dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, pa + i * m * k, lda,
                     pb + i * k * n, ldb, 0.0f, pc + i * m * n, n);
      if (status != dnnl_success) {
        return absl::InternalError(
            absl::StrCat("Einsum: oneDNN sgemm failed (status ", static_cast<int>(status), ")"));
      }
    }
    if (o_direct) return absl::OkStatus();
    // Scatter [batch, M, N] into the output's order: gather the output from the product, whose
    // strides per output dim are those of its row-major [batch, M, N] layout.
    Strides sp;
    sp.fill(0);
    int64_t s = 1;
    for (int j = static_cast<int>(o_mn.size()) - 1; j >= 0; --j) {
      sp[o_mn[j]] = s;
      s *= size[o_mn[j]];
    }
    Labels out_order(o_mn);
    std::sort(out_order.begin(), out_order.end(), [&](int x, int y) { return so[x] > so[y]; });
    Gather(pc, out_order, size, sp, out);
    return absl::OkStatus();
  }

  std::vector<Labels> inputs_;
  Labels output_;
  bool explicit_output_ = false;
  bool has_diagonal_ = false;  // a label repeated within one operand
};

}  // namespace

void RegisterEinsumKernels(KernelRegistry& registry) {
  registry.Register("Einsum", FactoryOf<EinsumKernel>(), 12);
}

}  // namespace loopserve::engine::native
