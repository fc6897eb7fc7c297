#include "server/repository/model_warmup.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <new>
#include <random>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "engine/base/status_macros.h"
#include "engine/tensor/memory_budget.h"
#include "engine/tensor/shape.h"
#include "protocol/bytes.h"
#include "server/repository/repo_file.h"

namespace loopserve::server {
namespace {

using engine::DataType;

template <typename T>
void FillRandomIntegers(engine::Tensor& tensor, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> small(0, 7);
  T* data = tensor.mutable_data<T>();
  for (int64_t i = 0; i < tensor.NumElements(); ++i) data[i] = static_cast<T>(small(rng));
}

void FillRandom(engine::Tensor& tensor, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  const int64_t n = tensor.NumElements();
  switch (tensor.dtype()) {
    case DataType::kFloat32: {
      float* data = tensor.mutable_data<float>();
      for (int64_t i = 0; i < n; ++i) data[i] = static_cast<float>(real(rng));
      return;
    }
    case DataType::kFloat64: {
      double* data = tensor.mutable_data<double>();
      for (int64_t i = 0; i < n; ++i) data[i] = real(rng);
      return;
    }
    case DataType::kBFloat16: {
      // bfloat16 is the upper half of a float32.
      uint16_t* data = tensor.mutable_data<uint16_t>();
      for (int64_t i = 0; i < n; ++i) {
        const float value = static_cast<float>(real(rng));
        uint32_t bits;
        std::memcpy(&bits, &value, sizeof(bits));
        data[i] = static_cast<uint16_t>(bits >> 16);
      }
      return;
    }
    case DataType::kBool: {
      bool* data = tensor.mutable_data<bool>();
      for (int64_t i = 0; i < n; ++i) data[i] = (rng() & 1) != 0;
      return;
    }
    case DataType::kInt8:
      return FillRandomIntegers<int8_t>(tensor, rng);
    case DataType::kUint8:
      return FillRandomIntegers<uint8_t>(tensor, rng);
    case DataType::kInt16:
      return FillRandomIntegers<int16_t>(tensor, rng);
    case DataType::kUint16:
      return FillRandomIntegers<uint16_t>(tensor, rng);
    case DataType::kInt32:
      return FillRandomIntegers<int32_t>(tensor, rng);
    case DataType::kUint32:
      return FillRandomIntegers<uint32_t>(tensor, rng);
    case DataType::kInt64:
      return FillRandomIntegers<int64_t>(tensor, rng);
    case DataType::kUint64:
      return FillRandomIntegers<uint64_t>(tensor, rng);
    case DataType::kString: {
      // Short words, as loopctl perf sends.
      std::string* data = tensor.mutable_data<std::string>();
      for (int64_t i = 0; i < n; ++i) data[i] = absl::StrCat("w", rng() % 8);
      return;
    }
    case DataType::kFloat16:
    case DataType::kUndefined:
      if (tensor.ByteSize() > 0) std::memset(tensor.mutable_raw_data(), 0, tensor.ByteSize());
      return;
  }
}

// Opens <model_dir>/warmup/<file> as every repository file is (OpenRepositoryFile: inside the
// model folder, a regular file, never a FIFO that would block the load). Messages reach clients
// (RepositoryIndex): they name the file relative to the model folder only; every error is
// InvalidArgument (a missing file too).
absl::StatusOr<RepositoryFile> OpenWarmupFile(const std::string& model_dir, const std::string& file,
                                              absl::string_view what) {
  absl::StatusOr<RepositoryFile> opened =
      OpenRepositoryFile(model_dir, (std::filesystem::path(model_dir) / "warmup" / file).string(),
                         absl::StrCat("input_data_file warmup/", file));
  if (!opened.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", opened.status().message()));
  }
  return opened;
}

// Reads <model_dir>/warmup/<file>: exactly `bytes` bytes. A file larger than expected is refused
// before it is read.
absl::StatusOr<std::string> ReadWarmupFile(const std::string& model_dir, const std::string& file,
                                           size_t bytes, absl::string_view what) {
  LS_ASSIGN_OR_RETURN(const RepositoryFile in, OpenWarmupFile(model_dir, file, what));
  if (in.size() != bytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": input_data_file warmup/", file, " has ",
                                                   in.size(), " bytes; ", bytes,
                                                   " expected (the dims, one batch element)"));
  }
  absl::StatusOr<std::string> data = in.Read(bytes);
  if (!data.ok() || data->size() != bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": input_data_file warmup/", file, " could not be read in full"));
  }
  return data;
}

