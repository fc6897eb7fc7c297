#!/usr/bin/python3
"""Scale-out: three loopserve replicas behind HAProxy, scraped by a real Prometheus (issue 33).

Usage:
  scale_out_test.py --repo_root=DIR --loopserve=BIN --loopctl=BIN --haproxy=BIN --prometheus=BIN
                    --work=DIR
                    [--protoc=PROTOC] [--summary=FILE]

Everything runs on 127.0.0.1: three replicas (`--workers=1 --intra_op_threads=1
--drain_delay_seconds=3`, the example models), HAProxy in front (gRPC over HTTP/2 with `proto
h2`, KServe v2 REST over HTTP/1.1; health checks on each replica's /v2/health/ready; `retry-on
conn-failure empty-response 503`, `option redispatch`; `balance hdr(loopserve-sequence-id)`),
and Prometheus scraping the three with deploy/prometheus/loopserve-rules.yml (its windows
shortened from 1m to 5s so the test sees changes within seconds). gRPC and REST clients send
`rnn` requests through HAProxy and check every answer against numpy's reference
(deploy/make_example_models.py), never against a server's own output. Phases:

  capacity  `loopctl perf` on a few example models: one replica directly (concurrency 1: its one
            worker, one core) and the three through HAProxy (concurrency 6); throughput and
            latency percentiles, for server/OPERATIONS.md's capacity note.
  sticky    interleaved sequences carry the `loopserve-sequence-id` header (gRPC metadata and
            HTTP header): every step of one id reaches the same replica (told by the replicas'
            own request counters of a model no other traffic uses meanwhile), and the ids spread over more
            than one replica.
  rolling   under load, each replica in turn gets SIGTERM (not ready at once, still serving for
            the drain delay, then drains and exits 0), is restarted on the same ports and waits
            until HAProxy routes to it again: zero failed requests, gRPC and REST.
  kill      under load, one replica gets SIGKILL: the failed requests are at most those in flight
            at that moment and none started later fails; HAProxy marks it DOWN within 2 s.
  overload  after a baseline below 0.2 (one client), many clients with long Loops: the recording
            rule loopserve:queue_compute_ratio:rate1m rises above 2; with the overload gone (one
            client left) it falls below 0.2 again.

It prints one JSON line of what it measured (throughput, latency percentiles, failures, times),
also written to --summary when given. Every process it starts is stopped by its PID (also on
failure: SIGTERM, then SIGKILL), and --work is removed at the end. Exit status 0 when every check
passed.
"""

import argparse
import ctypes
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import numpy as np

np.float, np.int, np.bool, np.object = float, int, bool, object  # onnx 1.12 vs numpy 1.24

STICKY_HEADER = "loopserve-sequence-id"
REPLICAS = 3
# How long a phase may wait for something that normally takes well under a second (a replica
# starting, HAProxy seeing it): a hang bound for a loaded 2-core machine, not a speed claim.
BOUND_SECONDS = 60


