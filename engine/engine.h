#pragma once

// The engine's public face. server/, engine/tools/ and bench/ include this header (plus the value
// types of engine/tensor/ it passes around and the status macros of engine/base/); everything
// else under engine/ (IR, transforms, plan, frame, kernels) is internal and may change without
// notice. tests/cmake/engine_face_test.cmake checks the rule.
//
// Load a model once (Model::Load), share the shared_ptr<const Model> and call Run from any number
// of threads; each call takes its own RunOptions (deadline, cancel flag, limits, observer).

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/tensor/tensor.h"
#include "engine/tensor/value.h"

namespace onnx {
class TensorProto;
}

namespace loopserve::engine {

class Graph;
class Plan;

// ---- Loading -------------------------------------------------------------------------------

// A model input or output as clients see it.
struct TensorSpec {
  std::string name;
  ValueType type;  // kind, element type and dims (-1 = variable)
};

// Largest model file Load reads by default (each of model.onnx, model.xml and model.bin).
inline constexpr int64_t kDefaultMaxModelFileBytes = int64_t{2} << 30;

struct LoadOptions {
  // Name used in error messages ("model 'rnn' v2: ...") by callers; the engine does not add it.
  std::string name;
  // Largest model file accepted, in bytes, checked before reading; 0 = kDefaultMaxModelFileBytes.
  int64_t max_file_bytes = 0;
  // Largest number of tensor bytes loading may allocate (constants, compiled weights); 0 = no
  // limit. Past it the load fails with InvalidArgument before the allocation.
  int64_t max_memory_bytes = 0;
  // Keep a text dump of every compiled graph before and after the optimizer (Model::plan_dump;
  // `looprun --dump_plan`).
  bool dump_plan = false;
  // The per-model arena (engine/runtime/frame_pool.h): how many execution frames, with their
  // buffers, the model keeps for later runs (one per concurrent run), and the most bytes one of
  // them may hold to be kept. 0 frames: every run builds its frame afresh and frees it after.
  int kept_frames = 8;
  int64_t max_kept_frame_bytes = int64_t{256} << 20;
  // Reduced precision, opt-in per model (the `precision` model parameter, `--precision`):
  // kBf16 runs the products with constant float32 weights (MatMul, and MatMul with a fused
  // epilogue) of 4 rows or more in bfloat16 with float32 accumulation; elementwise math stays
  // float32 (error bound: engine/kernels/native/bf16_matmul.h). Refused at load (Unimplemented)
  // on a CPU without AVX512_BF16 or AMX-BF16, where oneDNN would emulate it slower than float32,
  // unless `force_precision`.
  enum class Precision { kFp32, kBf16 };
  Precision precision = Precision::kFp32;
  bool force_precision = false;
};

// ---- Running -------------------------------------------------------------------------------

// Receives one call per finished Loop execution (nested loops: one per inner execution). Called on
// the thread running the request; implementations must be thread-safe across requests.
class LoopObserver {
 public:
  virtual ~LoopObserver() = default;
  // `loop_index` indexes Model::loop_names(). `iterations` is how many times the body ran.
  virtual void OnLoopFinished(int loop_index, int64_t iterations, absl::Duration elapsed) = 0;
};

// One model output's part of one Loop iteration: the body result the Loop appends to a scan
// (stacked or concatenated) output that is also a model output (Model::scan_output_loops). For an
// ONNX scan output it is the output without its scan axis. Valid only during the call that
// receives it.
struct ScanSlice {
  int output;  // index into Model::outputs()
  const Tensor* tensor;
};

// Receives each iteration of the model's top-level Loops as it finishes: the streaming hook
// (RunOptions::iteration_observer). Called on the thread running the request, after the
// iteration's scan slices were appended and before the next iteration starts, so the Loop waits
// for it: an implementation may block (back-pressure) and should return within the run's
// deadline. Every top-level Loop calls it (a Loop without such scan outputs with no slices);
// nested Loops never do. One observer per run; it need not be thread-safe.
class IterationObserver {
 public:
  virtual ~IterationObserver() = default;
  // A top-level Loop execution starts (before its first iteration; tracing times iteration 0
  // from here). Model::Run only; the iteration batcher's rows never call it.
  virtual void OnLoopStart(int loop_index) {}
  // `loop_index` indexes Model::loop_names(); `iteration` counts from 0; `slices` holds one entry
  // per model output that is a scan output of that Loop, in Model::outputs() order (none for a
  // Loop without them). An error stops the run with that status.
  virtual absl::Status OnIteration(int loop_index, int64_t iteration,
                                   absl::Span<const ScanSlice> slices) = 0;
};

// How a Loop's iterations use the intra-op threads (RunOptions::loop_threads).
enum class LoopThreads : uint8_t { kAdaptive, kIntraOp, kOneThread };

// The names of the modes ("adaptive", "intra_op", "one": looprun's and loopserve's --loop_threads,
// a model config's loop_threads parameter). For any other name InvalidArgument "must be adaptive,
// intra_op or one, not '<name>'", which the caller prefixes with what it parsed.
absl::StatusOr<LoopThreads> ParseLoopThreads(absl::string_view name);
const char* LoopThreadsName(LoopThreads mode);

// What the caller of Model::Run controls about one run.
struct RunOptions {
  absl::Time deadline = absl::InfiniteFuture();
  // Set to true (from any thread) to stop the run; checked before every step of the top-level
  // graph and every Loop iteration. Not owned; must outlive the run.
  const std::atomic<bool>* cancelled = nullptr;
  // Largest number of iterations any single Loop execution may run; 0 means no limit. A loop that
  // would run more fails with ResourceExhausted.
  int64_t max_loop_iterations = 0;
  // Largest size in bytes a Loop's concatenated (scan) output may reach; 0 means no limit. A loop
  // whose output would grow past it fails with ResourceExhausted before the buffer grows.
  int64_t max_output_bytes = 0;
  // Largest number of tensor bytes the run may hold at once (MemoryBudget: inputs it was given
  // are not counted, everything it allocates is); 0 means no limit. A run that would allocate
  // past it fails with ResourceExhausted (LimitReason::kMemory) before the allocation.
  int64_t max_memory_bytes = 0;
  LoopObserver* loop_observer = nullptr;  // not owned; may be null
  // Streams the top-level Loops' iterations (see IterationObserver). Not owned; may be null, and
  // when it is the Loop pays one pointer test per iteration for it.
  IterationObserver* iteration_observer = nullptr;
  // How a Loop's iterations use the intra-op threads (SetIntraOpThreads) when there are more than
  // one: kAdaptive measures blocks of iterations run with the intra-op team, with one thread and
  // (loop_team) with one thread plus the SpinTeam, and runs the fastest
  // (engine/runtime/thread_mode.h); kIntraOp always uses the team; kOneThread always one thread,
  // with the SpinTeam when loop_team. With one intra-op thread all are the same.
  LoopThreads loop_threads = LoopThreads::kAdaptive;
  // Whether a Loop's one-thread iterations may split their larger products (MatMul, Gemm) by rows
  // over the calling thread's SpinTeam, helper threads of our own that spin only while the Loop
  // runs (engine/runtime/spin_team.h); the outputs are bitwise the same either way.
  bool loop_team = true;
};

// Which engine limit stopped a run. Attached to the ResourceExhausted status as a payload (it
// survives Annotate), so callers can tell limits apart without parsing messages, and an
// out-of-memory ResourceExhausted is not mistaken for either.
enum class LimitReason : uint8_t { kNone, kIterationCap, kOutputBytes, kMemory };
LimitReason GetLimitReason(const absl::Status& status);

// Statistics one run collects; returned by Model::Run.
struct RunStats {
  int64_t loop_executions = 0;
  int64_t loop_iterations = 0;
  int64_t peak_memory_bytes = 0;  // most tensor bytes the run held at once (MemoryBudget::peak)
  // Tensor bytes the run's frame keeps for the model's next run after this one (the per-model
  // arena; 0 when the frame was not kept). looprun prints it as "arena_bytes".
  int64_t arena_bytes = 0;
  // Steps that ran float work on a naive reference kernel (engine/kernels/reference), counted
  // once per step and run: the optimized kernels cover every float op of the models we know,
  // so anything but 0 marks a performance cliff (looprun prints it as "reference_steps").
  int64_t reference_steps = 0;
  // Loop iterations that ran on one thread although the run had more intra-op threads
  // (RunOptions::loop_threads: chosen by measurement, or forced). looprun prints it as
  // "one_thread_iterations".
  int64_t one_thread_iterations = 0;
  // Kernel runs split over a Loop's SpinTeam (RunOptions::loop_team). looprun prints it as
  // "team_splits".
  int64_t team_splits = 0;
};

// ---- The model -----------------------------------------------------------------------------

// A loaded, compiled model. Immutable after Load and shared as shared_ptr<const Model>: Run is
// thread-safe and may be called concurrently from any number of threads; each call gets its own
// execution frame and run context.
class FramePool;

class Model {
 public:
  ~Model();

