// LoopStepper (engine/engine.h): a model's top-level Loop run as one batch whose rows join and
// leave between iterations (iteration-level batching).
//
// The stepper owns one frame of the Loop's compiled body and drives it itself, as LoopKernel does
// for one execution, with rows packed along axis 0 of every carried value and batched input: a
// row joins by appending its bytes and leaves by having the last row's bytes moved into its
// place, so nothing but those rows moves. The body is checked once, at Create, for what makes
// rows independent of each other (RowRules below); the tests hold every row to its lone run.

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/status_macros.h"
#include "engine/engine.h"
#include "engine/ir/eltwise_fn.h"
#include "engine/ir/graph.h"
#include "engine/kernels/control/control_flow.h"
#include "engine/runtime/execution_frame.h"
#include "engine/runtime/plan.h"
#include "engine/runtime/run_context.h"
#include "engine/tensor/memory_budget.h"

namespace loopserve::engine {
namespace {

// Ops that act element by element (with broadcasting): a row's outputs depend on its own row of
// each batched operand only, as long as the batched operand's axis 0 stays the output's axis 0
// (checked with the declared ranks where known).
const absl::flat_hash_set<std::string>& ElementwiseOps() {
  static const auto* ops = new absl::flat_hash_set<std::string>{"Abs",         "Acos",
                                                                "Acosh",       "Add",
                                                                "And",         "Asin",
                                                                "Asinh",       "Atan",
                                                                "Atanh",       "BitShift",
                                                                "Cast",        "CastLike",
                                                                "Ceil",        "Celu",
                                                                "Clip",        "Cos",
                                                                "Cosh",        "Div",
                                                                "Elu",         "Equal",
                                                                "Erf",         "Exp",
                                                                "Floor",       "Gelu",
                                                                "Greater",     "GreaterOrEqual",
                                                                "HardSigmoid", "HardSwish",
                                                                "Identity",    "IsInf",
                                                                "IsNaN",       "LeakyRelu",
                                                                "Less",        "LessOrEqual",
                                                                "Log",         "Max",
                                                                "Mean",        "Min",
                                                                "Mish",        "Mod",
                                                                "Mul",         "Neg",
                                                                "Not",         "Or",
                                                                "Pow",         "PRelu",
                                                                "Reciprocal",  "Relu",
                                                                "Round",       "Selu",
                                                                "Sigmoid",     "Sign",
                                                                "Sin",         "Sinh",
                                                                "Softplus",    "Softsign",
                                                                "Sqrt",        "Sub",
                                                                "Sum",         "Tan",
                                                                "Tanh",        "ThresholdedRelu",
                                                                "Where",       "Xor"};
  return *ops;
}

// An op the elementwise table registers (engine/ir/eltwise_fn.h): elementwise too.
bool IsTableElementwiseOp(const std::string& op) {
  constexpr uint32_t kRegistered = kEltwiseDnnl | kEltwiseVector;
  EltwiseFn fn;
  ArithOp arith;
  return EltwiseFnOfOp(op.c_str(), kRegistered, &fn) ||
         ArithOpOfOp(op.c_str(), kRegistered, &arith);
}

// Ops that work along one `axis` attribute (default given) and treat other axes as independent.
struct AxisOp {
  const char* op;
  int64_t default_axis;
};
constexpr AxisOp kAxisOps[] = {
    {"Softmax", -1}, {"LogSoftmax", -1}, {"Hardmax", -1}, {"ArgMax", 0}, {"ArgMin", 0},
    {"Concat", 0},   {"Split", 0},       {"Flatten", 1},  {"CumSum", 0}, {"LayerNormalization", -1},
};

const absl::flat_hash_set<std::string>& ReduceOps() {
  static const auto* ops = new absl::flat_hash_set<std::string>{
      "ReduceMax", "ReduceMin", "ReduceSum",    "ReduceMean",      "ReduceProd",
      "ReduceL1",  "ReduceL2",  "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"};
  return *ops;
}

// Checks that the body keeps rows apart: walks its nodes in order, marking the values that derive
// from a batched one, and for each node that reads one asks whether the op keeps axis 0 as the
// rows. Returns FailedPrecondition naming the node and what it does to the rows.
class RowRules {
 public:
  RowRules(const Graph& body, const Graph& outer) : body_(body), outer_(outer) {
    batched_.assign(body.values.size(), false);
  }

  void MarkBatched(ValueId id) { batched_[id] = true; }
  bool batched(ValueId id) const { return id != kNoValue && batched_[id]; }

  absl::Status Check() {
    for (const Node& node : body_.nodes) {
      bool any = false;
      for (ValueId in : node.inputs) any = any || batched(in);
      for (ValueId in : node.implicit_inputs) any = any || batched(in);
      if (!any) continue;
      absl::Status status = CheckNode(node);
      if (!status.ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat(node.Label(), ": ", status.message(),
                         "; iteration batching needs every row of the body computed on its own"));
      }
      for (ValueId out : node.outputs) {
        if (out != kNoValue) batched_[out] = true;
      }
    }
    return absl::OkStatus();
  }

 private:
  // The declared rank of a body value, or -1.
  int Rank(ValueId id) const {
    const ValueType& t = body_.values[id].type;
    return t.dims.has_value() ? static_cast<int>(t.dims->size()) : -1;
  }

  // A constant of the body, or of the outer graph through a capture; null otherwise.
  const Tensor* Constant(ValueId id) const {
    for (const auto& [value, tensor] : body_.constants) {
      if (value == id) return tensor.get();
    }
    for (const Capture& c : body_.captures) {
      if (c.inner != id) continue;
      for (const auto& [value, tensor] : outer_.constants) {
        if (value == c.outer) return tensor.get();
      }
    }
    return nullptr;
  }

  absl::StatusOr<std::vector<int64_t>> ConstantInts(const Node& node, int input) const {
    if (input >= static_cast<int>(node.inputs.size()) || node.inputs[input] == kNoValue) {
      return std::vector<int64_t>{};
    }
    const Tensor* t = Constant(node.inputs[input]);
    if (t == nullptr || !IsInteger(t->dtype())) {
      return absl::InvalidArgumentError(
          absl::StrCat("input ", input, " (axes or shape) is not a constant"));
    }
    std::vector<int64_t> values(t->NumElements());
    for (int64_t i = 0; i < t->NumElements(); ++i) {
      values[i] = t->dtype() == DataType::kInt32 ? t->data<int32_t>()[i] : t->data<int64_t>()[i];
    }
    return values;
  }

