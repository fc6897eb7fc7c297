#include "engine/kernels/registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace loopserve::engine {
namespace {

std::string RangeText(int min_opset, int max_opset) {
  return max_opset == KernelRegistry::kMaxOpset
             ? absl::StrCat("[", min_opset, ", ...]")
             : absl::StrCat("[", min_opset, ", ", max_opset, "]");
}

}  // namespace

void KernelRegistry::Register(const std::string& op_type, KernelFactory factory, int min_opset,
                              int max_opset) {
  std::vector<Entry>& entries = entries_[op_type];
  for (const Entry& e : entries) {
    if (min_opset <= e.max_opset && e.min_opset <= max_opset) {
      if (status_.ok()) {
        status_ = absl::InternalError(absl::StrCat(
            "kernel registry: op '", op_type, "' registered twice for overlapping opsets ",
            RangeText(e.min_opset, e.max_opset), " and ", RangeText(min_opset, max_opset)));
      }
      return;
    }
  }
  entries.push_back(Entry{min_opset, max_opset, std::move(factory)});
}

const KernelFactory* KernelRegistry::Find(const std::string& op_type, int opset) const {
  auto it = entries_.find(op_type);
  if (it == entries_.end()) return nullptr;
  for (const Entry& e : it->second) {
    if (opset >= e.min_opset && opset <= e.max_opset) return &e.factory;
  }
  return nullptr;
}

std::vector<std::string> KernelRegistry::OpTypes() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const auto& [name, entries] : entries_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

const KernelRegistry& KernelRegistry::Builtin() {
  static const KernelRegistry* registry = [] {
    auto* r = new KernelRegistry();
    RegisterBuiltinKernels(*r);
    return r;
  }();
  return *registry;
}

}  // namespace loopserve::engine
