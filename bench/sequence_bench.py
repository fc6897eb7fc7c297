#!/usr/bin/python3
"""Stateful sequences (sequence_batching): server overhead per step, and oldest vs direct.

Usage: /usr/bin/python3 bench/sequence_bench.py --loopserve=build/bin/loopserve
           --loopctl=build/bin/loopctl --looprun=build/bin/looprun
           [--hidden=512] [--streams=64] [--requests=3000] [--length=50]

1. Overhead per step at 1 stream: `loopctl perf --sequence_length` on simple_sequence (a model of
   a few adds: its compute is ~1 us), read from the server's own histograms: receipt to answer
   (loopserve_request_duration_seconds) minus the model's compute
   (loopserve_compute_duration_seconds), mean per step over the run.
2. deploy/make_example_models.py's gru_chunk at --hidden (GRU over 4 frames x 16 features, state
   [1, batch, hidden]) under `oldest` and `direct` (max_batch_size 64): --streams concurrent
   sequences of --length steps (loopctl perf --concurrency=streams): throughput and p50/p99 per
   step; a lone stream's p99 on the same server.
3. The in-process ceiling (looprun, 1 intra-op thread as a worker has): the model at batch 1 and at
   batch --streams; steps/s = batch / median run time.
Prints the CPU and the load average, then one JSON line.
"""

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import numpy as np

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(_ROOT, "deploy"))
np.float, np.int, np.bool, np.object = float, int, bool, object  # onnx 1.12 with numpy 1.24
import make_example_models as ex  # noqa: E402
from onnx import numpy_helper  # noqa: E402
from bench_env import cpu_name, load_average  # noqa: E402


