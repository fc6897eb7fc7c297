#include "engine/kernels/dnnl/dnnl_util.h"

#include <cstdlib>
#include <new>

#include "absl/strings/str_cat.h"

namespace loopserve::engine {

namespace {

// oneDNN's profiling hooks off unless the environment asks for them: the ITT task markers around
// every primitive execute (ONEDNN_ITT_TASK_LEVEL; perf showed __itt_pt_write at 5-10% of bodies
// made of many small primitives) and the registration of each JIT kernel with VTune. oneDNN reads
// the ITT level once, on the first execute, so this runs before the engine is first used.
void DisableProfilingHooks() {
  if (std::getenv("ONEDNN_ITT_TASK_LEVEL") == nullptr &&
      std::getenv("DNNL_ITT_TASK_LEVEL") == nullptr) {
    setenv("ONEDNN_ITT_TASK_LEVEL", "0", /*overwrite=*/0);
  }
  if (std::getenv("ONEDNN_JIT_PROFILE") == nullptr && std::getenv("DNNL_JIT_PROFILE") == nullptr) {
    dnnl::set_jit_profiling_flags(0);
  }
}

}  // namespace

const dnnl::engine& CpuEngine() {
  static const dnnl::engine* engine = [] {
    DisableProfilingHooks();
    return new dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return *engine;
}

dnnl::memory::data_type ToDnnl(DataType type) {
  using dt = dnnl::memory::data_type;
  switch (type) {
    case DataType::kFloat32:
      return dt::f32;
    case DataType::kInt32:
      return dt::s32;
    case DataType::kInt8:
      return dt::s8;
    case DataType::kUint8:
      return dt::u8;
    case DataType::kFloat16:
      return dt::f16;
    case DataType::kBFloat16:
      return dt::bf16;
    default:
      return dt::undef;
  }
}

dnnl::memory::desc PlainDesc(const Shape& shape, dnnl::memory::data_type type) {
  dnnl::memory::dims dims(shape.dims().begin(), shape.dims().end());
  if (dims.empty()) dims.push_back(1);
  dnnl::memory::dims strides(dims.size());
  int64_t stride = 1;
  for (int i = static_cast<int>(dims.size()) - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= std::max<int64_t>(dims[i], 1);
  }
  return dnnl::memory::desc(dims, type, strides);
}

absl::Status FromDnnlError(const dnnl::error& e) {
  return absl::InternalError(absl::StrCat("oneDNN error (status ", e.status, "): ", e.what()));
}

DnnlRunResource::~DnnlRunResource() {
  std::free(scratchpad_);
  std::free(staging_);
}

dnnl::stream& DnnlRunResource::stream() {
  if (stream_ == nullptr) stream_ = std::make_unique<dnnl::stream>(CpuEngine());
  return *stream_;
}

void* DnnlRunResource::Scratchpad(size_t bytes) {
  return Grow(scratchpad_, scratchpad_bytes_, bytes);
}

void* DnnlRunResource::Staging(size_t bytes) { return Grow(staging_, staging_bytes_, bytes); }

void* DnnlRunResource::Grow(void*& buffer, size_t& capacity, size_t bytes) {
  if (bytes > capacity) {
    std::free(buffer);
    buffer = nullptr;
    capacity = 0;
    const size_t rounded = (bytes + 63) / 64 * 64;
    buffer = std::aligned_alloc(64, rounded);
    if (buffer == nullptr) throw std::bad_alloc();
    capacity = rounded;
  }
  return buffer;
}

}  // namespace loopserve::engine