  // Loads `path`: an ONNX model (.onnx) or an OpenVINO IR (.xml with its .bin beside it).
  // InvalidArgument for malformed models, files over the size limit and models needing more
  // memory than allowed (sizes are checked before anything is read or allocated), Unimplemented
  // for unsupported ops/opsets/types (naming the node, op type and opset), NotFound when the file
  // does not exist. Messages name the file by its base name, never its folders. The .onnx file
  // is parsed as it is read and the .bin is mapped, so a file is never held twice in memory.
  static absl::StatusOr<std::shared_ptr<const Model>> Load(const std::string& path,
                                                           const LoadOptions& options = {});
  // Loads an ONNX ModelProto from serialized bytes.
  static absl::StatusOr<std::shared_ptr<const Model>> LoadOnnx(absl::string_view bytes,
                                                               const LoadOptions& options = {});
  // Loads an OpenVINO IR from the text of its .xml and the bytes of its .bin (empty: no weights).
  static absl::StatusOr<std::shared_ptr<const Model>> LoadOpenVino(absl::string_view xml,
                                                                   absl::string_view weights,
                                                                   const LoadOptions& options = {});
  // Compiles an already-imported graph (engine/ir/graph.h; used by importers and tests).
  static absl::StatusOr<std::shared_ptr<const Model>> FromGraph(std::shared_ptr<Graph> graph,
                                                                const LoadOptions& options = {});

