#!/usr/bin/python3
"""Per-iteration streaming over REST as server-sent events, against the real loopserve binary.

Usage: /usr/bin/python3 python_sse_test.py --loopserve=BIN --models=DIR --repo_root=DIR

POST /v2/models/{m}/generate_stream (Triton's streaming endpoint) and POST .../infer with
`stream_iterations: true` answer `text/event-stream`: one `data: {json}` event per iteration of the
model's top-level Loop (the KServe v2 response form holding that iteration's slice of each
requested scan output, parameters `iteration` and `triton_final_response: false`), then the final
response (`triton_final_response: true`). Expected values come from numpy (the reference functions
of deploy/make_example_models.py), and the slices and the final event are also compared with the
server's unstreamed /infer answer to the same request. Also: errors before the headers are HTTP
statuses, after them an error event; a client that disconnects mid-stream stops the Loop
(in-flight gauge back to 0); a client that stops reading holds the Loop (slices counter and RSS
flat); time to the first event against time to the whole answer (printed).
"""

import argparse
import http.client
import json
import os
import signal
import socket
import sys
import time

import numpy as np

from loopserve_py import (DTYPES, OIP, Checks, Metrics, check, rss_bytes,  # noqa: E402
                         start_server)

def metric(port, name, **labels):
    return Metrics(port).value(name, **labels)


def wait_metric(port, name, want, seconds=10, **labels):
    return Metrics(port).wait_for(name, want, seconds, **labels)


def body(inputs, outputs=(), **params):
    b = {"inputs": [{"name": n, "datatype": OIP[a.dtype.type], "shape": list(a.shape),
                     "data": a.reshape(-1).tolist()} for n, a in inputs]}
    if outputs:
        b["outputs"] = [{"name": n} for n in outputs]
    if params:
        b["parameters"] = params
    return json.dumps(b)


def arrays(response):
    return {o["name"]: np.array(o["data"], DTYPES[o["datatype"]]).reshape(o["shape"])
            for o in response["outputs"]}


class Sse:
    """One POST answered with server-sent events, read event by event (http.client undoes the
    chunked transfer encoding)."""

    def __init__(self, port, path, payload, timeout=60):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        self.sent = time.perf_counter()
        self.conn.request("POST", path, payload, {"Content-Type": "application/json"})
        self.response = self.conn.getresponse()
        self.status = self.response.status
        self.type = self.response.getheader("Content-Type")

    def events(self):
        """Yields (seconds since the request, parsed JSON) per event until the stream ends."""
        data = []
        while True:
            line = self.response.readline()
            if not line:
                check(not data, "the stream ended inside an event")
                return
            line = line.rstrip(b"\r\n")
            if line.startswith(b"data: "):
                data.append(line[6:])
            elif line == b"" and data:
                yield time.perf_counter() - self.sent, json.loads(b"\n".join(data))
                data = []
            else:
                check(line == b"", "not a server-sent event line: %r" % line)

    def close(self):
        self.conn.close()


