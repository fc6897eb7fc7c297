#!/usr/bin/python3
"""What a gzip or deflate REST body costs against the same body uncompressed (issue 32).

Usage: /usr/bin/python3 bench/compressed_body_bench.py --loopserve=build/bin/loopserve
           [--elements=1000000] [--rounds=9]

The model is an FP32 Identity on [N]; the request is POST /v2/models/identity/infer with the
input as JSON `data` (N random floats, ~12 bytes each) and the output asked for as binary data
(so the response is small to write and parse). Three bodies, alternating within each round over
one keep-alive connection (http.client): the JSON as is, gzip-compressed, deflate (zlib)
-compressed. Separately, the time zlib itself takes to inflate each compressed body
(zlib.decompress: the same C library the server links). Printed: median request times, the
inflation times, and the target ratio compressed / (uncompressed + inflation), which should stay
under 1.2 (the server adds nothing to the inflation but a copy of the inflated body).
"""

import argparse
import gzip
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
import zlib

import numpy as np

np.float, np.int, np.bool, np.object = float, int, bool, object  # onnx 1.12 vs numpy 1.24
import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))
from loopserve_py import start_server  # noqa: E402
from bench_env import cpu_name, load_average  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--loopserve", required=True)
    parser.add_argument("--elements", type=int, default=1000000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="compressed_body_bench_")
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "identity",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    os.makedirs(os.path.join(work, "models", "identity", "1"))
    onnx.save(model, os.path.join(work, "models", "identity", "1", "model.onnx"))

    data = np.random.default_rng(0).standard_normal(args.elements).astype(np.float32)
    body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [args.elements],
                                   "data": data.tolist()}],
                       "outputs": [{"name": "y", "parameters": {"binary_data": True}}]}).encode()
    bodies = {"identity": (body, {}),
              "gzip": (gzip.compress(body, compresslevel=6), {"Content-Encoding": "gzip"}),
              "deflate": (zlib.compress(body, 6), {"Content-Encoding": "deflate"})}
    proc, ports = start_server(args.loopserve, ["--model_repository=" + os.path.join(work, "models"),
                                                "--metrics_port=-1"], kinds=("http",))
    try:
        conn = http.client.HTTPConnection("127.0.0.1", ports["http"], timeout=300)

        def post(name):
            payload, headers = bodies[name]
            headers = dict(headers, **{"Content-Type": "application/json"})
            start = time.perf_counter()
            conn.request("POST", "/v2/models/identity/infer", body=payload, headers=headers)
            response = conn.getresponse()
            answer = response.read()
            elapsed = time.perf_counter() - start
            if response.status != 200:
                raise SystemExit("FAIL: %s: %d %s" % (name, response.status, answer[:200]))
            length = int(response.getheader("Inference-Header-Content-Length"))
            if not np.array_equal(np.frombuffer(answer[length:], np.float32), data):
                raise SystemExit("FAIL: %s returned other data" % name)
            return elapsed * 1e3

        for name in bodies:
            post(name)  # warm-up, checked
        times = {name: [] for name in bodies}
        for _ in range(args.rounds):
            for name in bodies:
                times[name].append(post(name))
        inflate = {
            "gzip": statistics.median(
                [_timed(lambda: gzip.decompress(bodies["gzip"][0])) for _ in range(args.rounds)]),
            "deflate": statistics.median(
                [_timed(lambda: zlib.decompress(bodies["deflate"][0]))
                 for _ in range(args.rounds)]),
        }
        medians = {name: statistics.median(t) for name, t in times.items()}
        print("CPU: %s; load average %s; %d FP32 as JSON (%.1f MB; gzip %.1f MB, deflate %.1f MB),"
              " %d rounds" % (cpu_name(), load_average(), args.elements, len(body) / 1e6,
                              len(bodies["gzip"][0]) / 1e6, len(bodies["deflate"][0]) / 1e6,
                              args.rounds))
        print("uncompressed   median %8.1f ms" % medians["identity"])
        ratios = {}
        for name in ("gzip", "deflate"):
            ratios[name] = medians[name] / (medians["identity"] + inflate[name])
            print("%-14s median %8.1f ms   zlib inflation alone %6.1f ms   ratio to "
                  "uncompressed + inflation %.2f (target < 1.2)" %
                  (name, medians[name], inflate[name], ratios[name]))
        print(json.dumps({"bench": "compressed_body", "median_ms": medians, "inflate_ms": inflate,
                          "ratio": ratios}))
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return 0


def _timed(fn):
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


if __name__ == "__main__":
    sys.exit(main())