  // Whether `axis` (maybe negative) names axis 0 of a value of rank `rank` (unknown: -1).
  static absl::Status NotAxisZero(int64_t axis, int rank, const char* what) {
    if (axis == 0 || (rank > 0 && axis == -rank)) {
      return absl::InvalidArgumentError(absl::StrCat(what, " the batch axis 0"));
    }
    if (axis < 0 && rank < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "negative axis ", axis, " on a value of unknown rank (may be the batch axis)"));
    }
    return absl::OkStatus();
  }

  absl::Status CheckNode(const Node& node) {
    const std::string& op = node.op_type;
    if (!node.domain.empty() && node.domain != "ai.onnx") {
      return absl::InvalidArgumentError(absl::StrCat("op domain '", node.domain, "' is not known"));
    }
    const int rank0 = node.inputs.empty() || node.inputs[0] == kNoValue ? -1 : Rank(node.inputs[0]);
    if (ElementwiseOps().contains(op) || IsTableElementwiseOp(op)) return CheckElementwise(node);
    if (op == "MatMul" || op == "Gemm") return CheckProduct(node, rank0);
    if (op == "Gather") return CheckGather(node, rank0);
    for (const AxisOp& a : kAxisOps) {
      if (op == a.op) return CheckAxisOp(node, a, rank0);
    }
    if (ReduceOps().contains(op)) {
      LS_ASSIGN_OR_RETURN(std::vector<int64_t> axes, Axes(node));
      if (axes.empty()) {
        return absl::InvalidArgumentError("reduces over every axis, the batch axis 0 too");
      }
      for (int64_t axis : axes) LS_RETURN_IF_ERROR(NotAxisZero(axis, rank0, "reduces over"));
      return absl::OkStatus();
    }
    if (op == "Unsqueeze" || op == "Squeeze") {
      LS_ASSIGN_OR_RETURN(std::vector<int64_t> axes, Axes(node));
      if (axes.empty())
        return absl::InvalidArgumentError("without axes it may drop the batch axis");
      const int rank =
          op == "Unsqueeze" && rank0 >= 0 ? rank0 + static_cast<int>(axes.size()) : rank0;
      for (int64_t axis : axes) LS_RETURN_IF_ERROR(NotAxisZero(axis, rank, "inserts or removes"));
      return absl::OkStatus();
    }
    if (op == "Transpose") {
      LS_ASSIGN_OR_RETURN(std::vector<int64_t> perm, node.GetInts("perm", std::vector<int64_t>{}));
      if (perm.empty() || perm[0] != 0) return absl::InvalidArgumentError("moves the batch axis");
      return absl::OkStatus();
    }
    if (op == "Reshape") return CheckReshape(node);
    if (op == "Slice") return CheckSlice(node, rank0);
    if (op == "Shape" || op == "Size") {
      return absl::InvalidArgumentError("reads the number of rows");
    }
    return absl::InvalidArgumentError(
        absl::StrCat("op ", op, " is not known to keep rows apart on a batched value"));
  }

  // An elementwise op: a batched operand must have the output's rank, or broadcasting moves its
  // rows off axis 0.
  absl::Status CheckElementwise(const Node& node) const {
    int max_rank = -1;
    for (ValueId in : node.inputs) {
      if (in != kNoValue) max_rank = std::max(max_rank, Rank(in));
    }
    for (ValueId in : node.inputs) {
      if (!batched(in)) continue;
      const int r = Rank(in);
      if (r == 0) return absl::InvalidArgumentError("a batched operand is a scalar");
      if (r > 0 && r < max_rank) {
        return absl::InvalidArgumentError(
            "broadcasting a batched operand against one of higher rank moves the rows off axis "
            "0");
      }
    }
    return absl::OkStatus();
  }

  // MatMul or Gemm: the rows must be those of the first operand (or of both, row-aligned).
  absl::Status CheckProduct(const Node& node, int rank0) const {
    const std::string& op = node.op_type;
    if (batched(node.inputs[1])) {
      if (op == "MatMul" && batched(node.inputs[0]) && rank0 >= 3 &&
          Rank(node.inputs[1]) == rank0) {
        return absl::OkStatus();  // a batched product of row-aligned operands
      }
      return absl::InvalidArgumentError("the batched operand is the second one (rows are mixed)");
    }
    if (op == "Gemm") {
      LS_ASSIGN_OR_RETURN(int64_t trans_a, node.GetInt("transA", 0));
      if (trans_a != 0) return absl::InvalidArgumentError("transA mixes the rows");
      if (node.inputs.size() > 2 && batched(node.inputs[2])) {
        return absl::InvalidArgumentError("a batched bias C");
      }
      if (node.inputs.size() > 2 && node.inputs[2] != kNoValue && Rank(node.inputs[2]) == 2) {
        return absl::InvalidArgumentError("a 2-D bias C is added by row index");
      }
    }
    if (rank0 == 1) return absl::InvalidArgumentError("a batched 1-D operand is a single row");
    return absl::OkStatus();
  }

  absl::Status CheckGather(const Node& node, int rank0) const {
    LS_ASSIGN_OR_RETURN(int64_t axis, node.GetInt("axis", 0));
    if (batched(node.inputs[0])) {
      if (batched(node.inputs[1])) return absl::InvalidArgumentError("gathers rows by rows");
      return NotAxisZero(axis, rank0, "gathers along");
    }
    // A table looked up by batched indices: the indices' rows become the output's, in place of
    // the table's axis, which must be 0 for them to stay in front.
    if (axis != 0) return absl::InvalidArgumentError("batched indices gather off axis 0");
    return absl::OkStatus();
  }

  // An op working along one axis attribute (kAxisOps): the axis must not be 0.
  absl::Status CheckAxisOp(const Node& node, const AxisOp& a, int rank0) const {
    const std::string& op = node.op_type;
    LS_ASSIGN_OR_RETURN(int64_t axis, node.GetInt("axis", a.default_axis));
    if (op == "Softmax" || op == "LogSoftmax" || op == "Hardmax") {
      if (node.opset > 0 && node.opset < 13) {
        LS_ASSIGN_OR_RETURN(axis, node.GetInt("axis", 1));
      }
    }
    if (op == "Concat") {
      for (ValueId in : node.inputs) {
        if (in != kNoValue && !batched(in)) {
          return absl::InvalidArgumentError("concatenates a batched value with an unbatched one");
        }
      }
    }
    if (op == "Flatten") {
      if (axis == 0) return absl::InvalidArgumentError("flattens the batch axis into a row");
      return absl::OkStatus();
    }
    return NotAxisZero(axis, rank0, "works along");
  }

  // The axes of a Reduce*, Squeeze or Unsqueeze: the attribute (older opsets) or input 1.
  absl::StatusOr<std::vector<int64_t>> Axes(const Node& node) const {
    if (node.FindAttribute("axes") != nullptr) {
      return node.GetInts("axes", std::vector<int64_t>{});
    }
    return ConstantInts(node, 1);
  }

  absl::Status CheckReshape(const Node& node) const {
    if (batched(node.inputs[1])) return absl::InvalidArgumentError("a batched shape");
    LS_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ConstantInts(node, 1));
    if (shape.empty() || (shape[0] != 0 && shape[0] != -1)) {
      return absl::InvalidArgumentError("the new shape does not keep the batch (0 or -1) first");
    }
    if (shape[0] == -1 && std::count(shape.begin(), shape.end(), -1) > 1) {
      return absl::InvalidArgumentError("the new shape has more than one -1");
    }
    return absl::OkStatus();
  }

  absl::Status CheckSlice(const Node& node, int rank0) const {
    for (int i = 1; i < static_cast<int>(node.inputs.size()); ++i) {
      if (batched(node.inputs[i])) return absl::InvalidArgumentError("batched slice bounds");
    }
    LS_ASSIGN_OR_RETURN(std::vector<int64_t> axes, ConstantInts(node, 3));
    if (axes.empty()) return absl::InvalidArgumentError("slices every axis, the batch's too");
    for (int64_t axis : axes) LS_RETURN_IF_ERROR(NotAxisZero(axis, rank0, "slices"));
    return absl::OkStatus();
  }

  const Graph& body_;
  const Graph& outer_;
  std::vector<bool> batched_;
};