def post(port, path, payload, timeout=60):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", path, payload, {"Content-Type": "application/json"})
    r = conn.getresponse()
    out = (r.status, r.getheader("Content-Type"), r.read())
    conn.close()
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--loopserve", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--repo_root", required=True)
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(args.repo_root, "deploy"))
    import make_example_models as ex  # noqa: E402  (numpy references)

    # No repository poller: its rescans every 2 s would show in the RSS of the stalled-reader
    # check under a sanitizer, whose allocator keeps freed memory in quarantine.
    proc, ports = start_server(args.loopserve, ["--model_repository=" + args.models,
                                                "--metrics_port=0", "--workers=2",
                                                "--model_control_mode=none"],
                               kinds=("http", "metrics"))
    http_port, metrics_port = ports["http"], ports["metrics"]
    try:
        # ---- every slice in order, equal to numpy's and to /infer's scan output ------------
        def decoder(start, n):
            return [("start_token", np.array([start], np.int64)),
                    ("max_len", np.array(n, np.int64))]

        slices_before = metric(metrics_port, "loopserve_stream_slices_total",
                               model="greedy_decoder")
        http_before = metric(metrics_port, "loopserve_requests_total", model="greedy_decoder",
                             protocol="http", outcome="success")
        streamed_slices = 0
        for start, n, path, params in (
                (4, 200, "generate_stream", {}),  # never meets EOS: 200 iterations
                (1, 10, "generate_stream", {}),   # meets EOS early
                (4, 7, "infer", {"stream_iterations": True}),
                (4, 0, "generate_stream", {})):   # no iteration: only the final event
            what = "%s start %d max_len %d" % (path, start, n)
            last_token, tokens = ex.reference_greedy_decoder(np.array([start], np.int64),
                                                             np.array(n, np.int64))
            status, _, whole = post(http_port, "/v2/models/greedy_decoder/infer",
                                    body(decoder(start, n)))
            check(status == 200, "%s: /infer %d %r" % (what, status, whole))
            whole = json.loads(whole)
            stream = Sse(http_port, "/v2/models/greedy_decoder/" + path,
                         body(decoder(start, n), **params))
            check(stream.status == 200, "%s: status %d" % (what, stream.status))
            check(stream.type == "text/event-stream", "%s: Content-Type %r" % (what, stream.type))
            events = [e for _, e in stream.events()]
            stream.close()
            *slices, final = events
            check(len(slices) == len(tokens),
                  "%s: %d slice events for %d iterations" % (what, len(slices), len(tokens)))
            whole_tokens = arrays(whole)["tokens"]
            for i, event in enumerate(slices):
                check(event["model_name"] == "greedy_decoder", "%s: model_name" % what)
                check(event["parameters"] == {"iteration": i, "triton_final_response": False},
                      "%s: slice %d parameters %r" % (what, i, event["parameters"]))
                got = arrays(event)
                check(list(got) == ["tokens"], "%s: slice outputs %s" % (what, list(got)))
                check(got["tokens"].shape == tokens[i].shape,
                      "%s: slice %d shape %s" % (what, i, got["tokens"].shape))
                np.testing.assert_array_equal(got["tokens"], tokens[i])
                np.testing.assert_array_equal(got["tokens"], whole_tokens[i])
            check(final["parameters"] == {"triton_final_response": True},
                  "%s: final parameters %r" % (what, final.get("parameters")))
            got = arrays(final)
            np.testing.assert_array_equal(got["last_token"], last_token)
            np.testing.assert_array_equal(got["tokens"], tokens)
            check(final["outputs"] == whole["outputs"], "%s: final event != /infer's" % what)
            streamed_slices += len(slices)
        check(metric(metrics_port, "loopserve_stream_slices_total", model="greedy_decoder") ==
              slices_before + streamed_slices, "slices counted")
        check(metric(metrics_port, "loopserve_requests_total", model="greedy_decoder",
                     protocol="http", outcome="success") == http_before + 8,
              "REST requests counted under protocol=http")
        print("sse: %d slice events in order equal to numpy's and /infer's; finals equal /infer's"
              % streamed_slices)

        # One kept-alive connection serves stream after stream, and other requests between them.
        conn = http.client.HTTPConnection("127.0.0.1", http_port, timeout=30)
        _, tokens = ex.reference_greedy_decoder(np.array([4], np.int64), np.array(3, np.int64))
        for k in range(150):
            path = "generate_stream" if k % 3 else "infer"
            conn.request("POST", "/v2/models/greedy_decoder/" + path, body(decoder(4, 3)))
            r = conn.getresponse()
            text = r.read().decode()
            check(r.status == 200, "kept-alive request %d: status %d" % (k, r.status))
            if path == "infer":
                np.testing.assert_array_equal(arrays(json.loads(text))["tokens"], tokens)
            else:
                events = [json.loads(line[6:]) for line in text.split("\n")
                          if line.startswith("data: ")]
                check(len(events) == 4, "kept-alive stream %d: %d events" % (k, len(events)))
                np.testing.assert_array_equal(arrays(events[-1])["tokens"], tokens)
        check(conn.sock is not None, "the connection was closed")
        conn.close()
        print("sse: 100 streams and 50 /infer requests on one kept-alive connection")

        # Only the requested scan outputs stream; stream_iterations: false on generate_stream
        # answers one event.
        final_c, counts = ex.reference_counter(np.array(4, np.int64), np.array([10], np.int64))
        counter_in = [("M", np.array(4, np.int64)), ("start", np.array([10], np.int64))]
        stream = Sse(http_port, "/v2/models/counter/generate_stream",
                     body(counter_in, outputs=["counts"]))
        *slices, final = [e for _, e in stream.events()]
        stream.close()
        check([arrays(e)["counts"].tolist() for e in slices] == [c.tolist() for c in counts],
              "counter slices")
        check(list(arrays(final)) == ["counts"], "counter final outputs")
        np.testing.assert_array_equal(arrays(final)["counts"], counts)
        stream = Sse(http_port, "/v2/models/counter/generate_stream",
                     body(counter_in, stream_iterations=False))
        events = [e for _, e in stream.events()]
        stream.close()
        check(len(events) == 1 and events[0]["parameters"] == {"triton_final_response": True},
              "stream_iterations false: %r" % events)
        np.testing.assert_array_equal(arrays(events[0])["final"], final_c)
        print("sse: requested outputs only; stream_iterations: false -> one final event")

        # ---- errors ------------------------------------------------------------------------
        for path, payload, want_status, fragments in (
                ("/v2/models/add_scalar/generate_stream",
                 body([("x", np.zeros((1, 4), np.float32))]), 400, ["no Loop"]),
                ("/v2/models/add_scalar/infer",
                 body([("x", np.zeros((1, 4), np.float32))], stream_iterations=True), 400,
                 ["no Loop"]),
                ("/v2/models/endless/generate_stream", body([("x", np.array([0], np.int64))]),
                 400, ["scan output"]),
                ("/v2/models/greedy_decoder/generate_stream",
                 body(decoder(1, 3), outputs=["last_token"]), 400,
                 ["none of the requested outputs", "'tokens'"]),
                ("/v2/models/greedy_decoder/generate_stream", '{"inputs": [', 400,
                 ["generate_stream: the request body is not valid JSON"]),
                ("/v2/models/greedy_decoder/infer", '{"inputs": [', 400,
                 ["infer: the request body is not valid JSON"]),
                ("/v2/models/greedy_decoder/generate_stream",
                 json.dumps(dict(json.loads(body(decoder(1, 3))),
                                 parameters={"binary_data_output": True})), 400,
                 ["binary", "server-sent events"]),
                ("/v2/models/greedy_decoder/infer",
                 body(decoder(1, 3), stream_iterations="yes"), 400, ["stream_iterations"]),
                ("/v2/models/no_such_model/generate_stream", body(decoder(1, 3)), 404,
                 ["no_such_model"])):
            status, ctype, answer = post(http_port, path, payload)
            check(status == want_status, "%s: status %d (%r)" % (path, status, answer))
            check(ctype == "application/json", "%s: error Content-Type %r" % (path, ctype))
            message = json.loads(answer)["error"]
            for f in fragments:
                check(f in message, "%s: error %r lacks %r" % (path, message, f))
        conn = http.client.HTTPConnection("127.0.0.1", http_port, timeout=10)
        conn.request("GET", "/v2/models/counter/generate_stream")
        r = conn.getresponse()
        check(r.status == 405 and r.getheader("Allow") == "POST", "GET generate_stream")
        r.read()
        conn.close()
        # After the headers: an error event ends the stream. A deadline (the `timeout`
        # parameter, 300 ms) stops a Loop of 10^8 iterations after its first slices.
        stream = Sse(http_port, "/v2/models/counter/generate_stream",
                     body([("M", np.array(10 ** 8, np.int64)), ("start", np.array([0], np.int64))],
                          outputs=["counts"], timeout=300000))
        check(stream.status == 200, "deadline stream: status %d" % stream.status)
        events = [e for _, e in stream.events()]
        stream.close()
        check(len(events) > 1 and "error" in events[-1] and "deadline" in events[-1]["error"],
              "deadline stream: last event %r" % (events[-1] if events else None))
        for i, e in enumerate(events[:-1]):
            check(arrays(e)["counts"].tolist() == [i + 1], "deadline stream: slice %d" % i)
        print("sse: errors before the headers are statuses (400/404/405); after them an error "
              "event (%d slices, then %r)" % (len(events) - 1, events[-1]["error"][:60]))

        # ---- a client that disconnects mid-stream stops the Loop ----------------------------
        big = body([("M", np.array(10 ** 8, np.int64)), ("start", np.array([0], np.int64))],
                   outputs=["counts"])
        cancelled_before = metric(metrics_port, "loopserve_loop_limit_hits_total",
                                  reason="cancelled")
        stream = Sse(http_port, "/v2/models/counter/generate_stream", big)
        got = []
        for _, e in stream.events():
            got.append(arrays(e)["counts"].tolist())
            if len(got) == 20:
                break
        check(got == [[i + 1] for i in range(20)], "first 20 slices")
        check(metric(metrics_port, "loopserve_inflight_requests") == 1, "in flight")
        closed_at = time.time()
        stream.response.close()
        stream.close()
        gauge = wait_metric(metrics_port, "loopserve_inflight_requests", 0)
        took = time.time() - closed_at
        check(gauge == 0, "in-flight gauge %s after the client disconnected" % gauge)
        check(metric(metrics_port, "loopserve_loop_limit_hits_total", reason="cancelled") ==
              cancelled_before + 1, "cancelled Loop counted")
        print("sse: disconnect after 20 events stopped the Loop; in-flight 0 after %.1f ms" %
              (took * 1e3))

        # ---- a client that stops reading holds the Loop --------------------------------------
        # A raw socket that sends the request and reads nothing: the Loop runs ahead by what the
        # server queues (8 events) and the sockets' kernel buffers hold, then waits; its slices
        # counter stops and the server's RSS stays flat.
        slices_before = metric(metrics_port, "loopserve_stream_slices_total", model="counter")
        sock = socket.create_connection(("127.0.0.1", http_port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        payload = big.encode()
        sock.sendall(b"POST /v2/models/counter/generate_stream HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" %
                     len(payload) + payload)
        # Held: no new slice for 1 s (a loaded machine, or a sanitizer build, may not run the
        # worker for a few hundred ms).
        samples = []
        for _ in range(120):
            time.sleep(0.25)
            samples.append(metric(metrics_port, "loopserve_stream_slices_total", model="counter"))
            if len(samples) >= 5 and len(set(samples[-5:])) == 1:
                break
        slices_b = samples[-1]
        check(len(set(samples[-5:])) == 1 and slices_b > slices_before,
              "the Loop did not stop for a reader that read nothing (%s)" % samples[-5:])
        time.sleep(0.5)  # the last /metrics scrape's tail (its thread) settles first
        rss_a = rss_bytes(proc.pid)
        time.sleep(2.0)
        rss_b = rss_bytes(proc.pid)
        slices_c = metric(metrics_port, "loopserve_stream_slices_total", model="counter")
        # Unbounded buffering would let the Loop run on at tens of thousands of slices a second.
        check(slices_c - slices_b < 1000, "slices went on while nobody read: %d -> %d" %
              (slices_b, slices_c))
        # AddressSanitizer's quarantine keeps freed memory resident (a /metrics scrape's ~1.8 MB
        # stays), so under it the bound is looser; the slice count above bounds the queue there.
        rss_bound = (8 << 20) if "ASAN_OPTIONS" in os.environ else (1 << 20)
        check(rss_b - rss_a < rss_bound, "RSS grew %d bytes in 2 s while the reader stalled" %
              (rss_b - rss_a))
        ahead = int(slices_c - slices_before)
        # Reading again resumes it: the events arrive in order.
        reader = sock.makefile("rb")
        check(reader.readline().startswith(b"HTTP/1.1 200"), "stalled stream: status line")
        seen = 0
        while seen < ahead + 200:
            line = reader.readline()
            if line.startswith(b"data: "):
                event = json.loads(line[6:])
                check(event["parameters"]["iteration"] == seen,
                      "slice %d came as iteration %d" % (seen, event["parameters"]["iteration"]))
                seen += 1
        check(metric(metrics_port, "loopserve_stream_slices_total", model="counter") > slices_c,
              "reading resumed the Loop")
        reader.close()
        sock.close()
        check(wait_metric(metrics_port, "loopserve_inflight_requests", 0) == 0,
              "in flight after closing the stalled stream")
        print("sse: a stalled reader holds the Loop (%d slices ahead, then %d in 2 s; RSS "
              "%+.2f MB, at %.1f MB)" % (ahead, slices_c - slices_b, (rss_b - rss_a) / 1e6,
                                         rss_b / 1e6))

        # ---- time to the first event against the whole answer --------------------------------
        firsts, lasts, wholes = [], [], []
        for _ in range(15):
            stream = Sse(http_port, "/v2/models/greedy_decoder/generate_stream",
                         body(decoder(4, 200)))
            times = [t for t, _ in stream.events()]
            stream.close()
            firsts.append(times[0])
            lasts.append(times[-1])
            t0 = time.perf_counter()
            status, _, _ = post(http_port, "/v2/models/greedy_decoder/infer",
                                body(decoder(4, 200)))
            wholes.append(time.perf_counter() - t0)
            check(status == 200, "/infer status")
        print("sse: greedy decoder, 200 steps (medians of 15): first event %.2f ms, last event "
              "%.2f ms; /infer whole answer %.2f ms" % (np.median(firsts) * 1e3,
                                                        np.median(lasts) * 1e3,
                                                        np.median(wholes) * 1e3))
    finally:
        proc.send_signal(signal.SIGTERM)
        # A stream left open by a failed check holds its Loop until the exit timeout cancels it.
        code = proc.wait(timeout=60)
    check(code == 0, "loopserve exited with %d" % code)
    print("%d checks passed" % Checks.count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
