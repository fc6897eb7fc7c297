#!/usr/bin/python3
"""Stateful sequences (`sequence_batching`) end to end, with Triton's own Python client.

Usage: /usr/bin/python3 python_sequence_test.py --loopserve=BIN [--loopctl=BIN] --models=DIR --repo_root=DIR
       --work=DIR [--tritonclient=DIR]

1. Triton's four sequence examples (simple_grpc_sequence_sync/stream, the aio stream one and
   simple_http_sequence_sync) run unmodified against `simple_sequence` and print PASS.
2. Interleaved sequences over gRPC and REST, direct and oldest: every step's SUM is the running sum
   of that sequence's own inputs (the spec of the model's implicit state), so a state that leaked
   from one sequence into another shows.
3. gru_chunk (oldest, state [1, batch, 64]): 12 concurrent streams; every step's `prob` equals the
   numpy GRU reference fed the same chunks by one client carrying the state itself.
4. Every error case, over gRPC and REST: no sequence_id, a step without a start, a step after the
   end, a control/state input sent by the client, a restart (state reset), a step past its deadline
   (the sequence ends and says why), an idle timeout (the next step is told it expired), more
   sequences than slots (queued, then RESOURCE_EXHAUSTED), a reload of the model while a sequence
   is live (the new version starts fresh).
"""

import argparse
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np

from loopserve_py import check, start_server, Checks, Metrics  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--loopserve", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--repo_root", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--tritonclient", default=None)
    parser.add_argument("--loopctl", default=None)
    return parser.parse_args()


def make_repo(args):
    """simple_sequence and gru_chunk as generated, plus variants: oldest, one slot + short idle."""
    repo = os.path.join(args.work, "models")
    shutil.rmtree(repo, ignore_errors=True)
    os.makedirs(repo)
    for name in ("simple_sequence", "gru_chunk"):
        shutil.copytree(os.path.join(args.models, name), os.path.join(repo, name))
    config = open(os.path.join(repo, "simple_sequence", "config.pbtxt")).read()
    variants = {
        "seq_oldest": config.replace("  state [", "  oldest { max_candidate_sequences: 8 }\n  state ["),
        # One slot (max_batch_size 1, direct), 1 s idle: for expiry and slot exhaustion.
        "seq_small": config.replace("max_batch_size: 8", "max_batch_size: 1").replace(
            "max_sequence_idle_microseconds: 5000000", "max_sequence_idle_microseconds: 1000000")
        + "instance_group [ { count: 1 kind: KIND_CPU } ]\n",
    }
    for name, text in variants.items():
        shutil.copytree(os.path.join(args.models, "simple_sequence"), os.path.join(repo, name))
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write(text)
    return repo


def run_examples(client_dir, ports):
    env = dict(os.environ, PYTHONPATH=os.path.join(client_dir, "lib"))
    examples = os.path.join(client_dir, "examples")
    for script, port in (("simple_grpc_sequence_sync_infer_client.py", ports["grpc"]),
                         ("simple_grpc_sequence_stream_infer_client.py", ports["grpc"]),
                         ("simple_grpc_aio_sequence_stream_infer_client.py", ports["grpc"]),
                         ("simple_http_sequence_sync_infer_client.py", ports["http"])):
        result = subprocess.run([sys.executable, os.path.join(examples, script),
                                 "-u", "127.0.0.1:%d" % port],
                                env=env, capture_output=True, text=True, timeout=120)
        check(result.returncode == 0 and "PASS" in result.stdout,
              "%s: rc %d\n%s%s" % (script, result.returncode, result.stdout, result.stderr))
        print("ok: Triton example %s" % script)


