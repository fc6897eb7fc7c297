#!/usr/bin/python3
"""The request path's own cost (issue 34): server CPU per request, throughput and latency.

Usage: /usr/bin/python3 bench/request_cost.py [--bin=build/bin] [--duration=4] [--clients=1,4,16]
           [--workers=2] [--scaling_workers=1,2] [--profile=true]

Part 1, request cost. One loopserve (`--workers=N`, loopback, kernel-picked ports) serves a
one-iteration model: the example 256-wide RNN cell (deploy/make_example_models.py, rnn_cell without
its dynamic-batching config) at M=1, x and h0 [1,256] FP32, so the engine needs a few microseconds
and what is left is the request path. `loopctl perf` drives it over gRPC, REST with binary tensor
data and REST with JSON data, at each client count for --duration seconds. Around every run the
script reads the server's utime+stime from /proc/<pid>/stat, the client's CPU time (the waited
child's rusage) and the machine's busy time from /proc/stat, and prints per row: requests/s,
p50/p99 latency, server CPU us per request, the client's share of the machine and how busy the
machine was in all (the machine may be shared: the load average is printed before and after).
The issue's targets stand beside the 4-client gRPC and REST binary rows.

Then gRPC's own floor: bench/grpc_echo_server (a bare callback-API ModelInfer echo, same gRPC and
protobuf, no engine), driven by the same `loopctl perf` at the same client counts; its rows sit
under loopserve's, and the 1-client p50 ratio loopserve / echo is printed (issue 34: <= 1.5x).
Likewise libevhtp's floor for REST: bench/http_echo_server (libevhtp with loopserve's event threads,
RapidJSON parsing the request's JSON header, each input echoed as an output), REST binary and REST
JSON rows at the same client counts.
Every row also gives the server's context switches per request (voluntary + involuntary, summed
over its threads from /proc/<pid>/task/*/status): the thread hand-offs a request costs.

Part 1b, the example models (deploy/make_example_models.py, with their config.pbtxt, the inputs of
their first test case from --data_dir; all but `endless` and the sequence models, which
bench/sequence_bench.py measures): one loopserve serves them all, and each
gets a gRPC and a REST binary row at 4 clients beside the engine alone on the same inputs (looprun
--threads=1, median CPU per run), so the request path's share shows for real model sizes.

Part 2, `--workers` scaling. A compute-bound model (the same cell, 1024 wide, M=16) is served with
`--workers=W --intra_op_threads=1` for each W in --scaling_workers, at 2W clients; its throughput
is set against W times the engine's single-core rate, measured in the same run with `looprun
--threads=1` (median wall time and median CPU time per run; the CPU-time rate is what one free
core gives).

Part 3, profile (--profile=true and `perf` present): `perf record -g -p <server pid>` for 3 s of an
extra 4-client gRPC run (not one of the table's rows, as the profiler costs CPU too), then the top
symbols of `perf report` (self time). With perf_event_paranoid >= 2 only user space is sampled.

Every loop is bounded: each perf run has --duration and a subprocess timeout, servers are stopped
with SIGTERM (then killed) in `finally`. Needs Debian's /usr/bin/python3 (numpy + onnx 1.12).
"""

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO_ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(REPO_ROOT, "deploy"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_example_models as examples  # noqa: E402  (sets the numpy aliases onnx 1.12 needs)
import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402
from bench_env import cpu_name, load_average  # noqa: E402
from loopserve_py import start_server  # noqa: E402

PROTOCOLS = {
    "grpc": ("grpc", ["--protocol=grpc"]),
    "rest-binary": ("http", ["--protocol=http"]),
    "rest-json": ("http", ["--protocol=http", "--typed=true"]),
}
# Issue 34's targets: server CPU us per request for the one-iteration cell at 4 clients.
TARGETS_US = {("grpc", 4): 30.0, ("rest-binary", 4): 20.0}
SMALL = ("cell256", 256, 1)  # model name, hidden width, loop iterations (M)
LARGE = ("cell1024", 1024, 16)
CLK_TCK = os.sysconf("SC_CLK_TCK")


def isa_flags():
    """The vector ISA extensions /proc/cpuinfo lists that the engine's kernels care about."""
    wanted = ["avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile"]
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return " ".join(w for w in wanted if w in have)
    except OSError:
        pass
    return "unknown"


def process_cpu_seconds(pid):
    """utime + stime of a process, in seconds, from /proc/<pid>/stat (fields 14 and 15)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields[0] is field 3 (state)


def process_context_switches(pid):
    """Voluntary + involuntary context switches of every thread of a process, from /proc."""
    total = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        total += int(line.split(":")[1])
        except OSError:
            pass  # the thread ended meanwhile
    return total


def machine_times():
    """(busy, total) jiffies of all CPUs together, from the first line of /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    total = sum(values[:8])  # guest time is already counted in user
    return total - idle, total


def children_cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def write_repository(root):
    """A model repository with the two cells (no config.pbtxt: auto-completed, no batching) and
    looprun data folders for the large one."""
    for name, hidden, steps in (SMALL, LARGE):
        os.makedirs(os.path.join(root, "models", name, "1"))
        onnx.save(examples.build_rnn_cell(hidden), os.path.join(root, "models", name, "1",
                                                                  "model.onnx"))
        data = os.path.join(root, "data_" + name)
        os.makedirs(data)
        rng = np.random.RandomState(34)
        inputs = [("M", np.array(steps, np.int64)),
                  ("x", rng.uniform(-1, 1, (1, hidden)).astype(np.float32)),
                  ("h0", rng.uniform(-1, 1, (1, hidden)).astype(np.float32))]
        for k, (input_name, array) in enumerate(inputs):
            with open(os.path.join(data, "input_%d.pb" % k), "wb") as f:
                f.write(numpy_helper.from_array(array, input_name).SerializeToString())


def write_examples(root):
    """The example models with data folders of their first case's inputs: [(name, data dir)]."""
    written = []
    for example in examples.example_models():
        if example.name == "endless" or not example.cases:
            continue
        if example.config is not None and "sequence_batching" in example.config:
            continue  # each request needs a sequence id and its control flags: sequence_bench.py
        examples.write_example(os.path.join(root, "examples"), example)
        inputs = example.cases[sorted(example.cases)[0]][0]
        names = (example.io_names[0] if example.model is None else
                 [i.name for i in example.model.graph.input])
        data = os.path.join(root, "data_example_" + example.name)
        os.makedirs(data)
        for k, (input_name, array) in enumerate(zip(names, inputs)):
            with open(os.path.join(data, "input_%d.pb" % k), "wb") as f:
                f.write(numpy_helper.from_array(np.asarray(array), input_name).SerializeToString())
        written.append((example.name, data))
    return written


def example_engine_cpu_us(looprun, root, name, data):
    """The engine alone on one thread for an example (median CPU us per run), None if looprun
    cannot run it (an OpenVINO pair is model.xml)."""
    folder = os.path.join(root, "examples", name, "1")
    model = [f for f in os.listdir(folder) if f.endswith((".onnx", ".xml"))]
    if not model:
        return None
    out = subprocess.run([looprun, "--model=" + os.path.join(folder, model[0]), "--data=" + data,
                          "--repeat=300", "--warmup=5", "--threads=1"],
                         capture_output=True, text=True, timeout=300)
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    if out.returncode != 0 or not lines:
        return None
    return json.loads(lines[-1])["cpu_median_us"]


class Server:
    """loopserve on kernel-picked loopback ports; stopped by stop() (SIGTERM, then kill)."""

    def __init__(self, binary, repository, workers, extra=()):
        self.proc, ports = start_server(
            binary, ["--model_repository=" + repository, "--metrics_port=-1",
                     "--workers=%d" % workers] + list(extra), kinds=("grpc", "http"))
        self.address = {k: "127.0.0.1:%d" % p for k, p in ports.items()}

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)


