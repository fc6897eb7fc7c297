// NonMaxSuppression: greedy per-class box selection by score and IoU.

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/native/common.h"
#include "engine/kernels/native/register_families.h"

namespace loopserve::engine::native {
namespace {

struct Box {
  float y1, x1, y2, x2;
};

class NmsState : public KernelState {
 public:
  std::vector<int64_t> candidates;
  std::vector<int64_t> selected;  // (batch, class, box) triples
  std::vector<int64_t> kept;      // boxes kept for the current class
};

// NonMaxSuppression(boxes [B,N,4], scores [B,C,N], max_output_boxes_per_class?, iou_threshold?,
// score_threshold?; center_point_box) -> selected_indices [K,3] int64 of (batch, class, box).
// Per batch and class: boxes with score > score_threshold in descending score order (ties by
// lower index), each kept unless its IoU with an already kept box exceeds iou_threshold, at most
// max_output_boxes_per_class (default 0: none).
class NmsKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    LS_RETURN_IF_ERROR(CheckArity(init, 2, 5));
    LS_ASSIGN_OR_RETURN(int64_t center, init.node().GetInt("center_point_box", 0));
    if (center != 0 && center != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("center_point_box must be 0 or 1, got ", center));
    }
    return std::unique_ptr<Kernel>(new NmsKernel(center == 1));
  }
  std::unique_ptr<KernelState> CreateState() const override { return std::make_unique<NmsState>(); }

  absl::Status Run(KernelContext& ctx) const override {
    const Tensor& boxes = ctx.input(0);
    const Tensor& scores = ctx.input(1);
    if (boxes.dtype() != DataType::kFloat32 || scores.dtype() != DataType::kFloat32) {
      return UnsupportedType("boxes/scores", boxes.dtype());
    }
    if (boxes.rank() != 3 || boxes.dim(2) != 4 || scores.rank() != 3 ||
        scores.dim(0) != boxes.dim(0) || scores.dim(2) != boxes.dim(1)) {
      return absl::InvalidArgumentError(absl::StrCat("boxes ", boxes.shape().ToString(),
                                                     " must be [B,N,4] and scores ",
                                                     scores.shape().ToString(), " [B,C,N]"));
    }
    int64_t max_per_class = 0;
    float iou_threshold = 0;
    float score_threshold = 0;
    bool use_score_threshold = false;
    if (ctx.has_input(2) && ctx.input(2).NumElements() > 0) {
      if (!IsInteger(ctx.input(2).dtype())) {
        return absl::InvalidArgumentError("max_output_boxes_per_class must be an integer");
      }
      max_per_class = ctx.input(2).ScalarAsInt64();
    }
    if (ctx.has_input(3) && ctx.input(3).NumElements() > 0) {
      if (ctx.input(3).dtype() != DataType::kFloat32) {
        return absl::InvalidArgumentError("iou_threshold must be float32");
      }
      iou_threshold = ctx.input(3).data<float>()[0];
    }
    if (ctx.has_input(4) && ctx.input(4).NumElements() > 0) {
      if (ctx.input(4).dtype() != DataType::kFloat32) {
        return absl::InvalidArgumentError("score_threshold must be float32");
      }
      score_threshold = ctx.input(4).data<float>()[0];
      use_score_threshold = true;
    }
    NmsState& state = *ctx.state<NmsState>();
    state.selected.clear();
    const int64_t batches = boxes.dim(0);
    const int64_t n = boxes.dim(1);
    const int64_t classes = scores.dim(1);
    const float* pb = boxes.data<float>();
    const float* ps = scores.data<float>();
    for (int64_t b = 0; max_per_class > 0 && b < batches; ++b) {
      for (int64_t c = 0; c < classes; ++c) {
        const float* s = ps + (b * classes + c) * n;
        state.candidates.clear();
        for (int64_t i = 0; i < n; ++i) {
          if (!use_score_threshold || s[i] > score_threshold) state.candidates.push_back(i);
        }
        std::stable_sort(state.candidates.begin(), state.candidates.end(),
                         [&](int64_t a, int64_t z) { return s[a] > s[z]; });
        state.kept.clear();
        for (int64_t i : state.candidates) {
          if (static_cast<int64_t>(state.kept.size()) >= max_per_class) break;
          const Box bi = BoxAt(pb + (b * n + i) * 4);
          bool keep = true;
          for (int64_t j : state.kept) {
            if (IoU(bi, BoxAt(pb + (b * n + j) * 4)) > iou_threshold) {
              keep = false;
              break;
            }
          }
          if (!keep) continue;
          state.kept.push_back(i);
          state.selected.insert(state.selected.end(), {b, c, i});
        }
      }
    }
    const int64_t count = static_cast<int64_t>(state.selected.size() / 3);
    Tensor* y = ctx.output(0, DataType::kInt64, Shape{count, 3});
    std::copy(state.selected.begin(), state.selected.end(), y->mutable_data<int64_t>());
    return absl::OkStatus();
  }

 private:
  explicit NmsKernel(bool center) : center_(center) {}

  // Corners with y1 <= y2 and x1 <= x2, from either box encoding.
  Box BoxAt(const float* p) const {
    if (center_) {
      const float xc = p[0], yc = p[1], w = p[2], h = p[3];
      return {yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2};
    }
    return {std::min(p[0], p[2]), std::min(p[1], p[3]), std::max(p[0], p[2]), std::max(p[1], p[3])};
  }

  static float IoU(const Box& a, const Box& b) {
    const float ih = std::min(a.y2, b.y2) - std::max(a.y1, b.y1);
    const float iw = std::min(a.x2, b.x2) - std::max(a.x1, b.x1);
    if (ih <= 0 || iw <= 0) return 0;
    const float inter = ih * iw;
    const float uni = (a.y2 - a.y1) * (a.x2 - a.x1) + (b.y2 - b.y1) * (b.x2 - b.x1) - inter;
    return uni > 0 ? inter / uni : 0;
  }

  bool center_;
};

}  // namespace

void RegisterNmsKernels(KernelRegistry& registry) {
  registry.Register("NonMaxSuppression", FactoryOf<NmsKernel>(), 10);
}

}  // namespace loopserve::engine::native
