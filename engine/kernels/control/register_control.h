#pragma once

#include "engine/runtime/kernel_registry.h"

namespace loopserve::engine {

void RegisterLoopKernel(KernelRegistry& registry);  // loop.cc
void RegisterIfKernel(KernelRegistry& registry);    // if.cc

}  // namespace loopserve::engine