def free_ports(n):
    """`n` distinct ports the kernel reports free on 127.0.0.1 (kept bound until all are picked)."""
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def wait_until(what, predicate, seconds=BOUND_SECONDS, interval=0.05):
    """Polls `predicate` until it returns a true value (returned) or `seconds` pass (raises)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except (OSError, urllib.error.URLError, ValueError):
            pass
        time.sleep(interval)
    raise AssertionError("timed out after %d s waiting for %s" % (seconds, what))


def die_with_parent():
    """In a child before exec: SIGKILL it when the test process dies (even of SIGKILL, as a
    CTest timeout kills it), so no replica, HAProxy or Prometheus outlives the test."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class Processes:
    """Every process the test started, stopped by PID at the end (SIGTERM, then SIGKILL)."""

    def __init__(self):
        self.procs = []

    def start(self, args, log_path, **kwargs):
        log = open(log_path, "a")
        proc = subprocess.Popen(args, stderr=log, stdout=kwargs.pop("stdout", log),
                                preexec_fn=die_with_parent, **kwargs)
        proc.log_file = log
        self.procs.append(proc)
        return proc

    def stop_all(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            p.log_file.close()


class Replica:
    """One loopserve on fixed ports (a restart keeps them, as a pod keeps its address)."""

    FLAGS = ["--workers=1", "--intra_op_threads=1", "--max_queue_size=256",
             "--drain_delay_seconds=3", "--exit_timeout_seconds=10", "--model_control_mode=none",
             "--log_level=warning"]

    def __init__(self, index, binary, models, procs, work):
        self.index = index
        self.name = "r%d" % (index + 1)
        self.binary, self.models, self.procs, self.work = binary, models, procs, work
        self.grpc_port, self.http_port, self.metrics_port = free_ports(3)
        self.proc = None

    def start(self):
        log = os.path.join(self.work, "%s.log" % self.name)
        self.proc = self.procs.start(
            [self.binary, "--model_repository=" + self.models, "--address=127.0.0.1",
             "--grpc_port=%d" % self.grpc_port, "--http_port=%d" % self.http_port,
             "--metrics_port=%d" % self.metrics_port] + self.FLAGS, log, stdout=subprocess.PIPE,
            text=True)
        # The port lines come once the models are loaded and the ports bound (bounded wait).
        timer = threading.Timer(BOUND_SECONDS, self.proc.kill)
        timer.start()
        seen = set()
        for line in self.proc.stdout:
            if " listening on " in line:
                seen.add(line.split()[1])
            if len(seen) == 3:
                break
        timer.cancel()
        if len(seen) != 3:
            raise AssertionError("%s did not start (see %s)" % (self.name, log))
        threading.Thread(target=lambda out=self.proc.stdout: [None for _ in out], daemon=True).start()

    def ready(self):
        try:
            return http_get("http://127.0.0.1:%d/v2/health/ready" % self.http_port, 2)[0] == 200
        except urllib.error.HTTPError:
            return False

    def counter(self, name, **labels):
        """Sum of the samples of metric `name` whose labels include `labels`."""
        _, text = http_get("http://127.0.0.1:%d/metrics" % self.metrics_port)
        total = 0.0
        for line in text.splitlines():
            if line.startswith("#") or line.split("{", 1)[0].split(" ", 1)[0] != name:
                continue
            if all('%s="%s"' % (k, v) in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total


HAPROXY_CONFIG = """
global
  maxconn 2000

defaults
  mode http
  timeout connect 1s
  timeout client 60s
  timeout server 60s
  timeout check 1s
  # A request that reached a dead or refusing replica goes to another one: a refused or reset
  # connection, a connection closed without an answer, or a 503 (a replica draining).
  retries 3
  option redispatch 1
  retry-on conn-failure empty-response 503
  # L7 retries resend the request from HAProxy's buffer: wait for the whole request first.
  option http-buffer-request
  # Each replica's readiness, every 250 ms: 2 failures take it out, 2 successes put it back.
  # The gRPC servers speak HTTP/2; their checks go to the REST port over HTTP/1.1 (check-proto h1).
  default-server check inter 250ms fall 2 rise 2
  option httpchk GET /v2/health/ready
  # Requests without the header are spread round-robin; with it, each sequence id sticks to one
  # replica (consistent hashing: adding or losing a replica moves only its share of the ids).
  balance hdr(loopserve-sequence-id)
  hash-type consistent

frontend grpc_in
  bind 127.0.0.1:{grpc_port} proto h2
  default_backend grpc_replicas

frontend rest_in
  bind 127.0.0.1:{rest_port}
  option http-keep-alive
  default_backend rest_replicas

frontend stats
  bind 127.0.0.1:{stats_port}
  stats enable
  stats uri /stats

backend grpc_replicas
{grpc_servers}

backend rest_replicas
{rest_servers}
"""


class HaProxy:
    def __init__(self, binary, replicas, procs, work):
        self.grpc_port, self.rest_port, self.stats_port = free_ports(3)
        grpc_servers = "\n".join(
            "  server %s 127.0.0.1:%d id %d proto h2 port %d check-proto h1" % (r.name, r.grpc_port, r.index + 1,
                                                                 r.http_port) for r in replicas)
        rest_servers = "\n".join("  server %s 127.0.0.1:%d id %d" % (r.name, r.http_port,
                                                                     r.index + 1) for r in replicas)
        config = HAPROXY_CONFIG.replace("{grpc_port}", str(self.grpc_port)).replace(
            "{rest_port}", str(self.rest_port)).replace("{stats_port}", str(self.stats_port)).replace(
            "{grpc_servers}", grpc_servers).replace("{rest_servers}", rest_servers)
        self.config_path = os.path.join(work, "haproxy.cfg")
        with open(self.config_path, "w") as f:
            f.write(config)
        check = subprocess.run([binary, "-c", "-f", self.config_path], capture_output=True,
                               text=True, timeout=30)
        if check.returncode != 0:
            raise AssertionError("haproxy -c: %s%s" % (check.stdout, check.stderr))
        # -db: foreground, no daemon; the PID is ours to stop.
        self.proc = procs.start([binary, "-db", "-f", self.config_path],
                                os.path.join(work, "haproxy.log"))

    def status(self):
        """{(backend, server): 'UP' | 'DOWN' | ...} from the stats page's CSV."""
        _, text = http_get("http://127.0.0.1:%d/stats;csv" % self.stats_port, 2)
        lines = text.lstrip("# ").splitlines()
        header = lines[0].split(",")
        out = {}
        for line in lines[1:]:
            row = dict(zip(header, line.split(",")))
            if row.get("svname") not in ("FRONTEND", "BACKEND", None):
                out[(row["pxname"], row["svname"])] = row["status"].split(" ")[0]
        return out

    def all_up(self, name):
        s = self.status()
        return all(s.get((b, name)) == "UP" for b in ("grpc_replicas", "rest_replicas"))

    def all_down(self, name):
        s = self.status()
        return all(s.get((b, name), "").startswith("DOWN") for b in ("grpc_replicas", "rest_replicas"))


# ---------------------------------------------------------------------------------------------
# Clients


class Log:
    """What the clients saw: (protocol, start, end, ok, error) per request, thread-safe."""

    def __init__(self):
        self.lock = threading.Lock()
        self.records = []

    def add(self, *record):
        with self.lock:
            self.records.append(record)

    def between(self, t0, t1):
        with self.lock:
            return [r for r in self.records if r[1] >= t0 and r[1] < t1]


class Clients:
    """`grpc_n` gRPC and `rest_n` REST client threads sending `rnn` requests with M steps drawn
    from `steps` through HAProxy until stopped; each answer is checked against numpy."""

    def __init__(self, env, grpc_n, rest_n, steps, log):
        self.env, self.steps, self.log = env, steps, log
        # The answers are computed once, up front: numpy's reference of a long Loop takes longer
        # than the server's run, and the clients must not be the bottleneck.
        rng = np.random.RandomState(len(steps))
        self.cases = [self.case(rng, m) for m in steps for _ in range(3)]
        self.stop_event = threading.Event()
        self.threads = [threading.Thread(target=self.grpc_loop, args=(i,), daemon=True)
                        for i in range(grpc_n)]
        self.threads += [threading.Thread(target=self.rest_loop, args=(i,), daemon=True)
                         for i in range(rest_n)]
        for t in self.threads:
            t.start()

    def stop(self):
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout=BOUND_SECONDS)

    def case(self, rng, m):
        h0 = rng.uniform(-1, 1, (2, 4)).astype(np.float32)
        return m, h0, self.env.reference_rnn(np.int64(m), h0)[0]

    def grpc_loop(self, seed):
        import grpc
        pb = self.env.pb
        rng = np.random.RandomState(1000 + seed)
        channel = grpc.insecure_channel("127.0.0.1:%d" % self.env.haproxy.grpc_port)
        stub = self.env.pb_grpc.GRPCInferenceServiceStub(channel)
        while not self.stop_event.is_set():
            m, h0, want = self.cases[rng.randint(len(self.cases))]
            request = pb.ModelInferRequest(model_name="rnn")
            request.inputs.add(name="M", datatype="INT64", shape=[])
            request.inputs.add(name="h0", datatype="FP32", shape=[2, 4])
            request.outputs.add(name="h_final")
            request.raw_input_contents.extend([np.int64(m).tobytes(), h0.tobytes()])
            start = time.monotonic()
            try:
                response = stub.ModelInfer(request, timeout=30)
                got = np.frombuffer(response.raw_output_contents[0], np.float32).reshape(2, 4)
                ok = np.allclose(got, want, rtol=1e-4, atol=1e-5)
                self.log.add("grpc", start, time.monotonic(), ok, None if ok else "wrong answer")
            except grpc.RpcError as e:
                self.log.add("grpc", start, time.monotonic(), False,
                             "%s: %s" % (e.code(), e.details()))
        channel.close()

    def rest_loop(self, seed):
        import requests
        rng = np.random.RandomState(2000 + seed)
        session = requests.Session()
        url = "http://127.0.0.1:%d/v2/models/rnn/infer" % self.env.haproxy.rest_port
        while not self.stop_event.is_set():
            m, h0, want = self.cases[rng.randint(len(self.cases))]
            body = {"inputs": [{"name": "M", "datatype": "INT64", "shape": [], "data": [m]},
                               {"name": "h0", "datatype": "FP32", "shape": [2, 4],
                                "data": h0.reshape(-1).tolist()}],
                    "outputs": [{"name": "h_final"}]}
            start = time.monotonic()
            try:
                r = session.post(url, json=body, timeout=30)
                if r.status_code != 200:
                    self.log.add("rest", start, time.monotonic(), False,
                                 "HTTP %d %s" % (r.status_code, r.text[:200]))
                    continue
                out = r.json()["outputs"][0]
                got = np.array(out["data"], np.float32).reshape(out["shape"])
                ok = got.shape == (2, 4) and np.allclose(got, want, rtol=1e-4, atol=1e-5)
                self.log.add("rest", start, time.monotonic(), ok, None if ok else "wrong answer")
            except (requests.RequestException, ValueError, KeyError) as e:
                self.log.add("rest", start, time.monotonic(), False, repr(e)[:200])


def summarize(records, seconds):
    lat = sorted(r[2] - r[1] for r in records if r[3])
    pct = lambda q: round(lat[min(len(lat) - 1, int(q * len(lat)))] * 1000, 2) if lat else None
    return {"requests": len(records), "failed": sum(1 for r in records if not r[3]),
            "grpc": sum(1 for r in records if r[0] == "grpc"),
            "rest": sum(1 for r in records if r[0] == "rest"),
            "rps": round(len(records) / seconds, 1) if seconds > 0 else None,
            "p50_ms": pct(0.5), "p90_ms": pct(0.9), "p99_ms": pct(0.99)}


def failures_text(records, limit=5):
    bad = [r for r in records if not r[3]]
    return "%d failed, e.g. %s" % (len(bad), [(r[0], r[4]) for r in bad[:limit]])


# ---------------------------------------------------------------------------------------------
# Phases


class Env:
    pass


def phase_sticky(env, checks):
    """Interleaved sequences, gRPC and REST: each id stays on one replica."""
    import grpc
    import requests
    pb = env.pb
    channel = grpc.insecure_channel("127.0.0.1:%d" % env.haproxy.grpc_port)
    stub = env.pb_grpc.GRPCInferenceServiceStub(channel)
    session = requests.Session()
    rest_url = "http://127.0.0.1:%d/v2/models/counter/infer" % env.haproxy.rest_port

    def served_by(send):
        before = [r.counter("loopserve_requests_total", model="counter") for r in env.replicas]
        send()
        after = [r.counter("loopserve_requests_total", model="counter") for r in env.replicas]
        moved = [i for i in range(REPLICAS) if after[i] != before[i]]
        checks.check(len(moved) == 1, "one counter request moved %d replicas' counters" % len(moved))
        return moved[0] if moved else None

    def send_grpc(seq, step):
        request = pb.ModelInferRequest(model_name="counter")
        request.inputs.add(name="M", datatype="INT64", shape=[])
        request.inputs.add(name="start", datatype="INT64", shape=[1])
        request.raw_input_contents.extend([np.int64(step + 1).tobytes(),
                                           np.array([seq], np.int64).tobytes()])
        response = stub.ModelInfer(request, timeout=30, metadata=((STICKY_HEADER, "seq-%d" % seq),))
        final = np.frombuffer(response.raw_output_contents[0], np.int64)
        checks.check(final.tolist() == [seq + step + 1], "counter: %s" % final)

    def send_rest(seq, step):
        body = {"inputs": [{"name": "M", "datatype": "INT64", "shape": [], "data": [step + 1]},
                           {"name": "start", "datatype": "INT64", "shape": [1], "data": [seq]}],
                "outputs": [{"name": "final"}]}
        r = session.post(rest_url, json=body, timeout=30, headers={STICKY_HEADER: "seq-%d" % seq})
        checks.check(r.status_code == 200, "sticky REST: %d %s" % (r.status_code, r.text[:200]))
        checks.check(r.json()["outputs"][0]["data"] == [seq + step + 1], "counter: %s" % r.text)

    placement = {}
    sequences, steps = 12, 3
    for step in range(steps):  # step-major: the sequences interleave
        for seq in range(sequences):
            for protocol, send in (("grpc", send_grpc), ("rest", send_rest)):
                replica = served_by(lambda: send(seq, step))
                placement.setdefault((protocol, seq), []).append(replica)
    for (protocol, seq), replicas in sorted(placement.items()):
        checks.check(len(set(replicas)) == 1, "%s sequence %d went to replicas %s" % (
            protocol, seq, replicas))
    for protocol in ("grpc", "rest"):
        used = {placement[(protocol, s)][0] for s in range(sequences)}
        checks.check(len(used) > 1, "%s: %d sequence ids all hashed to one replica" % (
            protocol, sequences))
    channel.close()
    return {"sequences": sequences, "steps": steps,
            "replica_of_sequence": {"%s/%d" % k: v[0] for k, v in sorted(placement.items())}}


# What the capacity phase measures: (label, loopctl perf arguments).
CAPACITY_CASES = [
    ("rnn M=16", ["rnn", "--input=M:INT64::16", "--shape=h0:2,4"]),
    ("rnn M=2000", ["rnn", "--input=M:INT64::2000", "--shape=h0:2,4"]),
    ("counter M=16", ["counter", "--input=M:INT64::16"]),
]


def phase_capacity(env, checks):
    """loopctl perf (C++, no client-side bottleneck) for a few example models: one replica
    directly at concurrency 1 (its single worker on one core: requests per second per core), and
    the three through HAProxy at concurrency 6."""
    out = {}
    for label, perf in CAPACITY_CASES:
        row = {}
        for where, port, concurrency in (
                ("one_replica", env.replicas[0].grpc_port, 1),
                ("three_via_haproxy", env.haproxy.grpc_port, 2 * REPLICAS)):
            r = subprocess.run([env.loopctl, "--addr=127.0.0.1:%d" % port, "perf"] + perf +
                               ["--concurrency=%d" % concurrency, "--duration=3", "--warmup=20",
                                "--progress=false"],
                               capture_output=True, text=True, timeout=BOUND_SECONDS)
            checks.check(r.returncode == 0, "loopctl perf %s (%s): %s" % (label, where,
                                                                         r.stderr[-500:]))
            result = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
            checks.check(result and result[-1]["requests"] > 0, "loopctl perf printed no result")
            res = result[-1]
            row[where] = {"concurrency": concurrency, "rps": round(res["throughput"], 1),
                          "p50_ms": round(res["p50_us"] / 1000, 3),
                          "p99_ms": round(res["p99_us"] / 1000, 3)}
        out[label] = row
    return out


def phase_rolling(env, checks):
    log = Log()
    clients = Clients(env, grpc_n=4, rest_n=4, steps=[4, 8, 16, 32], log=log)
    t0 = time.monotonic()
    time.sleep(3)  # steady state first: its numbers are the per-replica capacity sample
    t_steady = time.monotonic()
    restarts = []
    try:
        for r in env.replicas:
            t = time.monotonic()
            r.proc.send_signal(signal.SIGTERM)
            # Readiness flips at once: HAProxy takes it out while it still serves.
            wait_until("HAProxy to take %s out" % r.name, lambda: env.haproxy.all_down(r.name))
            out_s = time.monotonic() - t
            code = r.proc.wait(timeout=BOUND_SECONDS)
            checks.check(code == 0, "%s exited %s after SIGTERM" % (r.name, code))
            exit_s = time.monotonic() - t
            r.start()
            wait_until("HAProxy to route to %s again" % r.name, lambda: env.haproxy.all_up(r.name))
            restarts.append({"replica": r.name, "out_of_rotation_s": round(out_s, 2),
                             "exited_s": round(exit_s, 2),
                             "back_s": round(time.monotonic() - t, 2)})
            time.sleep(1)
    finally:
        clients.stop()
    t1 = time.monotonic()
    steady = log.between(t0, t_steady)
    records = log.between(t0, t1)
    checks.check(records, "rolling: no requests were sent")
    checks.check(not [r for r in records if not r[3]], "rolling restart: " + failures_text(records))
    for protocol in ("grpc", "rest"):
        checks.check(any(r[0] == protocol for r in records), "rolling: no %s requests" % protocol)
    return {"steady": summarize(steady, t_steady - t0), "during": summarize(records, t1 - t0),
            "restarts": restarts}


def phase_kill(env, checks):
    log = Log()
    clients = Clients(env, grpc_n=4, rest_n=4, steps=[4, 8, 16, 32], log=log)
    victim = env.replicas[1]
    try:
        time.sleep(2)
        t_kill = time.monotonic()
        victim.proc.send_signal(signal.SIGKILL)
        wait_until("HAProxy to mark %s DOWN" % victim.name, lambda: env.haproxy.all_down(victim.name),
                   interval=0.02)
        down_s = time.monotonic() - t_kill
        time.sleep(2)  # traffic after the kill, on the two left
    finally:
        clients.stop()
    victim.proc.wait(timeout=BOUND_SECONDS)
    records = log.between(0, time.monotonic())
    in_flight = [r for r in records if r[1] <= t_kill < r[2]]
    failed = [r for r in records if not r[3]]
    late = [r for r in failed if r[1] > t_kill]
    checks.check(down_s < 2.0, "HAProxy took %.2f s to mark the killed replica DOWN" % down_s)
    checks.check(len(failed) <= len(in_flight),
                 "kill: %d failures but only %d requests in flight at the kill: %s" % (
                     len(failed), len(in_flight), failures_text(records)))
    checks.check(not late, "kill: %d requests started after the kill failed: %s" % (
        len(late), failures_text(late)))
    checks.check(any(r[1] > t_kill + down_s and r[3] for r in records),
                 "kill: nothing succeeded after the replica was marked DOWN")
    victim.start()
    wait_until("HAProxy to route to %s again" % victim.name, lambda: env.haproxy.all_up(victim.name))
    return {"failed": len(failed), "in_flight_at_kill": len(in_flight),
            "marked_down_s": round(down_s, 3), "requests": len(records)}


def prom_value(env, expr):
    url = "http://127.0.0.1:%d/api/v1/query?%s" % (env.prom_port,
                                                    urllib.parse.urlencode({"query": expr}))
    _, text = http_get(url)
    result = json.loads(text)["data"]["result"]
    return max(float(s["value"][1]) for s in result) if result else None


def phase_overload(env, checks):
    ratio = "max(loopserve:queue_compute_ratio:rate1m)"
    queue_avg = "max(loopserve:queue_seconds_per_request:rate1m)"

    def ratio_where(test):
        # A one-element list, true even when the ratio is 0; None until `test` holds.
        def predicate():
            value = prom_value(env, ratio)
            return [value] if value is not None and test(value) else None
        return predicate

    below = lambda limit: ratio_where(lambda v: v < limit)
    above = lambda limit: ratio_where(lambda v: v > limit)

    def light_until(what, predicate):
        # One client with long Loops: its requests never wait for a worker.
        light = Clients(env, grpc_n=1, rest_n=0, steps=[20000], log=Log())
        t = time.monotonic()
        try:
            return wait_until(what, predicate, seconds=90, interval=0.5), time.monotonic() - t
        finally:
            light.stop()

    # The earlier phases' short requests leave their own ratio in the window: first a baseline.
    (base,), _ = light_until("the queue/compute ratio to settle below 0.2 under a light load",
                          below(0.2))
    log = Log()
    # 12 clients with long Loops against 3 single-worker replicas: 3 run, 9 wait.
    heavy = Clients(env, grpc_n=6, rest_n=6, steps=[20000], log=log)
    t0 = time.monotonic()
    try:
        (peak,) = wait_until("the queue/compute ratio to rise above 2 under overload",
                             above(2.0), seconds=90, interval=0.5)
        peak_queue = prom_value(env, queue_avg)
    finally:
        heavy.stop()
    t1 = time.monotonic()
    overload = summarize(log.between(t0, t1), t1 - t0)
    checks.check(overload["failed"] == 0, "overload: " + failures_text(log.between(t0, t1)))
    (low,), fall_s = light_until("the queue/compute ratio to fall below 0.2 after the overload",
                              below(0.2))
    return {"baseline_ratio": round(base, 3), "peak_ratio": round(peak, 2),
            "peak_queue_seconds": round(peak_queue, 3), "rise_s": round(t1 - t0, 1),
            "fall_ratio": round(low, 3), "fall_s": round(fall_s, 1), "overload": overload}


class Checks:
    def __init__(self):
        self.count = 0

    def check(self, condition, message):
        self.count += 1
        if not condition:
            raise AssertionError(message)


def start_prometheus(env, args, procs, work):
    """Prometheus scraping the three replicas every second, with the shipped recording rules
    (windows shortened to 5 s)."""
    with open(os.path.join(args.repo_root, "deploy", "prometheus", "loopserve-rules.yml")) as f:
        rules = f.read()
    checks_rules = rules.count("[1m]")
    if checks_rules == 0:
        raise AssertionError("deploy/prometheus/loopserve-rules.yml has no [1m] windows")
    rules_path = os.path.join(work, "rules.yml")
    with open(rules_path, "w") as f:
        f.write(rules.replace("[1m]", "[5s]"))
    env.prom_port = free_ports(1)[0]
    config = os.path.join(work, "prometheus.yml")
    with open(config, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                "rule_files: ['%s']\n"
                "scrape_configs:\n  - job_name: loopserve\n    static_configs:\n"
                "      - targets: [%s]\n" % (rules_path, ", ".join(
                    "'127.0.0.1:%d'" % r.metrics_port for r in env.replicas)))
    procs.start([args.prometheus, "--config.file=" + config,
                 "--storage.tsdb.path=" + os.path.join(work, "tsdb"),
                 "--web.listen-address=127.0.0.1:%d" % env.prom_port],
                os.path.join(work, "prometheus.log"))
    wait_until("Prometheus to be ready",
               lambda: http_get("http://127.0.0.1:%d/-/ready" % env.prom_port)[0] == 200)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repo_root", required=True)
    parser.add_argument("--loopserve", required=True)
    parser.add_argument("--loopctl", required=True)
    parser.add_argument("--haproxy", default="/usr/sbin/haproxy")
    parser.add_argument("--prometheus", default="/usr/bin/prometheus")
    parser.add_argument("--protoc", default="protoc")
    parser.add_argument("--work", required=True)
    parser.add_argument("--summary")
    parser.add_argument("--phases", default="capacity,sticky,rolling,kill,overload")
    parser.add_argument("--keep_work", action="store_true", help="leave --work for debugging")
    args = parser.parse_args()
    # SIGTERM (a CTest timeout, a Ctrl-C'd CI job) unwinds through the cleanup below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("scale_out: terminated"))

    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    sys.path.insert(0, os.path.join(args.repo_root, "tests", "integration"))
    sys.path.insert(0, os.path.join(args.repo_root, "deploy"))
    from loopserve_py import make_stubs
    make_stubs(args.protoc, args.repo_root, os.path.join(args.work, "stubs"),
               ["proto/grpc_service.proto", "proto/model_config.proto"])
    from proto import grpc_service_pb2, grpc_service_pb2_grpc
    import make_example_models

    env = Env()
    env.pb, env.pb_grpc = grpc_service_pb2, grpc_service_pb2_grpc
    env.loopctl = args.loopctl
    env.reference_rnn = make_example_models.reference_rnn
    models = os.path.join(args.work, "models")
    subprocess.run(["/usr/bin/python3", os.path.join(args.repo_root, "deploy",
                                                     "make_example_models.py"), models],
                   check=True, timeout=BOUND_SECONDS, stdout=subprocess.DEVNULL)
    procs = Processes()
    checks = Checks()
    # The machine's load when the test started: other work on it shares the cores.
    summary = {"cpu": cpu_name(), "cores": os.cpu_count(), "replica_flags": Replica.FLAGS,
               "loadavg_1m_at_start": os.getloadavg()[0]}
    started = time.monotonic()
    status = 1
    try:
        env.replicas = [Replica(i, args.loopserve, models, procs, args.work) for i in range(REPLICAS)]
        for r in env.replicas:
            r.start()
        env.haproxy = HaProxy(args.haproxy, env.replicas, procs, args.work)
        start_prometheus(env, args, procs, args.work)
        for r in env.replicas:
            wait_until("HAProxy to route to %s" % r.name, lambda r=r: env.haproxy.all_up(r.name))
        phases = {"capacity": phase_capacity, "sticky": phase_sticky, "rolling": phase_rolling, "kill": phase_kill,
                  "overload": phase_overload}
        for name in args.phases.split(","):
            t = time.monotonic()
            summary[name] = phases[name](env, checks)
            summary[name + "_seconds"] = round(time.monotonic() - t, 1)
            print("scale_out: %s passed (%.1f s)" % (name, time.monotonic() - t), flush=True)
        status = 0
    except AssertionError as e:
        print("FAIL: %s" % e, flush=True)
        for r in getattr(env, "replicas", []):
            path = os.path.join(args.work, "%s.log" % r.name)
            if os.path.exists(path):
                print("--- %s log tail:\n%s" % (r.name, "".join(open(path).readlines()[-10:])))
    finally:
        procs.stop_all()
        summary["total_seconds"] = round(time.monotonic() - started, 1)
        line = json.dumps(summary, sort_keys=True)
        print(line, flush=True)
        if args.summary:
            with open(args.summary, "w") as f:
                f.write(line + "\n")
        if not args.keep_work:
            shutil.rmtree(args.work, ignore_errors=True)
    print("%d checks, %s" % (checks.count, "all passed" if status == 0 else "FAILED"))
    return status


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    sys.exit(main())
