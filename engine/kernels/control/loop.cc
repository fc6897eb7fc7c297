// The Loop kernel: runs a compiled body under a LoopSpec (engine/ir/loop_spec.h), for ONNX Loop
// and OpenVINO Loop-5 / TensorIterator alike.
//
// Hot path (per iteration): an interrupt check, the iteration counter written in place, sliced
// inputs copied into reused buffers, the body's steps, a scalar condition read, each concatenated
// output appended with one memcpy into a geometrically grown buffer, and back edges handed on by
// swapping buffers. Nothing is allocated and no primitive is created once shapes repeat.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <limits>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "engine/base/status_macros.h"
#include "engine/kernels/control/control_flow.h"
#include "engine/kernels/control/register_control.h"
#include "engine/runtime/execution_frame.h"
#include "engine/runtime/plan.h"
#include "engine/runtime/run_context.h"
#include "engine/runtime/spin_team.h"
#include "engine/runtime/thread_mode.h"

namespace loopserve::engine {
namespace {

using InputKind = LoopSpec::InputPort::Kind;
using OutputKind = LoopSpec::OutputPort::Kind;

// A carried port resolved to body slots. `swap` when the result is a buffer the body produces and
// no other port reads it, so the hand-over is a buffer swap; otherwise it is staged by copy.
struct CarriedPort {
  int node_input;
  int param_slot;
  int result_slot;
  bool swap;
  // The body hands the parameter straight back (engine/transform/elide_loop_identities turned
  // `Identity(param)` into the parameter itself): the value never changes, so there is nothing to
  // hand over.
  bool unchanged;
  DataType default_dtype;  // for an absent initial condition: bool true
  bool default_rank1;
};

struct SlicedPort {
  int node_input;
  int param_slot;
  int64_t axis;
  int64_t stride;
  int64_t part_size;
  int64_t start;
  int64_t end;
  bool squeeze;
};

// Where one execution reads a sliced input: iteration i takes `part_size` elements along `axis`
// starting at first + i * step.
struct SliceRun {
  int axis = 0;
  int64_t first = 0;
  int64_t step = 0;
  int64_t parts = 0;
};

struct OutputPortInfo {
  OutputKind kind = OutputKind::kLastValue;
  int node_output = -1;
  int result_slot = -1;
  int carried_param_slot = -1;  // kLastValue of a back-edge result: the value is in this param
  int64_t axis = 0;
  int64_t stride = 1;
  ValueType declared;  // the body result's declared type, for zero-iteration shapes
  std::string name;    // the Loop output's value name, for error messages
};

class LoopState : public KernelState {
 public:
  SubgraphFrame body;
  std::vector<Value> staged;           // one per carried port that is copied rather than swapped
  std::vector<SliceRun> slices;        // per sliced port, for the current execution
  std::vector<Shape> slice_shapes;     // per output port: the shape of one iteration's result
  std::vector<int64_t> max_rows;       // per output port: iterations that fit max_output_bytes
  std::vector<ScanSlice> scan_slices;  // per streamed output: IterationObserver's argument
};

// A Loop's choice between its intra-op team, one thread and one thread with the SpinTeam
// (engine/runtime/thread_mode.h), kept by the kernel across executions and runs: the execution
// that gets `mu` drives the chooser, timing its blocks (which may span executions); concurrent
// executions of the same Loop run in the mode last chosen (`chosen`) without measuring. One
// chooser for executions that may use the SpinTeam (RunOptions::loop_team, three modes) and one
// for those that may not (two).
struct AdaptiveThreads {
  using Mode = ThreadModeChooser::Mode;
  struct Choice {
    explicit Choice(bool spin_team) : chooser(Config(spin_team)) {}
    static ThreadModeChooser::Config Config(bool spin_team) {
      ThreadModeChooser::Config config;
      config.spin_team = spin_team;
      return config;
    }
    ThreadModeChooser chooser;
    int64_t remaining = 0;  // iterations left of chooser.iterations()
    double seconds = 0;     // of the block so far, from earlier executions
    std::atomic<Mode> chosen{Mode::kTeam};
  };
  absl::Mutex mu;
  Choice choices[2] ABSL_GUARDED_BY(mu) = {Choice(false), Choice(true)};  // [use SpinTeam]
};

// While a Loop on this thread chooses or forces its thread mode: its one-thread flag (one OpenMP
// thread, with or without the SpinTeam). Loops nested in its body follow it instead of choosing
// too (they run inside its SpinTeam engagement), and count their iterations by it.
thread_local const bool* t_loop_one_thread = nullptr;

// One execution's thread mode: set up from RunOptions::loop_threads when the calling thread has
// more than one intra-op thread, advanced after every iteration, and undone (thread count
// restored, chooser released, SpinTeam disengaged) when it goes out of scope. In the SpinTeam
// mode the calling thread's SpinTeam is engaged and the body's larger products split by rows
// over it; Loops nested in the body run inside that engagement (they set no mode of their own).
class LoopThreadMode {
 public:
  using Mode = ThreadModeChooser::Mode;