# What grpc_echo_server answers to ModelMetadata: the cells' signature (make_example_models.py).
ECHO_METADATA = """name: "%s" versions: "1" platform: "onnxruntime_onnx"
inputs { name: "M" datatype: "INT64" }
inputs { name: "x" datatype: "FP32" shape: -1 shape: %d }
inputs { name: "h0" datatype: "FP32" shape: -1 shape: %d }
outputs { name: "h_final" datatype: "FP32" shape: -1 shape: %d }
outputs { name: "h_seq" datatype: "FP32" shape: -1 shape: -1 shape: %d }
"""


# The same signature as KServe v2 REST model metadata, for http_echo_server.
ECHO_METADATA_JSON = """{"name": "%s", "versions": ["1"], "platform": "onnxruntime_onnx",
 "inputs": [{"name": "M", "datatype": "INT64", "shape": []},
            {"name": "x", "datatype": "FP32", "shape": [-1, %d]},
            {"name": "h0", "datatype": "FP32", "shape": [-1, %d]}],
 "outputs": [{"name": "h_final", "datatype": "FP32", "shape": [-1, %d]},
             {"name": "h_seq", "datatype": "FP32", "shape": [-1, -1, %d]}]}
"""


class EchoServer:
    """bench/grpc_echo_server (kind "grpc") or bench/http_echo_server (kind "http": libevhtp with
    loopserve's 2 event threads here) on a kernel-picked loopback port (same interface as
    Server)."""

    def __init__(self, binary, root, model, hidden, kind="grpc"):
        text, suffix, flags = ((ECHO_METADATA, "txt", ["--grpc_port=0"]) if kind == "grpc" else
                               (ECHO_METADATA_JSON, "json",
                                ["--http_port=0", "--threads=%d" % min(2, os.cpu_count() or 1)]))
        metadata = os.path.join(root, "echo_metadata." + suffix)
        with open(metadata, "w") as f:
            f.write(text % (model, hidden, hidden, hidden, hidden))
        self.proc = subprocess.Popen([binary, "--address=127.0.0.1", "--metadata=" + metadata] +
                                     flags,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        timer = threading.Timer(60, self.proc.kill)  # bounded wait for the port line
        timer.start()
        line = self.proc.stdout.readline()
        timer.cancel()
        if not line.startswith("echo: %s listening on " % kind):
            self.proc.kill()
            raise RuntimeError("%s did not report its port" % os.path.basename(binary))
        self.address = {kind: "127.0.0.1:%d" % int(line.strip().rsplit(":", 1)[1])}

    stop = Server.stop


def perf_run(loopctl, server, protocol, model, steps, clients, duration, during=None):
    """One `loopctl perf` run with the CPU counters read around it; `during(pid)` (optional) is
    called once the run has started and returns a Popen to wait for afterwards."""
    kind, flags = PROTOCOLS[protocol]
    given = ["--input=M:INT64::%d" % steps] if isinstance(steps, int) else ["--data_dir=" + steps]
    command = ([loopctl, "--addr=" + server.address[kind]] + flags +
               ["perf", model] + given + ["--concurrency=%d" % clients,
                "--duration=%g" % duration, "--warmup=%d" % (50 * clients), "--progress=false"])
    pid = server.proc.pid
    server_before = process_cpu_seconds(pid)
    switches_before = process_context_switches(pid)
    client_before = children_cpu_seconds()
    busy_before, total_before = machine_times()
    wall_before = time.monotonic()
    client = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    side = during(pid) if during else None
    try:
        out, err = client.communicate(timeout=duration * 4 + 120)
    except subprocess.TimeoutExpired:
        client.kill()
        client.communicate()
        raise RuntimeError("%s %d clients: loopctl perf timed out" % (protocol, clients))
    wall = time.monotonic() - wall_before
    busy_after, total_after = machine_times()
    server_cpu = process_cpu_seconds(pid) - server_before
    switches = process_context_switches(pid) - switches_before
    if side is not None:
        side.wait(timeout=120)
    client_cpu = children_cpu_seconds() - client_before  # includes the profiler, if any
    if client.returncode != 0:
        raise RuntimeError("%s %d clients: %s" % (protocol, clients, err.strip()))
    result = json.loads([x for x in out.splitlines() if x.startswith("{")][-1])
    # The server's CPU covers the warm-up requests too: count them in the divisor.
    served = result["requests"] + 50 * clients
    cores = os.cpu_count()
    result.update({
        "protocol": protocol, "clients": clients,
        "server_cpu_us_per_request": server_cpu * 1e6 / served,
        "switches_per_request": switches / served,
        "server_cores": server_cpu / wall,
        "client_share": client_cpu / (wall * cores),
        "machine_busy": (busy_after - busy_before) / max(1, total_after - total_before),
    })
    return result


def looprun_rate(looprun, root, model, repeat):
    """The engine alone on one thread: (median wall us, median CPU us) per run of `model`."""
    out = subprocess.run(
        [looprun, "--model=" + os.path.join(root, "models", model, "1", "model.onnx"),
         "--data=" + os.path.join(root, "data_" + model), "--repeat=%d" % repeat, "--warmup=5",
         "--threads=1"], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError("looprun: " + out.stderr.strip())
    result = json.loads([x for x in out.stdout.splitlines() if x.startswith("{")][-1])
    return result["median_us"], result["cpu_median_us"]


def profile(root, seconds):
    """A function for perf_run's `during`: perf record -g on the server for `seconds`."""
    data = os.path.join(root, "perf.data")

    def start(pid):
        return subprocess.Popen(["perf", "record", "-g", "-o", data, "-p", str(pid), "--",
                                 "sleep", str(seconds)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return start, data


def top_symbols(data, count, sort="dso,symbol"):
    """The first `count` rows of `perf report` (self time, >= 0.7%) sorted by `sort`."""
    out = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children",
                          "--sort", sort, "-g", "none", "--percent-limit", "0.7"],
                         capture_output=True, text=True, timeout=300)
    rows = [" ".join(w for w in line.split() if w != "-") for line in out.stdout.splitlines()
            if line.strip() and not line.startswith("#")]
    return rows[:count]


# Named shares of the profile (self time, summed over every symbol that matches).
BUCKETS = [
    ("malloc/free", ("malloc", "free", "_int_", "operator new", "operator delete", "tcache")),
    ("absl mutex deadlock detection", ("GraphCycles", "Deadlock")),
    ("futex", ("futex",)),
    ("thread switches", ("finish_task_switch", "schedule", "switch_to")),
]


def buckets(data):
    """[(bucket name, percent)] over every sampled symbol of the profile."""
    out = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children",
                          "--sort", "symbol", "-g", "none", "--percent-limit", "0"],
                         capture_output=True, text=True, timeout=300)
    totals = {name: 0.0 for name, _ in BUCKETS}
    for line in out.stdout.splitlines():
        words = line.split()
        if line.startswith("#") or not words or not words[0].endswith("%"):
            continue
        symbol = " ".join(words[2:])
        for name, patterns in BUCKETS:
            if any(p in symbol for p in patterns):
                totals[name] += float(words[0][:-1])
                break
    return [(name, totals[name]) for name, _ in BUCKETS]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default=os.path.join(REPO_ROOT, "build", "bin"),
                        help="folder with loopserve, loopctl and looprun")
    parser.add_argument("--duration", type=float, default=4.0, help="seconds per perf run")
    parser.add_argument("--clients", default="1,4,16")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--scaling_workers", default="1,2")
    parser.add_argument("--profile", default="true")
    args = parser.parse_args()
    binary = {b: os.path.join(args.bin, b)
              for b in ("loopserve", "loopctl", "looprun", "grpc_echo_server",
                        "http_echo_server")}
    clients = [int(c) for c in args.clients.split(",")]
    scaling = [int(w) for w in args.scaling_workers.split(",") if w]
    do_profile = args.profile == "true" and shutil.which("perf") is not None

    root = tempfile.mkdtemp(prefix="request_cost_")
    repository = os.path.join(root, "models")
    print("CPU: %s, %d cores, ISA: %s" % (cpu_name(), os.cpu_count(), isa_flags()))
    print("load average before: %s" % load_average())
    rows, echo_rows, example_rows, scale_rows, symbols = [], [], [], [], []
    try:
        write_repository(root)
        server = Server(binary["loopserve"], repository, args.workers)
        try:
            for protocol in PROTOCOLS:
                for c in clients:
                    rows.append(perf_run(binary["loopctl"], server, protocol, SMALL[0], SMALL[2],
                                         c, args.duration))
            if do_profile:
                start, data = profile(root, 3)
                perf_run(binary["loopctl"], server, "grpc", SMALL[0], SMALL[2], 4,
                         max(args.duration, 4.0), during=start)
                symbols = (top_symbols(data, 12, "dso") + [""] + top_symbols(data, 25) + [""] +
                           ["%.2f%% %s" % (p, name) for name, p in buckets(data)])
        finally:
            server.stop()
        example_data = write_examples(root)
        server = Server(binary["loopserve"], os.path.join(root, "examples"), args.workers)
        try:
            for name, data in example_data:
                engine = example_engine_cpu_us(binary["looprun"], root, name, data)
                for protocol in ("grpc", "rest-binary"):
                    try:
                        r = perf_run(binary["loopctl"], server, protocol, name, data, 4,
                                     args.duration)
                    except RuntimeError as e:  # reported, the others go on
                        print("example %s over %s: %s" % (name, protocol, e))
                        continue
                    r["model"], r["engine_cpu_us"] = name, engine
                    example_rows.append(r)
        finally:
            server.stop()
        if os.path.exists(binary["grpc_echo_server"]):
            echo = EchoServer(binary["grpc_echo_server"], root, SMALL[0], SMALL[1])
            try:
                for c in clients:
                    r = perf_run(binary["loopctl"], echo, "grpc", SMALL[0], SMALL[2], c,
                                 args.duration)
                    r["protocol"] = "grpc echo"
                    echo_rows.append(r)
            finally:
                echo.stop()
        if os.path.exists(binary["http_echo_server"]):
            echo = EchoServer(binary["http_echo_server"], root, SMALL[0], SMALL[1], "http")
            try:
                for protocol in ("rest-binary", "rest-json"):
                    for c in clients:
                        r = perf_run(binary["loopctl"], echo, protocol, SMALL[0], SMALL[2], c,
                                     args.duration)
                        r["protocol"] = protocol + " echo"
                        echo_rows.append(r)
            finally:
                echo.stop()
        small_wall_us, small_cpu_us = looprun_rate(binary["looprun"], root, SMALL[0], 2000)
        wall_us, cpu_us = looprun_rate(binary["looprun"], root, LARGE[0], 40)
        for w in scaling:
            server = Server(binary["loopserve"], repository, w, ["--intra_op_threads=1"])
            try:
                r = perf_run(binary["loopctl"], server, "grpc", LARGE[0], LARGE[2], 2 * w,
                             args.duration)
            finally:
                server.stop()
            r["workers"] = w
            r["vs_cpu_rate"] = r["throughput"] / (w * 1e6 / cpu_us)
            r["vs_wall_rate"] = r["throughput"] / (w * 1e6 / wall_us)
            scale_rows.append(r)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("load average after: %s" % load_average())

    print("\nRequest cost: %s (hidden %d, M=%d), --workers=%d, %g s per row" %
          (SMALL[0], SMALL[1], SMALL[2], args.workers, args.duration))
    print("engine alone (looprun --threads=1): median %.1f us wall, %.1f us CPU per run; the "
          "rest of the server CPU per request is the request path" % (small_wall_us, small_cpu_us))
    print("| protocol | clients | req/s | p50 (us) | p99 (us) | server CPU us/req | target |"
          " switches/req | server cores | client share | machine busy |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows + echo_rows:
        target = TARGETS_US.get((r["protocol"], r["clients"]))
        mark = "" if target is None else "<= %.0f (%s)" % (
            target, "met" if r["server_cpu_us_per_request"] <= target else "not met")
        print("| %s | %d | %.0f | %.0f | %.0f | %.1f | %s | %.2f | %.2f | %.0f%% | %.0f%% |" %
              (r["protocol"], r["clients"], r["throughput"], r["p50_us"], r["p99_us"],
               r["server_cpu_us_per_request"], mark, r["switches_per_request"],
               r["server_cores"], 100 * r["client_share"], 100 * r["machine_busy"]))
    ours = {r["clients"]: r for r in rows if r["protocol"] == "grpc"}
    echo_at = {r["clients"]: r for r in echo_rows if r["protocol"] == "grpc echo"}
    if 1 in ours and 1 in echo_at:
        ratio = ours[1]["p50_us"] / echo_at[1]["p50_us"]
        print("\n1 client, gRPC, p50 (same loopctl client): bare gRPC echo %.0f us, loopserve %.0f "
              "us: %.2fx (target <= 1.5x: %s)" % (echo_at[1]["p50_us"], ours[1]["p50_us"], ratio,
                                                  "met" if ratio <= 1.5 else "not met"))
    for c in sorted(set(ours) & set(echo_at)):
        print("%d clients, gRPC, server CPU per request: echo %.1f us (gRPC's floor here), "
              "loopserve %.1f us (%.1f us over the floor)" %
              (c, echo_at[c]["server_cpu_us_per_request"], ours[c]["server_cpu_us_per_request"],
               ours[c]["server_cpu_us_per_request"] - echo_at[c]["server_cpu_us_per_request"]))
    rest_ours = {r["clients"]: r for r in rows if r["protocol"] == "rest-binary"}
    rest_echo = {r["clients"]: r for r in echo_rows if r["protocol"] == "rest-binary echo"}
    for c in sorted(set(rest_ours) & set(rest_echo)):
        print("%d clients, REST binary, server CPU per request: echo %.1f us (libevhtp's floor "
              "here), loopserve %.1f us (%.1f us over the floor)" %
              (c, rest_echo[c]["server_cpu_us_per_request"],
               rest_ours[c]["server_cpu_us_per_request"],
               rest_ours[c]["server_cpu_us_per_request"] -
               rest_echo[c]["server_cpu_us_per_request"]))
    if example_rows:
        print("\nThe example models (deploy/make_example_models.py, first test case's inputs), 4 "
              "clients, --workers=%d:" % args.workers)
        print("| model | protocol | req/s | p50 (us) | server CPU us/req | engine alone CPU us |"
              " switches/req |")
        print("|---|---|---|---|---|---|---|")
        for r in example_rows:
            print("| %s | %s | %.0f | %.0f | %.1f | %s | %.2f |" %
                  (r["model"], r["protocol"], r["throughput"], r["p50_us"],
                   r["server_cpu_us_per_request"],
                   "-" if r["engine_cpu_us"] is None else "%.1f" % r["engine_cpu_us"],
                   r["switches_per_request"]))
    if not echo_rows:
        print("\necho rows: skipped (no grpc_echo_server / http_echo_server in --bin)")
    if scale_rows:
        print("\n--workers scaling: %s (hidden %d, M=%d), gRPC, 2 clients per worker, "
              "--intra_op_threads=1; engine alone (looprun --threads=1): median %.0f us wall, "
              "%.0f us CPU per run = %.0f runs/s per core (CPU)" %
              (LARGE[0], LARGE[1], LARGE[2], wall_us, cpu_us, 1e6 / cpu_us))
        print("| workers | req/s | p50 (us) | server CPU us/req | vs W x engine rate (CPU) |"
              " vs W x engine rate (wall) | client share | machine busy |")
        print("|---|---|---|---|---|---|---|---|")
        for r in scale_rows:
            print("| %d | %.0f | %.0f | %.0f | %.0f%% | %.0f%% | %.0f%% | %.0f%% |" %
                  (r["workers"], r["throughput"], r["p50_us"], r["server_cpu_us_per_request"],
                   100 * r["vs_cpu_rate"], 100 * r["vs_wall_rate"], 100 * r["client_share"],
                   100 * r["machine_busy"]))
    if symbols:
        print("\nperf profile of the server, 3 s of a 4-client gRPC run (self time, by library, top symbols, named shares):")
        for line in symbols:
            print("  " + line if line else "")
    elif args.profile == "true":
        print("\nperf profile: skipped (perf not found)")
    print(json.dumps({"cpu": cpu_name(), "isa": isa_flags(), "rows": rows,
                      "scaling": scale_rows, "echo_rows": echo_rows, "examples": example_rows, "engine_us": {"wall": wall_us, "cpu": cpu_us},
                      "small_engine_us": {"wall": small_wall_us, "cpu": small_cpu_us}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
