#!/usr/bin/env bash
# A long run of one fuzz target (README.md, "Commands"), with one summary line at the end:
#   tests/fuzz/long_run.sh TARGET [SECONDS] [BUILD_DIR] [SEED_DIR]
# SECONDS defaults to 600, BUILD_DIR to build-sanitize (a -DLOOPSERVE_FUZZ=ON build), SEED_DIR to
# BUILD_DIR/tests/fuzz/seeds/TARGET (ctest's fuzz_seeds writes it). The corpus grows in
# BUILD_DIR/tests/fuzz/corpus/TARGET; the log is BUILD_DIR/tests/fuzz/TARGET.log. A crash leaves
# its input as BUILD_DIR/tests/fuzz/crash-* (copy it to regressions/TARGET/ once fixed).
set -euo pipefail
cd "$(dirname "$0")/../.."

target=${1:?usage: tests/fuzz/long_run.sh TARGET [SECONDS] [BUILD_DIR] [SEED_DIR]}
seconds=${2:-600}
build=${3:-build-sanitize}
seeds=$(realpath "${4:-$build/tests/fuzz/seeds/$target}")
out=$build/tests/fuzz
corpus=$out/corpus/$target
mkdir -p "$corpus"
log=$out/$target.log

status=0
(cd "$out" &&
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "../../bin/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 "corpus/$target" "$seeds") >"$log" 2>&1 ||
  status=$?

stat() { grep -m1 "^stat::$1:" "$log" | awk '{print $2}'; }
last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
echo "$target: exit $status, ${seconds} s, $(stat number_of_executed_units) runs," \
  "$(stat average_exec_per_sec) execs/s, corpus $(find "$corpus" -type f | wc -l) files" \
  "($(du -sh "$corpus" | cut -f1)), peak RSS $(stat peak_rss_mb) MB;" \
  "last: $(echo "$last" | grep -oE 'cov: [0-9]+ ft: [0-9]+' || true)"
exit "$status"