  LoopThreadMode(LoopThreads policy, bool use_team,
                 AdaptiveThreads& adaptive) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (t_loop_one_thread != nullptr) {
      counted_ = t_loop_one_thread;
      return;
    }
    team_ = ThreadsOfThisThread();
    if (team_ <= 1) return;
    t_loop_one_thread = &one_thread_;
    owns_flag_ = true;
    if (use_team) spin_team_ = SpinTeam::OfThisThread(team_);
    switch (policy) {
      case LoopThreads::kIntraOp:
        return;
      case LoopThreads::kOneThread:
        // One OpenMP thread, with the SpinTeam when the run allows it.
        Apply(spin_team_ != nullptr ? Mode::kSpinTeam : Mode::kOneThread);
        return;
      case LoopThreads::kAdaptive:
        break;
    }
    AdaptiveThreads::Choice& choice = adaptive.choices[spin_team_ != nullptr ? 1 : 0];
    if (!adaptive.mu.TryLock()) {
      Apply(choice.chosen.load(std::memory_order_relaxed));
      return;
    }
    adaptive_ = &adaptive;
    choice_ = &choice;
    adaptive.mu.AssertHeld();
    if (choice.remaining <= 0) choice.remaining = choice.chooser.iterations();
    Apply(choice.chooser.mode());
    start_ = Clock::now();
  }

  ~LoopThreadMode() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (adaptive_ != nullptr) {
      adaptive_->mu.AssertHeld();
      choice_->seconds += Seconds(start_, Clock::now());
      choice_->chosen.store(choice_->chooser.current(), std::memory_order_relaxed);
      adaptive_->mu.Unlock();
    }
    Apply(Mode::kTeam);
    if (owns_flag_) t_loop_one_thread = nullptr;
  }

  LoopThreadMode(const LoopThreadMode&) = delete;
  LoopThreadMode& operator=(const LoopThreadMode&) = delete;

  // After each iteration: counts it and, at the end of the chooser's block, reports the block's
  // time and switches mode if the chooser says so. Hot path: a test and a decrement.
  void AfterIteration(RunStats& stats) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    stats.one_thread_iterations += *counted_ ? 1 : 0;
    if (adaptive_ == nullptr || --choice_->remaining > 0) return;
    const Clock::time_point now = Clock::now();
    ThreadModeChooser& chooser = choice_->chooser;
    chooser.Next(choice_->seconds + Seconds(start_, now));
    choice_->seconds = 0;
    choice_->remaining = chooser.iterations();
    Apply(chooser.mode());
    start_ = Clock::now();
  }

 private:
  using Clock = std::chrono::steady_clock;
  static double Seconds(Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration<double>(to - from).count();
  }
  void Apply(Mode mode) {
    if (mode == Mode::kSpinTeam && spin_team_ == nullptr) mode = Mode::kOneThread;
    if (mode == mode_) return;
    if ((mode == Mode::kTeam) != (mode_ == Mode::kTeam)) {
      SetThreadsOfThisThread(mode == Mode::kTeam ? team_ : 1);
    }
    if (mode == Mode::kSpinTeam && !spin_team_->engaged()) {
      spin_team_->Engage();
      engaged_ = true;
    } else if (mode != Mode::kSpinTeam && engaged_) {
      spin_team_->Disengage();
      engaged_ = false;
    }
    mode_ = mode;
    one_thread_ = mode != Mode::kTeam;
  }

  int team_ = 1;
  SpinTeam* spin_team_ = nullptr;  // the calling thread's; null without one
  bool engaged_ = false;           // this execution engaged spin_team_
  bool owns_flag_ = false;
  Mode mode_ = Mode::kTeam;
  bool one_thread_ = false;  // mode_ != kTeam
  // Whether an iteration runs on one OpenMP thread: one_thread_, or in a nested Loop its setter's.
  const bool* counted_ = &one_thread_;
  AdaptiveThreads* adaptive_ = nullptr;  // held (mu) while this execution drives the chooser
  AdaptiveThreads::Choice* choice_ = nullptr;
  Clock::time_point start_;
};

class LoopKernel : public Kernel {
 public:
  bool AcceptsStringInputs() const override { return true; }
  LoopKernel(std::shared_ptr<const Plan> body, std::shared_ptr<const LoopSpec> spec, int loop_index)
      : body_(std::move(body)), spec_(std::move(spec)), loop_index_(loop_index) {}

