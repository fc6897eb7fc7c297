#include "server/grpc/tensor_codec.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/tensor/shape.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpc/slice.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/slice.h"
#include "protocol/datatype.h"
#include "protocol/typed_contents.h"
#include "server/datatype.h"
#include "server/status_util.h"

namespace loopserve::server {
namespace {

using engine::DataType;
using engine::Tensor;
using engine::Value;
using InputTensor = inference::ModelInferRequest::InferInputTensor;

absl::Status Invalid(absl::string_view what, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", message));
}

bool HasTypedContents(const InputTensor& input) {
  return input.has_contents() &&
         protocol::OtherFilledField(input.contents(), protocol::ContentsField::kNone) !=
             protocol::ContentsField::kNone;
}

// Copies a repeated proto field into an owned tensor of element type T after checking the count.
template <typename T, typename Field>
absl::StatusOr<Tensor> CopyTyped(const std::string& what, const Field& field,
                                 absl::string_view field_name, DataType dtype,
                                 const engine::Shape& shape) {
  const int64_t expected = shape.NumElements();
  if (static_cast<int64_t>(field.size()) != expected) {
    return Invalid(what, absl::StrCat("shape ", shape.ToString(), " needs ", expected,
                                      " elements, got ", field.size(), " in ", field_name));
  }
  Tensor tensor(dtype, shape);
  T* out = tensor.mutable_data<T>();
  for (int i = 0; i < field.size(); ++i) out[i] = static_cast<T>(field.Get(i));
  return tensor;
}

absl::StatusOr<Tensor> DecodeTyped(const std::string& what, const InputTensor& input,
                                   absl::string_view datatype, DataType dtype,
                                   const engine::Shape& shape) {
  const inference::InferTensorContents& c = input.contents();
  // The field that may carry this datatype; every other field must be empty.
  const protocol::Datatype wire = protocol::ParseDatatype(datatype);
  const protocol::ContentsField field = protocol::ContentsFieldOf(wire);
  if (field == protocol::ContentsField::kNone) {
    return Invalid(what,
                   absl::StrCat("datatype ", datatype,
                                " has no typed contents field; send it in raw_input_contents"));
  }
  const absl::string_view expected_field = protocol::ContentsFieldName(field);
  const protocol::ContentsField other = protocol::OtherFilledField(c, field);
  if (other != protocol::ContentsField::kNone) {
    return Invalid(what, absl::StrCat("datatype ", datatype, " expects ", expected_field, ", got ",
                                      protocol::ContentsFieldName(other)));
  }
  if (field == protocol::ContentsField::kBytes) {
    return CopyTyped<std::string>(what, c.bytes_contents(), expected_field, dtype, shape);
  }
  absl::StatusOr<Tensor> tensor =
      absl::InternalError(absl::StrCat(what, ": unhandled datatype ", datatype));
  protocol::VisitNumeric(wire, [&](auto tag) {
    using T = typename decltype(tag)::type;
    protocol::VisitContents(c, field, [&](const auto& values) {
      tensor = CopyTyped<T>(what, values, expected_field, dtype, shape);
    });
  });
  return tensor;
}

}  // namespace

absl::Status ParseInferRequest(grpc::ByteBuffer& bytes, absl::string_view rpc,
                               inference::ModelInferRequest* request) {
  const size_t size = bytes.Valid() ? bytes.Length() : 0;
  bool parsed = true;
  if (size > 0) {
    grpc::ProtoBufferReader reader(&bytes);
    parsed = reader.status().ok() && request->ParseFromZeroCopyStream(&reader);
  }
  bytes.Clear();
  if (!parsed) {
    return absl::InvalidArgumentError(
        absl::StrCat(rpc, ": the request (", size,
                     " bytes) is not a valid inference.ModelInferRequest message"));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> SharedMemoryParameters(
    const google::protobuf::Map<std::string, inference::InferParameter>& parameters,
    absl::string_view what, SharedMemoryRef* ref) {
  auto region = parameters.find("shared_memory_region");
  auto offset = parameters.find("shared_memory_offset");
  auto size = parameters.find("shared_memory_byte_size");
  if (region == parameters.end()) {
    if (offset != parameters.end() || size != parameters.end()) {
      return Invalid(what,
                     "shared_memory_offset/shared_memory_byte_size without "
                     "shared_memory_region");
    }
    return false;
  }
  if (region->second.parameter_choice_case() != inference::InferParameter::kStringParam) {
    return Invalid(what, "parameter 'shared_memory_region' must be a string");
  }
  ref->region = region->second.string_param();
  auto non_negative = [&](auto it, const char* name, uint64_t* value) -> absl::Status {
    const inference::InferParameter& p = it->second;
    if (p.parameter_choice_case() == inference::InferParameter::kInt64Param &&
        p.int64_param() >= 0) {
      *value = static_cast<uint64_t>(p.int64_param());
    } else if (p.parameter_choice_case() == inference::InferParameter::kUint64Param) {
      *value = p.uint64_param();
    } else {
      return Invalid(what, absl::StrCat("parameter '", name, "' must be a non-negative int64"));
    }
    return absl::OkStatus();
  };
  if (size == parameters.end()) {
    return Invalid(what, "shared_memory_region needs shared_memory_byte_size");
  }
  LS_RETURN_IF_ERROR(non_negative(size, "shared_memory_byte_size", &ref->byte_size));
  ref->offset = 0;
  if (offset != parameters.end()) {
    LS_RETURN_IF_ERROR(non_negative(offset, "shared_memory_offset", &ref->offset));
  }
  return true;
}

namespace {

// The requested outputs, and those to be written into shared memory.
absl::Status ReadOutputs(const inference::ModelInferRequest& request, InferenceRequest* out,
                         const SharedMemoryManager* shm, SharedMemoryBindings* bindings) {
  for (const auto& output : request.outputs()) {
    out->outputs.push_back(output.name());
    if (output.parameters().empty()) continue;  // no shared-memory parameters
    const std::string what = absl::StrCat("output ", QuoteUntrusted(output.name()));
    SharedMemoryRef ref;
    LS_ASSIGN_OR_RETURN(bool uses_shm, SharedMemoryParameters(output.parameters(), what, &ref));
    if (!uses_shm) continue;
    if (shm == nullptr || bindings == nullptr) {
      return Invalid(what, "shared memory is not available on this endpoint");
    }
    LS_ASSIGN_OR_RETURN(SharedMemoryView view, shm->Map(ref, what));
    bindings->outputs.emplace_back(output.name(), std::move(view));
  }
  return absl::OkStatus();
}

// The request's parameters loopserve reads: Triton's `timeout`, `stream_iterations`, and
// Triton's sequence parameters.
absl::Status ReadParameters(const inference::ModelInferRequest& request, InferenceRequest* out) {
  auto it = request.parameters().find("timeout");
  if (it != request.parameters().end()) {
    // Triton's per-request `timeout` parameter (microseconds; 0 = none).
    const inference::InferParameter& p = it->second;
    int64_t micros = -1;
    if (p.parameter_choice_case() == inference::InferParameter::kInt64Param) {
      micros = p.int64_param();
    } else if (p.parameter_choice_case() == inference::InferParameter::kUint64Param) {
      micros = static_cast<int64_t>(
          std::min<uint64_t>(p.uint64_param(), std::numeric_limits<int64_t>::max()));
    }
    if (micros < 0) {
      return absl::InvalidArgumentError(
          "parameter 'timeout' must be a non-negative int64 (microseconds)");
    }
    out->timeout_us = micros;
  }
  it = request.parameters().find("stream_iterations");
  if (it != request.parameters().end()) {
    if (it->second.parameter_choice_case() != inference::InferParameter::kBoolParam) {
      return absl::InvalidArgumentError("parameter 'stream_iterations' must be a bool");
    }
    out->stream_iterations = it->second.bool_param();
  }
  // Triton's sequence parameters: the id as int64 / uint64 or a string; start and end as bools.
  it = request.parameters().find("sequence_id");
  if (it != request.parameters().end()) {
    const inference::InferParameter& p = it->second;
    if (p.parameter_choice_case() == inference::InferParameter::kInt64Param &&
        p.int64_param() >= 0) {
      out->sequence.id = static_cast<uint64_t>(p.int64_param());
    } else if (p.parameter_choice_case() == inference::InferParameter::kUint64Param) {
      out->sequence.id = p.uint64_param();
    } else if (p.parameter_choice_case() == inference::InferParameter::kStringParam) {
      out->sequence.string_id = p.string_param();
    } else {
      return absl::InvalidArgumentError(
          "parameter 'sequence_id' must be a non-negative int64, a uint64 or a string");
    }
  }
  for (auto [name, flag] : {std::pair<const char*, bool*>{"sequence_start", &out->sequence.start},
                            {"sequence_end", &out->sequence.end}}) {
    it = request.parameters().find(name);
    if (it == request.parameters().end()) continue;
    if (it->second.parameter_choice_case() != inference::InferParameter::kBoolParam) {
      return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "' must be a bool"));
    }
    *flag = it->second.bool_param();
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ToInferenceRequest(const inference::ModelInferRequest& request, InferenceRequest* out,
                                const SharedMemoryManager* shm, SharedMemoryBindings* bindings) {
  out->model_name = request.model_name();
  out->model_version = request.model_version();
  out->id = request.id();
  // Which inputs are in shared memory: raw_input_contents holds the others'.
  // (Inline storage: no allocation per request for the usual few inputs.)
  absl::InlinedVector<SharedMemoryRef, 4> refs(request.inputs_size());
  absl::InlinedVector<bool, 8> in_shm(request.inputs_size(), false);
  int shm_inputs = 0;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const InputTensor& input = request.inputs(i);
    if (input.parameters().empty()) continue;  // no shared-memory parameters
    const std::string what = absl::StrCat("input ", QuoteUntrusted(input.name()));
    LS_ASSIGN_OR_RETURN(bool uses_shm, SharedMemoryParameters(input.parameters(), what, &refs[i]));
    if (!uses_shm) continue;
    if (shm == nullptr || bindings == nullptr) {
      return Invalid(what, "shared memory is not available on this endpoint");
    }
    if (HasTypedContents(input)) {
      return Invalid(what, "has typed contents although its data is in shared memory");
    }
    in_shm[i] = true;
    ++shm_inputs;
  }
  const int unshared = request.inputs_size() - shm_inputs;
  const bool raw = request.raw_input_contents_size() > 0;
  if (raw && request.raw_input_contents_size() != unshared) {
    return absl::InvalidArgumentError(
        absl::StrCat("raw_input_contents has ", request.raw_input_contents_size(),
                     " entries but the request has ", unshared,
                     " inputs not in shared memory; give one entry per input, in order"));
  }
  out->inputs.reserve(request.inputs_size());
  int raw_index = 0;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const InputTensor& input = request.inputs(i);
    if (in_shm[i]) {
      InferenceRequest::Input& in = out->inputs.emplace_back();
      in.name = input.name();
      in.datatype = input.datatype();
      in.shape.assign(input.shape().begin(), input.shape().end());
      LS_ASSIGN_OR_RETURN(SharedMemoryView view,
                          shm->Map(refs[i], absl::StrCat("input ", QuoteUntrusted(input.name()))));
      in.raw = view.bytes();
      bindings->inputs.push_back(std::move(view));
      continue;
    }
    if (raw && HasTypedContents(input)) {
      // Triton's words (clients match on them).
      return absl::InvalidArgumentError(absl::StrCat(
          "contents field must not be specified when using raw_input_contents for ",
          QuoteUntrusted(input.name()), " for model ", QuoteUntrusted(request.model_name())));
    }
    InferenceRequest::Input& in = out->inputs.emplace_back();
    in.name = input.name();
    in.datatype = input.datatype();
    in.shape.assign(input.shape().begin(), input.shape().end());
    if (raw) {
      in.raw = request.raw_input_contents(raw_index++);
    } else {
      in.decode = [&input](const std::string& what, DataType dtype, const engine::Shape& shape) {
        return DecodeTyped(what, input, input.datatype(), dtype, shape);
      };
    }
  }
  LS_RETURN_IF_ERROR(ReadOutputs(request, out, shm, bindings));
  return ReadParameters(request, out);
}

absl::StatusOr<DecodedRequest> DecodeInferRequest(const inference::ModelInferRequest& request,
                                                  const engine::Model& model) {
  InferenceRequest decoded;
  LS_RETURN_IF_ERROR(ToInferenceRequest(request, &decoded));
  return BindRequest(decoded, model);
}

absl::Status EncodeInferOutputs(const engine::Model& model, const std::vector<int>& outputs,
                                const std::vector<engine::Value>& values,
                                inference::ModelInferResponse* response,
                                const SharedMemoryBindings* shm) {
  for (int index : outputs) {
    const std::string& name = model.outputs()[index].name;
    const Value& value = values[index];
    if (!value.is_tensor()) {
      return absl::UnimplementedError(absl::StrCat(
          "output '", name, "': ", value.is_sequence() ? "a sequence" : "an empty optional",
          " cannot be returned over KServe v2"));
    }
    const SharedMemoryView* view = shm == nullptr ? nullptr : shm->Output(name);
    if (view == nullptr) {
      LS_RETURN_IF_ERROR(EncodeOutputTensor(name, value.tensor(), response));
      continue;
    }
    const engine::Tensor& tensor = value.tensor();
    LS_ASSIGN_OR_RETURN(
        size_t written,
        WriteTensorToSharedMemory(absl::StrCat("output ", QuoteUntrusted(name)), tensor, *view));
    auto* out = response->add_outputs();
    out->set_name(name);
    out->set_datatype(std::string(KserveDataType(tensor.dtype())));
    for (int64_t d : tensor.shape().dims()) out->add_shape(d);
    (*out->mutable_parameters())["shared_memory_region"].set_string_param(view->region->name());
    (*out->mutable_parameters())["shared_memory_byte_size"].set_int64_param(
        static_cast<int64_t>(written));
  }
  return absl::OkStatus();
}

absl::Status EncodeOutputTensor(const std::string& name, const Tensor& tensor,
                                inference::ModelInferResponse* response) {
  const absl::string_view datatype = KserveDataType(tensor.dtype());
  if (datatype.empty()) {
    return absl::InternalError(absl::StrCat("output '", name, "': undefined element type"));
  }
  auto* out = response->add_outputs();
  out->set_name(name);
  out->set_datatype(std::string(datatype));
  for (int64_t d : tensor.shape().dims()) out->add_shape(d);
  return AppendRawTensor(absl::StrCat("output '", name, "'"), tensor,
                         response->add_raw_output_contents());
}

namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedOutputStream;

// Field numbers of inference.ModelInferResponse and of its InferOutputTensor.
constexpr int kResponseModelName = 1, kResponseModelVersion = 2, kResponseId = 3,
              kResponseOutputs = 5, kResponseRawOutputContents = 6;
constexpr int kOutputName = 1, kOutputDatatype = 2, kOutputShape = 3;

constexpr uint32_t LengthDelimited(int field) {
  return (static_cast<uint32_t>(field) << 3) | WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
}

// Bytes of a length-delimited field holding `size` bytes (tag, length, payload).
size_t DelimitedSize(int field, size_t size) {
  return CodedOutputStream::VarintSize32(LengthDelimited(field)) +
         CodedOutputStream::VarintSize64(size) + size;
}

// A proto3 string field: absent when empty.
size_t StringFieldSize(int field, absl::string_view value) {
  return value.empty() ? 0 : DelimitedSize(field, value.size());
}

uint8_t* WriteHeader(int field, size_t size, uint8_t* out) {
  out = CodedOutputStream::WriteVarint32ToArray(LengthDelimited(field), out);
  return CodedOutputStream::WriteVarint64ToArray(size, out);
}

uint8_t* WriteStringField(int field, absl::string_view value, uint8_t* out) {
  if (value.empty()) return out;
  out = WriteHeader(field, value.size(), out);
  std::memcpy(out, value.data(), value.size());
  return out + value.size();
}

// One selected output, sized before anything is written.
struct OutputLayout {
  const std::string* name;
  absl::string_view datatype;
  const Tensor* tensor;
  size_t shape_bytes;   // the packed shape's payload
  size_t tensor_bytes;  // the InferOutputTensor message
  size_t raw_bytes;     // its raw_output_contents entry
};

uint8_t* WriteRawContents(const Tensor& tensor, size_t raw_bytes, uint8_t* out) {
  out = WriteHeader(kResponseRawOutputContents, raw_bytes, out);
  if (tensor.dtype() == DataType::kString) {
    // Length-prefixed elements, as AppendRawTensor writes them.
    for (const std::string& element : tensor.span<std::string>()) {
      const auto length = static_cast<uint32_t>(element.size());
      const uint8_t prefix[4] = {
          static_cast<uint8_t>(length & 0xff), static_cast<uint8_t>((length >> 8) & 0xff),
          static_cast<uint8_t>((length >> 16) & 0xff), static_cast<uint8_t>(length >> 24)};
      std::memcpy(out, prefix, 4);
      std::memcpy(out + 4, element.data(), element.size());
      out += 4 + element.size();
    }
    return out;
  }
  if (raw_bytes > 0) std::memcpy(out, tensor.raw_data(), raw_bytes);
  return out + raw_bytes;
}

}  // namespace

absl::Status SerializeInferResponse(absl::string_view model_name, absl::string_view model_version,
                                    absl::string_view id, const engine::Model& model,
                                    const std::vector<int>& outputs,
                                    const std::vector<engine::Value>& values,
                                    grpc::ByteBuffer* bytes) {
  // At most a handful of outputs: the layouts live on the stack unless there are many.
  constexpr size_t kInline = 8;
  OutputLayout inline_layouts[kInline];
  std::vector<OutputLayout> heap_layouts;
  OutputLayout* layouts = inline_layouts;
  if (outputs.size() > kInline) {
    heap_layouts.resize(outputs.size());
    layouts = heap_layouts.data();
  }
  size_t total = StringFieldSize(kResponseModelName, model_name) +
                 StringFieldSize(kResponseModelVersion, model_version) +
                 StringFieldSize(kResponseId, id);
  for (size_t k = 0; k < outputs.size(); ++k) {
    const std::string& name = model.outputs()[outputs[k]].name;
    const Value& value = values[outputs[k]];
    if (!value.is_tensor()) {
      return absl::UnimplementedError(absl::StrCat(
          "output '", name, "': ", value.is_sequence() ? "a sequence" : "an empty optional",
          " cannot be returned over KServe v2"));
    }
    OutputLayout& layout = layouts[k];
    layout.name = &name;
    layout.tensor = &value.tensor();
    layout.datatype = KserveDataType(layout.tensor->dtype());
    if (layout.datatype.empty()) {
      return absl::InternalError(absl::StrCat("output '", name, "': undefined element type"));
    }
    if (layout.tensor->dtype() == DataType::kString) {
      for (const std::string& element : layout.tensor->span<std::string>()) {
        if (element.size() > UINT32_MAX) {
          return absl::ResourceExhaustedError(absl::StrCat(
              "output '", name, "': a BYTES element of ", element.size(), " bytes exceeds 4 GiB"));
        }
      }
    }
    layout.shape_bytes = 0;
    for (int64_t d : layout.tensor->shape().dims()) {
      layout.shape_bytes += CodedOutputStream::VarintSize64(static_cast<uint64_t>(d));
    }
    layout.tensor_bytes =
        StringFieldSize(kOutputName, name) + StringFieldSize(kOutputDatatype, layout.datatype) +
        (layout.shape_bytes == 0 ? 0 : DelimitedSize(kOutputShape, layout.shape_bytes));
    layout.raw_bytes = RawTensorSize(*layout.tensor);
    total += DelimitedSize(kResponseOutputs, layout.tensor_bytes) +
             DelimitedSize(kResponseRawOutputContents, layout.raw_bytes);
  }
  if (total > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the response would be ", total, " bytes, over protobuf's 2 GiB message limit"));
  }

  grpc_slice slice = grpc_slice_malloc(total);
  uint8_t* const start = GRPC_SLICE_START_PTR(slice);
  uint8_t* out = start;
  out = WriteStringField(kResponseModelName, model_name, out);
  out = WriteStringField(kResponseModelVersion, model_version, out);
  out = WriteStringField(kResponseId, id, out);
  // Field order, as protobuf serializes: every `outputs` (5), then every raw_output_contents (6).
  for (size_t k = 0; k < outputs.size(); ++k) {
    const OutputLayout& layout = layouts[k];
    out = WriteHeader(kResponseOutputs, layout.tensor_bytes, out);
    out = WriteStringField(kOutputName, *layout.name, out);
    out = WriteStringField(kOutputDatatype, layout.datatype, out);
    if (layout.shape_bytes > 0) {
      out = WriteHeader(kOutputShape, layout.shape_bytes, out);
      for (int64_t d : layout.tensor->shape().dims()) {
        out = CodedOutputStream::WriteVarint64ToArray(static_cast<uint64_t>(d), out);
      }
    }
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    out = WriteRawContents(*layouts[k].tensor, layouts[k].raw_bytes, out);
  }
  if (static_cast<size_t>(out - start) != total) {
    grpc_slice_unref(slice);
    return absl::InternalError(absl::StrCat("the response's size was computed as ", total,
                                            " bytes but ", out - start, " were written"));
  }
  grpc::Slice owned(slice, grpc::Slice::STEAL_REF);
  grpc::ByteBuffer buffer(&owned, 1);
  bytes->Swap(&buffer);
  return absl::OkStatus();
}

}  // namespace loopserve::server
