#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/engine.h"
#include "engine/import/onnx_importer.h"
#include "engine/import/openvino_importer.h"
#include "engine/kernels/native/bf16_matmul.h"
#include "engine/kernels/registry.h"
#include "engine/runtime/execution_frame.h"
#include "engine/runtime/frame_pool.h"
#include "engine/runtime/plan.h"
#include "engine/tensor/memory_budget.h"
#include "engine/tensor/scalar_like.h"
#include "google/protobuf/io/zero_copy_stream_impl.h"

namespace loopserve::engine {
namespace {

// The file name without its folders: errors name model files this way, so that messages that
// reach clients never show the server's file system.
std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// An open regular file whose size has been checked against the limit. Closes it on destruction.
class CheckedFile {
 public:
  static absl::StatusOr<CheckedFile> Open(const std::string& path, int64_t max_bytes) {
    const std::string name = BaseName(path);
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int error = errno;
      if (error == ENOENT || error == ENOTDIR) {
        return absl::NotFoundError(absl::StrCat(name, ": no such file"));
      }
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": cannot open (", std::strerror(error), ")"));
    }
    CheckedFile file(fd, name);
    struct stat info;
    if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": not a regular file"));
    }
    if (max_bytes > 0 && info.st_size > max_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": the file has ", info.st_size,
                                                     " bytes, more than the limit of ", max_bytes,
                                                     " (max_model_file_bytes)"));
    }
    file.size_ = static_cast<size_t>(info.st_size);
    return file;
  }

  CheckedFile(CheckedFile&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)), name_(std::move(other.name_)), size_(other.size_) {}
  CheckedFile& operator=(CheckedFile&&) = delete;
  ~CheckedFile() {
    if (fd_ >= 0) close(fd_);
  }

  int fd() const { return fd_; }
  const std::string& name() const { return name_; }
  size_t size() const { return size_; }

  // The whole file as one string (for the XML, which pugixml parses in memory).
  absl::StatusOr<std::string> ReadAll() const {
    std::string bytes(size_, '\0');
    size_t done = 0;
    while (done < size_) {
      const ssize_t n = pread(fd_, bytes.data() + done, size_ - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return absl::InvalidArgumentError(absl::StrCat(name_, ": read error"));
      done += static_cast<size_t>(n);
    }
    return bytes;
  }

 private:
  CheckedFile(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}

  int fd_;
  std::string name_;
  size_t size_ = 0;
};

// A read-only mapping of a whole file (the .bin weights): constants are copied out of it once, so
// the weights are never held twice on the heap. Unmapped on destruction.
class MappedFile {
 public:
  static absl::StatusOr<MappedFile> Map(const CheckedFile& file) {
    MappedFile mapped;
    if (file.size() == 0) return mapped;
    void* data = mmap(nullptr, file.size(), PROT_READ, MAP_PRIVATE, file.fd(), 0);
    if (data == MAP_FAILED) {
      return absl::InvalidArgumentError(
          absl::StrCat(file.name(), ": cannot map (", std::strerror(errno), ")"));
    }
    mapped.data_ = data;
    mapped.size_ = file.size();
    return mapped;
  }

  MappedFile(MappedFile&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  MappedFile& operator=(MappedFile&&) = delete;
  ~MappedFile() {
    if (data_ != nullptr) munmap(data_, size_);
  }

  absl::string_view bytes() const {
    return data_ == nullptr ? absl::string_view()
                            : absl::string_view(static_cast<const char*>(data_), size_);
  }

 private:
  MappedFile() = default;
  void* data_ = nullptr;
  size_t size_ = 0;
};

// What Load does, without its guard against allocation failures.
absl::StatusOr<std::shared_ptr<const Model>> LoadFile(const std::string& path,
                                                      const LoadOptions& options) {
  const int64_t max_bytes =
      options.max_file_bytes > 0 ? options.max_file_bytes : kDefaultMaxModelFileBytes;
  if (absl::EndsWith(path, ".onnx")) {
    LS_ASSIGN_OR_RETURN(CheckedFile file, CheckedFile::Open(path, max_bytes));
    // Parsed straight from the file: the serialized model is never held beside the parsed one.
    google::protobuf::io::FileInputStream input(file.fd());
    absl::StatusOr<std::shared_ptr<Graph>> graph = ImportOnnxModel(input);
    if (!graph.ok()) return Annotate(graph.status(), absl::StrCat(file.name(), ": "));
    return Model::FromGraph(*std::move(graph), options);
  }
  if (absl::EndsWith(path, ".xml")) {
    // The weights are the .bin beside the .xml. A model without constants needs none, so a
    // missing .bin is an error only once a Const layer reads from it.
    LS_ASSIGN_OR_RETURN(CheckedFile xml_file, CheckedFile::Open(path, max_bytes));
    LS_ASSIGN_OR_RETURN(std::string xml, xml_file.ReadAll());
    const std::string bin_path = path.substr(0, path.size() - 4) + ".bin";
    absl::StatusOr<CheckedFile> bin_file = CheckedFile::Open(bin_path, max_bytes);
    if (!bin_file.ok() && !absl::IsNotFound(bin_file.status())) return bin_file.status();
    absl::StatusOr<MappedFile> weights = MappedFile::Map(bin_file.ok() ? *bin_file : xml_file);
    if (!weights.ok()) return weights.status();
    absl::StatusOr<std::shared_ptr<Graph>> graph =
        ImportOpenVinoModel(xml, bin_file.ok() ? weights->bytes() : absl::string_view());
    if (!graph.ok()) return Annotate(graph.status(), absl::StrCat(xml_file.name(), ": "));
    return Model::FromGraph(*std::move(graph), options);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      BaseName(path), ": unknown model format (expected a .onnx file, or a .xml with its .bin)"));
}