  absl::Status Init(const Node& node, const Graph& outer) {
    const Graph& g = body_->graph();
    const int num_params = static_cast<int>(g.inputs.size());
    const int num_results = static_cast<int>(g.outputs.size());
    auto check_param = [&](int p) -> absl::Status {
      if (p < 0 || p >= num_params) {
        return absl::InvalidArgumentError(absl::StrCat("body parameter index ", p,
                                                       " is out of range (the body has ",
                                                       num_params, " parameters)"));
      }
      return absl::OkStatus();
    };
    auto check_result = [&](int r) -> absl::Status {
      if (r < 0 || r >= num_results) {
        return absl::InvalidArgumentError(absl::StrCat(
            "body result index ", r, " is out of range (the body has ", num_results, " results)"));
      }
      return absl::OkStatus();
    };
    auto check_input = [&](int i) -> absl::Status {
      if (i < 0 || i >= static_cast<int>(node.inputs.size())) {
        return absl::InvalidArgumentError(absl::StrCat("Loop input index ", i, " is out of range"));
      }
      return absl::OkStatus();
    };
    if (spec_->current_iteration_param >= 0) {
      LS_RETURN_IF_ERROR(check_param(spec_->current_iteration_param));
      iteration_slot_ = g.inputs[spec_->current_iteration_param];
      const ValueType& t = g.values[iteration_slot_].type;
      iteration_dtype_ = t.dtype == DataType::kInt32 ? DataType::kInt32 : DataType::kInt64;
      iteration_rank1_ = t.dims.has_value() && t.dims->size() == 1;
    }
    if (spec_->condition_result >= 0) {
      LS_RETURN_IF_ERROR(check_result(spec_->condition_result));
      condition_slot_ = g.outputs[spec_->condition_result];
    }
    std::vector<int> result_uses(g.values.size(), 0);
    for (const LoopSpec::InputPort& port : spec_->inputs) {
      LS_RETURN_IF_ERROR(check_param(port.body_param));
      LS_RETURN_IF_ERROR(check_input(port.node_input));
      const int param_slot = g.inputs[port.body_param];
      switch (port.kind) {
        case InputKind::kInvariant:
          invariant_.push_back({port.node_input, param_slot});
          break;
        case InputKind::kSliced:
          if (port.stride != 1 && port.stride != -1) {
            return absl::UnimplementedError(
                absl::StrCat("sliced input stride ", port.stride, " (only 1 and -1)"));
          }
          if (port.part_size < 1 || (port.squeeze && port.part_size != 1)) {
            return absl::InvalidArgumentError(
                absl::StrCat("sliced input part size ", port.part_size, " must be ",
                             port.squeeze ? "1 when the axis is removed" : "positive"));
          }
          sliced_.push_back({port.node_input, param_slot, port.axis, port.stride, port.part_size,
                             port.start, port.end, port.squeeze});
          break;
        case InputKind::kCarried: {
          LS_RETURN_IF_ERROR(check_result(port.back_edge));
          const int result_slot = g.outputs[port.back_edge];
          const ValueType& t = g.values[param_slot].type;
          CarriedPort c;
          c.node_input = port.node_input;
          c.param_slot = param_slot;
          c.result_slot = result_slot;
          c.swap = body_->is_produced(result_slot) && result_uses[result_slot]++ == 0;
          c.unchanged = result_slot == param_slot;
          c.default_dtype = DataType::kBool;
          c.default_rank1 = t.dims.has_value() && t.dims->size() == 1;
          carried_.push_back(c);
          break;
        }
      }
    }
    // A result swapped away by a back edge cannot also be read by an output afterwards; outputs
    // of a carried result read the parameter it was handed to. Results read by outputs that are
    // not back edges must not be swapped by any back edge either: stage those instead.
    for (const LoopSpec::OutputPort& port : spec_->outputs) {
      LS_RETURN_IF_ERROR(check_result(port.body_result));
      if (port.node_output < 0 || port.node_output >= static_cast<int>(node.outputs.size())) {
        return absl::InvalidArgumentError(
            absl::StrCat("Loop output index ", port.node_output, " is out of range"));
      }
      OutputPortInfo out{};
      out.kind = port.kind;
      out.node_output = port.node_output;
      out.result_slot = g.outputs[port.body_result];
      out.carried_param_slot = -1;
      for (const CarriedPort& c : carried_) {
        if (c.result_slot == out.result_slot) {
          out.carried_param_slot = c.param_slot;
          break;
        }
      }
      out.axis = port.axis;
      out.stride = port.stride;
      out.declared = g.values[out.result_slot].type;
      const ValueId output_id = node.outputs[port.node_output];
      if (output_id != kNoValue) out.name = outer.values[output_id].name;
      if (out.kind != OutputKind::kLastValue && out.stride != 1 && out.stride != -1) {
        return absl::UnimplementedError(
            absl::StrCat("concatenated output stride ", out.stride, " (only 1 and -1)"));
      }
      outputs_.push_back(out);
    }
    int staged = 0;
    for (CarriedPort& c : carried_) {
      staged_index_.push_back(c.swap || c.unchanged ? -1 : staged++);
    }
    num_staged_ = staged;
    return absl::OkStatus();
  }

  std::unique_ptr<KernelState> CreateState() const override {
    auto state = std::make_unique<LoopState>();
    state->staged.resize(num_staged_);
    state->slices.resize(sliced_.size());
    state->slice_shapes.resize(outputs_.size());
    state->max_rows.resize(outputs_.size());
    state->scan_slices.resize(streamed_.size());
    for (size_t s = 0; s < streamed_.size(); ++s) {
      state->scan_slices[s] = ScanSlice{streamed_[s].model_output, nullptr};
    }
    return state;
  }

  bool AcceptsNonTensorInputs() const override { return true; }

  const Plan& body() const { return *body_; }