// Reads <model_dir>/warmup/<file> as `elements` BYTES elements, each a 4-byte little-endian
// length and its bytes (the raw layout of BYTES inputs), nothing left over; at most
// kMaxStringFileBytes.
absl::Status ReadWarmupStrings(const std::string& model_dir, const std::string& file,
                               int64_t elements, absl::string_view what, std::string* out) {
  constexpr uint64_t kMaxStringFileBytes = uint64_t{64} << 20;
  LS_ASSIGN_OR_RETURN(const RepositoryFile in, OpenWarmupFile(model_dir, file, what));
  absl::StatusOr<std::string> read = in.Read(kMaxStringFileBytes);
  if (!read.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": cannot read input_data_file warmup/",
                                                   file, " (BYTES data up to ", kMaxStringFileBytes,
                                                   " bytes)"));
  }
  const std::string& data = *read;
  size_t at = 0;
  for (int64_t i = 0; i < elements; ++i) {
    const protocol::BytesElement e = protocol::ReadBytesElement(data, at);
    if (e.error == protocol::BytesElement::Error::kTruncatedLength) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": input_data_file warmup/", file,
                                                     " holds fewer than ", elements,
                                                     " length-prefixed BYTES elements"));
    }
    if (e.error == protocol::BytesElement::Error::kOverrun) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": input_data_file warmup/", file,
                                                     ": BYTES element ", i, " overruns the file"));
    }
    out[i].assign(e.value.data(), e.value.size());
    at = e.next;
  }
  if (at != data.size()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": input_data_file warmup/", file,
                                                   " has bytes after its ", elements,
                                                   " BYTES elements"));
  }
  return absl::OkStatus();
}

// The model inputs of one sample, in Model::inputs() order (absent ones kNone), reshaped as the
// config says. Their buffers are charged to `budget` (the version's per-request memory budget)
// as they are allocated: a sample whose inputs do not fit is ResourceExhausted naming it, before
// the memory is asked for.
absl::StatusOr<std::vector<engine::Value>> BuildSampleInputs(
    const inference::ModelConfig& config, const inference::ModelWarmup& sample, const ModelIo& io,
    const engine::Model& model, const std::string& model_dir, const std::string& what) {
  std::vector<engine::Value> inputs(model.inputs().size());
  const int64_t batch = std::max<uint32_t>(sample.batch_size(), 1);
  std::mt19937_64 rng(20240611);
  // std::map: the same input order (and random values) on every load.
  const std::map<std::string, inference::ModelWarmup::Input> ordered(sample.inputs().begin(),
                                                                     sample.inputs().end());
  for (const auto& [name, input] : ordered) {
    const std::string input_what = absl::StrCat(what, ": input '", absl::CEscape(name), "'");
    const int index = model.FindInput(name);
    if (index < 0) {
      return absl::InvalidArgumentError(absl::StrCat(input_what, ": the model has no such input"));
    }
    // Unbatched inputs (parameters 'unbatched_inputs') take their dims as given.
    const bool batched = io.InputBatchAxis(index) == 0;
    std::vector<int64_t> dims;
    if (batched) dims.push_back(batch);
    dims.insert(dims.end(), input.dims().begin(), input.dims().end());
    LS_ASSIGN_OR_RETURN(engine::Shape shape, engine::ValidateDims(dims, input_what));
    engine::Tensor tensor(DataTypeFromConfig(input.data_type()), shape);
    switch (input.input_data_type_case()) {
      case inference::ModelWarmup::Input::kRandomData:
        FillRandom(tensor, rng);
        break;
      case inference::ModelWarmup::Input::kInputDataFile: {
        if (tensor.dtype() == DataType::kString) {
          // One batch element's strings, repeated for the batch.
          const int64_t per_batch = tensor.NumElements() / (batched ? batch : 1);
          std::string* out = tensor.mutable_data<std::string>();
          LS_RETURN_IF_ERROR(
              ReadWarmupStrings(model_dir, input.input_data_file(), per_batch, input_what, out));
          for (int64_t i = per_batch; i < tensor.NumElements(); ++i) out[i] = out[i % per_batch];
          break;
        }
        const size_t element_bytes = tensor.ByteSize() / static_cast<size_t>(batched ? batch : 1);
        LS_ASSIGN_OR_RETURN(std::string data, ReadWarmupFile(model_dir, input.input_data_file(),
                                                             element_bytes, input_what));
        char* out = static_cast<char*>(tensor.mutable_raw_data());
        for (size_t offset = 0; element_bytes > 0 && offset < tensor.ByteSize();
             offset += element_bytes) {
          std::memcpy(out + offset, data.data(), element_bytes);
        }
        break;
      }
      default:  // zero_data (ParseModelConfig rejected samples without data); strings: empty
        if (tensor.dtype() != DataType::kString && tensor.ByteSize() > 0) {
          std::memset(tensor.mutable_raw_data(), 0, tensor.ByteSize());
        }
        break;
    }
    inputs[index] = engine::Value(std::move(tensor));
  }
  absl::Status adapted = io.AdaptInputs(inputs);
  if (!adapted.ok()) return Annotate(adapted, absl::StrCat(what, ": "));
  return inputs;
}

