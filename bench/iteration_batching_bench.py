#!/usr/bin/python3
"""Iteration-level batching against request-level dynamic batching and no batching: a greedy
decoder Loop with an end-token stop, request lengths long-tailed from 8 to 256 steps, 1 to 64
closed-loop clients. Issue 31's targets are printed beside the numbers.

Usage: /usr/bin/python3 bench/iteration_batching_bench.py --loopserve=build/bin/loopserve
           --looprun=build/bin/looprun [--hidden=512] [--vocab=2048] [--levels=1,8,32,64]
           [--seconds=5] [--workers=2] [--max_rows=32]

The model (tests/unit/engine/loop_stepper/make_stepper_models.py at --hidden/--vocab): carried h
[B,H], the last token [B] and a budget [B]; each step embeds the token, runs a tanh RNN cell,
takes the argmax of the logits [B,V] and emits the end token once the budget runs out; the Loop
stops on the end token. A request's length L (its budget) is drawn from a log-normal (median 24,
sigma 0.9) clipped to [8, 256] (about 11% are 8); its trip count M is 256. One loopserve
(--workers, one intra-op thread each) serves it three ways, each with --workers instances:
  none       no batching (decoder_rows, max_batch_size 0)
  dynamic    dynamic_batching, max_batch_size --max_rows, queue delay 1 ms (decoder_any: one
             condition for the whole batch, since a merged batch runs while any row runs; its
             rows past their end emit the end token)
  iteration  parameters iteration_batching (decoder_rows, max_batch_size --max_rows)
Each client sends one request at a time (gRPC ModelInfer, output 'tokens' only) for --seconds per
level: throughput (requests/s), p50/p99 latency, and the p99 of the 8-step requests. A lone
client's latency is measured apart, on requests of the mean length, the modes alternating. The
in-process ceiling is looprun on the decoder (decoder_any: Model::Run takes one condition) at
batch --max_rows with every row of the mean length: the requests/s the engine sustains with the
running batch always full (--workers engines side by side: workers x max_rows / run time). The
CPU and the load average are printed: the clients run on the same machine as the server.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(_ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(_ROOT, "tests", "unit", "engine", "loop_stepper"))
import make_stepper_models as sm  # noqa: E402  (sets the numpy aliases onnx 1.12 needs)
import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402
from loopserve_py import OIP, start_server  # noqa: E402
from bench_env import cpu_name, load_average  # noqa: E402

import grpc  # noqa: E402

CONFIG = """name: "%(name)s"
backend: "onnxruntime"
max_batch_size: %(mbs)d
%(batching)s
instance_group [ { count: %(count)d kind: KIND_CPU } ]
%(params)s
"""
LAYOUT = """parameters { key: "unbatched_inputs" value: { string_value: "M,cond" } }
parameters { key: "output_batch_axes" value: { string_value: "tokens:1,hs:1" } }
"""
TRIP = 256


def length(rng):
    return int(min(256, max(8, round(float(np.exp(rng.normal(np.log(24), 0.9)))))))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--loopserve", required=True)
    parser.add_argument("--looprun", required=True)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--levels", default="1,8,32,64")
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max_rows", type=int, default=32)
    parser.add_argument("--protoc", default="protoc")
    parser.add_argument("--modes", default="none,dynamic,iteration")
    parser.add_argument("--lone_rounds", type=int, default=6)
    args = parser.parse_args()
    levels = [int(v) for v in args.levels.split(",")]
    modes = args.modes.split(",")
    work = tempfile.mkdtemp(prefix="iteration_batching_bench_")
    from loopserve_py import make_stubs  # noqa: E402
    make_stubs(args.protoc, _ROOT, os.path.join(work, "stubs"), ["proto/grpc_service.proto",
                                                                 "proto/model_config.proto"])
    from proto import grpc_service_pb2 as pb, grpc_service_pb2_grpc as pb_grpc  # noqa: E402

    print("CPU: %s; load average before: %s" % (cpu_name(), load_average()))
    rows_model, _ = sm.decoder(args.hidden, args.vocab, per_row_condition=True)
    any_model, _ = sm.decoder(args.hidden, args.vocab, per_row_condition=False)
    repo = os.path.join(work, "repo")
    serve = {
        "none": (rows_model, 0, "", ""),
        "dynamic": (any_model, args.max_rows,
                    "dynamic_batching { max_queue_delay_microseconds: 1000 }", LAYOUT),
        "iteration": (rows_model, args.max_rows, "dynamic_batching { }",
                      LAYOUT + 'parameters { key: "iteration_batching" value: '
                      '{ string_value: "true" } }\n'),
    }
    for name, (model, mbs, batching, params) in serve.items():
        os.makedirs(os.path.join(repo, name, "1"))
        onnx.save(model, os.path.join(repo, name, "1", "model.onnx"))
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write(CONFIG % {"name": name, "mbs": mbs, "batching": batching,
                              "count": args.workers, "params": params})

    # ---- The in-process ceiling: looprun at batch max_rows, every row of the mean length ----
    sample = np.random.default_rng(1)
    mean_len = statistics.mean(length(sample) for _ in range(100000))
    ceiling = {}
    for b in (1, args.max_rows):
        data = os.path.join(work, "data_%d" % b)
        os.makedirs(data)
        steps = int(round(mean_len))
        values = [np.array(TRIP, np.int64), np.array(True),
                  sample.uniform(-1, 1, (b, args.hidden)).astype(np.float32),
                  np.full((b,), 3, np.int64), np.full((b,), steps, np.int64)]
        for k, value in enumerate(values):
            with open(os.path.join(data, "input_%d.pb" % k), "wb") as f:
                f.write(numpy_helper.from_array(value).SerializeToString())
        # decoder_any: Model::Run needs one condition per run (every row here is as long).
        out = subprocess.run([args.looprun, "--model=" + os.path.join(repo, "dynamic", "1",
                                                                      "model.onnx"),
                              "--data=" + data, "--threads=1", "--repeat=20", "--warmup=3"],
                             capture_output=True, text=True, check=True)
        us = json.loads(out.stdout.strip().splitlines()[-1])["median_us"]
        # --workers engines run side by side (one per instance).
        ceiling[b] = args.workers * b / (us / 1e6)
        print("in-process: batch %d of %d-step rows: %.0f us per run -> %.1f requests/s on %d "
              "workers" % (b, steps, us, ceiling[b], args.workers))
    print("mean request length %.1f steps; ceiling (batch %d always full): %.1f requests/s" %
          (mean_len, args.max_rows, ceiling[args.max_rows]))

    proc, ports = start_server(args.loopserve, ["--model_repository=" + repo,
                                                "--workers=%d" % args.workers,
                                                "--max_queue_size=1024"], kinds=("grpc",))
    results = {}
    lone = {}
    try:
        channel = grpc.insecure_channel("127.0.0.1:%d" % ports["grpc"])
        grpc.channel_ready_future(channel).result(timeout=30)
        stub = pb_grpc.GRPCInferenceServiceStub(channel)

        def request(model, n, seed):
            rng = np.random.default_rng(seed)
            r = pb.ModelInferRequest(model_name=model)
            for name, array in (("M", np.array(TRIP, np.int64)), ("cond", np.array(True)),
                                ("h0", rng.uniform(-1, 1, (1, args.hidden)).astype(np.float32)),
                                ("tok0", np.array([3], np.int64)),
                                ("budget0", np.array([n], np.int64))):
                r.inputs.add(name=name, datatype=OIP[array.dtype.type], shape=list(array.shape))
                r.raw_input_contents.append(array.tobytes())
            r.outputs.add(name="tokens")
            return r

        def level(model, clients):
            stop = time.monotonic() + args.seconds
            records = []
            lock = threading.Lock()
            errors = []

            def client(seed):
                rng = np.random.default_rng(seed)
                mine = []
                try:
                    while time.monotonic() < stop:
                        n = length(rng)
                        r = request(model, n, seed)
                        t0 = time.monotonic()
                        response = stub.ModelInfer(r, timeout=120)
                        mine.append((n, time.monotonic() - t0))
                        tokens = np.frombuffer(response.raw_output_contents[0], np.int64)
                        if tokens.size < n or tokens[n - 1] != sm.END:
                            errors.append("%s: a %d-step request ended at %d" % (model, n,
                                                                                  tokens.size))
                except Exception as e:  # noqa: BLE001  (reported below)
                    errors.append(repr(e))
                with lock:
                    records.extend(mine)

            start = time.monotonic()
            threads = [threading.Thread(target=client, args=(1000 * clients + k,))
                       for k in range(clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.monotonic() - start
            if errors:
                raise RuntimeError("; ".join(errors[:3]))
            lat = np.array([s for _, s in records]) * 1e3
            short = np.array([s for n, s in records if n == 8]) * 1e3
            return {"rps": len(records) / elapsed, "p50_ms": float(np.percentile(lat, 50)),
                    "p99_ms": float(np.percentile(lat, 99)), "requests": len(records),
                    "short_p99_ms": float(np.percentile(short, 99)) if short.size else None}

        for model in modes:  # warm-up
            level(model, 2)
        # A lone client: requests of the mean length one at a time, the modes alternating in
        # rounds (the load of a shared machine drifts); the median latency per mode.
        lone = {m: [] for m in modes}
        steps = int(round(mean_len))
        for r in range(args.lone_rounds):
            for model in (modes if r % 2 == 0 else list(reversed(modes))):
                for k in range(10):
                    t0 = time.monotonic()
                    stub.ModelInfer(request(model, steps, k), timeout=120)
                    lone[model].append((time.monotonic() - t0) * 1e3)
        print("\nlone client, %d-step requests: %s" % (steps, ", ".join(
            "%s %.2f ms" % (m, statistics.median(v)) for m, v in lone.items())))
        print("\nclients | mode      | requests/s | p50 ms | p99 ms | 8-step p99 ms | requests")
        for clients in levels:
            for model in modes:
                r = level(model, clients)
                results.setdefault(clients, {})[model] = r
                print("%7d | %-9s | %10.1f | %6.1f | %6.1f | %13s | %d" % (
                    clients, model, r["rps"], r["p50_ms"], r["p99_ms"],
                    "%.1f" % r["short_p99_ms"] if r["short_p99_ms"] is not None else "-",
                    r["requests"]))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print("\nload average after: %s" % load_average())
    summary = {"cpu": cpu_name(), "hidden": args.hidden, "vocab": args.vocab,
               "workers": args.workers, "max_rows": args.max_rows, "mean_length": mean_len,
               "ceiling_rps": ceiling[args.max_rows], "ceiling_batch1_rps": ceiling[1],
               "levels": results,
               "lone_median_ms": {m: statistics.median(v) for m, v in lone.items() if v}}
    at = 32 if 32 in results else max(results)
    r = results[at]
    if all(m in r for m in ("none", "dynamic", "iteration")):
        it = r["iteration"]
        print("at %d clients: iteration %.2fx dynamic (target >= 3), %.2fx none (target >= 5), "
              "%.0f%% of the in-process ceiling (target >= 80%% where the ceiling is lower)" % (
                  at, it["rps"] / r["dynamic"]["rps"], it["rps"] / r["none"]["rps"],
                  100 * it["rps"] / ceiling[args.max_rows]))
        if it["short_p99_ms"] and r["dynamic"]["short_p99_ms"] and r["none"]["short_p99_ms"]:
            print("8-step requests' p99: %.2fx dynamic's, %.2fx none's (target <= 0.25)" % (
                it["short_p99_ms"] / r["dynamic"]["short_p99_ms"],
                it["short_p99_ms"] / r["none"]["short_p99_ms"]))
    if "iteration" in lone and "none" in lone:
        ratio = statistics.median(lone["iteration"]) / statistics.median(lone["none"])
        summary["lone_ratio"] = ratio
        print("lone client: median latency %.2fx without the mode (target <= 1.1)" % ratio)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