  // A Loop of the top-level graph: records which of its scan outputs are model outputs as they are,
  // for IterationObserver (Model::scan_output_loops).
  void RegisterStreamedOutputs(const KernelInit& init) {
    if (!init.top_level()) return;
    top_level_ = true;
    const Graph& graph = init.graph();
    for (int j = 0; j < static_cast<int>(graph.outputs.size()); ++j) {
      for (size_t k = 0; k < outputs_.size(); ++k) {
        if (outputs_[k].kind == OutputKind::kLastValue) continue;
        if (init.node().outputs[outputs_[k].node_output] != graph.outputs[j]) continue;
        streamed_.push_back({static_cast<int>(k), j});
        init.RegisterScanOutput(j, loop_index_);
        break;
      }
    }
  }

  absl::Status Run(KernelContext& ctx) const override {
    RunContext& run = ctx.run_context();
    const absl::Time start = absl::Now();
    if (top_level_) {
      if (IterationObserver* observer = run.options().iteration_observer; observer != nullptr) {
        observer->OnLoopStart(loop_index_);
      }
    }
    int64_t iterations = 0;
    absl::Status status = Execute(ctx, iterations);
    run.stats().loop_executions += 1;
    run.stats().loop_iterations += iterations;
    if (LoopObserver* observer = run.options().loop_observer; observer != nullptr) {
      observer->OnLoopFinished(loop_index_, iterations, absl::Now() - start);
    }
    return status;
  }

 private:
  absl::Status ReadTripCount(KernelContext& ctx, int64_t& max_trip) const {
    max_trip = std::numeric_limits<int64_t>::max();
    if (!ctx.has_input(0)) return absl::OkStatus();
    const Value& v = ctx.input_value(0);
    if (!v.is_tensor() || v.tensor().NumElements() != 1 || !(IsInteger(v.tensor().dtype()))) {
      return absl::InvalidArgumentError(
          "the trip count must be a single integer (a scalar or a 1-element tensor)");
    }
    const int64_t m = v.tensor().ScalarAsInt64();
    if (m >= 0) {
      max_trip = m;
    } else if (spec_->negative_trip_count == LoopSpec::NegativeTripCount::kZeroIterations) {
      max_trip = 0;
    }
    return absl::OkStatus();
  }

