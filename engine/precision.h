#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/engine.h"

namespace loopserve::engine {

// The names of the precisions of LoadOptions::precision ("fp32", "bf16": looprun's and
// loopserve's --precision, a model config's precision parameter). For any other name
// InvalidArgument "must be fp32 or bf16, not '<name>'", which the caller prefixes with what it
// parsed. Stateless; thread-safe.
absl::StatusOr<LoadOptions::Precision> ParsePrecision(absl::string_view name);
const char* PrecisionName(LoadOptions::Precision precision);

}  // namespace loopserve::engine
