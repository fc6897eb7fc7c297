#include "engine/runtime/kernel_registry.h"

namespace loopserve::engine {

void KernelRegistry::Register(const std::string& op_type, KernelFactory factory, int min_opset,
                              int max_opset) {
  entries_[op_type].push_back(Entry{min_opset, max_opset, std::move(factory)});
}

const KernelFactory* KernelRegistry::Find(const std::string& op_type, int opset) const {
  auto it = entries_.find(op_type);
  if (it == entries_.end()) return nullptr;
  for (auto e = it->second.rbegin(); e != it->second.rend(); ++e) {
    if (opset >= e->min_opset && opset <= e->max_opset) return &e->factory;
  }
  return nullptr;
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