absl::StatusOr<std::vector<engine::Value>> BuildInputs(
    const inference::ModelConfig& config, const inference::ModelWarmup& sample, const ModelIo& io,
    const engine::Model& model, const std::string& model_dir, const std::string& what,
    int64_t max_memory_bytes) {
  engine::MemoryBudget budget(max_memory_bytes);
  engine::ScopedMemoryBudget scope(&budget);
  try {
    return BuildSampleInputs(config, sample, io, model, model_dir, what);
  } catch (const engine::MemoryBudgetExceeded& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, " (batch_size ", sample.batch_size(), "): its inputs do not fit the ",
                     "version's per-request memory budget (max_request_memory_bytes): ", e.what()));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, " (batch_size ", sample.batch_size(), "): cannot allocate its inputs"));
  }
}

}  // namespace

absl::StatusOr<int64_t> RunModelWarmup(const inference::ModelConfig& config, const ModelIo& io,
                                       const engine::Model& model, const std::string& model_dir,
                                       const WarmupOptions& options) {
  if (options.intra_op_threads > 0) engine::SetIntraOpThreads(options.intra_op_threads);
  int64_t total_runs = 0;
  for (const inference::ModelWarmup& sample : config.model_warmup()) {
    const std::string what = absl::StrCat("model_warmup '", absl::CEscape(sample.name()), "'");
    LS_ASSIGN_OR_RETURN(
        std::vector<engine::Value> inputs,
        BuildInputs(config, sample, io, model, model_dir, what, options.max_memory_bytes));
    const uint32_t runs = std::max<uint32_t>(sample.count(), 1);
    for (uint32_t run = 1; run <= runs; ++run) {
      if (options.cancelled != nullptr && options.cancelled->load()) {
        return absl::CancelledError(
            absl::StrCat(what, " (run ", run, " of ", runs, "): the warm-up was stopped"));
      }
      std::vector<engine::Value> copy(inputs.size());
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (!inputs[i].is_none()) copy[i].CopyFrom(inputs[i]);
      }
      engine::RunOptions run_options;
      run_options.deadline = absl::Now() + options.run_timeout;
      run_options.max_loop_iterations = options.max_loop_iterations;
      run_options.max_output_bytes = options.max_output_bytes;
      run_options.max_memory_bytes = options.max_memory_bytes;
      run_options.loop_threads = options.loop_threads;
      run_options.cancelled = options.cancelled;
      absl::StatusOr<std::vector<engine::Value>> outputs = model.Run(std::move(copy), run_options);
      if (!outputs.ok()) {
        return Annotate(outputs.status(), absl::StrCat(what, " (run ", run, " of ", runs, "): "));
      }
      ++total_runs;
    }
  }
  return total_runs;
}

}  // namespace loopserve::server