  absl::Status Execute(KernelContext& ctx, int64_t& iterations) const {
    LoopState& state = *ctx.state<LoopState>();
    RunContext& run = ctx.run_context();
    ExecutionFrame& outer = ctx.frame();
    ExecutionFrame& body = state.body.Get(*body_, run);

    int64_t max_trip;
    LS_RETURN_IF_ERROR(ReadTripCount(ctx, max_trip));
    bool cond = true;
    if (ctx.has_input(1)) {
      const Value& v = ctx.input_value(1);
      if (!v.is_tensor() || v.tensor().NumElements() != 1) {
        return absl::InvalidArgumentError(
            "the initial condition must be a single value (a scalar or a 1-element tensor)");
      }
      cond = v.tensor().ScalarAsBool();
    }

    // Bind what stays fixed for this execution.
    BindCaptures(*body_, outer, body);
    // Tensors are bound as views, which no body step can take (KernelContext::TakeInput); other
    // values are copies a step may take, so they are copied again before every iteration (no
    // importer makes one today: OpenVINO, the only source of invariant inputs, has only tensors).
    bool rebind_invariants = false;
    for (const auto& [node_input, param_slot] : invariant_) {
      const Value& v = ctx.input_value(node_input);
      if (v.is_tensor()) {
        body.slot(param_slot).mutable_tensor() = Tensor::ViewOf(v.tensor());
      } else {
        body.slot(param_slot).CopyFrom(v);
        rebind_invariants = true;
      }
    }
    for (const CarriedPort& c : carried_) {
      if (ctx.has_input(c.node_input)) {
        // One copy per execution (not per iteration), into a buffer the frame already owns.
        body.slot(c.param_slot).CopyFrom(ctx.input_value(c.node_input));
      } else {
        Tensor* t = &body.slot(c.param_slot).mutable_tensor();
        t->Resize(c.default_dtype, c.default_rank1 ? Shape{1} : Shape{});
        t->mutable_data<bool>()[0] = true;
      }
    }
    for (size_t k = 0; k < sliced_.size(); ++k) {
      const Value& v = ctx.input_value(sliced_[k].node_input);
      if (!v.is_tensor()) return absl::InvalidArgumentError("a sliced input must be a tensor");
      LS_RETURN_IF_ERROR(PlanSlices(sliced_[k], v.tensor(), state.slices[k]));
      max_trip = std::min<int64_t>(max_trip, state.slices[k].parts);
    }
    const int64_t cap = run.options().max_loop_iterations;
    // The counter is sized once per execution and then written in place. A body step may take
    // the parameter's buffer (KernelContext::TakeInput: Concat(i, ...) appending to it), leaving
    // the slot another value, so the slot is checked again every iteration.
    const Shape counter_shape = iteration_rank1_ ? Shape{1} : Shape{};
    if (iteration_slot_ >= 0) {
      body.slot(iteration_slot_).mutable_tensor().Resize(iteration_dtype_, counter_shape);
    }

    LoopThreadMode thread_mode(run.options().loop_threads, run.options().loop_team, adaptive_);
    int64_t i = 0;
    for (; i < max_trip && cond; ++i) {
      LS_RETURN_IF_ERROR(run.CheckInterrupted());
      if (cap > 0 && i >= cap) {
        return LimitExceededError(LimitReason::kIterationCap,
                                  absl::StrCat("the loop reached the iteration cap of ", cap,
                                               " (max_loop_iterations) before finishing"));
      }
      if (iteration_slot_ >= 0) {
        Tensor& counter = body.slot(iteration_slot_).mutable_tensor();
        if (counter.capacity() == 0 || counter.dtype() != iteration_dtype_ ||
            counter.rank() != counter_shape.rank() || counter.NumElements() != 1) {
          counter.Resize(iteration_dtype_, counter_shape);
        }
        void* iteration_counter = counter.mutable_raw_data();
        if (iteration_dtype_ == DataType::kInt32) {
          static_cast<int32_t*>(iteration_counter)[0] = static_cast<int32_t>(i);
        } else {
          static_cast<int64_t*>(iteration_counter)[0] = i;
        }
      }
      for (size_t k = 0; k < sliced_.size(); ++k) {
        // The range was validated against this input's shape when the execution started.
        const SlicedPort& s = sliced_[k];
        const SliceRun& run_k = state.slices[k];
        CopySlice(ctx.input_value(s.node_input).tensor(), run_k.axis, run_k.first + i * run_k.step,
                  s.part_size, s.squeeze, body.slot(s.param_slot).mutable_tensor());
      }

      if (rebind_invariants && i > 0) {
        for (const auto& [node_input, param_slot] : invariant_) {
          const Value& v = ctx.input_value(node_input);
          if (!v.is_tensor()) body.slot(param_slot).CopyFrom(v);
        }
      }
      LS_RETURN_IF_ERROR(body.Run());

      if (condition_slot_ >= 0) {
        const Value& c = body.slot(condition_slot_);
        if (!c.is_tensor() || c.tensor().NumElements() != 1) {
          return absl::InvalidArgumentError(
              "the body's condition output must be a single value (a scalar or a 1-element "
              "tensor)");
        }
        cond = c.tensor().ScalarAsBool();
      }
      for (size_t k = 0; k < outputs_.size(); ++k) {
        const OutputPortInfo& out = outputs_[k];
        if (out.kind == OutputKind::kLastValue) continue;
        LS_RETURN_IF_ERROR(Append(out, i, body.slot(out.result_slot), state.slice_shapes[k],
                                  state.max_rows[k],
                                  ctx.output_value(out.node_output).mutable_tensor(), max_trip,
                                  run.options().max_output_bytes));
      }
      if (top_level_) {
        if (IterationObserver* observer = run.options().iteration_observer; observer != nullptr) {
          for (size_t s = 0; s < streamed_.size(); ++s) {
            state.scan_slices[s].tensor =
                &body.slot(outputs_[streamed_[s].port].result_slot).tensor();
          }
          LS_RETURN_IF_ERROR(observer->OnIteration(loop_index_, i, state.scan_slices));
        }
      }
      // Back edges: first stage every copied value (sources may alias), then hand over.
      for (size_t k = 0; k < carried_.size(); ++k) {
        if (!carried_[k].swap && !carried_[k].unchanged)
          state.staged[staged_index_[k]].CopyFrom(body.slot(carried_[k].result_slot));
      }
      for (size_t k = 0; k < carried_.size(); ++k) {
        const CarriedPort& c = carried_[k];
        if (c.unchanged) continue;
        Value& param = body.slot(c.param_slot);
        swap(param, c.swap ? body.slot(c.result_slot) : state.staged[staged_index_[k]]);
      }
      thread_mode.AfterIteration(run.stats());
    }
    iterations = i;

    for (size_t k = 0; k < outputs_.size(); ++k) {
      const OutputPortInfo& out = outputs_[k];
      Value& dst = ctx.output_value(out.node_output);
      if (out.kind == OutputKind::kLastValue) {
        const int slot = out.carried_param_slot >= 0 ? out.carried_param_slot : out.result_slot;
        if (out.carried_param_slot < 0 && iterations == 0) {
          LS_RETURN_IF_ERROR(EmptyLike(out, dst.mutable_tensor(), /*stacked=*/false));
          continue;
        }
        // Carried parameters own their buffers after CopyFrom/swap, so they are swapped out;
        // the body slot keeps the output's old buffer to reuse next execution.
        bool first_use = true;
        for (size_t j = 0; j < k; ++j) {
          if (outputs_[j].kind == OutputKind::kLastValue &&
              (outputs_[j].carried_param_slot >= 0 ? outputs_[j].carried_param_slot
                                                   : outputs_[j].result_slot) == slot) {
            dst.CopyFrom(ctx.output_value(outputs_[j].node_output));
            first_use = false;
            break;
          }
        }
        if (!first_use) continue;
        Value& src = body.slot(slot);
        if (out.carried_param_slot >= 0 && !(src.is_tensor() && src.tensor().is_view())) {
          swap(src, dst);
        } else {
          MoveOut(*body_, slot, src, dst);
        }
      } else if (iterations == 0) {
        LS_RETURN_IF_ERROR(EmptyLike(out, dst.mutable_tensor(), out.kind == OutputKind::kStack));
      } else {
        SetStackedRows(dst.mutable_tensor(), iterations);
        LS_RETURN_IF_ERROR(
            FinishConcat(out, state.slice_shapes[k], iterations, dst.mutable_tensor()));
      }
    }
    return absl::OkStatus();
  }

