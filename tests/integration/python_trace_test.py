#!/usr/bin/python3
"""Triton's trace extension with Triton's own Python client (../shared/tritonclient).

Usage: /usr/bin/python3 python_trace_test.py --loopserve=BIN --models=DIR --work=DIR
       --tritonclient=DIR

Starts loopserve on the integration-test models with Triton's trace flags (--trace-file,
--trace-level, --trace-rate, --trace-log-frequency) and a --trace_dir, then through
tritonclient's update_trace_settings / get_trace_settings (gRPC and HTTP) checks the files it
writes against Triton's trace format (trace.md: a JSON array of {"id", "model_name",
"model_version", "timestamps": [{"name", "ns"}]}):
  - every traced request has REQUEST_START, QUEUE_START, COMPUTE_START, COMPUTE_INPUT_END,
    COMPUTE_OUTPUT_START, COMPUTE_END, REQUEST_END in that order, with non-decreasing times;
  - trace_rate N traces requests 1, N+1, 2N+1, ...; trace_count stops after that many and reads
    back as what is left;
  - LOOP_ITERATIONS adds one LOOP_ITERATION_START/END pair per iteration of the Loop, as many as
    the trip count the request sent (the counter model: M iterations), inside the compute, also
    while the request streams its iterations (server-sent events, each still sent);
  - a model's own settings override the server's, and clearing them reverts to the server's;
  - trace_file outside the trace folder is refused (INVALID_ARGUMENT, nothing created), TENSORS
    is UNIMPLEMENTED, OFF writes nothing;
  - log_frequency 0 writes at shutdown.
Then a second server with Triton's --trace-config mode=opentelemetry,
opentelemetry,url=... sends OTLP/HTTP JSON to a collector on loopback (a Python HTTP server here):
a request span, its compute child and one child span per Loop iteration, in one trace.
It also checks REST responses compressed as Accept-Encoding asks (gzip, deflate; decoded with
Python's gzip/zlib and tritonclient's response_compression_algorithm), and plain otherwise.
"""

import argparse
import glob
import json
import os
import gzip
import http.server
import threading
import time
import signal
import subprocess
import sys
import urllib.request
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loopserve_py import check, Checks, start_server  # noqa: E402

ACTIVITIES = ["REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END",
              "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END"]


def expect_error(call, status, text):
    from tritonclient.utils import InferenceServerException
    try:
        call()
    except InferenceServerException as e:
        check(status in str(e.status()) and text in e.message(),
              "want %s / %r, got %s / %r" % (status, text, e.status(), e.message()))
        return
    raise AssertionError("no error; want %s / %r" % (status, text))


def counter(client_module, client, m):
    """One request to the counter model (a Loop of M iterations); checks its answer."""
    inputs = [client_module.InferInput("M", [1], "INT64"),
              client_module.InferInput("start", [1], "INT64")]
    inputs[0].set_data_from_numpy(np.array([m], np.int64))
    inputs[1].set_data_from_numpy(np.array([10], np.int64))
    result = client.infer("counter", inputs, request_id="req-%d" % m)
    check(int(result.as_numpy("final")[0]) == 10 + max(m, 0), "counter answer")


def add_scalar(client_module, client):
    x = np.ones((1, 4), np.float32)
    inputs = [client_module.InferInput("x", [1, 4], "FP32")]
    inputs[0].set_data_from_numpy(x)
    result = client.infer("add_scalar", inputs)
    check(np.array_equal(result.as_numpy("y"), x + np.float32(1.5)), "add_scalar answer")


def read_traces(path):
    with open(path) as f:
        traces = json.load(f)
    check(isinstance(traces, list), "a trace file is a JSON array")
    return traces


def wait_traces(path, count, seconds=30):
    """The traces in `path` once it holds at least `count` (a writer thread of the server's adds
    them just after the requests are answered); raises past `seconds`."""
    deadline = time.time() + seconds
    while True:
        try:
            with open(path) as f:
                traces = json.load(f)
            if len(traces) >= count:
                check(isinstance(traces, list), "a trace file is a JSON array")
                return traces
        except (OSError, ValueError):  # not there yet, or caught mid-write
            pass
        if time.time() > deadline:
            raise AssertionError("%s: fewer than %d traces after %d s" % (path, count, seconds))
        time.sleep(0.02)


