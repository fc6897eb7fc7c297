#!/usr/bin/env bash
# Installs everything loopserve needs to build and test, from Debian bookworm's packages only.
# Used by the README's commands (through deploy/dev.sh), by CI and by the container build, so all
# three install the same things. Pass --runtime for only what the server needs at run time.
set -euo pipefail

BUILD_PACKAGES=(
  build-essential cmake ninja-build pkgconf clang-format
  clang libclang-rt-14-dev libfuzzer-14-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libdnnl-dev libsleef-dev ocl-icd-opencl-dev prometheus-cpp-dev libpugixml-dev libonnx-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-onnx python3-numpy python3-grpcio
  libonnx-testdata curl openssl
  prometheus python3-yaml
)
RUNTIME_PACKAGES=(
  libgrpc++1.51 libgrpc29 libprotobuf32 libdnnl2 ocl-icd-libopencl1 libprometheus-cpp-core1.0
  libprometheus-cpp-pull1.0 libpugixml1v5 libonnx1 libgomp1
  libabsl20220623 libc-ares2 libcivetweb1 libre2-9 libssl3 libsleef3
)

packages=("${BUILD_PACKAGES[@]}")
if [[ "${1:-}" == "--runtime" ]]; then packages=("${RUNTIME_PACKAGES[@]}"); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install_deps: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "install_deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