  // Resolves a sliced port against the input of this execution: its axis, the parts its index
  // range [start, end] holds and where the first one starts. InvalidArgument when the range lies
  // outside the axis (an empty axis gives no parts).
  static absl::Status PlanSlices(const SlicedPort& s, const Tensor& full, SliceRun& run) {
    absl::StatusOr<int> axis = NormalizeAxis(s.axis, full.rank());
    if (!axis.ok()) return Annotate(axis.status(), "sliced input: ");
    run.axis = *axis;
    const int64_t d = full.dim(*axis);
    const int64_t lo = s.start < 0 ? s.start + d : s.start;
    const int64_t hi = s.end < 0 ? s.end + d : s.end;
    if (d == 0) {
      run.parts = 0;
      return absl::OkStatus();
    }
    if (lo < 0 || lo >= d || hi < 0 || hi >= d) {
      return absl::InvalidArgumentError(
          absl::StrCat("sliced input: the range [", s.start, ", ", s.end, "] is outside axis ",
                       *axis, " of size ", d, " (shape ", full.shape().ToString(), ")"));
    }
    const int64_t first = std::min(lo, hi);
    const int64_t last = std::max(lo, hi);
    run.parts = (last - first + 1) / s.part_size;
    if (s.stride > 0) {
      run.first = first;
      run.step = s.part_size;
    } else {
      run.first = last + 1 - s.part_size;
      run.step = -s.part_size;
    }
    return absl::OkStatus();
  }

