#pragma once

#include "engine/kernels/registry.h"

namespace loopserve::engine {

void RegisterLoopKernel(KernelRegistry& registry);  // loop.cc
void RegisterIfKernel(KernelRegistry& registry);    // if.cc

}  // namespace loopserve::engine
