#include "engine/kernels/native/half.h"

namespace loopserve::engine::native {

void WidenHalf(const Tensor& in, Tensor& out) {
  out.Resize(DataType::kFloat32, in.shape());
  const uint16_t* src = in.data<uint16_t>();
  float* dst = out.mutable_data<float>();
  const int64_t n = in.NumElements();
  if (in.dtype() == DataType::kFloat16) {
    for (int64_t i = 0; i < n; ++i) dst[i] = HalfToFloat(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = BFloatToFloat(src[i]);
  }
}

void NarrowHalf(const Tensor& in, Tensor& out) {
  const float* src = in.data<float>();
  uint16_t* dst = out.mutable_data<uint16_t>();
  const int64_t n = in.NumElements();
  if (out.dtype() == DataType::kFloat16) {
    for (int64_t i = 0; i < n; ++i) dst[i] = FloatToHalf(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = FloatToBFloat(src[i]);
  }
}

}  // namespace loopserve::engine::native
