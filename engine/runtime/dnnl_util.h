#pragma once

#include <dnnl.hpp>

#include "absl/status/status.h"
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

}  // namespace loopserve::engine