// Row `from` of a packed [rows, ...] tensor copied over row `to`.
void MoveRow(Tensor& t, int64_t from, int64_t to) {
  const size_t row = t.ByteSize() / static_cast<size_t>(t.dim(0));
  char* base = static_cast<char*>(t.mutable_raw_data());
  std::memcpy(base + static_cast<size_t>(to) * row, base + static_cast<size_t>(from) * row, row);
}

// Sets dim 0 of a packed tensor to `rows`, keeping the rows before it; `reserve` bytes of capacity
// at least (so the buffer grows once, to the stepper's capacity).
void SetRows(Tensor& t, int64_t rows, size_t reserve) {
  Shape shape = t.shape();
  shape[0] = rows;
  t.ResizeKeepingData(shape, reserve);
}

// Row `r` of a packed tensor as an owned [1, ...] tensor.
Tensor CopyRow(const Tensor& t, int64_t r) {
  Shape shape = t.shape();
  shape[0] = 1;
  Tensor out(t.dtype(), shape);
  const size_t row = out.ByteSize();
  if (row > 0) {
    std::memcpy(out.mutable_raw_data(), static_cast<const char*>(t.raw_data()) + r * row, row);
  }
  return out;
}

// Whether two tensors hold the same values: numbers bytewise, strings element by element.
bool SameValue(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  if (a.dtype() == DataType::kString) {
    const std::string* x = a.data<std::string>();
    return std::equal(x, x + a.NumElements(), b.data<std::string>());
  }
  return a.ByteSize() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.ByteSize()) == 0;
}

// Refuses a model iteration batching cannot drive, saying `why`.
absl::Status NotOneLoop(absl::string_view why) {
  return absl::FailedPreconditionError(
      absl::StrCat("iteration batching needs a model whose graph is one Loop: ", why));
}

}  // namespace

class LoopStepper::Impl {
 public:
  enum class Role : uint8_t { kTripCount, kCondition, kBatched, kUnbatched, kUnused };

  // A carried value of the body (the condition excepted): packed rows in its parameter's slot.
  struct Carried {
    int param_slot;
    int result_slot;
    int input;        // the model input giving the initial value
    bool unchanged;   // the body hands the parameter straight back
    bool swap;        // the result is a buffer the body produces, read by this port only
    int staged = -1;  // index into staged_ when copied rather than swapped
  };
  // A model input the body captures: bound as a view before every iteration.
  struct Bound {
    int inner_slot;
    int input;  // model input, or -1 for a constant
    const Tensor* constant;
  };
  // One buffer of rows packed on axis 0, filled from model input `input` as rows join: the
  // parameter slot of carried_[carried], or (carried -1) the rows of a batched capture. An input
  // may fill several (two carried values, or a carried value the body also reads directly).
  struct Packed {
    int input;
    int carried;
  };
  struct Output {
    bool scan;        // a stacked scan output; else the last value of carried_[carried]
    int carried;      // index into carried_
    int result_slot;  // scan: the body result appended every iteration
    bool batched;     // scan: the result has the rows on axis 0
    ValueType declared;
    std::string name;
  };
  struct Row {
    int64_t id;
    int64_t iterations = 0;
    int64_t max_trip;
    bool run;  // condition and trip count allow another iteration
    RowOptions options;
    std::vector<Tensor> scans;  // per Output (empty for last values): [iterations, slice...]
    int64_t scan_bytes = 0;
    absl::Status error;
  };

  Impl(std::shared_ptr<const Model> model, const Plan& top, const LoopStepperOptions& options)
      : model_(std::move(model)), top_(top), options_(options), context_(RunOptions{}) {}

