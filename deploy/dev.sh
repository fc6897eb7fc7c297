#!/usr/bin/env bash
# The README's commands:
#   deploy/dev.sh serve     install (apt), build, generate the example models, start loopserve
#   deploy/dev.sh test      install (apt), build, run the whole test suite (ctest), then the
#                           sanitizer stage below (skip it with SANITIZE=0)
#   deploy/dev.sh sanitize  install (apt), then only the sanitizer stage: a clang build with
#                           AddressSanitizer + UndefinedBehaviorSanitizer + libFuzzer in
#                           $SANITIZE_BUILD_DIR, the unit, integration and hostile tests under it,
#                           and a bounded run of every fuzz target (tests/fuzz/README.md)
# Environment: BUILD_DIR (default build), SANITIZE_BUILD_DIR (build-sanitize), GRPC_PORT (8001),
# METRICS_PORT (8002), JOBS (nproc), SANITIZE (1), FUZZ_SECONDS (30 per target).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
SANITIZE_BUILD_DIR=${SANITIZE_BUILD_DIR:-build-sanitize}
JOBS=${JOBS:-$(nproc)}
TEST_TIMEOUT=${TEST_TIMEOUT:-300}

sanitize_stage() {
  local start=$SECONDS
  cmake -S . -B "$SANITIZE_BUILD_DIR" -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DLOOPSERVE_SANITIZE=address,undefined -DLOOPSERVE_FUZZ=ON -DLOOPSERVE_BUILD_BENCH=OFF \
    -DLOOPSERVE_FUZZ_SECONDS="${FUZZ_SECONDS:-30}"
  cmake --build "$SANITIZE_BUILD_DIR" -j "$JOBS"
  echo "sanitizer build: $((SECONDS - start)) s"
  # halt_on_error: the first report fails the test; detect_leaks: LeakSanitizer at exit.
  # The conformance suites and the deploy checks run in the plain build only.
  ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$SANITIZE_BUILD_DIR" --output-on-failure -j "$JOBS" -LE "conformance|deploy" \
      --repeat until-pass:2 --timeout "$TEST_TIMEOUT"
  echo "sanitizer stage: $((SECONDS - start)) s"
}

deploy/install_deps.sh
if [[ "${1:-}" == "sanitize" ]]; then
  sanitize_stage
  exit 0
fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD_DIR" -j "$JOBS"

case "${1:-}" in
  serve)
    /usr/bin/python3 deploy/make_example_models.py deploy/models
    exec "$BUILD_DIR/bin/loopserve" --model_repository=deploy/models \
      --http_port="${HTTP_PORT:-8000}" --grpc_port="${GRPC_PORT:-8001}" \
      --metrics_port="${METRICS_PORT:-8002}"
    ;;
  test)
    # A test that fails is run once more before it counts as failed (here and in the sanitizer
    # stage): some tests bound wall-clock times (a deadline met within 300 ms, a worker freed within
    # 0.6 s) and the container build runs beside them on the same two cores. Both attempts' output
    # is printed. A test without a time limit of its own is stopped after $TEST_TIMEOUT seconds
    # (the slowest take ~30 s), so that a hang costs minutes, not ctest's default 25 minutes per
    # attempt against CI's 90-minute limit.
    ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" --repeat until-pass:2 \
      --timeout "$TEST_TIMEOUT"
    if [[ "${SANITIZE:-1}" != "0" ]]; then sanitize_stage; fi
    ;;
  *)
    echo "usage: deploy/dev.sh serve|test|sanitize" >&2
    exit 2
    ;;
esac
