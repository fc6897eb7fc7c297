#!/usr/bin/python3
"""Stateful sequences when a step is stopped, when the server drains, and their statistics, over
gRPC and REST with Triton's own Python client (and raw sockets where the client has no verb).

Usage: /usr/bin/python3 python_sequence_control_test.py --loopserve=BIN --models=DIR
       --repo_root=DIR --work=DIR [--tritonclient=DIR]

The model, spin_sequence, is simple_sequence's accumulator (SUM: the running sum of the sequence's
INPUTs, carried in the implicit state ACC) with a Loop of SPIN iterations before its answer, so a
step runs as long as the test asks (the Loop checks the deadline and cancellation every
iteration). The iteration time is measured first, on this machine.

1. Deadline of a running step: the gRPC deadline (client_timeout) and Triton's `timeout`
   parameter over REST. The step answers DEADLINE_EXCEEDED (REST 504) promptly, and the
   sequence's next step is told the sequence ended because that step failed, naming why.
2. Cancel of a running step: tritonclient's async_infer(...).cancel() over gRPC, the client
   closing its connection over REST. The next step is told the sequence ended, naming the cancel.
3. ModelStatistics' sequence_stats (loopserve's extension, field 101 / key "sequence_stats")
   after a known script of steps: tritonclient's get_inference_statistics still parses over gRPC
   and HTTP; the counts are those of the script.
4. Drain: SIGTERM while steps run on live sequences (one over gRPC, one over REST): both are
   answered with their right sums, new steps of other live sequences get UNAVAILABLE (REST 503)
   while they run, and loopserve exits 0. With a step that would run for minutes and
   --exit_timeout_seconds=2: the step is answered with an error at the exit timeout and loopserve
   still exits 0, promptly.
"""

import argparse
import http.client
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loopserve_py import check, start_server, Checks, Metrics  # noqa: E402

from onnx import TensorProto, helper, numpy_helper  # noqa: E402  (after loopserve_py's shim)
import onnx  # noqa: E402

SPIN_CONFIG = """\
max_batch_size: 4
input [
  { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "SPIN" data_type: TYPE_INT64 dims: [ 1 ] }
]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
  state [
    {
      input_name: "ACC_IN"
      output_name: "ACC_OUT"
      data_type: TYPE_INT32
      dims: [ 1 ]
      initial_state { name: "zero" data_type: TYPE_INT32 dims: [ 1 ] zero_data: true }
    }
  ]
}
"""

# Iterations that run for minutes on any machine: a step only a deadline, a cancel or the exit
# timeout ends.
ENDLESS = 1 << 40