  absl::Status Init() {
    const Plan& top = top_;
    if (top.steps().size() != 1 || top.steps()[0].node->op_type != "Loop") {
      return NotOneLoop(absl::StrCat("the graph has ", top.steps().size(),
                                     " nodes after optimization (one Loop and nothing else)"));
    }
    const engine::Step& step = top.steps()[0];
    const Node& loop = *step.node;
    body_ = LoopBodyPlan(*step.kernel);
    if (body_ == nullptr || loop.loop == nullptr) {
      return NotOneLoop("the node is not a Loop kernel");
    }
    const LoopSpec& spec = *loop.loop;
    std::shared_ptr<const Graph> source_body = loop.GetGraph("body");
    if (source_body == nullptr) return NotOneLoop("the Loop has no body");

    roles_.assign(top.graph().inputs.size(), Role::kUnused);
    for (const std::string& name : options_.unbatched_inputs) {
      const int i = model_->FindInput(name);
      if (i < 0)
        return absl::InvalidArgumentError(
            absl::StrCat("unbatched input '", name, "' is not a model input"));
    }
    LS_RETURN_IF_ERROR(BindTripAndCondition(loop));
    negative_runs_forever_ = spec.negative_trip_count == LoopSpec::NegativeTripCount::kInfinite;

    RowRules rules(*source_body, top.graph());
    if (spec.current_iteration_param >= 0) {
      iteration_param_ = spec.current_iteration_param;
    }
    condition_slot_ =
        spec.condition_result >= 0 ? body_->graph().outputs[spec.condition_result] : -1;
    LS_RETURN_IF_ERROR(BindCarried(loop, *source_body, rules));
    LS_RETURN_IF_ERROR(CheckUnreadParams(*source_body));
    LS_RETURN_IF_ERROR(BindCaptureInputs(*source_body, rules));
    LS_RETURN_IF_ERROR(rules.Check());
    for (size_t k = 0; k < carried_.size(); ++k) {
      packed_.push_back({carried_[k].input, static_cast<int>(k)});
    }
    for (const Bound& b : bound_) {
      if (b.input >= 0 && roles_[b.input] == Role::kBatched) packed_.push_back({b.input, -1});
    }
    LS_RETURN_IF_ERROR(CollectOutputs(loop, *source_body, rules));
    // The Loop's index for IterationObserver (nested Loops register before the one holding them).
    for (int loop_index : model_->scan_output_loops()) {
      if (loop_index >= 0) loop_index_ = loop_index;
    }
    staged_.resize(num_staged_);
    observer_slices_.reserve(outputs_.size());
    observer_views_.reserve(outputs_.size());
    frame_ = std::make_unique<ExecutionFrame>(*body_, context_);
    captured_rows_.resize(roles_.size());
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> Admit(std::vector<Value> inputs, const RowOptions& options) {
    const std::vector<TensorSpec>& specs = model_->inputs();
    if (inputs.size() != specs.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the model has ", specs.size(), " inputs, got ", inputs.size()));
    }
    if (static_cast<int>(rows_.size()) >= options_.max_rows) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the running batch is full (", options_.max_rows, " rows)"));
    }
    Row row;
    row.id = next_id_;
    row.options = options;
    int64_t max_trip = std::numeric_limits<int64_t>::max();
    bool cond = true;
    for (size_t i = 0; i < inputs.size(); ++i) {
      LS_RETURN_IF_ERROR(CheckInput(static_cast<int>(i), inputs[i], &max_trip, &cond));
    }
    if (trip_constant_ != nullptr) max_trip = TripCount(trip_constant_->ScalarAsInt64());
    if (cond_constant_ != nullptr) cond = cond_constant_->ScalarAsBool();
    row.max_trip = max_trip;
    row.run = cond && max_trip > 0;
    row.scans.resize(outputs_.size());
    LS_RETURN_IF_ERROR(AppendRow(inputs));
    rows_.push_back(std::move(row));
    return next_id_++;
  }

  void Step(std::vector<FinishedRow>* finished) {
    // Rows that end before running: interrupted, at their cap, or with nothing to run.
    const absl::Time wall = absl::Now();
    for (int64_t r = static_cast<int64_t>(rows_.size()) - 1; r >= 0; --r) {
      Row& row = rows_[r];
      absl::Status status;
      if (row.options.cancelled != nullptr &&
          row.options.cancelled->load(std::memory_order_relaxed)) {
        status = absl::CancelledError("the request was cancelled");
      } else if (wall >= row.options.deadline) {
        status = absl::DeadlineExceededError("the request's deadline passed while its Loop ran");
      } else if (row.run && row.options.max_loop_iterations > 0 &&
                 row.iterations >= row.options.max_loop_iterations) {
        status = LimitExceededError(
            LimitReason::kIterationCap,
            absl::StrCat("the loop reached the iteration cap of ", row.options.max_loop_iterations,
                         " (max_loop_iterations) before finishing"));
      } else if (row.run) {
        continue;
      }
      Retire(r, status, finished);
    }
    const int64_t n = static_cast<int64_t>(rows_.size());
    if (n == 0) return;
    absl::Status status = RunBody(n);
    if (!status.ok()) {
      for (int64_t r = n - 1; r >= 0; --r) Retire(r, status, finished);
      return;
    }
    const int64_t row_bytes = RowBytes();  // the same for every row, and after a row retires
    for (int64_t r = n - 1; r >= 0; --r) {
      Row& row = rows_[r];
      absl::Status end = row.error;
      if (end.ok() && row.options.max_memory_bytes > 0 &&
          row_bytes + row.scan_bytes > row.options.max_memory_bytes) {
        end = LimitExceededError(
            LimitReason::kMemory,
            absl::StrCat("the row would hold more than ", row.options.max_memory_bytes,
                         " bytes (max_request_memory_bytes)"));
      }
      if (end.ok() && row.run) continue;
      Retire(r, end, finished);
    }
  }

  bool Remove(int64_t id, const absl::Status& status, std::vector<FinishedRow>* finished) {
    for (size_t r = 0; r < rows_.size(); ++r) {
      if (rows_[r].id == id) {
        Retire(static_cast<int64_t>(r), status, finished);
        return true;
      }
    }
    return false;
  }

  int rows() const { return static_cast<int>(rows_.size()); }
  int max_rows() const { return options_.max_rows; }

 private:
  int64_t TripCount(int64_t m) const {
    if (m >= 0) return m;
    return negative_runs_forever_ ? std::numeric_limits<int64_t>::max() : 0;
  }

  // A packed buffer: a carried value's parameter slot, or a batched capture's rows.
  Tensor& Buffer(const Packed& p) {
    return p.carried >= 0 ? frame_->slot(carried_[p.carried].param_slot).mutable_tensor()
                          : captured_rows_[p.input];
  }
  // The first packed buffer that batched input `i` fills (every one has the same row shape).
  const Tensor& RowsOf(int i) {
    for (const Packed& p : packed_) {
      if (p.input == i) return Buffer(p);
    }
    return captured_rows_[i];
  }

