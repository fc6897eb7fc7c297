#!/usr/bin/python3
"""The engine's own ceiling for dynamic batching: one RNN-cell Loop run at batch 1 against batch 8
and 32, in process (looprun), per width; the ceiling is what merging can at best save per request.

Usage: /usr/bin/python3 bench/batching_ceiling.py --looprun=build/bin/looprun
           [--cells=256:32,1024:32,4096:8] [--batches=1,8,32] [--rounds=3] [--threads=1]

Each cell WIDTH:STEPS is deploy/make_example_models.py's rnn_cell at that width (h = Tanh(x Wx +
h Wh + b) for M = STEPS steps; weights 2 x WIDTH^2 floats) with random x and h0 of batch B. Each
round runs every batch size once (`looprun --repeat`, enough runs for ~1 s, after a warm-up),
alternating the order between rounds; printed per cell and batch: the median over rounds of
looprun's median_us, the time per request (median / B) and the ceiling = time at batch 1 / time
per request at batch B (how much faster per request the engine gets by merging B requests).
Then one JSON line. `--threads` is the intra-op threads (1: as a loopserve worker with
--workers=2 on 2 cores). The CPU and the load average before and after are printed.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(_ROOT, "deploy"))
np.float, np.int, np.bool, np.object = float, int, bool, object  # onnx 1.12 with numpy 1.24
import make_example_models as ex  # noqa: E402
from onnx import numpy_helper  # noqa: E402
from bench_env import cpu_name, load_average  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--looprun", required=True)
    parser.add_argument("--cells", default="256:32,1024:32,4096:8")
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    work = tempfile.mkdtemp(prefix="loopserve_batching_ceiling_")
    print("CPU: %s, %d cores; load average before: %s; looprun --threads=%d" % (
        cpu_name(), os.cpu_count(), load_average(), args.threads))
    rng = np.random.RandomState(17)
    summary = []
    for cell in args.cells.split(","):
        width, steps = (int(v) for v in cell.split(":"))
        folder = os.path.join(work, "cell_%d" % width)
        os.makedirs(folder)
        model = os.path.join(folder, "model.onnx")
        with open(model, "wb") as f:
            f.write(ex.build_rnn_cell(width).SerializeToString())
        data = {}
        for b in batches:
            data[b] = os.path.join(folder, "b%d" % b)
            os.makedirs(data[b])
            inputs = [np.array(steps, np.int64),
                      rng.uniform(-1, 1, (b, width)).astype(np.float32),
                      rng.uniform(-1, 1, (b, width)).astype(np.float32)]
            for k, value in enumerate(inputs):
                with open(os.path.join(data[b], "input_%d.pb" % k), "wb") as f:
                    f.write(numpy_helper.from_array(value).SerializeToString())
        # Runs for ~1 s per batch size: from one timing run at batch 1.
        probe = subprocess.run([args.looprun, "--model=" + model, "--data=" + data[batches[0]],
                                "--threads=%d" % args.threads, "--repeat=3", "--warmup=1"],
                               capture_output=True, text=True, check=True)
        once_us = json.loads(probe.stdout.strip().splitlines()[-1])["median_us"]
        times = {b: [] for b in batches}
        for r in range(args.rounds):
            order = batches if r % 2 == 0 else list(reversed(batches))
            for b in order:
                repeat = max(5, int(1e6 / max(once_us * b, 1)))
                out = subprocess.run([args.looprun, "--model=" + model, "--data=" + data[b],
                                      "--threads=%d" % args.threads, "--repeat=%d" % repeat,
                                      "--warmup=%d" % max(2, repeat // 10)],
                                     capture_output=True, text=True, check=True)
                times[b].append(json.loads(out.stdout.strip().splitlines()[-1])["median_us"])
        base = statistics.median(times[batches[0]])
        print("\n%d-wide cell, M = %d (weights %.1f MB)" % (width, steps,
                                                           2 * width * width * 4 / 2 ** 20))
        print("batch | median us | us per request | ceiling x")
        row = {"width": width, "steps": steps, "batches": {}}
        for b in batches:
            t = statistics.median(times[b])
            per = t / b
            row["batches"][b] = {"median_us": t, "per_request_us": per, "ceiling": base / per}
            print("%5d | %9.1f | %14.1f | %9.2f" % (b, t, per, base / per))
        summary.append(row)
    print("\nload average after: %s" % load_average())
    print(json.dumps({"cpu": cpu_name(), "threads": args.threads, "cells": summary}))


if __name__ == "__main__":
    main()
