#pragma once

#include <cstdint>

// Calls of any global operator new so far in this test binary (operator_new_counter.cc replaces
// them all). Link operator_new_counter.cc into a test binary to use it.
int64_t OperatorNewCount();