  // Bytes one row holds in the packed buffers.
  int64_t RowBytes() {
    int64_t bytes = 0;
    const int64_t n = static_cast<int64_t>(rows_.size());
    for (const Packed& p : packed_) {
      bytes += static_cast<int64_t>(Buffer(p).ByteSize()) / std::max<int64_t>(n, 1);
    }
    return bytes;
  }

  // The index of the top graph's input `id`, or -1.
  int InputOf(ValueId id) const {
    const Graph& graph = top_.graph();
    for (size_t i = 0; i < graph.inputs.size(); ++i) {
      if (graph.inputs[i] == id) return static_cast<int>(i);
    }
    return -1;
  }
  // The top graph's constant `id`, or null.
  const Tensor* ConstantOf(ValueId id) const {
    for (const auto& [value, tensor] : top_.graph().constants) {
      if (value == id) return tensor.get();
    }
    return nullptr;
  }
  // Whether model input `i` is listed in LoopStepperOptions::unbatched_inputs.
  bool IsUnbatched(int i) const {
    return std::find(options_.unbatched_inputs.begin(), options_.unbatched_inputs.end(),
                     model_->inputs()[i].name) != options_.unbatched_inputs.end();
  }

  // The trip count and the initial condition: per row, from a model input, a constant or absent.
  absl::Status BindTripAndCondition(const Node& loop) {
    for (int k = 0; k < 2; ++k) {
      const ValueId id = loop.inputs.size() > static_cast<size_t>(k) ? loop.inputs[k] : kNoValue;
      if (id == kNoValue) continue;
      const int i = InputOf(id);
      if (i >= 0) {
        roles_[i] = k == 0 ? Role::kTripCount : Role::kCondition;
        (k == 0 ? trip_input_ : cond_input_) = i;
      } else if (const Tensor* c = ConstantOf(id); c != nullptr) {
        (k == 0 ? trip_constant_ : cond_constant_) = c;
      } else {
        return NotOneLoop(absl::StrCat("the Loop's ", k == 0 ? "trip count" : "initial condition",
                                       " is computed; it must be a model input or a constant"));
      }
    }
    return absl::OkStatus();
  }

  // The carried values (carried_): each from a batched model input, packed in its parameter's
  // slot; marks their parameters batched in `rules`.
  absl::Status BindCarried(const Node& loop, const Graph& source_body, RowRules& rules) {
    const LoopSpec& spec = *loop.loop;
    const Graph& body = body_->graph();
    std::vector<int> result_uses(body.values.size(), 0);
    for (const LoopSpec::InputPort& port : spec.inputs) {
      if (port.kind == LoopSpec::InputPort::Kind::kSliced) {
        return NotOneLoop("it has a sliced input (a TensorIterator): rows would share the slices");
      }
      const ValueId id = loop.inputs[port.node_input];
      if (port.kind == LoopSpec::InputPort::Kind::kInvariant) {
        return NotOneLoop("it has an invariant input port (OpenVINO Loop); export it as a capture");
      }
      if (port.node_input == 1) {
        // The condition is carried like a value (ONNX): its parameter must not be read, since
        // rows hold their own conditions.
        cond_param_ = port.body_param;
        continue;
      }
      const int i = InputOf(id);
      if (i < 0 || IsUnbatched(i) || roles_[i] == Role::kTripCount ||
          roles_[i] == Role::kCondition) {
        return NotOneLoop(absl::StrCat("the initial value of carried '",
                                       body.ValueName(body.inputs[port.body_param]),
                                       "' must be a batched model input"));
      }
      roles_[i] = Role::kBatched;
      Carried c;
      c.param_slot = body.inputs[port.body_param];
      c.result_slot = body.outputs[port.back_edge];
      c.input = i;
      c.unchanged = c.param_slot == c.result_slot;
      c.swap = body_->is_produced(c.result_slot) && result_uses[c.result_slot]++ == 0;
      if (!c.swap && !c.unchanged) c.staged = num_staged_++;
      carried_.push_back(c);
      rules.MarkBatched(source_body.inputs[port.body_param]);
    }
    return absl::OkStatus();
  }

  // The iteration counter and the incoming condition differ per row: the source body must not
  // read them.
  absl::Status CheckUnreadParams(const Graph& source_body) const {
    std::vector<bool> read(source_body.values.size(), false);
    for (const Node& n : source_body.nodes) {
      for (ValueId v : n.inputs)
        if (v != kNoValue) read[v] = true;
      for (ValueId v : n.implicit_inputs)
        if (v != kNoValue) read[v] = true;
    }
    for (ValueId v : source_body.outputs) read[v] = true;
    if (iteration_param_ >= 0 && read[source_body.inputs[iteration_param_]]) {
      return absl::FailedPreconditionError(
          "the Loop body reads the iteration counter, which differs per row; iteration "
          "batching needs a body that does not (carry a per-row counter instead)");
    }
    if (cond_param_ >= 0 && read[source_body.inputs[cond_param_]]) {
      return absl::FailedPreconditionError(
          "the Loop body reads its incoming condition, which iteration batching keeps per row");
    }
    return absl::OkStatus();
  }

  // Captures: model inputs (batched unless listed unbatched) or constants, bound before every
  // iteration (bound_); then the batched model inputs (batched_inputs_), which must be numeric
  // tensors with a row axis.
  absl::Status BindCaptureInputs(const Graph& source_body, RowRules& rules) {
    const Graph& graph = top_.graph();
    for (const Capture& c : body_->graph().captures) {
      const int i = InputOf(c.outer);
      if (i >= 0) {
        if (roles_[i] == Role::kTripCount || roles_[i] == Role::kCondition) {
          return NotOneLoop("the body reads the trip count or the initial condition");
        }
        roles_[i] = IsUnbatched(i) ? Role::kUnbatched : Role::kBatched;
        bound_.push_back({c.inner, i, nullptr});
      } else if (const Tensor* t = ConstantOf(c.outer); t != nullptr) {
        bound_.push_back({c.inner, -1, t});
      } else {
        return NotOneLoop(absl::StrCat("the body reads '", graph.ValueName(c.outer),
                                       "', computed outside the Loop"));
      }
    }
    for (const Capture& c : source_body.captures) {
      const int i = InputOf(c.outer);
      if (i >= 0 && roles_[i] == Role::kBatched) rules.MarkBatched(c.inner);
    }
    for (size_t i = 0; i < roles_.size(); ++i) {
      if (roles_[i] == Role::kBatched) {
        const TensorSpec& in = model_->inputs()[i];
        if (in.type.kind != ValueKind::kTensor || in.type.dtype == DataType::kString ||
            (in.type.dims.has_value() && in.type.dims->empty())) {
          return NotOneLoop(absl::StrCat("batched input '", in.name,
                                         "' must be a numeric tensor of rank 1 or more"));
        }
        batched_inputs_.push_back(static_cast<int>(i));
      }
    }
    return absl::OkStatus();
  }

