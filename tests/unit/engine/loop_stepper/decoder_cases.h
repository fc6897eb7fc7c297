#pragma once

// The LoopStepper's greedy decoder (make_stepper_models.py, decoder_rows) and what numpy says each
// of its test requests gives (expected.txt, never loopserve's output): shared by the engine's
// LoopStepper tests and the server's IterationBatcher tests. The including file defines
// LOOPSERVE_STEPPER_MODELS_DIR (the build does).

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace loopserve::decoder_cases {

constexpr int kHidden = 16;

// One request of the decoder and its expected results.
struct Case {
  int64_t m = 0;
  int64_t budget = 0;
  int64_t tok0 = 0;
  std::vector<float> h0;
  std::vector<int64_t> tokens;  // expected
  std::vector<float> h_final;   // expected
};

inline std::vector<Case> ReadCases() {
  std::ifstream in(std::string(LOOPSERVE_STEPPER_MODELS_DIR) + "/decoder_rows/expected.txt");
  int rows = 0, hidden = 0;
  in >> rows >> hidden;
  EXPECT_EQ(hidden, kHidden);
  std::vector<Case> cases(rows);
  for (Case& c : cases) {
    int64_t t = 0;
    in >> c.m >> c.budget >> c.tok0 >> t;
    c.h0.resize(hidden);
    for (float& v : c.h0) in >> v;
    c.tokens.resize(t);
    for (int64_t& v : c.tokens) in >> v;
    c.h_final.resize(hidden);
    for (float& v : c.h_final) in >> v;
  }
  EXPECT_TRUE(in) << "expected.txt is truncated";
  return cases;
}

}  // namespace loopserve::decoder_cases
