#!/usr/bin/env bash
# The README's two commands:
#   deploy/dev.sh serve   install (apt), build, generate the example models, start loopserve
#   deploy/dev.sh test    install (apt), build, run the whole test suite (ctest)
# Environment: BUILD_DIR (default build), GRPC_PORT (8001), METRICS_PORT (8002), JOBS (nproc).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}

deploy/install_deps.sh
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
    ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS"
    ;;
  *)
    echo "usage: deploy/dev.sh serve|test" >&2
    exit 2
    ;;
esac
