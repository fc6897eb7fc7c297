#pragma once

// `looprun --conformance=DIR`: runs every test-case folder under DIR in the ONNX backend-test
// layout, each in its own forked child with a timeout, so that a crash or a hang in one case
// fails that case instead of the run.

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace loopserve::tools {

struct ConformanceOptions {
  std::string dir;        // searched recursively for case folders
  std::string list_file;  // if set: one line per case, "name<TAB>pass|fail<TAB>reason"
  std::string filter;     // if set: only cases whose name (path under dir) matches this regex
  int jobs = 1;           // cases run at the same time
  absl::Duration case_timeout = absl::Seconds(20);
};

// The verdict on one case folder.
struct CaseResult {
  bool passed = false;
  std::string reason;  // why it failed (one line); empty when it passed
};

// Runs one case in this process (no isolation). A case folder holds model.onnx (or model.xml) and
// any of:
//   test_data_set_<k>/  input_<i>.pb and output_<j>.pb: every data set must run and match;
//   EXPECT_ERROR        loading or running (on the data sets' inputs) must return an error;
//   NO_DATA, or no data sets at all: the model must load;
//   ATOL                a number: the absolute tolerance of this case's float comparisons in place
//                       of 1e-7 (for a reference in double precision that float32 rounding alone
//                       can miss by more, e.g. an output near 0 after cancellation).
CaseResult RunCase(const std::string& case_dir);

using CaseRunner = std::function<CaseResult(const std::string& case_dir)>;
using CaseReporter = std::function<void(size_t index, const CaseResult& result)>;

// Runs `run_case(cases[i])` for every case, each in a forked child (at most `jobs` at a time), and
// calls `report(i, result)` in the parent in index order as results become available. A child that
// dies on a signal fails with "crashed (signal N)", one still running after `timeout` is killed and
// fails with "timed out (...)". The child's stdout is redirected to stderr. Not thread-safe (forks;
// reaps only its own children). Internal for fork/pipe/poll failures.
absl::Status RunIsolated(const std::vector<std::string>& cases, int jobs, absl::Duration timeout,
                         const CaseRunner& run_case, const CaseReporter& report);

// Finds the cases, runs them (RunCase in forked children), prints "PASS name" / "FAIL name: reason"
// per case in name order and then "N passed, M failed" on stdout, and writes the list file.
// Returns kExitOk when every case passed, kExitMismatch when some failed, kExitError when DIR or
// the list file cannot be used or the filter is not a valid regex.
int RunConformanceMain(const ConformanceOptions& options);

}  // namespace loopserve::tools
