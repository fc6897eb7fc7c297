#!/usr/bin/python3
"""Iteration-level batching (parameters 'iteration_batching') against the real loopserve.

Usage: /usr/bin/python3 python_iteration_batching_test.py --loopserve=BIN --loopctl=BIN
       --models=DIR --repo_root=DIR --work=DIR [--protoc=PROTOC]

The models come from tests/unit/engine/loop_stepper/make_stepper_models.py (a greedy decoder Loop
whose rows stop on their own budget). Served as:
  dec_iter   iteration_batching, max_batch_size 16, one instance (one running batch)
  dec_one    the same with max_batch_size 1: one row runs, the next waits for room
  dec_plain  the same model without batching: every answer of dec_iter is compared with
             dec_plain's answer to the same request, and the tokens with the numpy reference
  dec_bad    decoder_any (one condition for the whole batch) with iteration_batching: refused at
             load, with the reason naming its ReduceMax
  dec_yes, dec_nobatch  iteration_batching "yes", and "true" without max_batch_size: refused
  dec_typo   a misspelt key: loaded without the mode, the log says the key was ignored
  scaled_iter  a model whose body reads an unbatched input s: rows of two values of s sent at
             once are all answered right (a row waits for a batch with its s)
Checked:
1. join/leave: a long row (10^7 steps) runs while 12 short rows join and leave: each short
   answer arrives while the long one still runs (one instance: without iteration batching they
   would queue behind it) and equals its lone run and numpy; then the long row is cancelled.
2. deadline and cancel remove just that row: a row with a 300 ms timeout gets DEADLINE_EXCEEDED, a
   cancelled one CANCELLED, while a row beside them is answered right. A request waiting for room
   in a full running batch (dec_one) is answered DEADLINE_EXCEEDED by the server at its `timeout`
   parameter while it waits, not when the running row ends.
3. streaming: stream_iterations on dec_iter sends each row's token slices, equal to the final.
4. the refused model is not ready and the log gives the reason; loopctl config shows the mode.
The loopserve_iteration_* metrics count the rows admitted, the rows per iteration (more than one
on average while the long row runs) and the iterations per row.
"""

import os
import subprocess
import sys
import threading
import time

import numpy as np

import grpc  # noqa: E402

from loopserve_py import DTYPES, OIP, Metrics, check, parse_test_args, start_server  # noqa: E402

HIDDEN = 16

CONFIG = """name: "%(name)s"
backend: "onnxruntime"
max_batch_size: %(mbs)d
%(batching)s
instance_group [ { count: 1 kind: KIND_CPU } ]
%(params)s
"""
LAYOUT = """parameters { key: "unbatched_inputs" value: { string_value: "M,cond" } }
parameters { key: "output_batch_axes" value: { string_value: "tokens:1,hs:1" } }
"""
ITER = 'parameters { key: "iteration_batching" value: { string_value: "true" } }\n'


