#!/usr/bin/python3
"""KServe v2 over HTTP/REST against gRPC: the same request to the same server, three encodings.

Usage: /usr/bin/python3 bench/protocol_bench.py --loopserve=build/bin/loopserve
           --loopctl=build/bin/loopctl --models=build/bench/bench_models
           [--rounds=5] [--requests=2000] [--clients=1,8]

The request is serve_rnn (bench/make_bench_models.py): 10 Loop iterations of a 64-wide RNN cell,
inputs M=10, cond=true, h0 [1,64] FP32 (random), outputs h [1,64] and the scan hs [10,1,64]
(2.8 KB). One loopserve (default flags) serves both ports; the client is `loopctl perf` (C++: gRPC
stubs, or libcurl with one keep-alive connection per client thread) in three modes:
  grpc         ModelInfer with raw_input_contents
  http-binary  POST .../infer with Triton's binary tensor data extension (inputs and outputs as
               bytes after the JSON header)
  http-json    POST .../infer with JSON `data` for inputs and outputs (loopctl --typed=true)
Each round runs every mode at every client count (modes alternate within the round); printed per
mode and client count: the median over rounds of the p50 and p99 latency and of the throughput,
and the p50 ratio to gRPC; then one JSON line.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "integration"))
from loopserve_py import start_server  # noqa: E402
from bench_env import cpu_name  # noqa: E402

MODES = {
    "grpc": ["--protocol=grpc"],
    "http-binary": ["--protocol=http"],
    "http-json": ["--protocol=http", "--typed=true"],
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--loopserve", required=True)
    parser.add_argument("--loopctl", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", default="1,8")
    args = parser.parse_args()
    clients = [int(c) for c in args.clients.split(",")]

    # bench_models holds bare model files: a repository with serve_rnn/1/model.onnx.
    repository = tempfile.mkdtemp(prefix="protocol_bench_")
    os.makedirs(os.path.join(repository, "serve_rnn", "1"))
    os.symlink(os.path.abspath(os.path.join(args.models, "serve_rnn", "model.onnx")),
               os.path.join(repository, "serve_rnn", "1", "model.onnx"))
    proc, ports = start_server(args.loopserve, ["--model_repository=" + repository,
                                                "--metrics_port=-1"], kinds=("grpc", "http"))
    address = {"grpc": "127.0.0.1:%d" % ports["grpc"], "http": "127.0.0.1:%d" % ports["http"]}
    results = {(m, c): [] for m in MODES for c in clients}
    try:
        for _ in range(args.rounds):
            for c in clients:
                for mode, flags in MODES.items():
                    addr = address["grpc" if mode == "grpc" else "http"]
                    out = subprocess.run(
                        [args.loopctl, "--addr=" + addr] + flags +
                        ["perf", "serve_rnn", "--input=M:INT64::10", "--input=cond:BOOL::true",
                         "--concurrency=%d" % c, "--requests=%d" % args.requests,
                         "--warmup=100", "--progress=false"],
                        capture_output=True, text=True, timeout=600)
                    if out.returncode != 0:
                        raise RuntimeError("%s: %s" % (mode, out.stderr))
                    line = [x for x in out.stdout.splitlines() if x.startswith("{")][-1]
                    results[(mode, c)].append(json.loads(line))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        shutil.rmtree(repository)

    print("CPU: %s, %d cores; %d rounds x %d requests per mode and client count" %
          (cpu_name(), os.cpu_count(), args.rounds, args.requests))
    print("| mode | clients | p50 (us) | p99 (us) | req/s | p50 / gRPC |")
    print("|---|---|---|---|---|---|")
    summary = []
    for c in clients:
        base = statistics.median(r["p50_us"] for r in results[("grpc", c)])
        for mode in MODES:
            rs = results[(mode, c)]
            p50 = statistics.median(r["p50_us"] for r in rs)
            p99 = statistics.median(r["p99_us"] for r in rs)
            tput = statistics.median(r["throughput"] for r in rs)
            print("| %s | %d | %.1f | %.1f | %.0f | %.2fx |" % (mode, c, p50, p99, tput, p50 / base))
            summary.append({"mode": mode, "clients": c, "p50_us": p50, "p99_us": p99,
                            "throughput": tput, "p50_vs_grpc": p50 / base})
    print(json.dumps({"cpu": cpu_name(), "rounds": args.rounds, "results": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