  // Copies `count` elements along `axis` of `full`, from `index` on, into `part` (dim `axis`
  // becomes `count`, or disappears with `squeeze`).
  static void CopySlice(const Tensor& full, int axis, int64_t index, int64_t count, bool squeeze,
                        Tensor& part) {
    const int64_t d = full.dim(axis);
    Shape shape = full.shape();
    if (squeeze) {
      Shape::Dims dims(shape.dims().begin(), shape.dims().end());
      dims.erase(dims.begin() + axis);
      shape = Shape(dims);
    } else {
      shape[axis] = count;
    }
    part.Resize(full.dtype(), shape);
    const int64_t outer = full.shape().NumElements(0, axis);
    const int64_t inner = full.shape().NumElements(axis + 1, full.rank());
    if (full.dtype() == DataType::kString) {
      for (int64_t o = 0; o < outer; ++o) {
        CopyElements(DataType::kString, full.raw_data(), (o * d + index) * inner,
                     part.mutable_raw_data(), o * count * inner, count * inner);
      }
      return;
    }
    const size_t elem = DataTypeSize(full.dtype());
    const size_t row = static_cast<size_t>(inner) * elem;
    const size_t chunk = row * static_cast<size_t>(count);
    const char* src = static_cast<const char*>(full.raw_data());
    char* dst = static_cast<char*>(part.mutable_raw_data());
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(dst + o * chunk, src + (o * d + index) * row, chunk);
    }
  }

  // Appends iteration `i`'s result to the output buffer, laid out as [iterations, slice...].
  // `max_bytes` (> 0) caps the concatenation's size: checked before the buffer grows.
  static absl::Status Append(const OutputPortInfo& out, int64_t i, const Value& result,
                             Shape& slice_shape, int64_t& max_rows, Tensor& buffer,
                             int64_t max_trip, int64_t max_bytes) {
    if (!result.is_tensor()) {
      return absl::UnimplementedError("a scan/concatenated output must be a tensor");
    }
    const Tensor& r = result.tensor();
    const size_t bytes = r.ByteSize();
    if (i > 0 && (r.shape() != slice_shape || r.dtype() != buffer.dtype())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "scan output changed from ", DataTypeName(buffer.dtype()), slice_shape.ToString(), " to ",
          DataTypeName(r.dtype()), r.shape().ToString(), " at iteration ", i,
          "; scan outputs must keep their shape"));
    }
    // Rows that fit under `max_bytes`, worked out once per execution (a division per iteration
    // costs more than the rest of a trivial body's append).
    if (i == 0) {
      max_rows = max_bytes > 0 && bytes > 0
                     ? static_cast<int64_t>(static_cast<uint64_t>(max_bytes) / bytes)
                     : std::numeric_limits<int64_t>::max();
    }
    if (i >= max_rows) {
      return LimitExceededError(
          LimitReason::kOutputBytes,
          absl::StrCat("concatenated output '", out.name, "' would exceed ", max_bytes,
                       " bytes (max_output_bytes) at iteration ", i));
    }
    if (r.dtype() == DataType::kString) return AppendStrings(i, r, slice_shape, buffer);
    if (i == 0) {
      slice_shape = r.shape();
      // Reserve for the known trip count when it is small; otherwise grow geometrically.
      const size_t slice_bytes = r.ByteSize();
      constexpr size_t kMaxUpfrontBytes = size_t{64} << 20;
      size_t reserve = slice_bytes * 4;
      if (max_trip != std::numeric_limits<int64_t>::max() && slice_bytes > 0 &&
          static_cast<size_t>(max_trip) <= kMaxUpfrontBytes / slice_bytes) {
        reserve = slice_bytes * static_cast<size_t>(max_trip);
      }
      // (Filled, not built from {1}: GCC 12 with -fsanitize warns maybe-uninitialized on that.)
      Shape::Dims dims(slice_shape.rank() + 1, 1);
      std::copy(slice_shape.dims().begin(), slice_shape.dims().end(), dims.begin() + 1);
      buffer.Resize(r.dtype(), Shape(dims));
      buffer.ResizeKeepingData(Shape(dims), reserve);
    } else if (static_cast<size_t>(i + 1) * bytes > buffer.capacity()) {
      // Growth (rare: doubling). In steady state the buffer's recorded shape is not touched; rows
      // land in its spare capacity and SetStackedRows records them. Record the i rows written so
      // far first, so the regrowth keeps them all.
      SetStackedRows(buffer, i);
      Shape shape = buffer.shape();
      shape[0] = i + 1;
      buffer.ResizeKeepingData(shape, static_cast<size_t>(i + 1) * bytes * 2);
    }
    if (bytes > 0) {
      AppendCopy(static_cast<char*>(buffer.mutable_raw_data()) + static_cast<size_t>(i) * bytes,
                 r.raw_data(), bytes);
    }
    return absl::OkStatus();
  }

  // Append for string elements: the buffer's recorded rows are always constructed strings, so it
  // grows row by row (its capacity still geometrically) and the row is copied by element.
  static absl::Status AppendStrings(int64_t i, const Tensor& r, Shape& slice_shape,
                                    Tensor& buffer) {
    Shape::Dims dims{i + 1};
    if (i == 0) slice_shape = r.shape();
    dims.insert(dims.end(), slice_shape.dims().begin(), slice_shape.dims().end());
    if (i == 0) {
      buffer.Resize(DataType::kString, Shape(dims));
    } else {
      const size_t need = static_cast<size_t>(i + 1) * r.ByteSize();
      buffer.ResizeKeepingData(Shape(dims), need > buffer.capacity() ? need * 2 : 0);
    }
    CopyElements(DataType::kString, r.raw_data(), 0, buffer.mutable_raw_data(), i * r.NumElements(),
                 r.NumElements());
    return absl::OkStatus();
  }

  // Copies one slice into the stacked buffer. Slices of kStreamingBytes or more bypass the cache
  // (non-temporal stores): the buffer is written once and not read again by the loop, and
  // streaming it keeps the body's weights and carried values in L2 instead of evicting them with
  // output lines (which an ordinary store also reads before writing).
  static void AppendCopy(char* dst, const void* src, size_t bytes) {
#if defined(__SSE2__)
    constexpr size_t kStreamingBytes = 4096;
    if (bytes >= kStreamingBytes && reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
      const auto* in = static_cast<const char*>(src);
      size_t done = 0;
      for (; done + 64 <= bytes; done += 64) {
        const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + done));
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + done + 16));
        const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + done + 32));
        const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + done + 48));
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + done), a);
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + done + 16), b);
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + done + 32), c);
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + done + 48), d);
      }
      _mm_sfence();
      if (done < bytes) std::memcpy(dst + done, in + done, bytes - done);
      return;
    }