def main():
    args = parse_test_args(loopctl=True)
    from proto import grpc_service_pb2 as pb, grpc_service_pb2_grpc as pb_grpc  # noqa: E402
    sys.path.insert(0, os.path.join(args.repo_root, "tests", "unit", "engine", "loop_stepper"))
    import make_stepper_models as sm  # noqa: E402  (the models and the numpy reference)

    models = os.path.join(args.work, "models")
    subprocess.run([sys.executable, os.path.join(args.repo_root, "tests", "unit", "engine",
                                                 "loop_stepper", "make_stepper_models.py"), models],
                   check=True)
    weights = sm.weights(HIDDEN, 12)
    repo = os.path.join(args.work, "repo")
    subprocess.run(["rm", "-rf", repo], check=True)
    for name, source, mbs, batching, params in (
            ("dec_iter", "decoder_rows", 16, "dynamic_batching { }", LAYOUT + ITER),
            ("dec_one", "decoder_rows", 1, "dynamic_batching { }", LAYOUT + ITER),
            ("dec_plain", "decoder_rows", 0, "", ""),
            ("dec_bad", "decoder_any", 16, "dynamic_batching { }", LAYOUT + ITER),
            ("dec_yes", "decoder_rows", 16, "dynamic_batching { }",
             LAYOUT + ITER.replace('"true"', '"yes"')),
            ("dec_nobatch", "decoder_rows", 0, "", ITER),
            ("dec_typo", "decoder_rows", 16, "dynamic_batching { }",
             LAYOUT + ITER.replace("iteration_batching", "iteration_batchng")),
            ("scaled_iter", "scaled", 16, "dynamic_batching { }",
             'parameters { key: "unbatched_inputs" value: { string_value: "M,s" } }\n' + ITER)):
        os.makedirs(os.path.join(repo, name, "1"))
        subprocess.run(["cp", os.path.join(models, source, "model.onnx"),
                        os.path.join(repo, name, "1", "model.onnx")], check=True)
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write(CONFIG % {"name": name, "mbs": mbs, "batching": batching, "params": params})

    rng = np.random.RandomState(5)

    def inputs(budget, m=1000):
        return [("M", np.array(m, np.int64)), ("cond", np.array(True)),
                ("h0", rng.uniform(-1, 1, (1, HIDDEN)).astype(np.float32)),
                ("tok0", np.array([int(rng.randint(1, 12))], np.int64)),
                ("budget0", np.array([budget], np.int64))]

    def request(model, values, **params):
        r = pb.ModelInferRequest(model_name=model)
        for name, array in values:
            array = np.asarray(array)
            r.inputs.add(name=name, datatype=OIP[array.dtype.type], shape=list(array.shape))
            r.raw_input_contents.append(array.tobytes())
        for key, value in params.items():
            r.parameters[key].bool_param = value
        return r

    def outputs_of(response):
        return {o.name: np.frombuffer(raw, DTYPES[o.datatype]).reshape(tuple(o.shape))
                for o, raw in zip(response.outputs, response.raw_output_contents)}

    def expect_right(got, values, what):
        plain = outputs_of(stub.ModelInfer(request("dec_plain", values), timeout=60))
        check(set(got) == set(plain), "%s: outputs %s vs %s" % (what, list(got), list(plain)))
        for name in plain:
            check(got[name].shape == plain[name].shape,
                  "%s/%s: shape %s, alone %s" % (what, name, got[name].shape, plain[name].shape))
            np.testing.assert_allclose(got[name], plain[name], rtol=1e-5, atol=1e-6,
                                       err_msg="%s/%s vs its lone run" % (what, name))
        v = dict(values)
        tokens, _ = sm.reference(weights, int(v["M"]), int(v["budget0"][0]), int(v["tok0"][0]),
                                 v["h0"][0])
        np.testing.assert_array_equal(got["tokens"].reshape(-1), np.array(tokens, np.int64),
                                      err_msg="%s tokens vs numpy" % what)

    log_path = os.path.join(args.work, "loopserve.log")
    with open(log_path, "w") as log:
        proc, ports = start_server(args.loopserve, ["--model_repository=" + repo,
                                                    "--metrics_port=0", "--workers=2"],
                                   stderr=log)
    metrics = Metrics(ports["metrics"])
    try:
        channel = grpc.insecure_channel("127.0.0.1:%d" % ports["grpc"])
        grpc.channel_ready_future(channel).result(timeout=30)
        stub = pb_grpc.GRPCInferenceServiceStub(channel)

        # ---- 4. the refused model, the mode in the complete config ----
        check(stub.ModelReady(pb.ModelReadyRequest(name="dec_iter"), timeout=10).ready,
              "dec_iter ready")
        check(not stub.ModelReady(pb.ModelReadyRequest(name="dec_bad"), timeout=10).ready,
              "dec_bad (one condition for the whole batch) was loaded")
        with open(log_path) as f:
            text = f.read()
        check("(ReduceMax)" in text and "iteration_batching" in text and "the batch" in text,
              "the log does not say why dec_bad was refused:\n" + text[-2000:])
        for name, says in (("dec_yes", "string_value must be true or false, not 'yes'"),
                           ("dec_nobatch", "needs max_batch_size > 0")):
            check(not stub.ModelReady(pb.ModelReadyRequest(name=name), timeout=10).ready,
                  "%s was loaded" % name)
            check(says in text, "the log does not say why %s was refused" % name)
        # A misspelt key is not taken for the mode: the model loads without it, and the log says
        # the key was ignored.
        check(stub.ModelReady(pb.ModelReadyRequest(name="dec_typo"), timeout=10).ready,
              "dec_typo not ready")
        check("'iteration_batchng' ignored: not a loopserve setting" in text,
              "the log does not warn about the misspelt key")
        check("dec_iter' v1: iteration batching on: up to 16 rows" in text,
              "the load log does not say iteration batching is on")
        r = subprocess.run([args.loopctl, "--addr=127.0.0.1:%d" % ports["grpc"], "config",
                            "dec_iter"], capture_output=True, text=True, timeout=60)
        check(r.returncode == 0 and 'key: "iteration_batching"' in r.stdout and
              'string_value: "true"' in r.stdout, "loopctl config:\n" + r.stdout + r.stderr)
        print("refused: dec_bad not ready, the log names its ReduceMax; loopctl config shows "
              "iteration_batching")

        # ---- 1. rows join and leave around a long one ----
        # The long row runs until cancelled (a budget of 10^7 steps: minutes).
        long_call = stub.ModelInfer.future(request("dec_iter", inputs(10 ** 7, m=10 ** 8)),
                                           timeout=120)
        time.sleep(0.05)
        shorts = [inputs(budget) for budget in (1, 3, 8, 2, 13, 5, 21, 4, 9, 1, 17, 6)]
        answers = [None] * len(shorts)
        failures = []

        def client(k):
            try:
                answers[k] = outputs_of(stub.ModelInfer(request("dec_iter", shorts[k]), timeout=60))
            except Exception as e:  # noqa: BLE001  (reported below)
                failures.append(repr(e))

        threads = [threading.Thread(target=client, args=(k,)) for k in range(len(shorts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        check(not failures, "short rows failed: %s" % failures)
        check(not long_call.done(), "the long row ended before the short ones that joined it")
        long_call.cancel()
        try:
            long_call.result()
            check(False, "the cancelled long row was answered")
        except grpc.FutureCancelledError:
            pass
        for k, values in enumerate(shorts):
            expect_right(answers[k], values, "short row %d" % k)
        labels = {"model": "dec_iter", "version": "1"}
        admitted = metrics.value("loopserve_iteration_rows_admitted_total", **labels)
        check(admitted >= 13,
              "loopserve_iteration_rows_admitted_total %s, expected >= 13" % admitted)
        steps = metrics.value("loopserve_iteration_batch_rows_count", **labels)
        rows = metrics.value("loopserve_iteration_batch_rows_sum", **labels)
        check(steps > 0 and rows / steps > 1, "running batches held %s rows over %s iterations: "
              "the short rows never ran beside the long one" % (rows, steps))
        check(metrics.value("loopserve_iteration_row_iterations_count", **labels) >= 12,
              "iterations per row not recorded")
        print("join/leave: 12 short rows answered while a long row ran; all equal their lone runs "
              "and numpy; %.2f rows per iteration on average" % (rows / steps))

        # ---- 2. deadline and cancel take out just that row ----
        keep_values = inputs(300)
        keep = stub.ModelInfer.future(request("dec_iter", keep_values), timeout=120)
        expiring = stub.ModelInfer.future(request("dec_iter", inputs(10 ** 7, m=10 ** 8)),
                                          timeout=0.3)
        cancelled = stub.ModelInfer.future(request("dec_iter", inputs(10 ** 7, m=10 ** 8)),
                                           timeout=120)
        time.sleep(0.2)
        cancelled.cancel()
        try:
            expiring.result()
            check(False, "the expiring row was answered")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.DEADLINE_EXCEEDED, "expiring: %s" % e.code())
        expect_right(outputs_of(keep.result()), keep_values, "row beside the cancelled one")
        metrics.wait_for("loopserve_requests_total", 2, outcome="cancelled", model="dec_iter",
                         version="1", protocol="grpc")
        metrics.wait_for("loopserve_inflight_requests", 0)
        print("deadline and cancel: those rows left, the row beside them answered right")

        # ---- a request waiting for room leaves at its deadline (the server's `timeout`) ----
        running = stub.ModelInfer.future(request("dec_one", inputs(10 ** 7, m=10 ** 8)),
                                         timeout=120)
        check(metrics.wait_for("loopserve_iteration_rows_admitted_total", 1, model="dec_one",
                               version="1") == 1, "the running row did not start")
        waiting = request("dec_one", inputs(5))
        waiting.parameters["timeout"].int64_param = 300000  # microseconds
        started = time.monotonic()
        try:
            stub.ModelInfer(waiting, timeout=60)
            check(False, "the waiting request was answered with outputs")
        except grpc.RpcError as e:
            waited = time.monotonic() - started
            check(e.code() == grpc.StatusCode.DEADLINE_EXCEEDED, "waiting: %s" % e.code())
            check("in the queue" in e.details(), "waiting: %s" % e.details())
            check(waited < 30, "waiting: answered after %.1f s" % waited)
        check(not running.done(), "the running row ended meanwhile")
        running.cancel()
        metrics.wait_for("loopserve_inflight_requests", 0)
        print("a request waiting for room answered DEADLINE_EXCEEDED after %.2f s while the row "
              "ran" % waited)

        # ---- unbatched inputs: rows with another value wait for the batch to empty ----
        def scaled_case(k):
            m, sv, x0 = 3 + 7 * (k % 3), float(1 + k % 2), float(k)
            return m, sv, x0, [("M", np.array(m, np.int64)), ("s", np.array(sv, np.float32)),
                               ("x0", np.full((1, 4), x0, np.float32))]

        scaled_answers = {}

        def scaled_client(k):
            try:
                m, sv, x0, values = scaled_case(k)
                got = outputs_of(stub.ModelInfer(request("scaled_iter", values), timeout=60))
                x = np.float32(x0)
                for _ in range(m):  # the spec: x <- x / 2 + s
                    x = np.float32(x * np.float32(0.5) + np.float32(sv))
                scaled_answers[k] = (got["x_final"], x)
            except Exception as e:  # noqa: BLE001  (reported below)
                failures.append(repr(e))

        threads = [threading.Thread(target=scaled_client, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        check(not failures, "scaled rows failed: %s" % failures)
        for k, (got, want) in scaled_answers.items():
            np.testing.assert_allclose(got, np.full((1, 4), want, np.float32), rtol=1e-6,
                                       err_msg="scaled row %d" % k)
        print("unbatched inputs: 8 rows with two values of s answered right")

        # ---- 3. stream_iterations: each row's own slices ----
        streams = {"a": inputs(7), "b": inputs(12)}
        sent = []
        for rid, values in streams.items():
            r = request("dec_iter", values, stream_iterations=True)
            r.id = rid
            sent.append(r)
        by_id = {}
        for response in stub.ModelStreamInfer(iter(sent), timeout=60):
            check(response.error_message == "", response.error_message)
            by_id.setdefault(response.infer_response.id, []).append(response.infer_response)
        for rid, values in streams.items():
            *slices, final = by_id[rid]
            got = outputs_of(final)
            expect_right(got, values, "stream " + rid)
            tokens = got["tokens"].reshape(-1)
            check(len(slices) == len(tokens), "%s: %d slices, %d tokens" % (rid, len(slices),
                                                                         len(tokens)))
            for i, s in enumerate(slices):
                check(s.parameters["iteration"].int64_param == i, "%s: slice %d" % (rid, i))
                np.testing.assert_array_equal(outputs_of(s)["tokens"].reshape(-1), tokens[i:i + 1])
        print("streaming: every row's slices in order, equal to its final tokens")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print("python_iteration_batching_test: OK")


if __name__ == "__main__":
    main()