def build_spin_sequence():
    """SUM = (ACC_IN * (1 - START) + INPUT) * READY, plus (Loop's count - SPIN) = 0 so the Loop's
    result is used."""
    def vi(name, elem_type, shape):
        return helper.make_tensor_value_info(name, elem_type, shape)

    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["x_in", "one64"], ["x_out"])],
        "spin_body",
        [vi("iter", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []),
         vi("x_in", TensorProto.INT64, [1])],
        [vi("cond_out", TensorProto.BOOL, []), vi("x_out", TensorProto.INT64, [1])],
        initializer=[numpy_helper.from_array(np.array([1], np.int64), "one64")])
    graph = helper.make_graph(
        [helper.make_node("ReduceMax", ["SPIN"], ["trips"], keepdims=0),
         helper.make_node("Loop", ["trips", "", "zero64"], ["spun"], name="spin_loop", body=body),
         helper.make_node("Sub", ["spun", "trips"], ["spun0"]),
         helper.make_node("Cast", ["spun0"], ["spun32"], to=TensorProto.INT32),
         helper.make_node("Sub", ["one", "START"], ["keep"]),
         helper.make_node("Mul", ["ACC_IN", "keep"], ["kept"]),
         helper.make_node("Add", ["kept", "INPUT"], ["added"]),
         helper.make_node("Mul", ["added", "READY"], ["ready_sum"]),
         helper.make_node("Add", ["ready_sum", "spun32"], ["SUM"]),
         helper.make_node("Identity", ["SUM"], ["ACC_OUT"])],
        "spin_sequence",
        [vi("INPUT", TensorProto.INT32, ["batch", 1]), vi("SPIN", TensorProto.INT64, ["batch", 1]),
         vi("START", TensorProto.INT32, ["batch", 1]), vi("READY", TensorProto.INT32, ["batch", 1]),
         vi("ACC_IN", TensorProto.INT32, ["batch", 1])],
        [vi("SUM", TensorProto.INT32, ["batch", 1]), vi("ACC_OUT", TensorProto.INT32, ["batch", 1])],
        initializer=[numpy_helper.from_array(np.array(1, np.int32), "one"),
                     numpy_helper.from_array(np.array([0], np.int64), "zero64")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def make_repo(args):
    """spin_sequence; stats_sequence (a copy of simple_sequence: direct, 8 slots) whose
    statistics only the statistics case touches; counter (no sequence_batching)."""
    repo = os.path.join(args.work, "models")
    shutil.rmtree(repo, ignore_errors=True)
    os.makedirs(os.path.join(repo, "spin_sequence", "1"))
    onnx.save(build_spin_sequence(), os.path.join(repo, "spin_sequence", "1", "model.onnx"))
    with open(os.path.join(repo, "spin_sequence", "config.pbtxt"), "w") as f:
        f.write(SPIN_CONFIG)
    shutil.copytree(os.path.join(args.models, "simple_sequence"),
                    os.path.join(repo, "stats_sequence"))
    with open(os.path.join(repo, "stats_sequence", "config.pbtxt"), "a") as f:
        f.write("instance_group [ { count: 1 kind: KIND_CPU } ]\n")
    shutil.copytree(os.path.join(args.models, "counter"), os.path.join(repo, "counter"))
    return repo


class Clients:
    """One step of spin_sequence (or stats_sequence) over gRPC or REST with tritonclient; errors
    come back as (code, message): gRPC's StatusCode name, REST's HTTP status."""

    def __init__(self, ports):
        import tritonclient.grpc as grpcclient
        import tritonclient.http as httpclient
        self.grpc = grpcclient
        self.http = httpclient
        self.ports = ports
        self.grpc_client = grpcclient.InferenceServerClient("127.0.0.1:%d" % ports["grpc"])
        self.local = threading.local()

    def http_client(self):
        """The HTTP client is gevent's: one per thread."""
        if not hasattr(self.local, "client"):
            self.local.client = self.http.InferenceServerClient("127.0.0.1:%d" % self.ports["http"])
        return self.local.client

    def inputs(self, protocol, model, value, spin):
        mod = self.grpc if protocol == "grpc" else self.http
        inputs = [mod.InferInput("INPUT", [1, 1], "INT32")]
        inputs[0].set_data_from_numpy(np.full((1, 1), value, np.int32))
        if model == "spin_sequence":
            inputs.append(mod.InferInput("SPIN", [1, 1], "INT64"))
            inputs[1].set_data_from_numpy(np.full((1, 1), spin, np.int64))
        return inputs

    def step(self, protocol, value, sequence_id, start=False, end=False, spin=0,
             model="spin_sequence", **kwargs):
        from tritonclient.utils import InferenceServerException
        client = self.grpc_client if protocol == "grpc" else self.http_client()
        try:
            result = client.infer(model, self.inputs(protocol, model, value, spin),
                                  sequence_id=sequence_id, sequence_start=start,
                                  sequence_end=end, **kwargs)
            return int(result.as_numpy("SUM")[0][0]), None
        except InferenceServerException as e:
            return None, (str(e.status()), e.message() or "")


def expect_error(result, codes, words, what):
    """`result` is an error whose code is one of `codes` and whose message has every word."""
    got, err = result
    check(err is not None and err[0] in codes and all(w in err[1].lower() for w in words),
          "%s: got %r %r, want one of %s naming %s" % (what, got, err, codes, words))


def ended_error(protocol):
    """The codes of a step of a sequence that ended with a failed step: INVALID_ARGUMENT (not
    live) once the failure was handled, ABORTED when it was queued behind the failing step."""
    if protocol == "grpc":
        return ("StatusCode.INVALID_ARGUMENT", "StatusCode.ABORTED")
    return ("400", "409")


def iteration_seconds(clients):
    """Seconds per Loop iteration of spin_sequence, measured on a throwaway sequence."""
    spin = 200000
    check(clients.step("grpc", 1, 90, start=True)[0] == 1, "calibration start")
    began = time.monotonic()
    got = clients.step("grpc", 1, 90, spin=spin, end=True)
    took = time.monotonic() - began
    check(got == (2, None), "calibration step: %r" % (got,))
    print("spin_sequence: %.0f ns per Loop iteration" % (took / spin * 1e9))
    return took / spin


def deadline_cases(clients):
    """A running step past its deadline: gRPC deadline and REST `timeout` parameter."""
    for protocol, seq in (("grpc", 101), ("http", 102)):
        check(clients.step(protocol, 3, seq, start=True)[0] == 3, "%s deadline start" % protocol)
        began = time.monotonic()
        if protocol == "grpc":
            result = clients.step(protocol, 1, seq, spin=ENDLESS, client_timeout=0.3)
            expect_error(result, ("StatusCode.DEADLINE_EXCEEDED",), ("deadline",),
                         "grpc: a running step past its gRPC deadline")
        else:
            result = clients.step(protocol, 1, seq, spin=ENDLESS, timeout=300000)
            expect_error(result, ("504",), ("deadline",),
                         "http: a running step past its `timeout` parameter")
        check(time.monotonic() - began < 10, "%s: the late step took %.1f s" %
              (protocol, time.monotonic() - began))
        # The server stops the Loop at the deadline (the gRPC client stops waiting at once, so
        # the next step may still find the late one running: then it is ABORTED).
        expect_error(clients.step(protocol, 1, seq), ended_error(protocol),
                     ("sequence %d" % seq, "deadline"), "%s: the step after a late one" % protocol)
        check(time.monotonic() - began < 15, "%s: the server did not stop the late step" % protocol)
        check(clients.step(protocol, 4, seq, start=True)[0] == 4, "%s: the id starts again"
              % protocol)
        check(clients.step(protocol, 1, seq, end=True)[0] == 5, "%s: and ends" % protocol)
    print("ok: a running step past its deadline ends its sequence, saying why (grpc, http)")


def wait_inflight(metrics, want, what):
    got = metrics.wait_for("loopserve_inflight_requests", want, seconds=20)
    check(got == want, "%s: loopserve_inflight_requests %s, want %s" % (what, got, want))


def cancel_cases(clients, metrics):
    """A running step cancelled by its client: gRPC cancel, REST connection closed."""
    # gRPC: tritonclient's async_infer returns a CallContext whose cancel() cancels the RPC.
    seq = 201
    check(clients.step("grpc", 3, seq, start=True)[0] == 3, "grpc cancel start")
    answered = queue.Queue()
    ctx = clients.grpc_client.async_infer(
        "spin_sequence", clients.inputs("grpc", "spin_sequence", 1, ENDLESS),
        callback=lambda result, error: answered.put(error), sequence_id=seq)
    wait_inflight(metrics, 1, "grpc: the step to cancel")
    ctx.cancel()
    error = answered.get(timeout=10)
    check(error is not None and "CANCELLED" in str(error.status()),
          "grpc: the cancelled step's answer: %r" % (error,))
    wait_inflight(metrics, 0, "grpc: the cancelled step is done")
    expect_error(clients.step("grpc", 1, seq), ended_error("grpc"),
                 ("sequence %d" % seq, "cancel"), "grpc: the step after a cancelled one")

    # REST: the client closes its connection while the step runs.
    seq = 202
    check(clients.step("http", 3, seq, start=True)[0] == 3, "http cancel start")
    body = json.dumps({
        "parameters": {"sequence_id": seq},
        "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [1]},
                   {"name": "SPIN", "shape": [1, 1], "datatype": "INT64", "data": [ENDLESS]}]})
    conn = http.client.HTTPConnection("127.0.0.1", clients.ports["http"], timeout=30)
    conn.request("POST", "/v2/models/spin_sequence/infer", body,
                 {"Content-Type": "application/json"})
    wait_inflight(metrics, 1, "http: the step to cancel")
    conn.sock.shutdown(2)
    conn.close()
    wait_inflight(metrics, 0, "http: the step whose client left is done")
    expect_error(clients.step("http", 1, seq), ended_error("http"),
                 ("sequence %d" % seq, "cancel"), "http: the step after a cancelled one")
    print("ok: a running step cancelled by its client ends its sequence, saying why (grpc, http)")


def read_fields(data):
    """The protobuf wire fields of `data`: {number: [value]} (varints as ints, fixed64 as bytes,
    length-delimited as bytes)."""
    fields, i = {}, 0

    def varint():
        nonlocal i
        shift = value = 0
        while True:
            byte = data[i]
            i += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value

    while i < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            value = varint()
        elif wire == 1:
            value, i = data[i:i + 8], i + 8
        elif wire == 2:
            n = varint()
            value, i = data[i:i + n], i + n
        elif wire == 5:
            value, i = data[i:i + 4], i + 4
        else:
            raise ValueError("wire type %d" % wire)
        fields.setdefault(number, []).append(value)
    return fields


SEQUENCE_STATS_FIELDS = ("live", "slots", "backlog", "started", "ended", "expired", "aborted",
                         "restarted", "rejected", "step_count", "execution_count")


def statistics_case(clients):
    """sequence_stats after a known script on stats_sequence (direct, 8 slots, nothing else uses
    it): 2 sequences started and 1 restart, 5 steps run one per execution, 1 end, 1 live, 1 step
    refused."""
    step = clients.step
    model = "stats_sequence"
    check(step("grpc", 1, 301, start=True, model=model)[0] == 1, "stats 1")
    check(step("http", 2, 301, model=model)[0] == 3, "stats 2")
    check(step("grpc", 3, 301, end=True, model=model)[0] == 6, "stats 3")
    check(step("http", 5, 302, start=True, model=model)[0] == 5, "stats 4")
    check(step("grpc", 7, 302, start=True, model=model)[0] == 7, "stats 5 (a restart)")
    expect_error(step("grpc", 1, 303, model=model), ("StatusCode.INVALID_ARGUMENT",),
                 ("never started",), "stats: a step without a start")
    want = {"live": 1, "slots": 8, "backlog": 0, "started": 2, "ended": 1, "expired": 0,
            "aborted": 0, "restarted": 1, "rejected": 1, "step_count": 5, "execution_count": 5}

    # HTTP: tritonclient's JSON, with our key beside Triton's.
    stats = clients.http_client().get_inference_statistics(model)
    entry = stats["model_stats"][0]
    check(entry["name"] == model and entry["inference_count"] == 5 and
          entry["inference_stats"]["success"]["count"] == 5,
          "http: Triton's statistics of %s: %r" % (model, entry))
    got = entry.get("sequence_stats")
    check(got is not None and {k: got.get(k) for k in want} == want and
          got.get("steps_per_execution") == 1.0,
          "http: sequence_stats %r, want %r and steps_per_execution 1.0" % (got, want))

    # gRPC: tritonclient's own message (without field 101) still parses.
    stats = clients.grpc_client.get_inference_statistics(model)
    check(len(stats.model_stats) == 1 and stats.model_stats[0].name == model and
          stats.model_stats[0].inference_count == 5 and
          stats.model_stats[0].inference_stats.success.count == 5,
          "grpc: tritonclient's statistics: %r" % stats)
    as_json = clients.grpc_client.get_inference_statistics(model, as_json=True)
    check(as_json["model_stats"][0]["name"] == model, "grpc as_json: %r" % as_json)
    # ... and the field it skips is on the wire: ModelStatistics.sequence_stats = 101.
    stats_pb = read_fields(stats.SerializeToString())[1][0]  # tritonclient keeps unknown fields
    sequence = read_fields(read_fields(stats_pb)[101][0])
    got = {name: sequence.get(number, [0])[0]
           for number, name in enumerate(SEQUENCE_STATS_FIELDS, start=1)}
    per = np.frombuffer(sequence[12][0], "<f8")[0] if 12 in sequence else None
    check(got == want and per == 1.0,
          "grpc: sequence_stats on the wire %r / %r, want %r and 1.0" % (got, per, want))
    # A model without sequence_batching has no sequence_stats.
    other = clients.http_client().get_inference_statistics("counter")["model_stats"][0]
    check(other["name"] == "counter" and "sequence_stats" not in other,
          "counter (no sequence_batching): %r" % other)
    print("ok: sequence_stats over gRPC (field 101) and HTTP; tritonclient parses both")


def drain_case(args, repo, per_iteration):
    """SIGTERM while a step runs on a live sequence over gRPC and over REST."""
    log = open(os.path.join(args.work, "drain.log"), "w")
    proc, ports = start_server(args.loopserve, ["--model_repository=" + repo, "--metrics_port=0",
                                                "--exit_timeout_seconds=60"],
                               kinds=("grpc", "http", "metrics"), stderr=log)
    try:
        clients = Clients(ports)
        metrics = Metrics(ports["metrics"])
        for protocol, seq in (("grpc", 401), ("http", 402), ("grpc", 403), ("http", 404)):
            check(clients.step(protocol, 10, seq, start=True)[0] == 10, "drain start %d" % seq)
        # Two steps of ~3 s each (at the measured iteration time), one per instance: both run
        # while the new steps are sent.
        spin = int(3.0 / per_iteration)
        answers = {}

        def run(protocol, seq):
            answers[seq] = clients.step(protocol, 5, seq, spin=spin)

        running = [threading.Thread(target=run, args=("grpc", 401)),
                   threading.Thread(target=run, args=("http", 402))]
        for t in running:
            t.start()
        wait_inflight(metrics, 2, "drain: the two running steps")
        proc.send_signal(signal.SIGTERM)
        # The drain has begun once the server logs that it waits for the requests in flight.
        log_path = os.path.join(args.work, "drain.log")
        until = time.monotonic() + 20
        while "waiting for requests in flight" not in open(log_path).read():
            check(time.monotonic() < until, "drain: no drain logged:\n" + open(log_path).read())
            time.sleep(0.01)
        # New steps of the other live sequences are refused while the running ones run.
        expect_error(clients.step("grpc", 1, 403), ("StatusCode.UNAVAILABLE",), ("shutting down",),
                     "drain: a new gRPC step")
        expect_error(clients.step("http", 1, 404), ("503",), ("shutting down",),
                     "drain: a new REST step")
        check(len(answers) == 0, "drain: the running steps were answered before the new ones: "
              "the test's steps were too short (%r)" % answers)
        for t in running:
            t.join(timeout=60)
        check(answers == {401: (15, None), 402: (15, None)},
              "drain: the running steps' answers: %r" % answers)
        code = proc.wait(timeout=60)
        check(code == 0, "drain: loopserve exited with %d" % code)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    print("ok: SIGTERM: running steps answered, new steps UNAVAILABLE (grpc 403, http 503), exit 0")

    # A step that would run for minutes: cancelled at the exit timeout, answered, exit 0.
    log = open(os.path.join(args.work, "drain_timeout.log"), "w")
    proc, ports = start_server(args.loopserve, ["--model_repository=" + repo, "--metrics_port=0",
                                                "--exit_timeout_seconds=2"],
                               kinds=("grpc", "http", "metrics"), stderr=log)
    try:
        clients = Clients(ports)
        metrics = Metrics(ports["metrics"])
        check(clients.step("grpc", 10, 501, start=True)[0] == 10, "drain timeout start")
        answers = {}
        runner = threading.Thread(
            target=lambda: answers.update(r=clients.step("grpc", 5, 501, spin=ENDLESS)))
        runner.start()
        wait_inflight(metrics, 1, "drain timeout: the running step")
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        runner.join(timeout=30)
        code = proc.wait(timeout=30)
        took = time.monotonic() - began
        check(answers.get("r", (None, None))[1] is not None and
              answers["r"][1][0] in ("StatusCode.CANCELLED", "StatusCode.UNAVAILABLE"),
              "drain timeout: the endless step's answer: %r" % answers)
        check(code == 0 and took < 15, "drain timeout: exit %d after %.1f s" % (code, took))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    print("ok: SIGTERM with a step past the exit timeout: answered %s, exit 0 after %.1f s"
          % (answers["r"][1][0], took))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--loopserve", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--repo_root", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--tritonclient", default=None)
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    client_dir = args.tritonclient or os.path.join(args.repo_root, "..", "shared", "tritonclient")
    if not os.path.isdir(os.path.join(client_dir, "lib", "tritonclient")):
        print("SKIP: no tritonclient at %s" % client_dir)
        return 0
    sys.path.insert(0, os.path.join(client_dir, "lib"))
    repo = make_repo(args)
    log = open(os.path.join(args.work, "loopserve.log"), "w")
    proc, ports = start_server(args.loopserve, ["--model_repository=" + repo, "--metrics_port=0"],
                               kinds=("grpc", "http", "metrics"), stderr=log)
    try:
        clients = Clients(ports)
        metrics = Metrics(ports["metrics"])
        per_iteration = iteration_seconds(clients)
        deadline_cases(clients)
        cancel_cases(clients, metrics)
        statistics_case(clients)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    check(code == 0, "loopserve exited with %d" % code)
    drain_case(args, repo, per_iteration)
    print("PASS: %d checks" % Checks.count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