#endif
    std::memcpy(dst, src, bytes);
  }

  // Records `rows` stacked slices in `buffer`'s shape; they must fit its capacity (no copy).
  static void SetStackedRows(Tensor& buffer, int64_t rows) {
    if (buffer.dim(0) == rows) return;
    Shape shape = buffer.shape();
    shape[0] = rows;
    buffer.ResizeKeepingData(shape, 0);
  }

  // Turns the stacked [n, slice...] buffer into the output's final layout.
  static absl::Status FinishConcat(const OutputPortInfo& out, const Shape& slice_shape, int64_t n,
                                   Tensor& buffer) {
    // Each iteration's part as laid out in the output: kConcat joins along `axis` of the result
    // (a rank-0 result counts as [1]); kStack along a new axis, a dim of 1 inserted there.
    Shape slice = slice_shape;
    int axis = 0;
    if (out.kind == OutputKind::kStack) {
      LS_ASSIGN_OR_RETURN(axis, NormalizeAxis(out.axis, slice_shape.rank() + 1));
      if (axis == 0 && out.stride > 0) return absl::OkStatus();  // already [n, slice...]
      Shape::Dims dims(slice_shape.dims().begin(), slice_shape.dims().end());
      dims.insert(dims.begin() + axis, 1);
      slice = Shape(dims);
    } else {
      if (slice.rank() == 0) slice = Shape{1};
      LS_ASSIGN_OR_RETURN(axis, NormalizeAxis(out.axis, slice.rank()));
    }
    Shape final_shape = slice;
    final_shape[axis] = slice[axis] * n;
    if (axis == 0 && out.stride > 0) {
      buffer.Reshape(final_shape);
      return absl::OkStatus();
    }
    Tensor joined(buffer.dtype(), final_shape);
    if (buffer.dtype() == DataType::kString) {
      const int64_t outer = slice.NumElements(0, axis);
      const int64_t chunk = slice.NumElements(axis, slice.rank());
      const int64_t slice_elements = slice.NumElements();
      for (int64_t it = 0; it < n; ++it) {
        const int64_t pos = out.stride > 0 ? it : n - 1 - it;
        for (int64_t o = 0; o < outer; ++o) {
          CopyElements(DataType::kString, buffer.raw_data(), it * slice_elements + o * chunk,
                       joined.mutable_raw_data(), (o * n + pos) * chunk, chunk);
        }
      }
      buffer = std::move(joined);
      return absl::OkStatus();
    }
    const size_t elem = DataTypeSize(buffer.dtype());
    const int64_t outer = slice.NumElements(0, axis);
    const size_t chunk = static_cast<size_t>(slice.NumElements(axis, slice.rank())) * elem;
    const size_t slice_bytes = static_cast<size_t>(slice.NumElements()) * elem;
    const char* src = static_cast<const char*>(buffer.raw_data());
    char* dst = static_cast<char*>(joined.mutable_raw_data());
    for (int64_t it = 0; it < n; ++it) {
      const int64_t pos = out.stride > 0 ? it : n - 1 - it;
      for (int64_t o = 0; o < outer; ++o) {
        std::memcpy(dst + (o * n + pos) * chunk, src + it * slice_bytes + o * chunk, chunk);
      }
    }
    buffer = std::move(joined);
    return absl::OkStatus();
  }

  // The output of a loop that ran zero times: declared dims with unknown ones as 0, and for a
  // stacked output a leading 0.
  static absl::Status EmptyLike(const OutputPortInfo& out, Tensor& t, bool stacked) {
    // A std::vector (cold path): GCC 12 with -fsanitize reports a false maybe-uninitialized on an
    // InlinedVector grown by push_back here.
    std::vector<int64_t> dims;
    if (out.declared.dims.has_value()) {
      for (int64_t d : *out.declared.dims) dims.push_back(d < 0 ? 0 : d);
    }
    if (stacked) {
      absl::StatusOr<int> axis = NormalizeAxis(out.axis, static_cast<int>(dims.size()) + 1);
      dims.insert(dims.begin() + (axis.ok() ? *axis : 0), 0);
    }
    if (!stacked && out.kind == OutputKind::kConcat) {
      if (dims.empty()) dims.push_back(0);
      absl::StatusOr<int> axis = NormalizeAxis(out.axis, static_cast<int>(dims.size()));
      dims[axis.ok() ? *axis : 0] = 0;
    }
    const DataType dtype =
        out.declared.dtype == DataType::kUndefined ? DataType::kFloat32 : out.declared.dtype;
    t.Resize(dtype, Shape(absl::MakeConstSpan(dims)));
    if (dtype != DataType::kString && t.ByteSize() > 0) {
      std::memset(t.mutable_raw_data(), 0, t.ByteSize());
    }
    return absl::OkStatus();
  }

  std::shared_ptr<const Plan> body_;
  std::shared_ptr<const LoopSpec> spec_;
  int loop_index_;
  int iteration_slot_ = -1;
  DataType iteration_dtype_ = DataType::kInt64;
  bool iteration_rank1_ = false;
  int condition_slot_ = -1;
  std::vector<std::pair<int, int>> invariant_;  // (node input, param slot)
  std::vector<SlicedPort> sliced_;
  std::vector<CarriedPort> carried_;
  std::vector<int> staged_index_;
  int num_staged_ = 0;
  std::vector<OutputPortInfo> outputs_;
  struct StreamedOutput {
    int port;          // index into outputs_
    int model_output;  // index into the model's outputs
  };
  std::vector<StreamedOutput> streamed_;  // top-level Loops only; model output order
  bool top_level_ = false;                // a Loop of the top-level graph (IterationObserver)
  mutable AdaptiveThreads adaptive_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateLoop(const KernelInit& init) {
  const Node& node = init.node();
  if (node.loop == nullptr) {
    return absl::InvalidArgumentError("Loop node has no port map (importer bug)");
  }
  std::shared_ptr<const Graph> body = node.GetGraph("body");
  if (body == nullptr) return absl::InvalidArgumentError("attribute 'body' is missing");
  LS_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, init.CompileSubgraph(body));
  const int loop_index = init.RegisterLoop(node.name);
  auto kernel = std::make_unique<LoopKernel>(std::move(plan), node.loop, loop_index);
  LS_RETURN_IF_ERROR(kernel->Init(node, init.graph()));
  kernel->RegisterStreamedOutputs(init);
  return kernel;
}

}  // namespace

const Plan* LoopBodyPlan(const Kernel& kernel) {
  const auto* loop = dynamic_cast<const LoopKernel*>(&kernel);
  return loop == nullptr ? nullptr : &loop->body();
}

void RegisterLoopKernel(KernelRegistry& registry) { registry.Register("Loop", CreateLoop); }

}  // namespace loopserve::engine
