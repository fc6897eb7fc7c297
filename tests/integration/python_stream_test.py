#!/usr/bin/python3
"""ModelStreamInfer against the real loopserve, from a stock grpcio client.

Usage: /usr/bin/python3 python_stream_test.py --loopserve=BIN --loopctl=BIN --models=DIR
       --repo_root=DIR --work=DIR [--protoc=PROTOC]

Expected values come from numpy (the reference functions of deploy/make_example_models.py and the
numpy-computed expected/ cases of the test repository), never from loopserve's own output; the
final response of a streamed request is also compared with ModelInfer's answer to the same
request.

1. Many requests on one stream (Triton's ModelStreamInfer): each answered once, by id, with
   ModelInfer's validation (errors arrive as error_message and leave the stream open), the
   `timeout` parameter, metrics; a client that cancels the stream stops its running Loop
   (in-flight gauge back to 0).
2. `stream_iterations: true`: one response per iteration (the scan outputs' slices, `iteration`
   parameter, `triton_final_response: false`), then the final response (`triton_final_response:
   true`); clear errors for models without a Loop or without scan outputs and on ModelInfer;
   cancel mid-stream stops the Loop; a reader that stops reading stops the Loop (slices counter
   and RSS flat while it waits).
3. `loopctl infer MODEL --stream` prints the tokens on one line as they come, then the final outputs.
"""

import os
import queue
import signal
import subprocess
import sys
import time

import numpy as np

import grpc  # noqa: E402

from loopserve_py import (DTYPES, OIP, Checks, Metrics, check, parse_test_args, read_case,  # noqa: E402
                         rss_bytes, start_server)

