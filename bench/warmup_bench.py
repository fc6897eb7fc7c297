#!/usr/bin/python3
"""First-request latency of a freshly loaded model, with and without model_warmup.

Usage: /usr/bin/python3 bench/warmup_bench.py --loopserve=build/bin/loopserve
           --models=build/bench/bench_models [--trials=10] [--steady=20] [--protoc=protoc]

The model is bench_models/rnn_dynamic: an RNN cell (256 wide, 100 Loop iterations) whose batch dim
is symbolic, so the engine can only make its oneDNN primitive (MatMul + bias + Tanh) when the first
request shows the batch size; its first run also faults in the 1.6 MB scan output. Two
repositories hold the same model: `cold` without a config, `warm` with a config.pbtxt whose
model_warmup sends the same shape (batch 16) before the version reports READY.

Each trial starts a fresh loopserve process (oneDNN's primitive cache is per process), waits until
it is ready and a gRPC connection is up (ServerReady), then times the first ModelInfer and
`--steady` more; cold and warm trials alternate. Printed: per mode the median over trials of the
first request, of the steady-state median, their ratio, and the time from start to ready (which
includes the warm-up); then one JSON line.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time

import numpy as np

np.float, np.int, np.bool, np.object = float, int, bool, object  # onnx 1.12 vs numpy 1.24
from onnx import numpy_helper  # noqa: E402

import grpc  # noqa: E402

# The Python integration tests' helpers: stubs from our protos, a loopserve on picked ports.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "integration"))
from loopserve_py import make_stubs, start_server  # noqa: E402
from bench_env import cpu_name  # noqa: E402

MODEL = "rnn_dynamic"
BATCH, HIDDEN, TRIPS = 16, 256, 100

WARM_CONFIG = """model_warmup [
  {
    name: "batch 16, 100 steps"
    inputs { key: "M" value: { data_type: TYPE_INT64 dims: [ ] input_data_file: "M" } }
    inputs { key: "cond" value: { data_type: TYPE_BOOL dims: [ ] input_data_file: "cond" } }
    inputs { key: "h0" value: { data_type: TYPE_FP32 dims: [ %d, %d ] random_data: true } }
  }
]
""" % (BATCH, HIDDEN)


def make_repositories(models, work):
    source = os.path.join(models, MODEL, "model.onnx")
    for mode in ("cold", "warm"):
        version = os.path.join(work, mode, MODEL, "1")
        os.makedirs(version)
        shutil.copy(source, os.path.join(version, "model.onnx"))
    warm = os.path.join(work, "warm", MODEL)
    with open(os.path.join(warm, "config.pbtxt"), "w") as f:
        f.write(WARM_CONFIG)
    os.makedirs(os.path.join(warm, "warmup"))
    with open(os.path.join(warm, "warmup", "M"), "wb") as f:
        f.write(np.array(TRIPS, np.int64).tobytes())
    with open(os.path.join(warm, "warmup", "cond"), "wb") as f:
        f.write(np.array(True).tobytes())


def request(pb):
    rng = np.random.default_rng(1)
    r = pb.ModelInferRequest(model_name=MODEL)
    for name, datatype, array in (("M", "INT64", np.array(TRIPS, np.int64)),
                                  ("cond", "BOOL", np.array(True)),
                                  ("h0", "FP32", rng.standard_normal((BATCH, HIDDEN))
                                   .astype(np.float32))):
        r.inputs.add(name=name, datatype=datatype, shape=array.shape)
        r.raw_input_contents.append(array.tobytes())
    return r


def trial(binary, repository, pb, pb_grpc, steady):
    start = time.monotonic()
    proc, ports = start_server(binary, ["--model_repository=" + repository, "--metrics_port=-1",
                                        "--model_control_mode=none"], kinds=("grpc",))
    port = ports["grpc"]
    try:
        channel = grpc.insecure_channel("127.0.0.1:%d" % port)
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        assert stub.ServerReady(pb.ServerReadyRequest(), timeout=30).ready
        assert stub.ModelReady(pb.ModelReadyRequest(name=MODEL), timeout=30).ready
        ready = time.monotonic() - start
        r = request(pb)
        times = []
        for _ in range(1 + steady):
            t0 = time.perf_counter()
            stub.ModelInfer(r, timeout=60)
            times.append(time.perf_counter() - t0)
        channel.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    return ready, times[0], statistics.median(times[1:])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--loopserve", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--steady", type=int, default=20)
    parser.add_argument("--protoc", default="protoc")
    args = parser.parse_args()
    repo_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    work = tempfile.mkdtemp(prefix="warmup_bench_")
    try:
        make_repositories(args.models, work)
        make_stubs(args.protoc, repo_root, os.path.join(work, "stubs"),
                   ["proto/grpc_service.proto", "proto/model_config.proto"])
        from proto import grpc_service_pb2 as pb, grpc_service_pb2_grpc as pb_grpc  # noqa: E402
        results = {"cold": [], "warm": []}
        for _ in range(args.trials):
            for mode in ("cold", "warm"):
                results[mode].append(trial(args.loopserve, os.path.join(work, mode), pb, pb_grpc,
                                           args.steady))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print("CPU: %s, %d cores; model %s (batch %d, hidden %d, %d iterations); %d trials" % (
        cpu_name(), os.cpu_count(), MODEL, BATCH, HIDDEN, TRIPS, args.trials))
    print("%-8s %14s %14s %12s %14s" % ("mode", "first req ms", "steady ms", "first/steady",
                                         "ready after ms"))
    summary = {"cpu": cpu_name(), "model": MODEL, "trials": args.trials}
    for mode in ("cold", "warm"):
        first = statistics.median(t[1] for t in results[mode]) * 1e3
        steady = statistics.median(t[2] for t in results[mode]) * 1e3
        ready = statistics.median(t[0] for t in results[mode]) * 1e3
        print("%-8s %14.2f %14.2f %12.2f %14.1f" % (mode, first, steady, first / steady, ready))
        summary[mode] = {"first_ms": round(first, 3), "steady_ms": round(steady, 3),
                         "ready_ms": round(ready, 1),
                         "first_all_ms": [round(t[1] * 1e3, 3) for t in results[mode]]}
    summary["first_cold_over_warm"] = round(summary["cold"]["first_ms"] /
                                            summary["warm"]["first_ms"], 2)
    print("first request without warm-up / with warm-up: %.2fx" % summary["first_cold_over_warm"])
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