  const std::vector<TensorSpec>& inputs() const { return inputs_; }
  const std::vector<TensorSpec>& outputs() const { return outputs_; }
  // Index of the named input/output, or -1.
  int FindInput(absl::string_view name) const;
  int FindOutput(absl::string_view name) const;

  // Names of every Loop node in the model (nested ones included), indexed as in
  // LoopObserver::OnLoopFinished.
  const std::vector<std::string>& loop_names() const { return loop_names_; }
  // Per model output (Model::outputs() order): the index (into loop_names()) of the top-level Loop
  // whose scan output it is, when the output is a Loop's stacked or concatenated output as it is
  // (streamable through IterationObserver); -1 otherwise.
  const std::vector<int>& scan_output_loops() const { return scan_output_loops_; }

  // With LoadOptions::dump_plan: each graph (Loop bodies included) before and after the graph
  // optimizer, the rewrites that fired and the nodes the plan runs. Empty otherwise.
  const std::string& plan_dump() const { return plan_dump_; }

  // Runs the model. `inputs` are in inputs() order (tensors may be views of caller memory, which
  // must stay valid during the call). Checks each input's kind, element type and rank/dims against
  // the declared ones (InvalidArgument naming the input). Returns the outputs in outputs() order,
  // owning their buffers. `stats` (optional) receives loop counts.
  absl::StatusOr<std::vector<Value>> Run(std::vector<Value> inputs, const RunOptions& options,
                                         RunStats* stats = nullptr) const;

