#!/usr/bin/python3
"""Dynamic batching against unbatched serving: one RNN-cell Loop model, 1 to 32 closed-loop clients.

Usage: /usr/bin/python3 bench/batching_bench.py --loopserve=build/bin/loopserve
           --loopctl=build/bin/loopctl [--hidden=256] [--steps=32] [--levels=1:32:x2]
           [--seconds=3] [--rounds=3] [--delay_us=500] [--workers=2] [--batched_instances=N]

The model is deploy/make_example_models.py's rnn_cell at width --hidden: M INT64 [] (the trip
count, unbatched), x and h0 FP32 [batch, hidden]; h = Tanh(x Wx + h Wh + b) for M steps; outputs
h_final [batch, hidden] and the scan h_seq [M, batch, hidden] (batch axis 1). One loopserve
(--workers, default flags otherwise) serves it twice from a temporary repository:
  batched    max_batch_size 32, dynamic_batching { max_queue_delay_microseconds: --delay_us },
             unbatched_inputs M, output_batch_axes h_seq:1; instance count --batched_instances
             (default --workers: one collector per worker)
  unbatched  the same config without dynamic_batching
Each client sends one request of batch size 1 (M = --steps, random x and h0) at a time
(`loopctl perf --concurrency_range=--levels --duration=--seconds`). Each round runs both
configurations (alternating); printed per concurrency: the medians over rounds of throughput and
p50/p99 latency for both, the throughput ratio and the p99 ratio, the mean batch size the
batched model ran (loopserve_batch_size), then one JSON line. The CPU model and the load average
before and after are printed too: the clients run on the same machine as the server.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import urllib.request

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(_ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(_ROOT, "deploy"))
from loopserve_py import start_server  # noqa: E402
import make_example_models as ex  # noqa: E402
from bench_env import cpu_name, load_average  # noqa: E402

CONFIG = """name: "%(name)s"
backend: "onnxruntime"
max_batch_size: 32
%(batching)s
parameters { key: "unbatched_inputs" value: { string_value: "M" } }
parameters { key: "output_batch_axes" value: { string_value: "h_seq:1" } }
"""


def scrape(port, name, model):
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(name + "{") and 'model="%s"' % model in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--loopserve", required=True)
    parser.add_argument("--loopctl", required=True)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--levels", default="1:32:x2")
    parser.add_argument("--seconds", type=float, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--delay_us", type=int, default=500)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batched_instances", type=int, default=0,
                        help="instance_group count of the batched model (0: --workers)")
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="loopserve_batching_bench_")
    model = ex.build_rnn_cell(args.hidden).SerializeToString()
    names = {"batched": "cell_batched", "unbatched": "cell_unbatched"}
    for kind, name in names.items():
        os.makedirs(os.path.join(work, name, "1"))
        with open(os.path.join(work, name, "1", "model.onnx"), "wb") as f:
            f.write(model)
        batching = ("dynamic_batching { max_queue_delay_microseconds: %d }" % args.delay_us
                    if kind == "batched" else "")
        if kind == "batched" and args.batched_instances > 0:
            batching += "\ninstance_group [ { count: %d kind: KIND_CPU } ]" % (
                args.batched_instances)
        with open(os.path.join(work, name, "config.pbtxt"), "w") as f:
            f.write(CONFIG % {"name": name, "batching": batching})

    print("CPU: %s, %d cores; load average before: %s" % (cpu_name(), os.cpu_count(),
                                                           load_average()))
    print("model: rnn_cell, hidden %d, M = %d steps, batch 1 per request; %d workers; "
          "max_queue_delay %d us; batched instances %s" % (
              args.hidden, args.steps, args.workers, args.delay_us,
              args.batched_instances or args.workers))
    proc, ports = start_server(args.loopserve, [
        "--model_repository=" + work, "--model_control_mode=none",
        "--workers=%d" % args.workers, "--metrics_port=0", "--http_port=-1"])
    results = {kind: {} for kind in names}  # kind -> concurrency -> [level results]
    batch_sizes = {}  # concurrency -> [mean batch size]
    try:
        for _ in range(args.rounds):
            for kind, name in names.items():
                cmd = [args.loopctl, "--addr=127.0.0.1:%d" % ports["grpc"], "perf", name,
                       "--input=M:INT64::%d" % args.steps, "--shape=x:1,%d" % args.hidden,
                       "--shape=h0:1,%d" % args.hidden, "--concurrency_range=" + args.levels,
                       "--duration=%g" % args.seconds, "--warmup=20", "--progress=false"]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
                for line in out.splitlines():
                    if line.startswith('{"model"'):
                        level = json.loads(line)
                        results[kind].setdefault(level["concurrency"], []).append(level)
        # Mean batch size per level: one more short batched pass per level, read from metrics.
        for c in sorted(results["batched"]):
            before = (scrape(ports["metrics"], "loopserve_batch_size_sum", names["batched"]),
                      scrape(ports["metrics"], "loopserve_batch_size_count", names["batched"]))
            subprocess.run([args.loopctl, "--addr=127.0.0.1:%d" % ports["grpc"], "perf",
                            names["batched"], "--input=M:INT64::%d" % args.steps,
                            "--shape=x:1,%d" % args.hidden, "--shape=h0:1,%d" % args.hidden,
                            "--concurrency=%d" % c, "--duration=1", "--warmup=0",
                            "--progress=false"], capture_output=True, check=True)
            after = (scrape(ports["metrics"], "loopserve_batch_size_sum", names["batched"]),
                     scrape(ports["metrics"], "loopserve_batch_size_count", names["batched"]))
            batch_sizes[c] = (after[0] - before[0]) / max(after[1] - before[1], 1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)

    def med(kind, c, key):
        return statistics.median(level[key] for level in results[kind][c])

    print("\nmedians over %d rounds of %g s per level\n" % (args.rounds, args.seconds))
    print("clients | unbatched infer/s  p50 us  p99 us | batched infer/s  p50 us  p99 us | "
          "throughput x  p99 x | mean batch")
    summary = []
    for c in sorted(results["batched"]):
        u = {k: med("unbatched", c, k) for k in ("throughput", "p50_us", "p99_us")}
        b = {k: med("batched", c, k) for k in ("throughput", "p50_us", "p99_us")}
        row = {"clients": c, "unbatched": u, "batched": b,
               "throughput_ratio": b["throughput"] / u["throughput"],
               "p99_ratio": b["p99_us"] / u["p99_us"], "mean_batch": batch_sizes.get(c, 0)}
        summary.append(row)
        print("%7d | %17.1f %7.0f %7.0f | %15.1f %7.0f %7.0f | %12.2f %6.2f | %10.2f" % (
            c, u["throughput"], u["p50_us"], u["p99_us"], b["throughput"], b["p50_us"],
            b["p99_us"], row["throughput_ratio"], row["p99_ratio"], row["mean_batch"]))
    print("\nload average after: %s" % load_average())
    print(json.dumps({"cpu": cpu_name(), "hidden": args.hidden, "steps": args.steps,
                      "delay_us": args.delay_us, "levels": summary}))


if __name__ == "__main__":
    main()
