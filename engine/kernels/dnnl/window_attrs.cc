#include "engine/kernels/dnnl/window_attrs.h"

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"

namespace loopserve::engine {

absl::StatusOr<reference::WindowAttrs> ParseWindowAttrs(const Node& node,
                                                        bool require_kernel_shape) {
  reference::WindowAttrs attrs;
  LS_ASSIGN_OR_RETURN(const std::string auto_pad, node.GetString("auto_pad", "NOTSET"));
  if (auto_pad == "NOTSET" || auto_pad.empty()) {
    attrs.auto_pad = reference::AutoPad::kNotSet;
  } else if (auto_pad == "VALID") {
    attrs.auto_pad = reference::AutoPad::kValid;
  } else if (auto_pad == "SAME_UPPER") {
    attrs.auto_pad = reference::AutoPad::kSameUpper;
  } else if (auto_pad == "SAME_LOWER") {
    attrs.auto_pad = reference::AutoPad::kSameLower;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown auto_pad '", auto_pad, "'"));
  }
  LS_ASSIGN_OR_RETURN(attrs.kernel_shape, node.GetInts("kernel_shape", std::vector<int64_t>{}));
  if (require_kernel_shape && attrs.kernel_shape.empty()) {
    return absl::InvalidArgumentError("attribute kernel_shape is required");
  }
  LS_ASSIGN_OR_RETURN(attrs.strides, node.GetInts("strides", std::vector<int64_t>{}));
  LS_ASSIGN_OR_RETURN(attrs.dilations, node.GetInts("dilations", std::vector<int64_t>{}));
  LS_ASSIGN_OR_RETURN(attrs.pads, node.GetInts("pads", std::vector<int64_t>{}));
  LS_ASSIGN_OR_RETURN(const int64_t ceil_mode, node.GetInt("ceil_mode", 0));
  attrs.ceil_mode = ceil_mode != 0;
  const size_t rank = attrs.kernel_shape.size();
  if (rank > 0) {
    for (const auto* v : {&attrs.strides, &attrs.dilations}) {
      if (!v->empty() && v->size() != rank) {
        return absl::InvalidArgumentError(
            absl::StrCat("strides/dilations have ", v->size(), " values, kernel_shape ", rank));
      }
    }
    if (!attrs.pads.empty() && attrs.pads.size() != 2 * rank) {
      return absl::InvalidArgumentError(
          absl::StrCat("pads have ", attrs.pads.size(), " values, expected ", 2 * rank));
    }
  }
  LS_RETURN_IF_ERROR(reference::ValidateWindowAttrs(attrs, node.op_type));
  return attrs;
}

DnnlWindow ToDnnlWindow(const reference::Window& window) {
  DnnlWindow w;
  for (int i = 0; i < window.rank; ++i) {
    w.strides.push_back(window.strides[i]);
    w.kernel.push_back(window.kernel[i]);
    w.dilations.push_back(window.dilations[i] - 1);
    w.padding_l.push_back(window.pads_begin[i]);
    w.padding_r.push_back(window.pads_end[i]);
  }
  return w;
}

}  // namespace loopserve::engine
