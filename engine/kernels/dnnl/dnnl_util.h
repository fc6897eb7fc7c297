#pragma once

#include <cstddef>
#include <dnnl.hpp>
#include <memory>

#include "absl/status/status.h"
#include "engine/runtime/run_context.h"
#include "engine/tensor/dtype.h"
#include "engine/tensor/shape.h"

namespace loopserve::engine {

// The process-wide oneDNN CPU engine (thread-safe to use from any thread).
const dnnl::engine& CpuEngine();

// The oneDNN data type for `type`, or data_type::undef when oneDNN has none (int64, bool, f64...).
dnnl::memory::data_type ToDnnl(DataType type);

// A plain row-major memory descriptor for `shape` (a scalar becomes {1}).
dnnl::memory::desc PlainDesc(const Shape& shape, dnnl::memory::data_type type);

// Converts a dnnl::error thrown by oneDNN into a Status (Internal, with oneDNN's message).
absl::Status FromDnnlError(const dnnl::error& e);

// The oneDNN state of one run (RunContext::Resource<DnnlRunResource>()): its CPU stream, the
// user-managed scratchpad every primitive of the run shares and the staging area every staged
// step shares (one buffer each, grown to the largest need; kept with the model's frame for its
// next run, FramePool). Neither is a tensor buffer: the memory budget does not count them.
// Primitives are created with scratchpad_mode::user, so one const primitive runs on any thread with
// the run's scratchpad. Not thread-safe, like the run.
class DnnlRunResource final : public RunResource {
 public:
  DnnlRunResource() = default;
  ~DnnlRunResource() override;

  // Created on first use.
  dnnl::stream& stream();

  // A 64-byte aligned buffer of at least `bytes`, valid until the next call with a larger size.
  void* Scratchpad(size_t bytes);
  // The same for the staged (blocked-layout) copies of a step's source and result: one area for
  // every step of the run, instead of a pair per step that would all stay allocated.
  void* Staging(size_t bytes);

 private:
  // A 64-byte aligned buffer of at least `bytes` in `buffer`, grown (not kept) when too small.
  static void* Grow(void*& buffer, size_t& capacity, size_t bytes);

  std::unique_ptr<dnnl::stream> stream_;
  void* scratchpad_ = nullptr;
  size_t scratchpad_bytes_ = 0;
  void* staging_ = nullptr;
  size_t staging_bytes_ = 0;
};

}  // namespace loopserve::engine
