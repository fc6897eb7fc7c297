#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <type_traits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/types/span.h"
#include "engine/base/status_macros.h"
#include "engine/tensor/scalar_like.h"
#include "server/repository/model_config.h"
#include "server/repository/model_config_internal.h"

// ModelIo: the complete config as the request path applies it (dims, batch axes, reshapes).

namespace loopserve::server {
namespace {

using inference::ModelConfig;

// False when the elements do not fit.
bool ResolveShape(int64_t elements, engine::Shape& target) {
  int unknown = -1;
  int64_t product = 1;
  for (int i = 0; i < target.rank(); ++i) {
    if (target[i] < 0) {
      unknown = i;
    } else {
      product *= target[i];
    }
  }
  if (unknown < 0) return product == elements;
  if (product == 0) {
    if (elements != 0) return false;
    target[unknown] = 0;
    return true;
  }
  if (elements % product != 0) return false;
  target[unknown] = elements / product;
  return true;
}

}  // namespace

// ---- ModelIo ----

ModelIo ModelIo::Build(const inference::ModelConfig& config, const engine::Model& model) {
  ModelIo io;
  io.max_batch_size_ = config.max_batch_size();
  io.input_by_model_index_.assign(model.inputs().size(), -1);
  io.output_by_model_index_.assign(model.outputs().size(), -1);
  // CompleteModelConfig has checked the layout.
  const BatchLayout layout = ReadBatchLayout(config).value_or(BatchLayout());
  // Client-side dims with the batch dim at `axis` (-1: none); none when the model's rank is
  // unknown and the config gives no dims (auto-complete wrote none).
  auto full = [&](absl::Span<const int64_t> dims, const engine::TensorSpec& spec,
                  int axis) -> std::optional<std::vector<int64_t>> {
    if (!spec.type.dims.has_value() && dims.empty()) return std::nullopt;
    std::vector<int64_t> out(dims.begin(), dims.end());
    if (axis >= 0) out.insert(out.begin() + std::min<size_t>(axis, out.size()), -1);
    return out;
  };
  for (const inference::ModelInput& input : config.input()) {
    const int index = FindSpec(model.inputs(), input.name());
    if (index < 0) continue;  // CompleteModelConfig has rejected this
    Tensor t;
    t.name = input.name();
    t.dtype = DataTypeFromConfig(input.data_type());
    t.model_index = index;
    t.optional = input.optional();
    t.batch_axis = io.max_batch_size_ > 0 && layout.InputBatched(t.name) ? 0 : -1;
    t.dims = full(input.dims(), model.inputs()[index], t.batch_axis);
    if (input.has_reshape()) {
      t.reshape = full(input.reshape().shape(), model.inputs()[index], t.batch_axis);
    }
    io.input_by_model_index_[index] = static_cast<int>(io.inputs_.size());
    io.inputs_.push_back(std::move(t));
  }
  for (const inference::ModelOutput& output : config.output()) {
    const int index = FindSpec(model.outputs(), output.name());
    if (index < 0) continue;
    Tensor t;
    t.name = output.name();
    t.dtype = DataTypeFromConfig(output.data_type());
    t.model_index = index;
    t.batch_axis = io.max_batch_size_ > 0 ? layout.OutputAxis(t.name) : -1;
    t.dims = full(output.dims(), model.outputs()[index], t.batch_axis);
    if (output.has_reshape()) {
      t.reshape = full(output.reshape().shape(), model.outputs()[index], t.batch_axis);
      io.any_output_reshape_ = true;
    }
    io.output_by_model_index_[index] = static_cast<int>(io.outputs_.size());
    io.outputs_.push_back(std::move(t));
  }
  return io;
}

int ModelIo::InputBatchAxis(int model_index) const {
  if (model_index < 0 || model_index >= static_cast<int>(input_by_model_index_.size())) return -1;
  const int i = input_by_model_index_[model_index];
  return i < 0 ? -1 : inputs_[i].batch_axis;
}

int ModelIo::OutputBatchAxis(int model_index) const {
  if (model_index < 0 || model_index >= static_cast<int>(output_by_model_index_.size())) return -1;
  const int i = output_by_model_index_[model_index];
  return i < 0 ? -1 : outputs_[i].batch_axis;
}

absl::Status ModelIo::AdaptInputs(std::vector<engine::Value>& inputs) const {
  int64_t batch = -1;  // the batch size of the first batched input
  const std::string* batch_input = nullptr;
  for (size_t i = 0; i < inputs.size() && i < input_by_model_index_.size(); ++i) {
    if (input_by_model_index_[i] < 0) continue;
    const Tensor& spec = inputs_[input_by_model_index_[i]];
    engine::Value& value = inputs[i];
    if (value.is_none()) {
      if (spec.optional) continue;
      return absl::InvalidArgumentError(
          absl::StrCat("input '", spec.name, "': missing from the request"));
    }
    if (!value.is_tensor()) continue;
    engine::Tensor& tensor = value.mutable_tensor();
    if (spec.dtype != engine::DataType::kUndefined && tensor.dtype() != spec.dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", spec.name, "': ", engine::DataTypeName(tensor.dtype()),
                       " does not match the config's data_type ", ConfigTypeName(spec.dtype)));
    }
    const bool batched = spec.batch_axis == 0;
    // A scalar sent as [1], or a [1] sent as a scalar, as ONNX Runtime accepts (the engine does the
    // same against the model's own declaration).
    if (!batched && spec.dims.has_value() &&
        engine::IsScalarLikeMatch(tensor.shape(), *spec.dims)) {
      tensor.Reshape(engine::Shape(absl::MakeConstSpan(*spec.dims)));
    }
    const engine::Shape& shape = tensor.shape();
    // Dims unknown (a model input of unknown rank): the batch dim is still checked.
    bool ok = !spec.dims.has_value() || shape.rank() == static_cast<int>(spec.dims->size());
    for (int d = 0; ok && spec.dims.has_value() && d < shape.rank(); ++d) {
      ok = (*spec.dims)[d] == -1 || (*spec.dims)[d] == shape[d];
    }
    if (ok && batched) ok = shape.rank() >= 1 && shape[0] >= 1 && shape[0] <= max_batch_size_;
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", spec.name, "': shape ", shape.ToString(), " does not match the config's ",
          spec.dims.has_value() ? FormatDims(*spec.dims) : "dims",
          batched ? absl::StrCat(" (batch dim 1 to ", max_batch_size_, ")") : ""));
    }
    if (batched) {
      if (batch_input != nullptr && shape[0] != batch) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", spec.name, "': batch size ", shape[0], " differs from input '", *batch_input,
            "''s ", batch, " (every batched input has the same first dim)"));
      }
      batch = shape[0];
      batch_input = &spec.name;
    }
    if (!spec.reshape.has_value() || !spec.dims.has_value()) continue;
    engine::Shape target(absl::MakeConstSpan(*spec.reshape));
    if (batched) target[0] = shape[0];
    if (!ResolveShape(shape.NumElements(), target)) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", spec.name, "': shape ", shape.ToString(),
                       " cannot be reshaped to the model's ", FormatDims(*spec.reshape)));
    }
    tensor.Reshape(target);
  }
  return absl::OkStatus();
}

absl::Status ModelIo::AdaptOutputs(std::vector<engine::Value>& outputs) const {
  if (!any_output_reshape_) return absl::OkStatus();
  for (const Tensor& spec : outputs_) {
    if (!spec.reshape.has_value() || !spec.dims.has_value()) continue;
    if (spec.model_index < 0 || spec.model_index >= static_cast<int>(outputs.size())) continue;
    engine::Value& value = outputs[spec.model_index];
    if (!value.is_tensor()) continue;
    engine::Tensor& tensor = value.mutable_tensor();
    engine::Shape target(absl::MakeConstSpan(*spec.dims));
    const int axis = spec.batch_axis;
    if (axis >= 0 && axis < tensor.shape().rank() && axis < target.rank()) {
      target[axis] = tensor.shape()[axis];
    }
    if (!ResolveShape(tensor.shape().NumElements(), target)) {
      return absl::InvalidArgumentError(
          absl::StrCat("output '", spec.name, "': the model's shape ", tensor.shape().ToString(),
                       " cannot be reshaped to the config's dims ", FormatDims(*spec.dims)));
    }
    tensor.Reshape(target);
  }
  return absl::OkStatus();
}

}  // namespace loopserve::server