// Runs `load` with a budget of options.max_memory_bytes for the tensors it allocates; an
// allocation past it or one the system refuses becomes InvalidArgument.
template <typename Load>
absl::StatusOr<std::shared_ptr<const Model>> GuardedLoad(const LoadOptions& options, Load&& load) {
  MemoryBudget budget(options.max_memory_bytes);
  ScopedMemoryBudget scope(&budget);
  try {
    return load();
  } catch (const MemoryBudgetExceeded& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model needs more memory than its limit: ", e.what()));
  } catch (const std::bad_alloc&) {
    return absl::InvalidArgumentError("out of memory while loading the model");
  }
}

// Checks a fed value against the declared type of a graph input. A one-element tensor fed as [1]
// for a declared scalar (or as a scalar for a declared [1]) takes the declared shape, as ONNX
// Runtime accepts it, so the plan only ever sees declared shapes.
absl::Status CheckInput(Value& value, const TensorSpec& spec) {
  const ValueType& type = spec.type;
  const std::string what = absl::StrCat("input '", spec.name, "'");
  if (type.kind == ValueKind::kSequence && !value.is_sequence()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": expected a sequence"));
  }
  if (type.kind == ValueKind::kTensor && !value.is_tensor()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": expected a tensor"));
  }
  if (type.kind == ValueKind::kOptional && value.is_none()) return absl::OkStatus();
  if (!value.is_tensor()) return absl::OkStatus();
  Tensor& t = value.mutable_tensor();
  if (type.dtype != DataType::kUndefined && t.dtype() != type.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": expected element type ",
                                                   DataTypeName(type.dtype), ", got ",
                                                   DataTypeName(t.dtype())));
  }
  if (type.dims.has_value()) {
    const std::vector<int64_t>& dims = *type.dims;
    if (IsScalarLikeMatch(t.shape(), dims)) t.Reshape(Shape(absl::MakeConstSpan(dims)));
    bool match = static_cast<int>(dims.size()) == t.rank();
    for (int i = 0; match && i < t.rank(); ++i) {
      if (dims[i] >= 0 && dims[i] != t.dim(i)) match = false;
    }
    if (!match) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": shape ", t.shape().ToString(),
                                                     " does not match the declared ",
                                                     type.ToString()));
    }
  }
  return absl::OkStatus();
}

// Outputs below this size are copied out of a kept frame rather than moved (Model::Run).
constexpr int64_t kCopiedOutputBytes = int64_t{256} << 10;