def main():
    args = parse_test_args(loopctl=True)
    from proto import grpc_service_pb2 as pb, grpc_service_pb2_grpc as pb_grpc  # noqa: E402
    sys.path.insert(0, os.path.join(args.repo_root, "deploy"))
    import make_example_models as ex  # noqa: E402  (numpy references)

    def request(model, inputs, rid="", outputs=(), **params):
        r = pb.ModelInferRequest(model_name=model, id=rid)
        for name, array in inputs:
            array = np.asarray(array)  # (ascontiguousarray would make a scalar 1-D)
            r.inputs.add(name=name, datatype=OIP[array.dtype.type], shape=list(array.shape))
            r.raw_input_contents.append(array.tobytes())
        for name in outputs:
            r.outputs.add(name=name)
        for key, value in params.items():
            if isinstance(value, bool):
                r.parameters[key].bool_param = value
            elif isinstance(value, int):
                r.parameters[key].int64_param = value
            else:
                r.parameters[key].string_param = value
        return r

    def outputs_of(response):
        return {o.name: np.frombuffer(raw, DTYPES[o.datatype]).reshape(tuple(o.shape))
                for o, raw in zip(response.outputs, response.raw_output_contents)}

    def same(got, expected, what):
        for name, want in expected:
            check(name in got, "%s: output %s missing (got %s)" % (what, name, list(got)))
            check(got[name].shape == want.shape,
                  "%s/%s: shape %s != %s" % (what, name, got[name].shape, want.shape))
            if want.dtype.kind == "f":
                np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6)
            else:
                np.testing.assert_array_equal(got[name], want)

    def final_flag(response):
        p = response.parameters.get("triton_final_response")
        check(p is not None and p.WhichOneof("parameter_choice") == "bool_param",
              "response %r lacks a bool triton_final_response" % response.id)
        return p.bool_param

    proc, ports = start_server(args.loopserve, ["--model_repository=" + args.models,
                                                "--metrics_port=0", "--workers=2"])
    metrics = Metrics(ports["metrics"])
    try:
        channel = grpc.insecure_channel("127.0.0.1:%d" % ports["grpc"])
        grpc.channel_ready_future(channel).result(timeout=30)
        stub = pb_grpc.GRPCInferenceServiceStub(channel)

        # ---- 1. many requests on one stream -----------------------------------------------
        cases = {}
        for model, case in (("counter", "expected"), ("greedy_decoder", "expected"),
                            ("greedy_decoder", "expected_no_eos"), ("rnn", "expected")):
            cases["%s/%s" % (model, case)] = (model,) + read_case(
                os.path.join(args.models, model, case))
        before = metrics.value("loopserve_requests_total", model="counter", protocol="grpc",
                               outcome="success")
        sent = [request(model, inputs, rid=key) for key, (model, inputs, _) in cases.items()]
        sent.append(request("no_such_model", [], rid="unknown"))
        sent.append(request("counter", [("M", np.array(3, np.int32)),
                                        ("start", np.array([1], np.int64))], rid="bad_dtype"))
        sent.append(request("endless", [("x", np.array([0], np.int64))], rid="timeout",
                            timeout=50000))
        sent.append(request("counter", [("M", np.array(2, np.int64)),
                                        ("start", np.array([7], np.int64))], rid="flag",
                            stream_iterations="yes"))
        answers = {}
        for response in stub.ModelStreamInfer(iter(sent), timeout=60):
            rid = response.infer_response.id
            check(rid not in answers, "request %r answered twice" % rid)
            answers[rid] = response
        check(sorted(answers) == sorted(r.id for r in sent),
              "answers %s for requests %s" % (sorted(answers), sorted(r.id for r in sent)))
        for key, (model, _, expected) in cases.items():
            response = answers[key]
            check(response.error_message == "", "%s: %s" % (key, response.error_message))
            check(response.infer_response.model_name == model, key + ": model name")
            check(final_flag(response.infer_response), key + ": final flag")
            same(outputs_of(response.infer_response), expected, key)
        for rid, fragments in (("unknown", ["no_such_model"]),
                               ("bad_dtype", ["'M'", "INT32"]),
                               ("timeout", ["deadline"]),
                               ("flag", ["stream_iterations", "bool"])):
            message = answers[rid].error_message
            check(message != "", "%s: expected an error" % rid)
            for f in fragments:
                check(f.lower() in message.lower(), "%s: error %r lacks %r" % (rid, message, f))
        check(metrics.value("loopserve_requests_total", model="counter", protocol="grpc",
                            outcome="success") == before + 1, "counter success counted once")
        check(metrics.value("loopserve_requests_total", model="endless", protocol="grpc",
                            outcome="deadline_exceeded") >= 1, "deadline counted")
        print("stream: %d requests on one stream answered by id, errors in-stream" % len(sent))

        # Bytes that are no ModelInferRequest: the error names ModelStreamInfer (not ModelInfer),
        # in-stream, and the stream goes on.
        raw_stream = channel.stream_stream(
            "/inference.GRPCInferenceService/ModelStreamInfer",
            request_serializer=lambda b: b,
            response_deserializer=pb.ModelStreamInferResponse.FromString)
        good = request("counter", [("M", np.array(2, np.int64)),
                                   ("start", np.array([7], np.int64))], rid="after_bad_bytes")
        responses = list(raw_stream(iter([b"\xff\xff\xff\xff", good.SerializeToString()]),
                                    timeout=60))
        check(len(responses) == 2, "undecodable bytes: %d responses" % len(responses))
        message = responses[0].error_message
        check(message.startswith("ModelStreamInfer: ") and
              "not a valid inference.ModelInferRequest" in message,
              "undecodable bytes on a stream: %r" % message)
        check(responses[1].error_message == "" and
              responses[1].infer_response.id == "after_bad_bytes",
              "the stream goes on after undecodable bytes: %r" % responses[1].error_message)
        print("stream: undecodable bytes answered in-stream, naming ModelStreamInfer")

        # A stream the client cancels stops its running Loop.
        def cancel_running(requests, after_responses=0):
            """Sends `requests` on a stream, reads `after_responses`, waits until a request is in
            flight, cancels the stream; returns seconds until the in-flight gauge is 0."""
            feed = queue.Queue()
            for r in requests:
                feed.put(r)
            call = stub.ModelStreamInfer(iter(feed.get, None), timeout=60)
            got = [next(call) for _ in range(after_responses)]
            check(metrics.wait_for("loopserve_inflight_requests", 1) == 1, "request in flight")
            cancelled_at = time.time()
            call.cancel()
            gauge = metrics.wait_for("loopserve_inflight_requests", 0)
            took = time.time() - cancelled_at
            check(gauge == 0, "in-flight gauge %s after cancel" % gauge)
            feed.put(None)
            return took, got

        limit_before = metrics.value("loopserve_loop_limit_hits_total", reason="cancelled")
        took, _ = cancel_running([request("endless", [("x", np.array([0], np.int64))])])
        check(metrics.value("loopserve_loop_limit_hits_total", reason="cancelled") ==
              limit_before + 1, "cancelled Loop counted")
        print("stream: client cancel stopped the endless Loop; in-flight 0 after %.1f ms" %
              (took * 1e3))

        # A client that sends many requests and reads no answer: the stream stops reading
        # requests (kStreamMaxPending = 64 in flight or unwritten) instead of piling up answers;
        # once the client reads, every request is answered. Answers of 160 KB (a 20000-row scan)
        # so that gRPC's flow-control windows cannot hold them all.
        before = metrics.value("loopserve_requests_total", model="counter", outcome="success")
        many = [request("counter", [("M", np.array(20000, np.int64)),
                                    ("start", np.array([k], np.int64))], rid="m%d" % k)
                for k in range(300)]
        call = stub.ModelStreamInfer(iter(many), timeout=120)
        time.sleep(2.0)
        answered_unread = metrics.value("loopserve_requests_total", model="counter",
                                        outcome="success") - before
        check(answered_unread < 200, "%d of 300 requests answered while the client read none" %
              answered_unread)
        seen = set()
        for response in call:
            check(response.error_message == "", response.error_message)
            k = int(response.infer_response.id[1:])
            counts = outputs_of(response.infer_response)["counts"]
            check(counts.shape == (20000, 1) and counts[0, 0] == k + 1 and
                  counts[-1, 0] == k + 20000, "m%d: counts" % k)
            seen.add(k)
        check(seen == set(range(300)), "%d of 300 answered" % len(seen))
        print("stream: 300 requests unread -> %d answered, reading paused; then all 300" %
              answered_unread)

        # The same, cancelled while its reading is paused: the stream ends, nothing stays in
        # flight, and the server shuts down promptly at the end (checked below).
        call = stub.ModelStreamInfer(iter(many), timeout=120)
        time.sleep(1.0)
        call.cancel()
        check(metrics.wait_for("loopserve_inflight_requests", 0) == 0,
              "in flight after cancelling a paused stream")
        check(stub.ServerLive(pb.ServerLiveRequest(), timeout=10).live, "live after")

        # ---- 2. stream_iterations -------------------------------------------------------------
        def run_stream(requests, timeout=60):
            by_id = {}
            for response in stub.ModelStreamInfer(iter(requests), timeout=timeout):
                by_id.setdefault(response.infer_response.id, []).append(response)
            return by_id

        # Greedy decoder of 200 steps (4 -> 7 -> 4 ..., never EOS) and one that meets EOS, on one
        # stream, interleaved; numpy's reference gives the tokens.
        decodes = {"long": (4, 200), "eos": (1, 10), "zero": (4, 0)}
        reqs = [request("greedy_decoder", [("start_token", np.array([s], np.int64)),
                                           ("max_len", np.array(n, np.int64))],
                        rid=rid, stream_iterations=True) for rid, (s, n) in decodes.items()]
        slices_before = metrics.value("loopserve_stream_slices_total", model="greedy_decoder")
        first_before = metrics.value("loopserve_stream_first_slice_seconds_count",
                                     model="greedy_decoder")
        by_id = run_stream(reqs)
        total_slices = 0
        for rid, (start, n) in decodes.items():
            last_token, tokens = ex.reference_greedy_decoder(np.array([start], np.int64),
                                                             np.array(n, np.int64))
            responses = by_id[rid]
            for r in responses:
                check(r.error_message == "", "%s: %s" % (rid, r.error_message))
            *slices, final = responses
            check(len(slices) == len(tokens),
                  "%s: %d slices for %d iterations" % (rid, len(slices), len(tokens)))
            for i, r in enumerate(slices):
                ir = r.infer_response
                check(not final_flag(ir), "%s: slice %d marked final" % (rid, i))
                check(ir.parameters["iteration"].int64_param == i,
                      "%s: slice %d has iteration %d" % (rid, i,
                                                         ir.parameters["iteration"].int64_param))
                got = outputs_of(ir)
                check(list(got) == ["tokens"], "%s: slice outputs %s" % (rid, list(got)))
                check(got["tokens"].shape == tokens[i].shape,
                      "%s: slice shape %s" % (rid, got["tokens"].shape))
                np.testing.assert_array_equal(got["tokens"], tokens[i])
            check(final_flag(final.infer_response), "%s: last response not final" % rid)
            got = outputs_of(final.infer_response)
            same(got, [("last_token", last_token), ("tokens", tokens)], rid + " final")
            # ModelInfer's answer to the same request (without the parameter).
            unary = stub.ModelInfer(request("greedy_decoder",
                                            [("start_token", np.array([start], np.int64)),
                                             ("max_len", np.array(n, np.int64))]), timeout=30)
            same(got, list(outputs_of(unary).items()), rid + " final vs ModelInfer")
            total_slices += len(slices)
        check(metrics.value("loopserve_stream_slices_total", model="greedy_decoder") ==
              slices_before + total_slices, "slices counted")
        # "zero" ran no iteration: no first slice.
        check(metrics.value("loopserve_stream_first_slice_seconds_count",
                            model="greedy_decoder") == first_before + 2, "first slices timed")
        print("stream_iterations: %d slices in order equal to numpy's; finals equal ModelInfer's"
              % total_slices)

        # Scan outputs chosen by `outputs`: only the requested ones are streamed.
        by_id = run_stream([request("counter", [("M", np.array(4, np.int64)),
                                                ("start", np.array([10], np.int64))],
                                    rid="c", outputs=["counts"], stream_iterations=True)])
        final_c, counts = ex.reference_counter(np.array(4, np.int64), np.array([10], np.int64))
        *slices, final = by_id["c"]
        check([outputs_of(r.infer_response)["counts"].tolist() for r in slices] ==
              [c.tolist() for c in counts], "counter slices")
        check(list(outputs_of(final.infer_response)) == ["counts"], "counter final outputs")

        # An OpenVINO Loop-5 streams too: its concatenated output's per-iteration piece.
        by_id = run_stream([request("ov_counter", [("trip", np.array([5], np.int64)),
                                                   ("start", np.array([2], np.float32))],
                                    rid="ov", stream_iterations=True)])
        ov_final, ov_counts = ex.reference_ov_counter(np.array([5], np.int64),
                                                      np.array([2], np.float32))
        *slices, final = by_id["ov"]
        check(len(slices) == 5, "ov_counter: %d slices" % len(slices))
        for i, r in enumerate(slices):
            np.testing.assert_allclose(outputs_of(r.infer_response)["counts"],
                                       ov_counts[i:i + 1])
        same(outputs_of(final.infer_response), [("final", ov_final), ("counts", ov_counts)],
             "ov_counter final")

        # Clear errors.
        errors = run_stream([
            request("add_scalar", [("x", np.zeros((1, 4), np.float32))], rid="no_loop",
                    stream_iterations=True),
            request("endless", [("x", np.array([0], np.int64))], rid="no_scan",
                    stream_iterations=True),
            request("greedy_decoder", [("start_token", np.array([1], np.int64)),
                                       ("max_len", np.array(3, np.int64))], rid="not_requested",
                    outputs=["last_token"], stream_iterations=True),
        ])
        for rid, fragments in (("no_loop", ["stream_iterations", "no Loop"]),
                               ("no_scan", ["stream_iterations", "scan output"]),
                               ("not_requested", ["none of the requested outputs", "'tokens'"])):
            check(len(errors[rid]) == 1, "%s: one response" % rid)
            message = errors[rid][0].error_message
            for f in fragments:
                check(f in message, "%s: error %r lacks %r" % (rid, message, f))
        try:
            stub.ModelInfer(request("greedy_decoder", [("start_token", np.array([1], np.int64)),
                                                       ("max_len", np.array(3, np.int64))],
                                    stream_iterations=True), timeout=30)
            check(False, "ModelInfer accepted stream_iterations")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.INVALID_ARGUMENT, "ModelInfer: %s" % e.code())
            check("ModelStreamInfer" in e.details(), "ModelInfer: %s" % e.details())
        print("stream_iterations: no Loop / no scan output / not requested / unary: clear errors")

        # Cancel mid-stream: a counter of 10^8 iterations, 20 slices read, then cancel.
        big = request("counter", [("M", np.array(10 ** 8, np.int64)),
                                  ("start", np.array([0], np.int64))], rid="big",
                      outputs=["counts"], stream_iterations=True)
        took, got = cancel_running([big], after_responses=20)
        check([outputs_of(r.infer_response)["counts"].tolist() for r in got] ==
              [[i + 1] for i in range(20)], "first 20 slices")
        print("stream_iterations: cancel after 20 slices stopped the Loop; in-flight 0 after "
              "%.1f ms" % (took * 1e3))

        # loopctl --stream: the tokens on one line, then the final outputs.
        _, tokens = ex.reference_greedy_decoder(np.array([1], np.int64), np.array(12, np.int64))
        shown = subprocess.run(
            [args.loopctl, "--addr=127.0.0.1:%d" % ports["grpc"], "infer", "greedy_decoder",
             "--input=start_token:INT64:1:1", "--input=max_len:INT64::12", "--stream"],
            capture_output=True, text=True, timeout=60)
        check(shown.returncode == 0, "loopctl --stream: %s" % shown.stderr)
        lines = shown.stdout.splitlines()
        want = "tokens: " + " ".join(str(int(t)) for t in tokens.reshape(-1))
        check(lines[0] == want, "loopctl --stream printed %r, expected %r" % (lines[0], want))
        check(lines[1].startswith("model: greedy_decoder version 1") and
              "%d slices" % len(tokens) in lines[1], "loopctl summary: %r" % lines[1])
        check(any(l.startswith("tokens INT64 [%d,1]" % len(tokens)) for l in lines[2:]),
              "loopctl final outputs: %r" % lines[2:])
        shown = subprocess.run(
            [args.loopctl, "--addr=127.0.0.1:%d" % ports["grpc"], "infer", "endless",
             "--input=x:INT64:1:0", "--stream"], capture_output=True, text=True, timeout=60)
        check(shown.returncode == 1 and "scan output" in shown.stderr,
              "loopctl --stream on endless: %d %r" % (shown.returncode, shown.stderr))
        print("loopctl --stream: %s" % lines[0])

        # A reader that stops reading: the Loop runs ahead only by what the transports buffer
        # (kStreamWindow responses plus gRPC's HTTP/2 flow-control windows, a few MB of tiny
        # messages), then waits: the slices counter stops and the server's RSS stays flat. (No
        # scrape between the RSS samples: each /metrics scrape may touch a fresh exposer thread's
        # stack.)
        slices_before_big = metrics.value("loopserve_stream_slices_total", model="counter")
        call = stub.ModelStreamInfer(iter([big]), timeout=30)
        for _ in range(50):
            next(call)
        # Held: no new slice for 1.5 s (three samples; one 0.5 s pause can be the scheduler's on a
        # loaded machine, which is what a sanitizer build once showed: 42,539 more slices after a
        # single quiet sample).
        slices_a = metrics.value("loopserve_stream_slices_total", model="counter")
        quiet = 0
        for _ in range(60):
            time.sleep(0.5)
            slices_b = metrics.value("loopserve_stream_slices_total", model="counter")
            quiet = quiet + 1 if slices_b == slices_a else 0
            if quiet == 3:
                break
            slices_a = slices_b
        check(quiet == 3, "the Loop did not stop for a reader that stopped reading")
        rss_a = rss_bytes(proc.pid)
        time.sleep(2.0)
        rss_b = rss_bytes(proc.pid)
        slices_c = metrics.value("loopserve_stream_slices_total", model="counter")
        check(slices_c == slices_b, "slices went on while nobody read: %d -> %d" %
              (slices_b, slices_c))
        check(rss_b - rss_a < 1 << 20, "RSS grew %d bytes in 2 s while the reader paused" %
              (rss_b - rss_a))
        # Reading again resumes the Loop; every slice arrives, in order.
        ahead = int(slices_b - slices_before_big)
        for i in range(50, ahead + 500):
            r = next(call).infer_response
            if r.parameters["iteration"].int64_param != i:
                check(False, "slice %d came as iteration %d" %
                      (i, r.parameters["iteration"].int64_param))
        check(metrics.value("loopserve_stream_slices_total", model="counter") > slices_b,
              "reading resumed the Loop")
        call.cancel()
        check(metrics.wait_for("loopserve_inflight_requests", 0) == 0, "in flight after cancel")
        print("stream_iterations: a paused reader holds the Loop (%d slices ahead of the reader's "
              "50, then none in 2 s; RSS %+.2f MB, at %.1f MB)" %
              (slices_b - slices_before_big, (rss_b - rss_a) / 1e6, rss_b / 1e6))
    finally:
        stopping = time.time()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    check(code == 0, "loopserve exited with %d" % code)
    # Every stream finished: gRPC's shutdown does not wait for a stream left open.
    check(time.time() - stopping < 5, "shutdown took %.1f s" % (time.time() - stopping))
    print("%d checks passed" % Checks.count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
