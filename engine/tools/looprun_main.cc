// looprun: runs a model in-process (benchmark / check against reference outputs) or a folder of
// ONNX backend-test cases. See engine/tools/looprun.h and engine/tools/conformance.h.

#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "engine/tools/conformance.h"
#include "engine/tools/looprun.h"

ABSL_FLAG(std::string, model, "",
          "Model to run: model.onnx, or model.xml with its .bin beside it.");
ABSL_FLAG(std::string, data, "",
          "Folder with input_<k>.pb (TensorProto / SequenceProto / OptionalProto, k in model input "
          "order) and optionally output_<k>.pb to compare against. Without it, inputs are zeros of "
          "the declared shapes (variable dims = 1).");
ABSL_FLAG(std::string, output_dir, "", "Where to write output_<k>.pb (created if missing).");
ABSL_FLAG(int, repeat, 1, "Timed runs.");
ABSL_FLAG(int, warmup, 0, "Untimed runs before the timed ones.");
ABSL_FLAG(int, threads, 0, "Intra-op threads (OpenMP); 0 = all cores.");
ABSL_FLAG(std::string, loop_threads, "adaptive",
          "With more than one intra-op thread, how Loop iterations use them: adaptive (time "
          "blocks of iterations with the team, with one thread and with one thread plus the "
          "SpinTeam (--loop_team), run the fastest, re-check as the load changes), intra_op "
          "(always the team) or one (always one thread, with the SpinTeam if --loop_team).");
ABSL_FLAG(bool, loop_team, true,
          "With more than one intra-op thread, while a Loop runs on one thread, split its larger "
          "products by rows over a team of our own that spins only while the Loop runs "
          "(false: plain one thread).");
ABSL_FLAG(std::string, precision, "fp32",
          "fp32 (default) or bf16: products with constant weights in bfloat16 (LoadOptions::"
          "precision); the JSON line then reports the largest deviation from an fp32 run.");
ABSL_FLAG(bool, force_precision, false,
          "With --precision=bf16: run on a CPU without native bf16 too (emulated, slow).");
ABSL_FLAG(bool, dump_plan, false,
          "Print every graph (Loop bodies included) before and after the graph optimizer, the "
          "rewrites that fired and the nodes the plan runs, then run as usual.");
ABSL_FLAG(bool, verbose, false,
          "Also print, on stderr, the vector ISA of the engine's kernels and the steps that ran "
          "float work on a reference kernel (reference_steps; also in the JSON line).");
ABSL_FLAG(bool, list_ops, false,
          "Print the op types of the built-in kernel table, one per line, and exit.");
ABSL_FLAG(bool, print_backend, false,
          "Print the back-end table the kernels use on this CPU (after --isa) and exit.");
ABSL_FLAG(std::string, isa, "",
          "Cap the vector ISA of the engine's kernels and oneDNN's: avx512, avx2 or scalar "
          "(default: the best the CPU has, or LOOPSERVE_MAX_ISA).");
ABSL_FLAG(std::string, conformance, "",
          "Run every test-case folder (model.onnx + test_data_set_*/, or EXPECT_ERROR / NO_DATA; "
          "an ATOL file sets the case's absolute tolerance, default 1e-7) under this folder, "
          "each in a forked child; prints PASS/FAIL per case and 'N passed, M failed'.");
ABSL_FLAG(std::string, list_file, "",
          "With --conformance: write 'name<TAB>pass|fail<TAB>reason' per case to this file.");
ABSL_FLAG(std::string, filter, "", "With --conformance: only cases whose name matches this regex.");
ABSL_FLAG(int, jobs, 1, "With --conformance: cases run at the same time.");
ABSL_FLAG(absl::Duration, case_timeout, absl::Seconds(20),
          "With --conformance: a case still running after this long fails as timed out.");

int main(int argc, char** argv) {
  loopserve::engine::UsePassiveOpenMpWait(argv);
  absl::SetProgramUsageMessage(
      "looprun --model=FILE [--data=DIR] [--output_dir=DIR] [--repeat=N] [--warmup=N] "
      "[--threads=N] [--loop_threads=adaptive|intra_op|one] [--precision=fp32|bf16] [--dump_plan] "
      "[--verbose] [--isa=avx512|avx2|scalar]\n  looprun --print_backend [--isa=...]\n  looprun "
      "--conformance=DIR [--list_file=PATH] "
      "[--filter=REGEX] "
      "[--jobs=N] [--case_timeout=20s] [--threads=N]");
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    std::cerr << "looprun: unexpected argument '" << positional[1] << "' (see --help)" << std::endl;
    return loopserve::tools::kExitError;
  }
  if (!absl::GetFlag(FLAGS_isa).empty()) {
    const absl::Status capped = loopserve::engine::SetVectorIsaCap(absl::GetFlag(FLAGS_isa));
    if (!capped.ok()) {
      std::cerr << "looprun: --isa: " << capped.message() << std::endl;
      return loopserve::tools::kExitError;
    }
  }
  if (absl::GetFlag(FLAGS_print_backend)) {
    std::cout << loopserve::engine::DescribeActiveBackend();
    return loopserve::tools::kExitOk;
  }
  if (absl::GetFlag(FLAGS_list_ops)) {
    for (const std::string& op : loopserve::engine::RegisteredOpTypes()) std::cout << op << "\n";
    return loopserve::tools::kExitOk;
  }
  loopserve::engine::SetIntraOpThreads(absl::GetFlag(FLAGS_threads));

  if (!absl::GetFlag(FLAGS_conformance).empty()) {
    loopserve::tools::ConformanceOptions options;
    options.dir = absl::GetFlag(FLAGS_conformance);
    options.list_file = absl::GetFlag(FLAGS_list_file);
    options.filter = absl::GetFlag(FLAGS_filter);
    options.jobs = absl::GetFlag(FLAGS_jobs);
    options.case_timeout = absl::GetFlag(FLAGS_case_timeout);
    return loopserve::tools::RunConformanceMain(options);
  }
  if (absl::GetFlag(FLAGS_model).empty()) {
    std::cerr << "looprun: pass --model=FILE or --conformance=DIR (see --help)" << std::endl;
    return loopserve::tools::kExitError;
  }
  loopserve::tools::RunModelOptions options;
  options.model = absl::GetFlag(FLAGS_model);
  options.data = absl::GetFlag(FLAGS_data);
  options.output_dir = absl::GetFlag(FLAGS_output_dir);
  options.repeat = absl::GetFlag(FLAGS_repeat);
  options.warmup = absl::GetFlag(FLAGS_warmup);
  options.dump_plan = absl::GetFlag(FLAGS_dump_plan);
  options.precision = absl::GetFlag(FLAGS_precision);
  options.force_precision = absl::GetFlag(FLAGS_force_precision);
  options.verbose = absl::GetFlag(FLAGS_verbose);
  options.loop_threads = absl::GetFlag(FLAGS_loop_threads);
  options.loop_team = absl::GetFlag(FLAGS_loop_team);
  return loopserve::tools::RunModelMain(options);
}