  // Outputs (outputs_): every model output is an output of the Loop, the last value of a carried
  // value or a scan stacked on axis 0.
  absl::Status CollectOutputs(const Node& loop, const Graph& source_body, const RowRules& rules) {
    const LoopSpec& spec = *loop.loop;
    const Graph& graph = top_.graph();
    const Graph& body = body_->graph();
    for (ValueId out_id : graph.outputs) {
      int port_index = -1;
      for (size_t k = 0; k < spec.outputs.size(); ++k) {
        const int node_output = spec.outputs[k].node_output;
        if (loop.outputs[node_output] == out_id) port_index = static_cast<int>(k);
      }
      if (port_index < 0) {
        return NotOneLoop(
            absl::StrCat("output '", graph.ValueName(out_id), "' is not a Loop output"));
      }
      const LoopSpec::OutputPort& port = spec.outputs[port_index];
      Output o{};
      o.name = graph.ValueName(out_id);
      o.result_slot = body.outputs[port.body_result];
      o.declared = body.values[o.result_slot].type;
      o.carried = -1;
      if (port.kind == LoopSpec::OutputPort::Kind::kLastValue) {
        for (size_t k = 0; k < carried_.size(); ++k) {
          if (carried_[k].result_slot == o.result_slot) o.carried = static_cast<int>(k);
        }
        if (o.carried < 0) {
          return NotOneLoop(absl::StrCat(
              "output '", o.name, "' is the last value of a body result that is not carried"));
        }
      } else {
        if (port.kind != LoopSpec::OutputPort::Kind::kStack || port.axis != 0 || port.stride != 1) {
          return NotOneLoop(absl::StrCat("scan output '", o.name, "' is not stacked on axis 0"));
        }
        o.scan = true;
        o.batched = rules.batched(source_body.outputs[port.body_result]);
      }
      outputs_.push_back(std::move(o));
    }
    return absl::OkStatus();
  }