class Clients:
    """One step over gRPC or REST with tritonclient; errors come back as (code, message)."""

    def __init__(self, ports):
        import tritonclient.grpc as grpcclient
        import tritonclient.http as httpclient
        self.grpc = grpcclient
        self.http = httpclient
        self.grpc_client = grpcclient.InferenceServerClient("127.0.0.1:%d" % ports["grpc"])
        self.http_url = "127.0.0.1:%d" % ports["http"]
        self.http_client = httpclient.InferenceServerClient(self.http_url)
        self.local = threading.local()

    def local_http(self):
        """The HTTP client is gevent's: one per thread."""
        if threading.current_thread() is threading.main_thread():
            return self.http_client
        if not hasattr(self.local, "client"):
            self.local.client = self.http.InferenceServerClient(self.http_url)
        return self.local.client

    def step(self, protocol, model, value, sequence_id, start=False, end=False, output="SUM",
             extra=None, timeout_us=None):
        mod = self.grpc if protocol == "grpc" else self.http
        client = self.grpc_client if protocol == "grpc" else self.local_http()
        array = np.full((1, 1), value, np.int32)
        inputs = [mod.InferInput("INPUT", [1, 1], "INT32")]
        inputs[0].set_data_from_numpy(array)
        for name in extra or ():
            inputs.append(mod.InferInput(name, [1, 1], "INT32"))
            inputs[-1].set_data_from_numpy(array)
        outputs = [mod.InferRequestedOutput(output)]
        kwargs = {}
        if timeout_us is not None:
            kwargs["timeout"] = timeout_us  # Triton's `timeout` request parameter
        from tritonclient.utils import InferenceServerException
        try:
            result = client.infer(model, inputs, outputs=outputs, sequence_id=sequence_id,
                                  sequence_start=start, sequence_end=end, **kwargs)
            return int(result.as_numpy(output)[0][0]), None
        except InferenceServerException as e:
            return None, (str(e.status()), e.message() or "")


