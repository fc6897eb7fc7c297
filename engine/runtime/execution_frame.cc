#include "engine/runtime/execution_frame.h"

#include <new>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"

namespace loopserve::engine {

ExecutionFrame::ExecutionFrame(const Plan& plan, RunContext& context)
    : plan_(plan),
      context_(&context),
      slots_(plan.num_slots()),
      released_capacity_(plan.num_slots(), 0),
      states_(plan.steps().size()) {
  for (const auto& [id, tensor] : plan.graph().constants) {
    slots_[id].mutable_tensor() = Tensor::ViewOf(*tensor);
  }
  for (size_t s = 0; s < states_.size(); ++s) states_[s] = plan.steps()[s].kernel->CreateState();
}

ExecutionFrame::~ExecutionFrame() = default;

void ExecutionFrame::ReleaseRequestValues() {
  for (const ValueId id : plan_.graph().inputs) slots_[id] = Value();
  for (size_t i = 0; i < slots_.size(); ++i) {
    Value& v = slots_[i];
    if (plan_.is_produced(static_cast<int>(i)) && v.is_tensor() && v.tensor().is_view()) {
      v = Value();
    }
  }
}

namespace {

bool HoldsStrings(const Value& v) {
  if (v.is_tensor()) return v.tensor().dtype() == DataType::kString;
  return v.is_sequence() && !v.sequence().empty() &&
         v.sequence().front().dtype() == DataType::kString;
}

bool NoStringInputs(const Step& step, const ExecutionFrame& frame) {
  for (const int32_t slot : step.inputs) {
    if (slot >= 0 && HoldsStrings(frame.slot(slot))) return false;
  }
  return true;
}

// Kernels that accept sequences and optionals (also empty optionals, kNone) are not checked.
inline bool InputsAreTensors(const Step& step, const ExecutionFrame& frame) {
  if (step.reject_strings && !NoStringInputs(step, frame)) return false;
  if (!step.tensor_inputs_only) return true;
  for (const int32_t slot : step.inputs) {
    if (slot >= 0 && !frame.slot(slot).is_tensor()) return false;
  }
  return true;
}

absl::Status InputError(const Step& step, const ExecutionFrame& frame) {
  for (size_t i = 0; i < step.inputs.size(); ++i) {
    const int slot = step.inputs[i];
    if (slot < 0) continue;
    const Value& v = frame.slot(slot);
    const std::string& name = frame.plan().graph().ValueName(slot);
    if (step.reject_strings && HoldsStrings(v)) {
      return absl::UnimplementedError(
          absl::StrCat("input ", i, " ('", name, "') holds strings, which this op does not take"));
    }
    if (v.is_tensor() || !step.tensor_inputs_only) continue;
    if (v.is_none()) {
      return absl::InvalidArgumentError(
          absl::StrCat("input ", i, " ('", name, "') has no value (an empty optional?)"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("input ", i, " ('", name, "') is a sequence where a tensor is expected"));
  }
  return absl::OkStatus();
}

}  // namespace

void ExecutionFrame::TakeRecycled(const Step& step) {
  for (const int32_t slot : step.outputs) {
    const size_t wanted = released_capacity_[slot];
    if (wanted == 0 || recycled_.empty()) continue;
    Value& v = slots_[slot];
    if (v.is_sequence() || (v.is_tensor() && v.tensor().capacity() > 0)) continue;
    recycled_.TakeInto(wanted, [&v](Tensor&& buffer) { v.mutable_tensor() = std::move(buffer); });
  }
}

void ExecutionFrame::Recycle(const Step& step) {
  for (const int32_t slot : step.releases) {
    Value& v = slots_[slot];
    // Owned tensors only: a view's memory is someone else's, and a string tensor's buffer holds
    // constructed objects.
    if (!v.is_tensor() || v.tensor().capacity() == 0 || v.tensor().dtype() == DataType::kString) {
      continue;
    }
    released_capacity_[slot] = v.tensor().capacity();
    recycled_.Put(std::move(v.mutable_tensor()));
  }
}

absl::Status ExecutionFrame::Run(bool check_interrupts) {
  const std::vector<Step>& steps = plan_.steps();
  for (size_t s = 0; s < steps.size(); ++s) {
    const Step& step = steps[s];
    if (check_interrupts) LS_RETURN_IF_ERROR(context_->CheckInterrupted());
    absl::Status status;
    if (!InputsAreTensors(step, *this)) {
      status = InputError(step, *this);
    } else {
      if (!recycled_.empty()) TakeRecycled(step);
      KernelContext ctx(*this, step, states_[s].get(), slots_.data());
      try {
        status = step.kernel->Run(ctx);
      } catch (const MemoryBudgetExceeded& e) {
        status = LimitExceededError(LimitReason::kMemory,
                                    absl::StrCat(e.what(), " (max_request_memory_bytes)"));
      } catch (const std::bad_alloc&) {
        status = absl::ResourceExhaustedError("out of memory");
      } catch (const std::exception& e) {
        // Kernels convert their libraries' exceptions (dnnl::error) themselves; this is the net.
        status = absl::InternalError(e.what());
      }
    }
    if (!status.ok()) {
      // Interruptions pass through unlabelled so every level reports the same plain reason.
      if (status.code() == absl::StatusCode::kCancelled ||
          status.code() == absl::StatusCode::kDeadlineExceeded) {
        return status;
      }
      return Annotate(status, step.label);
    }
    if (!step.releases.empty()) Recycle(step);
  }
  return absl::OkStatus();
}

}  // namespace loopserve::engine