def check_trace(trace, model, iterations=None):
    """Triton's fields, every activity once and in order, times non-decreasing; with
    `iterations`, that many LOOP_ITERATION_START/END pairs (indices 0..n-1) inside the compute."""
    check(trace["model_name"] == model and trace["model_version"] == 1, trace)
    check(isinstance(trace["id"], int) and trace["id"] > 0, trace)
    stamps = trace["timestamps"]
    names = [s["name"] for s in stamps]
    check([n for n in names if not n.startswith("LOOP_ITERATION")] == ACTIVITIES, names)
    times = [s["ns"] for s in stamps]
    check(all(a <= b for a, b in zip(times, times[1:])), "timestamps out of order: %s" % stamps)
    spans = [s for s in stamps if s["name"].startswith("LOOP_ITERATION")]
    if iterations is None:
        check(not spans, "no iteration spans at TIMESTAMPS")
        return
    check(len(spans) == 2 * iterations, "%d spans for %d iterations" % (len(spans), iterations))
    for i in range(iterations):
        start, end = spans[2 * i], spans[2 * i + 1]
        check(start["name"] == "LOOP_ITERATION_START" and end["name"] == "LOOP_ITERATION_END" and
              start["iteration"] == i and end["iteration"] == i and
              start["loop"] == "counter_loop", (start, end))
    lo = names.index("COMPUTE_INPUT_END")
    hi = names.index("COMPUTE_OUTPUT_START")
    check(names[lo + 1:hi] == [s["name"] for s in spans], "spans lie inside the compute")


def compressed_responses(httpclient, h, port):
    """REST answers compressed as Accept-Encoding asks; expected values from the counter model's
    definition (start + 1 .. start + M)."""
    m = 300
    want = list(range(11, 11 + m))
    body = json.dumps({"inputs": [
        {"name": "M", "shape": [1], "datatype": "INT64", "data": [m]},
        {"name": "start", "shape": [1], "datatype": "INT64", "data": [10]}]}).encode()

    def post(accept):
        request = urllib.request.Request("http://127.0.0.1:%d/v2/models/counter/infer" % port,
                                         data=body, headers={"Content-Type": "application/json"})
        if accept is not None:
            request.add_header("Accept-Encoding", accept)
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.headers, response.read()

    for accept, coding, decode in (("gzip", "gzip", gzip.decompress),
                                   ("deflate", "deflate", zlib.decompress),
                                   ("br, deflate;q=0.5, gzip;q=0.9", "gzip", gzip.decompress),
                                   (None, None, None), ("identity", None, None),
                                   ("gzip;q=0", None, None)):
        headers, raw = post(accept)
        check(headers.get("Content-Encoding") == coding, (accept, dict(headers)))
        check(int(headers["Content-Length"]) == len(raw), "Content-Length is the sent bytes")
        plain = decode(raw) if decode else raw
        if coding:
            check(len(raw) < len(plain), "compressed is smaller")
        outputs = {o["name"]: o for o in json.loads(plain)["outputs"]}
        check(outputs["counts"]["data"] == want and outputs["final"]["data"] == [10 + m], accept)
    # A small answer goes out as it is, whatever was asked.
    request = urllib.request.Request("http://127.0.0.1:%d/v2/health/ready" % port,
                                     headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=30) as response:
        check(response.headers.get("Content-Encoding") is None, dict(response.headers))
    # tritonclient decodes what it asked for (binary outputs in a compressed body).
    for algorithm in ("gzip", "deflate"):
        inputs = [httpclient.InferInput("M", [1], "INT64"),
                  httpclient.InferInput("start", [1], "INT64")]
        inputs[0].set_data_from_numpy(np.array([m], np.int64))
        inputs[1].set_data_from_numpy(np.array([10], np.int64))
        result = h.infer("counter", inputs, response_compression_algorithm=algorithm,
                         request_compression_algorithm=algorithm)
        check(result.as_numpy("counts").reshape(-1).tolist() == want, algorithm)
    print("ok: compressed REST responses (gzip, deflate) as Accept-Encoding asks")


