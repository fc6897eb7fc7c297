"""What the Python integration tests share: stubs generated from our protos, a loopserve process
on kernel-picked ports, the Open Inference Protocol datatype table and the test models' numpy
expected cases."""

import argparse
import os
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np

np.float, np.int, np.bool, np.object = float, int, bool, object  # onnx 1.12 vs numpy 1.24

# Open Inference Protocol datatype <-> numpy dtype (the fixed-size ones; BYTES is handled apart).
DTYPES = {"FP32": np.float32, "FP64": np.float64, "INT64": np.int64, "INT32": np.int32,
          "INT16": np.int16, "INT8": np.int8, "UINT8": np.uint8, "UINT16": np.uint16,
          "UINT32": np.uint32, "UINT64": np.uint64, "BOOL": np.bool_}
OIP = {v: k for k, v in DTYPES.items()}


def read_case(case_dir):
    """([(name, array)] inputs, [(name, array)] outputs) of a case folder written by the model
    generators (input_<k>.pb, output_<k>.pb: ONNX TensorProtos computed with numpy)."""
    import onnx
    from onnx import numpy_helper

    def read(path):
        t = onnx.TensorProto()
        with open(path, "rb") as f:
            t.ParseFromString(f.read())
        return t.name, numpy_helper.to_array(t)

    inputs, outputs = [], []
    for prefix, into in (("input", inputs), ("output", outputs)):
        k = 0
        while os.path.exists(os.path.join(case_dir, "%s_%d.pb" % (prefix, k))):
            into.append(read(os.path.join(case_dir, "%s_%d.pb" % (prefix, k))))
            k += 1
    return inputs, outputs


def make_stubs(protoc, repo_root, work, protos):
    """Generates Python messages and gRPC stubs for `protos` (paths under repo_root, e.g.
    "proto/grpc_service.proto") into `work` with protoc and Debian's grpc_python_plugin, and puts
    `work` on sys.path (import them as `from proto import grpc_service_pb2`)."""
    os.makedirs(work, exist_ok=True)
    subprocess.run([protoc, "-I", repo_root, "--python_out=" + work, "--grpc_python_out=" + work,
                    "--plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin"] +
                   [os.path.join(repo_root, p) for p in protos], check=True)
    sys.path.insert(0, work)


def parse_test_args(loopctl=False,
                    protos=("proto/grpc_service.proto", "proto/model_config.proto")):
    """Parses the command line CMake gives a Python integration test (--loopserve, --models,
    --repo_root, --work, --protoc; --loopctl when `loopctl`), makes --work and generates the stubs
    of `protos` into it (make_stubs). Returns the parsed arguments."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--loopserve", required=True)
    if loopctl:
        parser.add_argument("--loopctl", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--repo_root", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--protoc", default="protoc")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    make_stubs(args.protoc, args.repo_root, args.work, list(protos))
    return args


def start_server(binary, flags, kinds=("grpc", "metrics"), timeout=60, stderr=None):
    """Starts `binary --address=127.0.0.1 --grpc_port=0 ...flags` and reads the ports it prints
    ("loopserve: <kind> listening on <address>:<port>") for every kind in `kinds`. Returns
    (process, {kind: port}); kills the process and raises if they do not come within `timeout`.
    The server's stderr goes to `stderr` (an open file) if given, else to /dev/null."""
    proc = subprocess.Popen([binary, "--address=127.0.0.1", "--grpc_port=0", "--http_port=0"] + list(flags),
                            stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL if stderr is None else stderr, text=True)
    ports = {}
    timer = threading.Timer(timeout, proc.kill)  # bounded wait for the port lines
    timer.start()
    for line in proc.stdout:
        for kind in kinds:
            prefix = "loopserve: %s listening on " % kind
            if line.startswith(prefix):
                ports[kind] = int(line.strip().rsplit(":", 1)[1])
        if len(ports) == len(kinds):
            break
    timer.cancel()
    if len(ports) != len(kinds):
        proc.kill()
        raise RuntimeError("loopserve did not report its ports")
    return proc, ports


class Checks:
    """How many check() calls a test made (its closing line prints the count)."""
    count = 0


def check(condition, message):
    """One assertion of an integration test: counted, AssertionError(message) when false."""
    Checks.count += 1
    if not condition:
        raise AssertionError(message)


class Metrics:
    """A loopserve /metrics endpoint on 127.0.0.1, read as Prometheus text. With strict=True,
    wait_for raises AssertionError when the value is not reached in time."""

    def __init__(self, port, seconds=10, strict=False):
        self.url = "http://127.0.0.1:%d/metrics" % port
        self.seconds = seconds
        self.strict = strict

    def value(self, name, **labels):
        """Sum of the samples of `name` whose labels include `labels`."""
        text = urllib.request.urlopen(self.url, timeout=10).read().decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith("#") or line.split("{", 1)[0].split(" ", 1)[0] != name:
                continue
            if all('%s="%s"' % (k, v) in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def wait_for(self, name, want, seconds=None, **labels):
        """Polls until `name` (summed over `labels`) equals `want`; returns the last value."""
        deadline = time.time() + (self.seconds if seconds is None else seconds)
        while time.time() < deadline:
            got = self.value(name, **labels)
            if got == want:
                return got
            time.sleep(0.005)
        got = self.value(name, **labels)
        if self.strict and got != want:
            raise AssertionError("%s%s: %s, expected %s" % (name, labels, got, want))
        return got


def rss_bytes(pid):
    """The resident set of process `pid`, in bytes."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")
