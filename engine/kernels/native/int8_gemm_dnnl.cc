#include "engine/kernels/native/int8_gemm_dnnl.h"

#include <atomic>
#include <cstring>
#include <string>

#include "engine/kernels/dnnl/dnnl_kernel.h"
#include "engine/kernels/dnnl/dnnl_util.h"

namespace loopserve::engine::native {

namespace {
std::atomic<bool> g_enabled{true};
}  // namespace

void DnnlInt8Gemm::SetEnabled(bool enabled) { g_enabled.store(enabled, std::memory_order_relaxed); }
bool DnnlInt8Gemm::Enabled() { return g_enabled.load(std::memory_order_relaxed); }

struct DnnlInt8Gemm::Prepared {
  dnnl::matmul primitive;
  dnnl::memory::desc src, dst, zero, scratchpad;
  dnnl::memory packed_b;  // B' in the primitive's layout, owned by the memory object
  std::string impl;
};

DnnlInt8Gemm::DnnlInt8Gemm(const void* b, bool b_signed, int64_t k, int64_t n)
    : k_(k), n_(n), b_signed_(b_signed), b_(k * n) {
  for (int64_t i = 0; i < k * n; ++i) {
    b_[i] = b_signed ? static_cast<const int8_t*>(b)[i]
                     : static_cast<int8_t>(static_cast<const uint8_t*>(b)[i] ^ 0x80);
  }
}

std::shared_ptr<const DnnlInt8Gemm::Prepared> DnnlInt8Gemm::Prepare(int64_t m) const {
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [rows, prepared] : prepared_) {
      if (rows == m) return prepared;
    }
  }
  std::shared_ptr<Prepared> p;
  try {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const dnnl::memory::desc src({m, k_}, dt::u8, tag::ab);
    const dnnl::memory::desc weights_any({k_, n_}, dt::s8, tag::any);
    const dnnl::memory::desc dst({m, n_}, dt::s32, tag::ab);
    dnnl::primitive_attr attr;
    attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, weights_any, dst), attr,
                                          CpuEngine());
    const std::string impl = pd.impl_info_str();
    if (impl.rfind("brg", 0) == 0) {
      p = std::make_shared<Prepared>();
      p->primitive = dnnl::matmul(pd);
      CountDnnlPrimitiveCreation();
      p->src = src;
      p->dst = dst;
      p->zero = dnnl::memory::desc({1}, dt::s32, tag::x);
      p->scratchpad = pd.scratchpad_desc();
      p->impl = impl;
      const dnnl::memory::desc plain({k_, n_}, dt::s8, tag::ab);
      dnnl::memory user(plain, CpuEngine(), const_cast<int8_t*>(b_.data()));
      p->packed_b = dnnl::memory(pd.weights_desc(), CpuEngine());
      dnnl::stream stream(CpuEngine());
      dnnl::reorder(user, p->packed_b).execute(stream, user, p->packed_b);
      stream.wait();
    }
  } catch (const dnnl::error&) {
    p = nullptr;  // no primitive: the native kernel runs it
  }
  absl::MutexLock lock(&mu_);
  for (const auto& [rows, prepared] : prepared_) {
    if (rows == m) return prepared;  // another thread prepared it meanwhile
  }
  prepared_.emplace_back(m, p);
  return p;
}

bool DnnlInt8Gemm::Usable(int64_t m) const { return Enabled() && m > 0 && Prepare(m) != nullptr; }

std::string DnnlInt8Gemm::ImplName(int64_t m) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [rows, prepared] : prepared_) {
    if (rows == m) return prepared == nullptr ? "" : prepared->impl;
  }
  return "";
}

absl::Status DnnlInt8Gemm::Run(const uint8_t* a, int64_t m, int32_t a_zero, const void* b_zero,
                               int64_t b_zero_count, int32_t* y, DnnlInt8GemmBinding& binding,
                               RunContext& run) const {
  try {
    if (binding.m != m || binding.prepared == nullptr) {
      std::shared_ptr<const Prepared> p = Prepare(m);
      if (p == nullptr) return absl::InternalError("no oneDNN int8 matmul for this product");
      binding.m = m;
      binding.src = dnnl::memory(p->src, CpuEngine(), DNNL_MEMORY_NONE);
      binding.dst = dnnl::memory(p->dst, CpuEngine(), DNNL_MEMORY_NONE);
      binding.zero = dnnl::memory(p->zero, CpuEngine(), &binding.zero_value);
      binding.scratchpad = dnnl::memory(p->scratchpad, CpuEngine(), DNNL_MEMORY_NONE);
      binding.prepared = p;
    }
    const Prepared& p = *static_cast<const Prepared*>(binding.prepared.get());
    DnnlRunResource& resource = run.Resource<DnnlRunResource>();
    binding.src.set_data_handle(const_cast<uint8_t*>(a));
    binding.dst.set_data_handle(y);
    binding.zero_value = a_zero;
    const size_t pad_bytes = p.scratchpad.get_size();
    binding.scratchpad.set_data_handle(pad_bytes > 0 ? resource.Scratchpad(pad_bytes) : nullptr);
    p.primitive.execute(resource.stream(),
                        {{DNNL_ARG_SRC, binding.src},
                         {DNNL_ARG_WEIGHTS, p.packed_b},
                         {DNNL_ARG_DST, binding.dst},
                         {DNNL_ARG_SCRATCHPAD, binding.scratchpad},
                         {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, binding.zero}});
  } catch (const dnnl::error& e) {
    return FromDnnlError(e);
  }
  // A B zero point: y_ij -= zb'_j (rowsum_i - k za').
  const int32_t shift = b_signed_ ? 0 : -128;
  auto zero_b = [&](int64_t j) -> int32_t {
    if (b_zero == nullptr) return shift;
    const int64_t zj = b_zero_count == 1 ? 0 : j;
    return (b_signed_ ? static_cast<const int8_t*>(b_zero)[zj]
                      : static_cast<const uint8_t*>(b_zero)[zj]) +
           shift;
  };
  bool any = false;
  for (int64_t j = 0; j < n_ && !any; ++j) any = zero_b(j) != 0;
  if (!any) return absl::OkStatus();
  binding.row_sum.resize(m);
  for (int64_t i = 0; i < m; ++i) {
    uint32_t sum = 0;
    for (int64_t p = 0; p < k_; ++p) sum += a[i * k_ + p];
    binding.row_sum[i] =
        static_cast<int32_t>(sum - static_cast<uint32_t>(k_) * static_cast<uint32_t>(a_zero));
  }
  for (int64_t i = 0; i < m; ++i) {
    const uint32_t r = static_cast<uint32_t>(binding.row_sum[i]);
    int32_t* row = y + i * n_;
    for (int64_t j = 0; j < n_; ++j) {
      row[j] = static_cast<int32_t>(static_cast<uint32_t>(row[j]) -
                                    static_cast<uint32_t>(zero_b(j)) * r);
    }
  }
  return absl::OkStatus();
}

}  // namespace loopserve::engine::native