class Collector(http.server.ThreadingHTTPServer):
    """An OTLP/HTTP collector on 127.0.0.1: keeps every JSON body POSTed to /v1/traces."""

    def __init__(self):
        bodies = self.bodies = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                data = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path == "/v1/traces" and \
                        self.headers["Content-Type"] == "application/json":
                    bodies.append(json.loads(data))
                    self.send_response(200)
                else:
                    self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def spans(self):
        return [span for body in self.bodies for rs in body["resourceSpans"]
                for ss in rs["scopeSpans"] for span in ss["spans"]]


def opentelemetry(args, grpcclient, httpclient):
    collector = Collector()
    url = "http://127.0.0.1:%d/v1/traces" % collector.server_address[1]
    proc, ports = start_server(
        args.loopserve,
        ["--model_repository=" + args.models, "--metrics_port=0",
         "--trace-config", "mode=opentelemetry", "--trace-config=opentelemetry,url=" + url,
         "--trace-config", "level=LOOP_ITERATIONS", "--trace-config=rate=1"],
        kinds=("grpc", "http", "metrics"))
    try:
        g = grpcclient.InferenceServerClient("127.0.0.1:%d" % ports["grpc"])
        h = httpclient.InferenceServerClient("127.0.0.1:%d" % ports["http"])
        check(h.get_trace_settings()["trace_mode"] == "opentelemetry", "mode")
        counter(grpcclient, g, 5)
        deadline = time.time() + 20
        while len(collector.spans()) < 7 and time.time() < deadline:
            time.sleep(0.05)
        spans = collector.spans()
        check(len(spans) == 7, "1 + 1 + 5 spans, got %d" % len(spans))
        request, compute, iterations = spans[0], spans[1], spans[2:]
        check(request["name"] == "InferRequest" and "parentSpanId" not in request, request)
        attributes = {a["key"]: a["value"] for a in request["attributes"]}
        check(attributes["model_name"] == {"stringValue": "counter"} and
              attributes["request_id"] == {"stringValue": "req-5"}, attributes)
        check([e["name"] for e in request["events"]] == ACTIVITIES, request["events"])
        check(compute["name"] == "compute" and compute["parentSpanId"] == request["spanId"],
              compute)
        check(int(request["startTimeUnixNano"]) <= int(compute["startTimeUnixNano"]) <=
              int(compute["endTimeUnixNano"]) <= int(request["endTimeUnixNano"]), "nesting")
        for i, span in enumerate(iterations):
            attributes = {a["key"]: a["value"] for a in span["attributes"]}
            check(span["name"] == "loop_iteration" and span["parentSpanId"] == compute["spanId"]
                  and attributes["iteration"] == {"intValue": str(i)} and
                  attributes["loop"] == {"stringValue": "counter_loop"}, span)
        check(len({s["traceId"] for s in spans}) == 1, "one trace")
        # A trace file cannot be set without a folder.
        expect_error(lambda: h.update_trace_settings(settings={"trace_file": "x.json"}), "400",
                     "--trace_dir")
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        collector.shutdown()
    check(code == 0, "loopserve exited with %d" % code)
    print("ok: OTLP/HTTP JSON to a collector: request, compute and 5 iteration spans")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--loopserve", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--tritonclient", required=True)
    args = parser.parse_args()
    if not os.path.isdir(os.path.join(args.tritonclient, "lib", "tritonclient")):
        print("SKIP: no tritonclient at %s" % args.tritonclient)
        return 0
    sys.path.insert(0, os.path.join(args.tritonclient, "lib"))
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    traces = os.path.join(args.work, "traces")
    subprocess.run(["rm", "-rf", args.work], check=True)
    os.makedirs(traces)
    log = open(os.path.join(args.work, "loopserve.log"), "w")
    # Triton's (deprecated) trace flags at start-up.
    proc, ports = start_server(
        args.loopserve,
        ["--model_repository=" + args.models, "--metrics_port=0", "--trace_dir=" + traces,
         "--trace-file=start.json", "--trace-level=TIMESTAMPS", "--trace-rate=1",
         "--trace-log-frequency=1"],
        kinds=("grpc", "http", "metrics"), stderr=log)
    g = grpcclient.InferenceServerClient("127.0.0.1:%d" % ports["grpc"])
    h = httpclient.InferenceServerClient("127.0.0.1:%d" % ports["http"])
    path = lambda name: os.path.join(traces, name)  # noqa: E731
    try:
        # The start-up flags: every request traced at TIMESTAMPS, written at once.
        settings = h.get_trace_settings()
        check(settings["trace_level"] == ["TIMESTAMPS"] and settings["trace_rate"] == "1" and
              settings["trace_file"] == "start.json", settings)
        counter(httpclient, h, 3)
        counter(grpcclient, g, 2)
        got = wait_traces(path("start.json"), 2)
        check(len(got) == 2, "two traces, got %d" % len(got))
        for trace in got:
            check_trace(trace, "counter")
        check(got[0]["request_id"] == "req-3" and got[1]["request_id"] == "req-2", got)
        check(got[0]["id"] != got[1]["id"], "distinct ids")
        check("trace" in g.get_server_metadata().extensions, "trace in the extension list")
        print("ok: start-up flags, Triton's timestamps over HTTP and gRPC")

        # OFF writes nothing.
        g.update_trace_settings(settings={"trace_level": ["OFF"]})
        before = sorted(os.listdir(traces))
        for _ in range(3):
            counter(grpcclient, g, 2)
        check(len(read_traces(path("start.json"))) == 2, "OFF: no more traces")
        check(sorted(os.listdir(traces)) == before, "OFF: no new file")
        print("ok: OFF writes nothing")

        # LOOP_ITERATIONS: one span per iteration (the trip count the request sent).
        settings = h.update_trace_settings(settings={
            "trace_file": "iter.json", "trace_level": ["TIMESTAMPS", "LOOP_ITERATIONS"]})
        check(settings["trace_level"] == ["TIMESTAMPS", "LOOP_ITERATIONS"], settings)
        for m in (7, 0, 1):
            counter(httpclient, h, m)
        counter(grpcclient, g, 12)
        got = wait_traces(path("iter.json"), 4)
        check(len(got) == 4, "four traces, got %d" % len(got))
        for trace, m in zip(got, (7, 0, 1, 12)):
            check_trace(trace, "counter", iterations=m)
        print("ok: LOOP_ITERATIONS: spans equal to the trip count (7, 0, 1, 12)")

        # Streaming (server-sent events, stream_iterations) while traced: every iteration is
        # still streamed (its values the counter's: start + i + 1), and spanned.
        h.update_trace_settings(settings={"trace_file": "stream.json"})
        payload = json.dumps({"id": "req-stream", "inputs": [
            {"name": "M", "shape": [1], "datatype": "INT64", "data": [6]},
            {"name": "start", "shape": [1], "datatype": "INT64", "data": [10]}],
            "parameters": {"stream_iterations": True}}).encode()
        request = urllib.request.Request(
            "http://127.0.0.1:%d/v2/models/counter/generate_stream" % ports["http"],
            data=payload, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            events = [json.loads(line[5:]) for line in response.read().decode().splitlines()
                      if line.startswith("data:")]
        *slices, final = events
        check([e["outputs"][0]["data"] for e in slices] == [[11 + i] for i in range(6)],
              [e.get("outputs") for e in slices])
        check(final["parameters"]["triton_final_response"], final)
        got = wait_traces(path("stream.json"), 1)
        check(len(got) == 1 and got[0]["request_id"] == "req-stream", got)
        check_trace(got[0], "counter", iterations=6)
        print("ok: a streamed request's iterations are spanned and still streamed")

        # trace_rate: 1 of 3 (requests 1, 4, 7 of 7).
        g.update_trace_settings(settings={"trace_file": "rate.json", "trace_rate": "3",
                                          "trace_level": ["TIMESTAMPS"]})
        for m in range(1, 8):
            counter(grpcclient, g, m)
        got = wait_traces(path("rate.json"), 3)
        check([t["request_id"] for t in got] == ["req-1", "req-4", "req-7"],
              [t.get("request_id") for t in got])
        # trace_count: 2 traces, then none; it reads back as what is left.
        settings = h.update_trace_settings(settings={"trace_file": "count.json", "trace_rate": "1",
                                                     "trace_count": "2"})
        check(settings["trace_count"] == "2", settings)
        for m in range(1, 6):
            counter(httpclient, h, m)
        got = wait_traces(path("count.json"), 2)
        check([t["request_id"] for t in got] == ["req-1", "req-2"], got)
        check(g.get_trace_settings(as_json=True)["settings"]["trace_count"]["value"] == ["0"],
              "count left")
        print("ok: trace_rate and trace_count")

        # A model's settings: counter OFF while the server traces; cleared, it follows again.
        h.update_trace_settings(settings={"trace_file": "model.json", "trace_count": "-1"})
        settings = h.update_trace_settings(model_name="counter", settings={"trace_level": ["OFF"]})
        check(settings["trace_level"] == ["OFF"] and settings["trace_file"] == "model.json",
              settings)
        check(h.get_trace_settings()["trace_level"] == ["TIMESTAMPS"], "the server's unchanged")
        check(g.get_trace_settings(model_name="counter", as_json=True)["settings"]["trace_level"]
              ["value"] == ["OFF"], "gRPC reads the model's")
        counter(httpclient, h, 2)
        add_scalar(httpclient, h)
        got = wait_traces(path("model.json"), 1)
        check([t["model_name"] for t in got] == ["add_scalar"], got)
        check_trace(got[0], "add_scalar")
        g.update_trace_settings(model_name="counter", settings={"trace_level": None})
        check(h.get_trace_settings(model_name="counter")["trace_level"] == ["TIMESTAMPS"],
              "cleared: the server's")
        counter(grpcclient, g, 2)
        got = wait_traces(path("model.json"), 2)
        check([t["model_name"] for t in got] == ["add_scalar", "counter"], got)
        print("ok: per-model settings and clearing them")

        # Refused: paths outside the trace folder, TENSORS, bad numbers.
        for name in ("../escape.json", "/tmp/loopserve_trace_escape.json", "sub/x.json", ".."):
            expect_error(lambda: h.update_trace_settings(settings={"trace_file": name}), "400",
                         "plain file name")
            expect_error(lambda: g.update_trace_settings(settings={"trace_file": name}),
                         "INVALID_ARGUMENT", "plain file name")
        check(not os.path.exists(os.path.join(args.work, "escape.json")), "nothing escaped")
        expect_error(lambda: h.update_trace_settings(settings={"trace_level": ["TENSORS"]}),
                     "501", "TENSORS")
        expect_error(lambda: g.update_trace_settings(settings={"trace_level": ["TENSORS"]}),
                     "UNIMPLEMENTED", "TENSORS")
        expect_error(lambda: h.update_trace_settings(settings={"trace_rate": "0"}), "400",
                     "positive integer")
        check(h.get_trace_settings()["trace_file"] == "model.json", "refusals changed nothing")
        print("ok: refused settings")

        h.update_trace_settings(settings={"trace_level": ["OFF"]})
        compressed_responses(httpclient, h, ports["http"])

        # log_frequency 0: written when the server stops.
        h.update_trace_settings(settings={"trace_file": "final.json", "log_frequency": "0",
                                          "trace_level": ["TIMESTAMPS"]})
        counter(httpclient, h, 4)
        counter(grpcclient, g, 5)
        check(not os.path.exists(path("final.json")), "log_frequency 0: not written yet")
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    check(code == 0, "loopserve exited with %d" % code)
    got = read_traces(path("final.json"))
    check([t["request_id"] for t in got] == ["req-4", "req-5"], got)
    check(sorted(os.path.basename(p) for p in glob.glob(os.path.join(traces, "*"))) ==
          ["count.json", "final.json", "iter.json", "model.json", "rate.json", "start.json",
           "stream.json"],
          os.listdir(traces))
    print("ok: log_frequency 0 writes at shutdown")
    opentelemetry(args, grpcclient, httpclient)
    print("PASS: %d checks" % Checks.count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
