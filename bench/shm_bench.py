#!/usr/bin/python3
"""A 64 MB tensor through system shared memory against binary REST and gRPC (issue 32).

Usage: /usr/bin/python3 bench/shm_bench.py --loopserve=build/bin/loopserve
           [--tritonclient=../shared/tritonclient] [--mb=64] [--rounds=7]

The model is an FP32 Identity on a [N] tensor (N = mb MiB / 4), written into a temporary
repository. One loopserve serves both ports; the client is Triton's own Python client
(tritonclient), as a Triton user would call it, in three modes, alternating within each round:
  grpc         ModelInfer, input in raw_input_contents, output in raw_output_contents
  http-binary  POST .../infer with Triton's binary tensor data extension (input and output)
  shm          input and output in registered system shared-memory regions (only names,
               offsets and sizes on the wire)
Each request's output is checked against its input (an identity). Printed: the median latency
per mode over the rounds, and each mode's ratio to shm; then one JSON line.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

np.float, np.int, np.bool, np.object = float, int, bool, object  # onnx 1.12 vs numpy 1.24
import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))
from loopserve_py import start_server  # noqa: E402
from bench_env import cpu_name, load_average  # noqa: E402


def write_model(root):
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "identity",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    os.makedirs(os.path.join(root, "identity", "1"))
    onnx.save(model, os.path.join(root, "identity", "1", "model.onnx"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--loopserve", required=True)
    parser.add_argument("--tritonclient",
                        default=os.path.join(os.path.dirname(HERE), "..", "shared", "tritonclient"))
    parser.add_argument("--mb", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(args.tritonclient, "lib"))
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    import tritonclient.utils.shared_memory as shm

    n = args.mb * (1 << 20) // 4
    data = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    size = data.nbytes
    work = tempfile.mkdtemp(prefix="shm_bench_")
    write_model(os.path.join(work, "models"))
    max_bytes = 4 * size + (1 << 20)
    proc, ports = start_server(args.loopserve, ["--model_repository=" + os.path.join(work, "models"),
                                                "--metrics_port=-1",
                                                "--max_message_bytes=%d" % max_bytes],
                               kinds=("grpc", "http"))
    g = grpcclient.InferenceServerClient(url="127.0.0.1:%d" % ports["grpc"])
    h = httpclient.InferenceServerClient(url="127.0.0.1:%d" % ports["http"],
                                         network_timeout=300, connection_timeout=300)
    key_in, key_out = "/shm_bench_in_%d" % os.getpid(), "/shm_bench_out_%d" % os.getpid()
    ip = shm.create_shared_memory_region("in", key_in, size)
    op = shm.create_shared_memory_region("out", key_out, size)
    try:
        g.unregister_system_shared_memory()
        g.register_system_shared_memory("in", key_in, size)
        g.register_system_shared_memory("out", key_out, size)

        def run_grpc():
            x = grpcclient.InferInput("x", [n], "FP32")
            x.set_data_from_numpy(data)
            r = g.infer("identity", [x], outputs=[grpcclient.InferRequestedOutput("y")])
            return r.as_numpy("y")

        def run_http():
            x = httpclient.InferInput("x", [n], "FP32")
            x.set_data_from_numpy(data, binary_data=True)
            r = h.infer("identity", [x],
                        outputs=[httpclient.InferRequestedOutput("y", binary_data=True)])
            return r.as_numpy("y")

        def run_shm():
            # The client writes its input into the region and reads the output from the other,
            # as a shared-memory client does (both copies are part of the time).
            shm.set_shared_memory_region(ip, [data])
            x = grpcclient.InferInput("x", [n], "FP32")
            x.set_shared_memory("in", size)
            y = grpcclient.InferRequestedOutput("y")
            y.set_shared_memory("out", size)
            g.infer("identity", [x], outputs=[y])
            return shm.get_contents_as_numpy(op, np.float32, [n]).copy()

        modes = {"grpc": run_grpc, "http-binary": run_http, "shm": run_shm}
        times = {m: [] for m in modes}
        for mode, run in modes.items():  # warm-up, and the identity checked once per mode
            out = run()
            if not np.array_equal(out, data):
                raise SystemExit("FAIL: %s returned other data" % mode)
        for _ in range(args.rounds):
            for mode, run in modes.items():
                start = time.perf_counter()
                run()
                times[mode].append((time.perf_counter() - start) * 1e3)
        medians = {m: statistics.median(t) for m, t in times.items()}
        print("CPU: %s; load average %s; %d MiB FP32 identity, %d rounds, Triton's Python client"
              % (cpu_name(), load_average(), args.mb, args.rounds))
        for mode in modes:
            print("%-12s median %8.1f ms   %5.2fx shm's time" %
                  (mode, medians[mode], medians[mode] / medians["shm"]))
        print(json.dumps({"bench": "shm", "mb": args.mb, "median_ms": medians,
                          "speedup_vs_grpc": medians["grpc"] / medians["shm"],
                          "speedup_vs_http_binary": medians["http-binary"] / medians["shm"]}))
        g.unregister_system_shared_memory()
    finally:
        shm.destroy_shared_memory_region(ip)
        shm.destroy_shared_memory_region(op)
        proc.terminate()
        proc.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