def start_server(binary, repo):
    proc = subprocess.Popen([binary, "--address=127.0.0.1", "--grpc_port=0", "--http_port=-1",
                             "--metrics_port=0", "--model_repository=" + repo,
                             "--model_control_mode=none"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    ports = {}
    timer = threading.Timer(120, proc.kill)
    timer.start()
    for line in proc.stdout:
        m = re.match(r"loopserve: (\w+) listening on .*:(\d+)", line)
        if m:
            ports[m.group(1)] = int(m.group(2))
        if "grpc" in ports and "metrics" in ports:
            break
    timer.cancel()
    return proc, ports


def metric_sum(port, name, model):
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and 'model="%s"' % model in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def cpu_seconds(pid):
    """User + system CPU seconds process `pid` has used (/proc/<pid>/stat)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def perf(loopctl, port, model, concurrency, requests, length, server_pid=None):
    """loopctl perf's JSON, plus the CPU seconds the client (loopctl) and the server used over
    the whole run (warm-up included) and its wall time."""
    client_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_before = cpu_seconds(server_pid) if server_pid else 0.0
    began = time.monotonic()
    out = subprocess.run([loopctl, "--addr=127.0.0.1:%d" % port, "perf", model,
                          "--concurrency=%d" % concurrency, "--requests=%d" % requests,
                          "--sequence_length=%d" % length, "--warmup=%d" % concurrency,
                          "--progress=false"],
                         capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - began
    if out.returncode != 0:
        raise RuntimeError("loopctl perf %s: %s" % (model, out.stderr))
    client_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = json.loads([l for l in out.stdout.splitlines() if l.startswith("{")][-1])
    result["client_cpu_s"] = round((client_after.ru_utime + client_after.ru_stime) -
                                   (client_before.ru_utime + client_before.ru_stime), 2)
    result["server_cpu_s"] = round(cpu_seconds(server_pid) - server_before, 2) if server_pid else 0
    result["wall_s"] = round(wall, 2)
    return result


def looprun_median(looprun, model, data, repeat):
    out = subprocess.run([looprun, "--model=" + model, "--data=" + data, "--threads=1",
                          "--repeat=%d" % repeat, "--warmup=20"],
                         capture_output=True, text=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])["median_us"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--loopserve", required=True)
    parser.add_argument("--loopctl", required=True)
    parser.add_argument("--looprun", required=True)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--length", type=int, default=50)
    parser.add_argument("--overhead_only", action="store_true",
                        help="only part 1 (the per-step overhead at 1 stream)")
    args = parser.parse_args()
    print("CPU: %s, %d cores; load average before: %s" % (cpu_name(), os.cpu_count(),
                                                          load_average()))
    work = tempfile.mkdtemp(prefix="loopserve_sequence_bench_")
    repo = os.path.join(work, "models")
    ex.write_example(repo, ex.simple_sequence_example())
    model = ex.build_gru_chunk(args.hidden)
    for name, strategy in (("gru_oldest", "oldest { max_candidate_sequences: %d }" % args.streams),
                           ("gru_direct", "direct { }")):
        folder = os.path.join(repo, name)
        os.makedirs(os.path.join(folder, "1"))
        with open(os.path.join(folder, "1", "model.onnx"), "wb") as f:
            f.write(model.SerializeToString())
        with open(os.path.join(folder, "config.pbtxt"), "w") as f:
            f.write(ex.gru_chunk_config(args.hidden, strategy, max_batch_size=args.streams))
    proc, ports = start_server(args.loopserve, repo)
    result = {"cpu": cpu_name(), "hidden": args.hidden, "streams": args.streams}
    try:
        grpc, metrics = ports["grpc"], ports["metrics"]
        names = ("loopserve_request_duration_seconds_sum", "loopserve_compute_duration_seconds_sum",
                 "loopserve_request_duration_seconds_count")
        before = [metric_sum(metrics, n, "simple_sequence") for n in names]
        lone = perf(args.loopctl, grpc, "simple_sequence", 1, 2000, 100, proc.pid)
        after = [metric_sum(metrics, n, "simple_sequence") for n in names]
        count = after[2] - before[2]
        overhead = ((after[0] - before[0]) - (after[1] - before[1])) / count * 1e6
        compute = (after[1] - before[1]) / count * 1e6
        # The server's CPU per step (all its threads: gRPC, runner, batcher, model), which a
        # loaded machine inflates far less than the wall-clock overhead (time waiting for a core).
        cpu_per_step = lone["server_cpu_s"] / count * 1e6
        result["overhead_us_per_step"] = round(overhead, 1)
        result["server_cpu_us_per_step"] = round(cpu_per_step, 1)
        result["simple_sequence_client_p50_us"] = lone["p50_us"]
        print("1 stream, simple_sequence: server overhead %.1f us per step (receipt to answer "
              "minus compute %.1f us, mean of %d steps); server CPU %.1f us per step; client "
              "round trip p50 %.1f us" % (overhead, compute, count, cpu_per_step, lone["p50_us"]))
        for name in () if args.overhead_only else ("gru_direct", "gru_oldest"):
            sizes = [metric_sum(metrics, n, name) for n in ("loopserve_batch_size_sum",
                                                            "loopserve_batch_size_count")]
            r = perf(args.loopctl, grpc, name, args.streams, args.requests, args.length,
                     proc.pid)
            after = [metric_sum(metrics, n, name) for n in ("loopserve_batch_size_sum",
                                                            "loopserve_batch_size_count")]
            steps_per_run = (after[0] - sizes[0]) / max(after[1] - sizes[1], 1)
            alone = perf(args.loopctl, grpc, name, 1, 300, args.length)
            served = after[0] - sizes[0]  # steps executed over the run (warm-up included)
            cpu_per_step = r["server_cpu_s"] / max(served, 1) * 1e6
            cores = os.cpu_count()
            client_share = r["client_cpu_s"] / (r["wall_s"] * cores)
            server_share = r["server_cpu_s"] / (r["wall_s"] * cores)
            result[name] = {"steps_per_s": r["throughput"], "p50_us": r["p50_us"],
                            "p99_us": r["p99_us"], "steps_per_execution": round(steps_per_run, 1),
                            "lone_p50_us": alone["p50_us"], "lone_p99_us": alone["p99_us"],
                            "server_cpu_us_per_step": round(cpu_per_step, 1),
                            "client_cpu_share": round(client_share, 2),
                            "server_cpu_share": round(server_share, 2)}
            print("%s: %d streams %.1f steps/s (%.1f steps per execution), p50 %.0f us, p99 %.0f "
                  "us; lone stream p50 %.0f us, p99 %.0f us; server CPU %.0f us per step; CPU "
                  "of the %d cores over the run: client %.0f%%, server %.0f%%"
                  % (name, args.streams, r["throughput"], steps_per_run, r["p50_us"],
                     r["p99_us"], alone["p50_us"], alone["p99_us"], cpu_per_step, cores,
                     100 * client_share, 100 * server_share))
        if args.overhead_only:
            return 0
        ratio = result["gru_oldest"]["steps_per_s"] / result["gru_direct"]["steps_per_s"]
        result["oldest_over_direct"] = round(ratio, 2)
        cpu_ratio = (result["gru_direct"]["server_cpu_us_per_step"] /
                     max(result["gru_oldest"]["server_cpu_us_per_step"], 1e-9))
        result["oldest_over_direct_server_cpu"] = round(cpu_ratio, 2)
        print("oldest / direct throughput: %.2fx; server CPU per step direct / oldest: %.2fx "
              "(the throughput ratio of a server that has the cores to itself)" % (ratio, cpu_ratio))
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        if args.overhead_only:
            print(json.dumps(result))
            shutil.rmtree(work, ignore_errors=True)
    # The in-process ceiling.
    model_path = os.path.join(repo, "gru_oldest", "1", "model.onnx")
    rng = np.random.RandomState(5)
    medians = {}
    for batch in (1, args.streams):
        data = os.path.join(work, "b%d" % batch)
        os.makedirs(data)
        arrays = [rng.uniform(-1, 1, (batch, ex.GRU_CHUNK_STEPS, ex.GRU_CHUNK_FEATURES)),
                  np.zeros((batch, 1)), rng.uniform(-1, 1, (1, batch, args.hidden))]
        for k, (name, a) in enumerate(zip(("chunk", "start", "h_in"), arrays)):
            with open(os.path.join(data, "input_%d.pb" % k), "wb") as f:
                f.write(numpy_helper.from_array(a.astype(np.float32), name).SerializeToString())
        medians[batch] = looprun_median(args.looprun, model_path, data, 200)
    ceiling_1 = 1e6 / medians[1]
    ceiling_n = args.streams * 1e6 / medians[args.streams]
    result["ceiling_steps_per_s"] = {"batch1": round(ceiling_1, 1),
                                     "batch%d" % args.streams: round(ceiling_n, 1)}
    print("in-process ceiling (looprun, 1 thread): batch 1 %.0f us = %.0f steps/s; batch %d "
          "%.0f us = %.0f steps/s (%.2fx)" % (medians[1], ceiling_1, args.streams,
                                              medians[args.streams], ceiling_n,
                                              ceiling_n / ceiling_1))
    # Little's law: N closed-loop streams at T steps/s wait N / T per step on average; at the
    # in-process ceiling every step waits at least one batch-N run.
    lone_p99 = result["gru_oldest"]["lone_p99_us"]
    result["p99_floor_over_lone_p99"] = round(medians[args.streams] / lone_p99, 2)
    print("p99 floor at %d streams: one batch-%d run (%.0f us) = %.2fx the lone stream's p99 "
          "(%.0f us); the target is under 2x" % (args.streams, args.streams,
                                                  medians[args.streams],
                                                  medians[args.streams] / lone_p99, lone_p99))
    print("load average after: %s" % load_average())
    print(json.dumps(result))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