 private:
  friend class LoopStepper;
  Model() = default;
  absl::StatusOr<std::vector<Value>> RunUnchecked(std::vector<Value> inputs,
                                                  const RunOptions& options, RunStats* stats) const;

  std::shared_ptr<const Plan> plan_;
  // Execution frames kept across runs (null with LoadOptions::kept_frames 0); declared after
  // plan_, which its frames run, so it is destroyed first.
  std::unique_ptr<FramePool> frames_;
  std::vector<TensorSpec> inputs_;
  std::vector<TensorSpec> outputs_;
  std::vector<std::string> loop_names_;
  std::vector<int> scan_output_loops_;
  std::string plan_dump_;
};

// ---- Stepping a batched Loop (iteration-level batching) ------------------------------------

// What one row (one request) of a LoopStepper may do: its own interrupts and limits, checked at
// every iteration boundary, and its own streaming hook.
struct RowOptions {
  absl::Time deadline = absl::InfiniteFuture();
  // Set to true (from any thread) to take the row out at the next boundary (Cancelled). Not owned;
  // must outlive the row.
  const std::atomic<bool>* cancelled = nullptr;
  // Iterations the row may run; 0 = no limit. Past it the row ends with ResourceExhausted
  // (LimitReason::kIterationCap).
  int64_t max_loop_iterations = 0;
  // Bytes the row's own scan outputs may reach; 0 = no limit (LimitReason::kOutputBytes).
  int64_t max_output_bytes = 0;
  // Bytes the row holds: its rows of the carried values and batched inputs plus its scan outputs;
  // 0 = no limit (LimitReason::kMemory).
  int64_t max_memory_bytes = 0;
  // Receives the row's own scan slices (batch dim 1) as each iteration finishes; not owned, may be
  // null; called on the thread that calls Step.
  IterationObserver* iteration_observer = nullptr;
};

// A row that left the batch: its outputs in Model::outputs() order (as Model::Run of that request
// alone returns them), or why it stopped early.
struct FinishedRow {
  int64_t id = 0;
  int64_t iterations = 0;
  absl::StatusOr<std::vector<Value>> outputs;
};

struct LoopStepperOptions {
  // Model inputs that are not batched (one value shared by every row; a row whose value differs
  // cannot join a non-empty batch). The trip count and the initial condition are per row and need
  // not be listed. Every other input has the batch on axis 0 and each row gives one (dim 0 of 1).
  std::vector<std::string> unbatched_inputs;
  // Rows the stepper holds at most (Admit refuses more with ResourceExhausted); carried buffers
  // are sized for it up front, so admitting moves only the new row's bytes.
  int max_rows = 64;
};

// Runs a model's top-level Loop as one batch whose rows join and leave between iterations: each
// row (a request) has its own trip count, initial condition, iteration counter, scan outputs,
// limits and interrupts, and its outputs equal those of Model::Run on that request alone, provided
// the body is row-independent, which Create checks:
//   - the top-level graph is one Loop whose inputs are model inputs or constants and whose outputs
//     are model outputs; no sliced inputs; scan outputs stacked on axis 0; last values only of
//     carried values;
//   - the body does not read the iteration counter (it differs per row), and every op on a value
//     that derives from a batched one keeps rows apart (elementwise ops; MatMul/Gemm with the
//     batched operand first; Gather of a table by batched indices; reductions, Softmax, ArgMax,
//     Concat, Split, Slice, Squeeze/Unsqueeze, Transpose, Reshape off axis 0); the condition is per
//     row ([rows] or [rows, 1]).
// Carried values live in buffers sized for max_rows; rows stay packed at the front: a retired row
// is replaced by the last row (one row moved per carried value), an admitted one is appended.
// Not thread-safe: one thread (a model instance's) drives a stepper. The model must outlive it.
class LoopStepper {
 public:
  // FailedPrecondition with the reason when the model's Loop cannot be stepped row by row
  // ("node 'argmax' (ReduceMax): reduces over the batch axis 0").
  static absl::StatusOr<std::unique_ptr<LoopStepper>> Create(std::shared_ptr<const Model> model,
                                                             const LoopStepperOptions& options);
  ~LoopStepper();