  // Checks model input `i` of a joining row against its declared type and its role; a trip count
  // or initial condition sets `*max_trip` or `*cond`.
  absl::Status CheckInput(int i, const Value& input, int64_t* max_trip, bool* cond) {
    const TensorSpec& spec = model_->inputs()[i];
    const std::string what = absl::StrCat("input '", spec.name, "'");
    if (!input.is_tensor())
      return absl::InvalidArgumentError(absl::StrCat(what, ": expected a tensor"));
    const Tensor& t = input.tensor();
    if (spec.type.dtype != DataType::kUndefined && t.dtype() != spec.type.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": expected element type ",
                                                     DataTypeName(spec.type.dtype), ", got ",
                                                     DataTypeName(t.dtype())));
    }
    switch (roles_[i]) {
      case Role::kTripCount:
        if (t.NumElements() != 1 || !IsInteger(t.dtype())) {
          return absl::InvalidArgumentError(
              absl::StrCat(what, ": the trip count must be a single integer"));
        }
        *max_trip = TripCount(t.ScalarAsInt64());
        break;
      case Role::kCondition:
        if (t.NumElements() != 1) {
          return absl::InvalidArgumentError(
              absl::StrCat(what, ": the initial condition must be a single value"));
        }
        *cond = t.ScalarAsBool();
        break;
      case Role::kBatched:
        return CheckBatchedRow(i, t, what);
      case Role::kUnbatched:
        if (!rows_.empty() && !SameValue(shared_[i], t)) {
          return absl::FailedPreconditionError(absl::StrCat(
              what, " differs from the running batch's (unbatched inputs must be equal)"));
        }
        break;
      case Role::kUnused:
        break;
    }
    return absl::OkStatus();
  }

  // A batched input's row: one row, of the declared shape, and of the running rows' shape.
  absl::Status CheckBatchedRow(int i, const Tensor& t, const std::string& what) {
    const TensorSpec& spec = model_->inputs()[i];
    if (t.rank() < 1 || t.dim(0) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": one row (dim 0 of 1) expected, got shape ", t.shape().ToString()));
    }
    if (spec.type.dims.has_value()) {
      const std::vector<int64_t>& dims = *spec.type.dims;
      bool match = static_cast<int>(dims.size()) == t.rank();
      for (int d = 1; match && d < t.rank(); ++d) match = dims[d] < 0 || dims[d] == t.dim(d);
      if (!match) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": shape ", t.shape().ToString(),
                                                       " does not match the declared ",
                                                       spec.type.ToString()));
      }
    }
    if (!rows_.empty()) {
      const Tensor& running = RowsOf(i);  // any of its buffers
      Shape a = running.shape();
      Shape b = t.shape();
      a[0] = b[0] = 1;
      if (a != b || running.dtype() != t.dtype()) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": a row of shape ", t.shape().ToString(),
                         " cannot join the running batch, whose rows are ", a.ToString()));
      }
    }
    return absl::OkStatus();
  }

  // Appends a checked row to the packed buffers: the batch's unbatched values when it is the
  // first, then its bytes. Only the first row allocates (the packed buffers for max_rows rows):
  // out of memory there refuses this row alone (ResourceExhausted), with no row running, instead
  // of throwing out of Admit and ending the rows of the driver's other batches. The stepper's
  // buffers are its own, charged to no request's budget (as in RunBody and Retire).
  absl::Status AppendRow(const std::vector<Value>& inputs) {
    ScopedMemoryBudget no_budget(nullptr);
    const int64_t n = static_cast<int64_t>(rows_.size());
    try {
      if (n == 0) {
        shared_.clear();
        shared_.resize(inputs.size());
        for (size_t i = 0; i < inputs.size(); ++i) {
          if (roles_[i] == Role::kUnbatched) shared_[i].CopyFrom(inputs[i].tensor());
        }
      }
      for (const Packed& p : packed_) {
        const Tensor& t = inputs[p.input].tensor();
        Tensor& rows = Buffer(p);
        const size_t row_bytes = t.ByteSize();
        if (row_bytes > std::numeric_limits<size_t>::max() / options_.max_rows) {
          throw std::bad_alloc();
        }
        if (n == 0) {
          rows.Resize(t.dtype(), t.shape());
          rows.ResizeKeepingData(t.shape(), row_bytes * options_.max_rows);
        } else {
          SetRows(rows, n + 1, row_bytes * options_.max_rows);
        }
        if (row_bytes > 0) {
          std::memcpy(static_cast<char*>(rows.mutable_raw_data()) + n * row_bytes, t.raw_data(),
                      row_bytes);
        }
      }
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(
          absl::StrCat("out of memory for the running batch's buffers (", options_.max_rows,
                       " rows of this request's shapes)"));
    }
    return absl::OkStatus();
  }

  // One iteration of the body for the n packed rows, then the per-row bookkeeping: conditions,
  // scan slices, streaming, hand-over of the carried values. Allocates nothing in steady state.
  absl::Status RunBody(int64_t n) {
    ScopedMemoryBudget no_budget(nullptr);
    BindCaptures();
    absl::Status status;
    try {
      status = frame_->Run();
    } catch (const std::bad_alloc&) {
      status = absl::ResourceExhaustedError("out of memory");
    }
    if (!status.ok()) return status;
    LS_RETURN_IF_ERROR(ReadConditions(n));
    for (size_t k = 0; k < outputs_.size(); ++k) {
      if (outputs_[k].scan) LS_RETURN_IF_ERROR(AppendScanSlices(k, n));
    }
    NotifyObservers(n);
    LS_RETURN_IF_ERROR(HandOverCarried(n));
    for (int64_t r = 0; r < n; ++r) {
      Row& row = rows_[r];
      ++row.iterations;
      if (row.iterations >= row.max_trip) row.run = false;
    }
    return absl::OkStatus();
  }

  // Binds every capture of the body, as a view, to its packed rows, shared value or constant.
  void BindCaptures() {
    for (const Bound& b : bound_) {
      const Tensor& t = b.input < 0                         ? *b.constant
                        : roles_[b.input] == Role::kBatched ? captured_rows_[b.input]
                                                            : shared_[b.input];
      frame_->slot(b.inner_slot).mutable_tensor() = Tensor::ViewOf(t);
    }
  }

  // Sets each row's `run` from the body's condition (one value per row, or one for all).
  absl::Status ReadConditions(int64_t n) {
    if (condition_slot_ < 0) return absl::OkStatus();
    const Value& c = frame_->slot(condition_slot_);
    if (!c.is_tensor() || (c.tensor().NumElements() != n && c.tensor().NumElements() != 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the body's condition must hold one value per row (", n, "), got ",
          c.is_tensor() ? c.tensor().shape().ToString() : std::string("a non-tensor")));
    }
    const Tensor& t = c.tensor();
    for (int64_t r = 0; r < n; ++r) {
      const int64_t e = t.NumElements() == 1 ? 0 : r;
      bool v;
      switch (t.dtype()) {
        case DataType::kBool:
          v = t.data<bool>()[e];
          break;
        case DataType::kInt64:
          v = t.data<int64_t>()[e] != 0;
          break;
        case DataType::kInt32:
          v = t.data<int32_t>()[e] != 0;
          break;
        case DataType::kFloat32:
          v = t.data<float>()[e] != 0;
          break;
        default:
          return absl::InvalidArgumentError("the body's condition must be bool");
      }
      rows_[r].run = v;
    }
    return absl::OkStatus();
  }

  // Appends this iteration's slice of scan output k to each healthy row's stack (a row over its
  // max_output_bytes gets its error instead). The stacks grow geometrically.
  absl::Status AppendScanSlices(size_t k, int64_t n) {
    const Output& o = outputs_[k];
    const Value& v = frame_->slot(o.result_slot);
    if (!v.is_tensor() || v.tensor().dtype() == DataType::kString) {
      return absl::UnimplementedError(
          absl::StrCat("scan output '", o.name, "' must be a numeric tensor"));
    }
    const Tensor& result = v.tensor();
    if (o.batched && (result.rank() < 1 || result.dim(0) != n)) {
      return absl::InvalidArgumentError(absl::StrCat("scan output '", o.name, "': the result ",
                                                     result.shape().ToString(),
                                                     " does not have the ", n, " rows on axis 0"));
    }
    Shape slice = result.shape();
    if (o.batched) slice[0] = 1;
    const size_t bytes = static_cast<size_t>(slice.NumElements()) * DataTypeSize(result.dtype());
    for (int64_t r = 0; r < n; ++r) {
      Row& row = rows_[r];
      if (!row.error.ok()) continue;
      Tensor& buffer = row.scans[k];
      const int64_t i = row.iterations;
      if (row.options.max_output_bytes > 0 &&
          static_cast<int64_t>((i + 1) * bytes) > row.options.max_output_bytes) {
        row.error = LimitExceededError(LimitReason::kOutputBytes,
                                       absl::StrCat("concatenated output '", o.name,
                                                    "' would exceed ", row.options.max_output_bytes,
                                                    " bytes (max_output_bytes) at iteration ", i));
        continue;
      }
      Shape::Dims dims(slice.rank() + 1, 1);
      std::copy(slice.dims().begin(), slice.dims().end(), dims.begin() + 1);
      dims[0] = i + 1;
      if (i == 0) {
        buffer.Resize(result.dtype(), Shape(dims));
        buffer.ResizeKeepingData(Shape(dims), bytes * 16);
      } else {
        buffer.ResizeKeepingData(Shape(dims),
                                 (i + 1) * bytes > buffer.capacity() ? (i + 1) * bytes * 2 : 0);
      }
      if (bytes > 0) {
        std::memcpy(static_cast<char*>(buffer.mutable_raw_data()) + i * bytes,
                    static_cast<const char*>(result.raw_data()) + (o.batched ? r * bytes : 0),
                    bytes);
      }
      row.scan_bytes += static_cast<int64_t>(bytes);
    }
    return absl::OkStatus();
  }

  // Hands each observed, healthy row this iteration's scan slices; an observer's error becomes
  // its row's.
  void NotifyObservers(int64_t n) {
    for (int64_t r = 0; r < n; ++r) {
      Row& row = rows_[r];
      if (row.options.iteration_observer == nullptr || !row.error.ok()) continue;
      std::vector<ScanSlice>& slices = observer_slices_;
      std::vector<Tensor>& views = observer_views_;
      slices.clear();
      views.clear();  // reserved for every output at Init: the slices' pointers stay valid
      for (size_t k = 0; k < outputs_.size(); ++k) {
        if (!outputs_[k].scan) continue;
        const Tensor& buffer = row.scans[k];
        Shape slice(buffer.shape().dims().subspan(1));
        const size_t bytes =
            static_cast<size_t>(slice.NumElements()) * DataTypeSize(buffer.dtype());
        views.push_back(
            Tensor::View(buffer.dtype(), slice,
                         static_cast<const char*>(buffer.raw_data()) + row.iterations * bytes));
        slices.push_back(ScanSlice{static_cast<int>(k), &views.back()});
      }
      absl::Status s =
          row.options.iteration_observer->OnIteration(loop_index_, row.iterations, slices);
      if (!s.ok()) row.error = s;
    }
  }

  // Back edges: stage the copied values first (sources may alias), then hand over; each carried
  // value must come back with the n rows on axis 0.
  absl::Status HandOverCarried(int64_t n) {
    for (const Carried& c : carried_) {
      if (c.staged >= 0) staged_[c.staged].CopyFrom(frame_->slot(c.result_slot));
    }
    for (const Carried& c : carried_) {
      if (c.unchanged) continue;
      Value& param = frame_->slot(c.param_slot);
      Value& result = frame_->slot(c.result_slot);
      if (c.staged >= 0) {
        swap(param, staged_[c.staged]);
      } else if (result.is_tensor() && result.tensor().is_view()) {
        param.CopyFrom(result);
      } else {
        swap(param, result);
      }
      const Tensor& t = param.tensor();
      if (!param.is_tensor() || t.rank() < 1 || t.dim(0) != n) {
        return absl::InvalidArgumentError(absl::StrCat(
            "carried value '", body_->graph().ValueName(c.param_slot), "' came back as ",
            param.is_tensor() ? t.shape().ToString() : std::string("a non-tensor"),
            ", without the ", n, " rows on axis 0"));
      }
    }
    return absl::OkStatus();
  }

  // Takes row r out: answers it, then moves the last row into its place.
  void Retire(int64_t r, const absl::Status& status, std::vector<FinishedRow>* finished) {
    ScopedMemoryBudget no_budget(nullptr);
    Row& row = rows_[r];
    FinishedRow done;
    done.id = row.id;
    done.iterations = row.iterations;
    if (status.ok()) {
      std::vector<Value> outputs(outputs_.size());
      for (size_t k = 0; k < outputs_.size(); ++k) {
        const Output& o = outputs_[k];
        if (!o.scan) {
          outputs[k] = Value(CopyRow(frame_->slot(carried_[o.carried].param_slot).tensor(), r));
        } else if (row.iterations > 0) {
          outputs[k] = Value(std::move(row.scans[k]));
        } else {
          std::vector<int64_t> dims{0};
          if (o.declared.dims.has_value()) {
            for (int64_t d : *o.declared.dims) dims.push_back(d < 0 ? 0 : d);
          }
          const DataType dtype =
              o.declared.dtype == DataType::kUndefined ? DataType::kFloat32 : o.declared.dtype;
          outputs[k] = Value(Tensor(dtype, Shape(absl::MakeConstSpan(dims))));
        }
      }
      done.outputs = std::move(outputs);
    } else {
      done.outputs = status;
    }
    finished->push_back(std::move(done));
    const int64_t last = static_cast<int64_t>(rows_.size()) - 1;
    for (const Packed& p : packed_) {
      Tensor& t = Buffer(p);
      if (r != last) MoveRow(t, last, r);
      SetRows(t, last, 0);
    }
    if (r != last) rows_[r] = std::move(rows_[last]);
    rows_.pop_back();
  }

  std::shared_ptr<const Model> model_;
  const Plan& top_;  // the model's
  LoopStepperOptions options_;
  const Plan* body_ = nullptr;
  std::vector<Role> roles_;  // per model input
  int trip_input_ = -1;
  int cond_input_ = -1;
  const Tensor* trip_constant_ = nullptr;
  const Tensor* cond_constant_ = nullptr;
  bool negative_runs_forever_ = false;
  int iteration_param_ = -1;
  int cond_param_ = -1;
  int condition_slot_ = -1;
  int loop_index_ = 0;  // into Model::loop_names()
  std::vector<Carried> carried_;
  std::vector<Bound> bound_;
  std::vector<int> batched_inputs_;
  std::vector<Packed> packed_;
  std::vector<Output> outputs_;
  std::vector<Value> staged_;
  int num_staged_ = 0;
  // A row's scan slices for its IterationObserver, refilled per row and iteration (no allocation).
  std::vector<ScanSlice> observer_slices_;
  std::vector<Tensor> observer_views_;
  RunContext context_;
  std::unique_ptr<ExecutionFrame> frame_;
  std::vector<Tensor> captured_rows_;  // per model input: packed rows of a batched capture
  std::vector<Tensor> shared_;         // per model input: the running batch's unbatched value
  std::vector<Row> rows_;              // packed order: row r is row r of every packed buffer
  int64_t next_id_ = 1;
};

absl::StatusOr<std::unique_ptr<LoopStepper>> LoopStepper::Create(
    std::shared_ptr<const Model> model, const LoopStepperOptions& options) {
  if (model == nullptr) return absl::InvalidArgumentError("no model");
  if (options.max_rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_rows must be positive, not ", options.max_rows));
  }
  const Plan& top = *model->plan_;
  auto impl = std::make_unique<Impl>(std::move(model), top, options);
  LS_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<LoopStepper>(new LoopStepper(std::move(impl)));
}

LoopStepper::LoopStepper(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LoopStepper::~LoopStepper() = default;

absl::StatusOr<int64_t> LoopStepper::Admit(std::vector<Value> inputs, const RowOptions& options) {
  return impl_->Admit(std::move(inputs), options);
}
void LoopStepper::Step(std::vector<FinishedRow>* finished) { impl_->Step(finished); }
bool LoopStepper::Remove(int64_t id, const absl::Status& status,
                         std::vector<FinishedRow>* finished) {
  return impl_->Remove(id, status, finished);
}
int LoopStepper::rows() const { return impl_->rows(); }
int LoopStepper::max_rows() const { return impl_->max_rows(); }

}  // namespace loopserve::engine
