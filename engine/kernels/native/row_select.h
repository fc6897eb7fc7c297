#pragma once

// Vectorised scans of one contiguous float32 row for the selection ops: ArgMax / ArgMin (a greedy
// decoder's logits) and TopK with a small k over a long row (a beam search's beams x vocabulary
// scores). Each function has an AVX-512F and an AVX2 body, chosen per call by
// native::ActiveIsa() (capped by LOOPSERVE_MAX_ISA), and a scalar loop for CPUs without AVX2.
// Stateless and thread-safe.

#include <cstdint>

namespace loopserve::engine::native {

// The first index of the row's maximum (`max`) or minimum, or -1 when the row holds a NaN (the
// caller's general path decides what a NaN means). Requires n > 0.
int64_t FirstExtremumIndexF32(const float* x, int64_t n, bool max);

// The first index j in [from, n) whose x[j] ranks strictly before `bound` (x[j] > bound when
// `largest`, x[j] < bound otherwise) or is a NaN; n when there is none. TopK's filter: after the
// first k elements almost no element of a long row can enter the best k, so the row is scanned
// by whole vectors against the worst kept value and only the rare candidates are looked at.
int64_t NextCandidateF32(const float* x, int64_t from, int64_t n, float bound, bool largest);

}  // namespace loopserve::engine::native