  // Adds a row from one request's inputs (Model::inputs() order). InvalidArgument for inputs that
  // do not fit the model or the running batch's row shape; FailedPrecondition when an unbatched
  // input differs from the running batch's (the row may join once the batch is empty);
  // ResourceExhausted when max_rows rows run. Returns the row's id. A row whose trip count is 0 or
  // whose initial condition is false leaves at the next Step with zero iterations.
  absl::StatusOr<int64_t> Admit(std::vector<Value> inputs, const RowOptions& options);
  // Runs one iteration for every current row, then takes out and returns (appended to `finished`)
  // the rows that ended: condition false, trip count reached, interrupted or over a limit. An
  // error of the body itself ends every row with it.
  void Step(std::vector<FinishedRow>* finished);
  // Takes row `id` out now with `status` (appended to `finished`); false when it is not here.
  bool Remove(int64_t id, const absl::Status& status, std::vector<FinishedRow>* finished);

  int rows() const;
  int max_rows() const;

  class Impl;

 private:
  explicit LoopStepper(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The op types of the built-in kernel table (default ONNX domain), sorted: what a model may use
// (looprun --list_ops; bench/op_grid.py builds one model per op from it).
std::vector<std::string> RegisteredOpTypes();

// ---- Process settings ----------------------------------------------------------------------

// Sets how many threads the oneDNN primitives run from the calling thread may use (oneDNN here
// runs on OpenMP, whose thread count is a per-thread setting). Call once on each thread that runs
// models; 0 or less means "all cores". A server keeps workers x intra-op threads <= cores.
void SetIntraOpThreads(int threads);

// Threads available to this process (at least 1).
int AvailableCores();

// Makes OpenMP's idle threads sleep instead of spinning (OMP_WAIT_POLICY=PASSIVE) unless the
// environment already sets OMP_WAIT_POLICY or GOMP_SPINCOUNT. libgomp reads its environment once,
// before main() runs, so this sets the variable and re-executes the program (its own path, same
// argv; signal mask kept); if the exec fails it returns, keeping OpenMP's default. Call first thing
// in main() of a program that runs models, before any other thread exists. Why passive: wherever
// other processes share the cores, spinning team threads (libgomp's default 300000 rounds, or even
// 10000) made 2-thread Loop bodies 3-10x slower than sleeping ones (bench/RESULTS.md). On a quiet
// machine sleeping threads make a body of many small parallel regions pay a futex wake-up per
// region; there each Loop finds out by measurement that one thread is faster and runs on it
// (RunOptions::loop_threads).
void UsePassiveOpenMpWait(char** argv);

// The vector instruction set the engine's own kernels dispatch to: "avx512", "avx2" or "scalar",
// the best the CPU has, capped by the environment variable LOOPSERVE_MAX_ISA (avx2 | scalar).
// oneDNN dispatches on its own (capped by ONEDNN_MAX_CPU_ISA).
const char* ActiveVectorIsa();

// ---- ONNX tensors --------------------------------------------------------------------------

// Decodes a TensorProto (raw_data or the typed fields; little-endian) into an owned tensor,
// validating dims and byte counts. `what` names the tensor in messages. External data is
// Unimplemented.
absl::StatusOr<Tensor> TensorFromOnnx(const onnx::TensorProto& proto, absl::string_view what);

// Encodes `tensor` as a TensorProto with raw_data.
void TensorToOnnx(const Tensor& tensor, onnx::TensorProto* proto);

}  // namespace loopserve::engine