def interleaved(clients, protocol, model, base):
    """Six sequences stepped in turn from three threads; SUM must be each one's running sum."""
    rng = np.random.RandomState(base)
    plans = {base + k: rng.randint(-50, 50, size=7).tolist() for k in range(6)}
    errors = queue.Queue()

    def drive(ids):
        sums = {i: 0 for i in ids}
        for t in range(7):
            for i in ids:
                value = plans[i][t]
                got, err = clients.step(protocol, model, value, i, start=t == 0, end=t == 6)
                sums[i] += value
                if err is not None or got != sums[i]:
                    errors.put("%s %s seq %d step %d: got %r err %r want %d" %
                               (protocol, model, i, t, got, err, sums[i]))

    ids = sorted(plans)
    done = queue.Queue()

    def run(part):
        try:
            drive(part)
        finally:
            done.put(part)

    threads = [threading.Thread(target=run, args=(ids[k::3],)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    check(errors.empty(), errors.queue[0] if not errors.empty() else "")
    check(done.qsize() == 3, "a driving thread died")
    print("ok: interleaved sequences keep their own state (%s, %s)" % (protocol, model))


def gru_streams(clients, repo_root):
    sys.path.insert(0, os.path.join(repo_root, "deploy"))
    import make_example_models as mem  # the numpy GRU reference (ONNX GRU semantics)
    streams, steps = 12, 6
    rng = np.random.RandomState(31)
    chunks = rng.uniform(-1, 1, (streams, steps, 1, mem.GRU_CHUNK_STEPS,
                                 mem.GRU_CHUNK_FEATURES)).astype(np.float32)
    errors = queue.Queue()
    mod = clients.grpc

    def drive(s):
        h = np.zeros((1, 1, mem.GRU_CHUNK_HIDDEN), np.float32)  # the client-carried state
        for t in range(steps):
            want, h = mem.reference_gru_chunk(chunks[s, t], np.array([[1.0 if t == 0 else 0.0]],
                                                                     np.float32), h)
            inp = mod.InferInput("chunk", list(chunks[s, t].shape), "FP32")
            inp.set_data_from_numpy(chunks[s, t])
            try:
                got = clients.grpc_client.infer("gru_chunk", [inp], sequence_id=5000 + s,
                                                sequence_start=t == 0,
                                                sequence_end=t == steps - 1).as_numpy("prob")
            except Exception as e:  # noqa: BLE001
                errors.put("stream %d step %d: %s" % (s, t, e))
                return
            if got.shape != want.shape or not np.allclose(got, want, rtol=1e-4, atol=1e-5):
                errors.put("stream %d step %d: %r vs %r" % (s, t, got, want))

    threads = [threading.Thread(target=drive, args=(s,)) for s in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    check(errors.empty(), errors.queue[0] if not errors.empty() else "")
    print("ok: gru_chunk, %d concurrent streams equal the client-carried reference" % streams)


def error_cases(clients, protocol, repo):
    invalid = "StatusCode.INVALID_ARGUMENT" if protocol == "grpc" else "400"
    exhausted = "StatusCode.RESOURCE_EXHAUSTED" if protocol == "grpc" else "429"
    deadline = "StatusCode.DEADLINE_EXCEEDED" if protocol == "grpc" else "504"
    base = 9000 if protocol == "grpc" else 9500
    step = clients.step

    def expect(result, code, pattern, what):
        got, err = result
        check(err is not None and err[0] == code and re.search(pattern, err[1]),
              "%s %s: got %r %r, want %s /%s/" % (protocol, what, got, err, code, pattern))

    # No sequence id at all.
    mod = clients.grpc if protocol == "grpc" else clients.http
    client = clients.grpc_client if protocol == "grpc" else clients.local_http()
    inp = mod.InferInput("INPUT", [1, 1], "INT32")
    inp.set_data_from_numpy(np.ones((1, 1), np.int32))
    from tritonclient.utils import InferenceServerException
    try:
        client.infer("simple_sequence", [inp])
        check(False, "%s: a request without sequence_id was answered" % protocol)
    except InferenceServerException as e:
        check(str(e.status()) == invalid and "sequence_id" in e.message(), str(e))
    expect(step(protocol, "simple_sequence", 1, base + 1), invalid, "never started",
           "step without a start")
    check(step(protocol, "simple_sequence", 4, base + 2, start=True)[0] == 4, "start")
    check(step(protocol, "simple_sequence", 5, base + 2, end=True)[0] == 9, "end")
    expect(step(protocol, "simple_sequence", 1, base + 2), invalid, "ended", "step after the end")
    expect(step(protocol, "simple_sequence", 1, base + 3, start=True, extra=["ACC_IN"]), invalid,
           "server feeds", "a state input sent by the client")
    expect(step(protocol, "simple_sequence", 1, base + 3, start=True, extra=["START"]), invalid,
           "server feeds", "a control input sent by the client")
    # Restart: a second start of a live id begins again from the initial state.
    check(step(protocol, "simple_sequence", 10, base + 4, start=True)[0] == 10, "restart 1")
    check(step(protocol, "simple_sequence", 3, base + 4)[0] == 13, "restart 2")
    check(step(protocol, "simple_sequence", 2, base + 4, start=True)[0] == 2, "restart resets")
    check(step(protocol, "simple_sequence", 1, base + 4, end=True)[0] == 3, "restart end")
    # A step past its deadline fails, and ends its sequence with the reason.
    check(step(protocol, "simple_sequence", 1, base + 5, start=True)[0] == 1, "deadline start")
    expect(step(protocol, "simple_sequence", 1, base + 5, timeout_us=1), deadline, "deadline",
           "a step past its deadline")
    expect(step(protocol, "simple_sequence", 1, base + 5), invalid, "failed",
           "a step after a failed one")
    # One slot: a second start queues until the first sequence expires (1 s idle) and then runs;
    # a third start meanwhile finds the queue full; the expired sequence's next step is told.
    check(step(protocol, "seq_small", 7, base + 6, start=True)[0] == 7, "small start")
    queued = {}
    waiter = threading.Thread(
        target=lambda: queued.update(r=step(protocol, "seq_small", 8, base + 7, start=True)))
    began = time.monotonic()
    waiter.start()
    time.sleep(0.3)  # the waiter's start reaches the server's slot queue
    expect(step(protocol, "seq_small", 9, base + 8, start=True), exhausted, "slots",
           "more sequences than slots")
    waiter.join(timeout=30)
    check(queued.get("r", (None,))[0] == 8 and time.monotonic() - began >= 0.5,
          "%s: the queued start: %r" % (protocol, queued))
    expect(step(protocol, "seq_small", 1, base + 6), invalid, "expired",
           "a step after the idle timeout")
    check(step(protocol, "seq_small", 1, base + 7, end=True)[0] == 9, "queued sequence goes on")
    print("ok: error cases (%s)" % protocol)


def metrics_case(metrics):
    """The sequence series, against what the error cases did to seq_small (one slot): per protocol
    three sequences started (one expired, the queued one ended), one start and one step rejected."""
    small = {"model": "seq_small", "version": "1"}
    want = {"started": 4, "expired": 2, "ended": 2, "rejected": 4}
    for outcome, count in want.items():
        got = metrics.value("loopserve_sequences_total", outcome=outcome, **small)
        check(got == count, "loopserve_sequences_total{seq_small,%s}: %s, want %s" %
              (outcome, got, count))
    check(metrics.value("loopserve_sequence_slots", **small) == 1, "seq_small slots")
    check(metrics.value("loopserve_sequences_live", **small) == 0, "seq_small live")
    check(metrics.value("loopserve_sequence_slots", model="simple_sequence") == 16,
          "simple_sequence slots: max_batch_size 8 x 2 instances (--workers)")
    print("ok: sequence metrics")


def loopctl_case(loopctl, ports):
    """loopctl infer with --sequence_id/--sequence_start/--sequence_end over gRPC and REST, and
    perf --sequence_length driving 4 concurrent sequences."""
    def run(*argv):
        return subprocess.run([loopctl] + list(argv), capture_output=True, text=True, timeout=60)

    grpc_addr = "--addr=127.0.0.1:%d" % ports["grpc"]
    http = ["--protocol=http", "--addr=127.0.0.1:%d" % ports["http"]]
    first = run(grpc_addr, "infer", "simple_sequence", "--input=INPUT:INT32:1,1:5",
                "--sequence_id=4242", "--sequence_start", "--output=SUM")
    second = run(*http, "infer", "simple_sequence", "--input=INPUT:INT32:1,1:4",
                 "--sequence_id=4242", "--sequence_end", "--output=SUM")
    check(first.returncode == 0 and "= [5]" in first.stdout, first.stdout + first.stderr)
    check(second.returncode == 0 and "= [9]" in second.stdout, second.stdout + second.stderr)
    after = run(grpc_addr, "infer", "simple_sequence", "--input=INPUT:INT32:1,1:1",
                "--sequence_id=4242", "--output=SUM")
    check(after.returncode != 0 and "ended" in after.stderr, after.stdout + after.stderr)
    perf = run(grpc_addr, "perf", "gru_chunk", "--sequence_length=5", "--concurrency=4",
               "--requests=40", "--progress=false")
    check(perf.returncode == 0 and '"requests":40' in perf.stdout, perf.stdout + perf.stderr)
    # A string id cannot be numbered per sequence: concurrent clients would all drive one.
    named = run(grpc_addr, "perf", "gru_chunk", "--sequence_length=5", "--concurrency=4",
                "--sequence_id=abc", "--requests=40", "--progress=false")
    check(named.returncode == 2 and "--sequence_length numbers its sequences" in named.stderr,
          named.stdout + named.stderr)
    print("ok: loopctl infer --sequence_id/--sequence_start/--sequence_end, perf --sequence_length")


def reload_case(clients, repo):
    check(clients.step("grpc", "seq_oldest", 5, 7001, start=True)[0] == 5, "before reload")
    path = os.path.join(repo, "seq_oldest", "config.pbtxt")
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace("max_candidate_sequences: 8", "max_candidate_sequences: 4"))
    clients.grpc_client.load_model("seq_oldest")
    got, err = clients.step("grpc", "seq_oldest", 1, 7001)
    check(err is not None and err[0] == "StatusCode.INVALID_ARGUMENT" and "unloaded" in err[1],
          "step after a reload: %r %r" % (got, err))
    check(clients.step("grpc", "seq_oldest", 5, 7001, start=True)[0] == 5, "fresh after reload")
    print("ok: a reload ends live sequences; the new version starts fresh")


def main():
    args = parse_args()
    os.makedirs(args.work, exist_ok=True)
    client_dir = args.tritonclient or os.path.join(args.repo_root, "..", "shared", "tritonclient")
    if not os.path.isdir(os.path.join(client_dir, "lib", "tritonclient")):
        print("SKIP: no tritonclient at %s" % client_dir)
        return 0
    sys.path.insert(0, os.path.join(client_dir, "lib"))
    repo = make_repo(args)
    log = open(os.path.join(args.work, "loopserve.log"), "w")
    proc, ports = start_server(args.loopserve,
                               ["--model_repository=" + repo, "--metrics_port=0",
                                "--model_control_mode=explicit", "--load_model=*"],
                               kinds=("grpc", "http", "metrics"), stderr=log)
    try:
        run_examples(client_dir, ports)
        clients = Clients(ports)
        for protocol in ("grpc", "http"):
            interleaved(clients, protocol, "simple_sequence", 100 if protocol == "grpc" else 200)
            interleaved(clients, protocol, "seq_oldest", 300 if protocol == "grpc" else 400)
        gru_streams(clients, args.repo_root)
        for protocol in ("grpc", "http"):
            error_cases(clients, protocol, repo)
        metrics_case(Metrics(ports["metrics"]))
        if args.loopctl:
            loopctl_case(args.loopctl, ports)
        reload_case(clients, repo)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    check(code == 0, "loopserve exited with %d" % code)
    print("PASS: %d checks" % Checks.count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
