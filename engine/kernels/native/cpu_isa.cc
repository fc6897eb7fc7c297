#include "engine/kernels/native/cpu_isa.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "engine/kernels/backend.h"

namespace loopserve::engine::native {
namespace {

// From the one place that reads the CPU's features (engine/kernels/backend.h).
Isa Detect() {
  const CpuFeatures& f = DetectedCpuFeatures();
  if (f.avx512f) return Isa::kAvx512;
  if (f.avx2_fma) return Isa::kAvx2;
  return Isa::kScalar;
}

// The cap from LOOPSERVE_MAX_ISA; kAvx512 (no cap) when unset or unrecognised.
Isa EnvironmentCap() {
  const char* value = std::getenv("LOOPSERVE_MAX_ISA");
  if (value == nullptr) return Isa::kAvx512;
  if (std::strcmp(value, "avx2") == 0 || std::strcmp(value, "AVX2") == 0) return Isa::kAvx2;
  if (std::strcmp(value, "scalar") == 0 || std::strcmp(value, "SCALAR") == 0) {
    return Isa::kScalar;
  }
  return Isa::kAvx512;
}

std::atomic<uint8_t>& Cap() {
  static std::atomic<uint8_t> cap{static_cast<uint8_t>(EnvironmentCap())};
  return cap;
}

}  // namespace

Isa DetectedIsa() {
  static const Isa isa = Detect();
  return isa;
}

Isa ActiveIsa() {
  return static_cast<Isa>(
      std::min(static_cast<uint8_t>(DetectedIsa()), Cap().load(std::memory_order_relaxed)));
}

void SetMaxIsa(Isa isa) { Cap().store(static_cast<uint8_t>(isa), std::memory_order_relaxed); }

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kScalar:
      return "scalar";
  }
  return "scalar";
}

}  // namespace loopserve::engine::native
