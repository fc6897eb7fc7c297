#!/usr/bin/env bash
# Installs everything loopserve needs to build and test, from Debian bookworm's packages only.
# Used by the README's commands (through deploy/dev.sh), by CI and by the container build, so all
# three install the same things. Pass --build for only what building the binaries needs (the
# container's build stage), --runtime for only what the server needs at run time.
set -euo pipefail

# What building loopserve and loopctl and generating the example models need (the container
# image's build stage installs only these: deploy/install_deps.sh --build).
BUILD_PACKAGES=(
  build-essential cmake ninja-build pkgconf
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libdnnl-dev libsleef-dev ocl-icd-opencl-dev prometheus-cpp-dev libpugixml-dev libonnx-dev
  libevhtp-dev libevent-dev libonig-dev libssl-dev libsimdjson-dev rapidjson-dev
  libcurl4-openssl-dev
  python3-onnx python3-numpy
)
# What the tests, benchmarks and format checks add.
TEST_PACKAGES=(
  clang-format libgtest-dev libgmock-dev libbenchmark-dev
  # The sanitizer stage of deploy/dev.sh: clang, its ASan/UBSan runtimes, libFuzzer.
  clang libclang-rt-14-dev libfuzzer-14-dev
  libcivetweb-dev nlohmann-json3-dev
  python3-grpcio python3-requests libonnx-testdata curl openssl
  prometheus python3-yaml
  # tests/deploy/scale_out_test.py: three replicas behind HAProxy.
  haproxy
  # Triton's Python client (../shared/tritonclient) and its examples (issue 32).
  python3-rapidjson python3-gevent python3-geventhttpclient python3-packaging python3-aiohttp
  # tests/deploy/container_image_test.py builds deploy/Dockerfile and runs the image: podman and
  # buildah (rootless use needs uidmap, fuse-overlayfs, slirp4netns), mmdebstrap for the base
  # image, iproute2 for the test's network namespace.
  podman buildah mmdebstrap uidmap fuse-overlayfs slirp4netns iproute2
)
RUNTIME_PACKAGES=(
  libgrpc++1.51 libgrpc29 libprotobuf32 libdnnl2 ocl-icd-libopencl1 libprometheus-cpp-core1.0
  libpugixml1v5 libonnx1 libgomp1
  libabsl20220623 libc-ares2 libre2-9 libssl3 libsleef3
  libevhtp0 libevent-2.1-7 libevent-core-2.1-7 libevent-openssl-2.1-7 libevent-pthreads-2.1-7
  libonig5 libsimdjson14
  libcurl4 libbrotli1 libgssapi-krb5-2 libk5crypto3 libkeyutils1 libkrb5-3 libkrb5support0
  libldap-2.5-0 libnghttp2-14 libpsl5 librtmp1 libsasl2-2 libssh2-1
)

case "${1:-}" in
  "") packages=("${BUILD_PACKAGES[@]}" "${TEST_PACKAGES[@]}") ;;
  --build) packages=("${BUILD_PACKAGES[@]}") ;;
  --runtime) packages=("${RUNTIME_PACKAGES[@]}") ;;
  *) echo "usage: deploy/install_deps.sh [--build|--runtime]" >&2; exit 2 ;;
esac

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