// Bytes of the buffers `value` owns (views count 0).
int64_t OwnedBytes(const Value& value) {
  size_t bytes = value.is_tensor() ? value.tensor().capacity() : 0;
  if (value.is_sequence()) {
    for (const Tensor& t : value.sequence()) bytes += t.capacity();
  }
  return static_cast<int64_t>(bytes);
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Model>> Model::Load(const std::string& path,
                                                         const LoadOptions& options) {
  return GuardedLoad(options, [&] { return LoadFile(path, options); });
}

absl::StatusOr<std::shared_ptr<const Model>> Model::LoadOpenVino(absl::string_view xml,
                                                                 absl::string_view weights,
                                                                 const LoadOptions& options) {
  return GuardedLoad(options, [&]() -> absl::StatusOr<std::shared_ptr<const Model>> {
    LS_ASSIGN_OR_RETURN(std::shared_ptr<Graph> graph, ImportOpenVinoModel(xml, weights));
    return FromGraph(std::move(graph), options);
  });
}

absl::StatusOr<std::shared_ptr<const Model>> Model::LoadOnnx(absl::string_view bytes,
                                                             const LoadOptions& options) {
  return GuardedLoad(options, [&]() -> absl::StatusOr<std::shared_ptr<const Model>> {
    LS_ASSIGN_OR_RETURN(std::shared_ptr<Graph> graph, ImportOnnxModel(bytes));
    return FromGraph(std::move(graph), options);
  });
}

absl::StatusOr<std::shared_ptr<const Model>> Model::FromGraph(std::shared_ptr<Graph> graph,
                                                              const LoadOptions& options) {
  LS_RETURN_IF_ERROR(SortTopologically(*graph));
  std::shared_ptr<Model> model(new Model());
  for (ValueId v : graph->inputs) {
    model->inputs_.push_back(TensorSpec{graph->values[v].name, graph->values[v].type});
  }
  for (ValueId v : graph->outputs) {
    model->outputs_.push_back(TensorSpec{graph->values[v].name, graph->values[v].type});
  }
  const KernelRegistry& registry = KernelRegistry::Builtin();
  LS_RETURN_IF_ERROR(registry.status());
  CompileContext context(registry);
  if (options.dump_plan) context.set_dump(&model->plan_dump_);
  if (options.precision == LoadOptions::Precision::kBf16) {
    if (!native::CpuHasNativeBf16() && !options.force_precision) {
      return absl::UnimplementedError(
          "precision bf16: this CPU has neither AVX512_BF16 nor AMX-BF16 (oneDNN would emulate "
          "bf16 products slower than float32); force it to run anyway");
    }
    context.set_bf16_products(true);
  }
  LS_ASSIGN_OR_RETURN(model->plan_, Plan::Compile(std::move(graph), context));
  if (options.kept_frames > 0) {
    model->frames_ = std::make_unique<FramePool>(*model->plan_, options.kept_frames,
                                                 options.max_kept_frame_bytes);
  }
  model->loop_names_ = context.loop_names();
  model->scan_output_loops_ = context.scan_output_loops();
  model->scan_output_loops_.resize(model->outputs_.size(), -1);
  return std::shared_ptr<const Model>(std::move(model));
}

std::vector<std::string> RegisteredOpTypes() { return KernelRegistry::Builtin().OpTypes(); }

Model::~Model() = default;

int Model::FindInput(absl::string_view name) const {
  for (size_t i = 0; i < inputs_.size(); ++i) {
    if (inputs_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

int Model::FindOutput(absl::string_view name) const {
  for (size_t i = 0; i < outputs_.size(); ++i) {
    if (outputs_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

absl::StatusOr<std::vector<Value>> Model::Run(std::vector<Value> inputs, const RunOptions& options,
                                              RunStats* stats) const {
  // Kernels' allocation failures are turned into statuses per step (ExecutionFrame::Run); this
  // catches those outside any step (frame set-up, output copies).
  try {
    return RunUnchecked(std::move(inputs), options, stats);
  } catch (const MemoryBudgetExceeded& e) {
    return LimitExceededError(LimitReason::kMemory,
                              absl::StrCat(e.what(), " (max_request_memory_bytes)"));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory");
  }
}

absl::StatusOr<std::vector<Value>> Model::RunUnchecked(std::vector<Value> inputs,
                                                       const RunOptions& options,
                                                       RunStats* stats) const {
  if (inputs.size() != inputs_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model has ", inputs_.size(), " inputs, got ", inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) LS_RETURN_IF_ERROR(CheckInput(inputs[i], inputs_[i]));

  RunContext context(options);
  LS_RETURN_IF_ERROR(context.CheckInterrupted());
  // Everything the run allocates on this thread is charged to its budget, the frame included
  // (a kept frame's buffers up front, by FramePool::Take).
  MemoryBudget& memory = context.memory_budget();
  ScopedMemoryBudget budget(&memory);
  std::unique_ptr<ExecutionFrame> frame = frames_ != nullptr
                                              ? frames_->Take(context)
                                              : std::make_unique<ExecutionFrame>(*plan_, context);
  const Graph& graph = plan_->graph();
  for (size_t i = 0; i < inputs.size(); ++i) swap(frame->slot(graph.inputs[i]), inputs[i]);
  LS_RETURN_IF_ERROR(frame->Run(/*check_interrupts=*/true));

  std::vector<Value> outputs(graph.outputs.size());
  int64_t output_bytes = 0;
  for (size_t i = 0; i < graph.outputs.size(); ++i) {
    const ValueId id = graph.outputs[i];
    // The caller owns every output: values the frame produced are moved out; views (constants,
    // inputs passed straight through) are copied, and so is an output listed twice. A kept
    // frame's small outputs are copied too, so that their slots keep their buffers: one
    // allocation per output, where a moved Loop result would cost its body slot a second one.
    size_t first = 0;
    while (graph.outputs[first] != id) ++first;
    Value& v = frame->slot(id);
    if (first < i) {
      outputs[i].CopyFrom(outputs[first]);
    } else if (plan_->is_produced(id) && !(v.is_tensor() && v.tensor().is_view()) &&
               (frames_ == nullptr || OwnedBytes(v) >= kCopiedOutputBytes)) {
      swap(outputs[i], v);
    } else {
      outputs[i].CopyFrom(v);
    }
    output_bytes += OwnedBytes(outputs[i]);
  }
  if (stats != nullptr) {
    *stats = context.stats();
    stats->peak_memory_bytes = memory.peak();
  }
  if (frames_ != nullptr) {
    {
      // The inputs are the caller's: releasing them credits nothing to this run.
      ScopedMemoryBudget no_budget(nullptr);
      frame->ReleaseRequestValues();
    }
    // What the budget still holds and the caller does not is the frame's: its slots' buffers and
    // its kernels' states (body frames included).
    const int64_t held = std::max<int64_t>(0, memory.used() - output_bytes);
    const bool kept = frames_->Give(std::move(frame), context, held);
    if (stats != nullptr) stats->arena_bytes = kept ? held : 0;
  }
  return outputs;
}

}  // namespace loopserve::engine
