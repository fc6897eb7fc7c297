#!/usr/bin/python3
"""Dynamic batching against the real loopserve, from a stock grpcio client.

Usage: /usr/bin/python3 python_batching_test.py --loopserve=BIN --loopctl=BIN --models=DIR
       --repo_root=DIR --work=DIR [--protoc=PROTOC]

The model is the example rnn_cell (deploy/make_example_models.py: M INT64 [] unbatched, x and h0
[batch, 256], h_final [batch, 256], scan output h_seq [M, batch, 256] with its batch axis at 1),
served twice: `rnn_cell` with dynamic_batching and one instance, `rnn_cell_plain` without.
Every batched answer is compared with the numpy reference (reference_rnn_cell) and with the same
request answered unbatched by rnn_cell_plain; never with loopserve's own batched output.

With one instance, a request that runs holds the version's only collector, so the requests sent
meanwhile wait in the queue (loopserve_queue_depth tells how many) and merge when it ends:
1. Merging: requests of batch size 1, 2 and 3 with M = 5 and M = 3 merge into exactly two
   executions (one per M; loopserve_executions_total, loopserve_batch_size, ModelStatistics
   execution_count vs inference_count); a wrong shape and batched inputs of different batch
   sizes fail alone at once; a request whose deadline passes in the queue gets DEADLINE_EXCEEDED
   and one cancelled in the queue CANCELLED, without touching the batch.
2. A member cancelled while its batch runs: the other finishes with the right outputs; a batch
   whose members are all cancelled stops (in-flight gauge back to 0).
3. Stress: 16 client threads with random batch sizes and trip counts, every answer checked,
   through the queue (--inline_run_limit_us=0) and again where a lone request runs on the gRPC
   thread (it holds the collector slot; the others merge meanwhile).
4. `loopctl perf --concurrency_range=1:4:x2` (a geometric sweep) against the batched model.
"""

import os
import random
import shutil
import subprocess
import sys
import threading

import numpy as np

import grpc  # noqa: E402

from loopserve_py import (DTYPES, OIP, Checks, Metrics, check, parse_test_args,  # noqa: E402
                         start_server)

HIDDEN = 256


CONFIG = """name: "%(name)s"
backend: "onnxruntime"
max_batch_size: 32
%(batching)s
instance_group [ { count: %(count)d kind: KIND_CPU } ]
parameters { key: "unbatched_inputs" value: { string_value: "M" } }
parameters { key: "output_batch_axes" value: { string_value: "h_seq:1" } }
"""


def main():
    args = parse_test_args(loopctl=True)
    from proto import grpc_service_pb2 as pb, grpc_service_pb2_grpc as pb_grpc  # noqa: E402
    sys.path.insert(0, os.path.join(args.repo_root, "deploy"))
    import make_example_models as ex  # noqa: E402  (the numpy reference)

    repo = os.path.join(args.work, "repo")
    shutil.rmtree(repo, ignore_errors=True)
    # rnn_cell_two: two instances, so two collectors share one queue (one gathers while the
    # other runs a batch, and takes calls out of the queue the gathering one has looked at).
    batching = "dynamic_batching { max_queue_delay_microseconds: 2000 }"
    for name, batching, count in (("rnn_cell", batching, 1), ("rnn_cell_plain", "", 1),
                                  ("rnn_cell_two", batching, 2)):
        os.makedirs(os.path.join(repo, name, "1"))
        shutil.copy(os.path.join(args.models, "rnn_cell", "1", "model.onnx"),
                    os.path.join(repo, name, "1", "model.onnx"))
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write(CONFIG % {"name": name, "batching": batching, "count": count})

    rng = np.random.RandomState(17)

    def case(m, batch, width=HIDDEN):
        x = rng.uniform(-1, 1, (batch, width)).astype(np.float32)
        h0 = rng.uniform(-1, 1, (batch, HIDDEN)).astype(np.float32)
        return [("M", np.array(m, np.int64)), ("x", x), ("h0", h0)]

    def request(model, inputs, outputs=()):
        r = pb.ModelInferRequest(model_name=model)
        for name, array in inputs:
            array = np.asarray(array)
            r.inputs.add(name=name, datatype=OIP[array.dtype.type], shape=list(array.shape))
            r.raw_input_contents.append(array.tobytes())
        for name in outputs:
            r.outputs.add(name=name)
        return r

    def outputs_of(response):
        return {o.name: np.frombuffer(raw, DTYPES[o.datatype]).reshape(tuple(o.shape))
                for o, raw in zip(response.outputs, response.raw_output_contents)}

    def reference(inputs):
        values = dict(inputs)
        h_final, h_seq = ex.reference_rnn_cell(values["M"], values["x"], values["h0"])
        return {"h_final": h_final, "h_seq": h_seq}

    def expect_right(got, inputs, unbatched, what):
        want = reference(inputs)
        for name in got:
            check(got[name].shape == want[name].shape,
                  "%s/%s: shape %s, numpy %s" % (what, name, got[name].shape, want[name].shape))
            np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5,
                                       err_msg="%s/%s vs numpy" % (what, name))
            if unbatched is not None:
                np.testing.assert_allclose(got[name], unbatched[name], rtol=1e-5, atol=1e-6,
                                           err_msg="%s/%s vs unbatched" % (what, name))
            CHECKS_LOCAL[0] += 1

    CHECKS_LOCAL = [0]

    def stress(stub, metrics, what, must_merge, model="rnn_cell", requests=12):
        """16 client threads, `requests` each, random M and batch sizes; every answer checked
        against numpy (within 30 s: a call left in the queue shows as DEADLINE_EXCEEDED); with
        `must_merge`, some requests must have merged."""
        labels = {"model": model, "version": "1"}
        failures = []
        lock = threading.Lock()

        def client(seed):
            local = np.random.RandomState(seed)
            chooser = random.Random(seed)
            try:
                for _ in range(requests):
                    m = chooser.choice((2, 3))
                    b = chooser.choice((1, 2, 3))
                    inputs = [("M", np.array(m, np.int64)),
                              ("x", local.uniform(-1, 1, (b, HIDDEN)).astype(np.float32)),
                              ("h0", local.uniform(-1, 1, (b, HIDDEN)).astype(np.float32))]
                    got = outputs_of(stub.ModelInfer(request(model, inputs), timeout=30))
                    expect_right(got, inputs, None, "stress")
            except Exception as e:  # noqa: BLE001  (reported below)
                with lock:
                    failures.append(repr(e))

        executions = metrics.value("loopserve_executions_total", **labels)
        inferences = metrics.value("loopserve_inferences_total", **labels)
        threads = [threading.Thread(target=client, args=(seed,)) for seed in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        check(not failures, "%s: stress failures: %s" % (what, failures[:3]))
        merged = metrics.value("loopserve_inferences_total", **labels) - inferences
        ran = metrics.value("loopserve_executions_total", **labels) - executions
        check(merged >= 16 * requests and ran <= 16 * requests and
              (ran < 16 * requests or not must_merge),
              "%s: %d inferences in %d executions" % (what, merged, ran))
        metrics.wait_for("loopserve_inflight_requests", 0)
        print("%s: %d inferences in %d executions" % (what, merged, ran))

    proc, ports = start_server(args.loopserve, [
        "--model_repository=" + repo, "--model_control_mode=none", "--workers=2",
        "--metrics_port=0", "--inline_run_limit_us=0"])
    try:
        channel = grpc.insecure_channel("127.0.0.1:%d" % ports["grpc"])
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        metrics = Metrics(ports["metrics"], seconds=60, strict=True)
        labels = {"model": "rnn_cell", "version": "1"}

        def unbatched(inputs, outputs=()):
            return outputs_of(stub.ModelInfer(request("rnn_cell_plain", inputs, outputs),
                                              timeout=120))

        def hold():
            """A request that holds rnn_cell's only collector until cancelled."""
            future = stub.ModelInfer.future(
                request("rnn_cell", case(10 ** 9, 1), ["h_final"]), timeout=300)
            metrics.wait_for("loopserve_inflight_requests", 1)
            metrics.wait_for("loopserve_queue_depth", 0)
            return future

        # ---- 1. Merging, and requests that fail or leave alone ----
        blocker = hold()
        goods = [case(5, 1), case(5, 2), case(3, 1), case(5, 3), case(5, 1), case(3, 2)]
        good_futures = [stub.ModelInfer.future(request("rnn_cell", c), timeout=300)
                        for c in goods]
        expiring = stub.ModelInfer.future(request("rnn_cell", case(5, 1)), timeout=0.5)
        cancelled = stub.ModelInfer.future(request("rnn_cell", case(5, 2)), timeout=300)
        metrics.wait_for("loopserve_queue_depth", len(goods) + 2)
        # Validation happens before merging: these fail alone, at once.
        for inputs, what, says in ((case(5, 1, width=128), "shape", "input 'x': shape [1,128]"),
                                   ([("M", np.array(5, np.int64)),
                                     ("x", np.zeros((2, HIDDEN), np.float32)),
                                     ("h0", np.zeros((3, HIDDEN), np.float32))], "batch size",
                                    "batch size 3 differs")):
            try:
                stub.ModelInfer(request("rnn_cell", inputs), timeout=10)
                check(False, "a request with a wrong %s was answered" % what)
            except grpc.RpcError as e:
                check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and says in e.details(),
                      "wrong %s: %s %s" % (what, e.code(), e.details()))
        cancelled.cancel()
        try:
            expiring.result()
            check(False, "the expiring request was answered")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.DEADLINE_EXCEEDED, "expiring: %s" % e.code())
        executions = metrics.value("loopserve_executions_total", **labels)
        inferences = metrics.value("loopserve_inferences_total", **labels)
        batch_sum = metrics.value("loopserve_batch_size_sum", **labels)
        blocker.cancel()
        for k, (inputs, future) in enumerate(zip(goods, good_futures)):
            got = outputs_of(future.result())
            check(set(got) == {"h_final", "h_seq"}, "merged %d: outputs %s" % (k, list(got)))
            expect_right(got, inputs, unbatched(inputs), "merged request %d" % k)
        rows = sum(dict(c)["x"].shape[0] for c in goods)
        check(metrics.value("loopserve_executions_total", **labels) - executions == 2,
              "the six requests (M 5 and 3) ran as %d executions, expected 2" %
              (metrics.value("loopserve_executions_total", **labels) - executions))
        check(metrics.value("loopserve_inferences_total", **labels) - inferences == rows,
              "inferences counted: expected %d" % rows)
        check(metrics.value("loopserve_batch_size_sum", **labels) - batch_sum == rows,
              "batch sizes observed: expected a sum of %d" % rows)
        metrics.wait_for("loopserve_requests_total", 1, outcome="deadline_exceeded", **labels)
        metrics.wait_for("loopserve_requests_total", 2, outcome="cancelled", **labels)
        metrics.wait_for("loopserve_inflight_requests", 0)
        stats = stub.ModelStatistics(pb.ModelStatisticsRequest(name="rnn_cell", version="1"))
        s = stats.model_stats[0]
        check(s.execution_count == metrics.value("loopserve_executions_total", **labels),
              "ModelStatistics execution_count %d" % s.execution_count)
        check(s.inference_count == rows and s.execution_count == 2,
              "ModelStatistics: inference_count %d, execution_count %d (expected %d, 2)" %
              (s.inference_count, s.execution_count, rows))

        # ---- 2. Cancels while a batch runs ----
        long_steps = 20000
        blocker = hold()
        stays = case(long_steps, 2)
        leaves = case(long_steps, 1)
        stays_future = stub.ModelInfer.future(request("rnn_cell", stays, ["h_final"]), timeout=300)
        leaves_future = stub.ModelInfer.future(request("rnn_cell", leaves, ["h_final"]),
                                               timeout=300)
        metrics.wait_for("loopserve_queue_depth", 2)
        executions = metrics.value("loopserve_executions_total", **labels)
        cancelled_before = metrics.value("loopserve_requests_total", outcome="cancelled", **labels)
        blocker.cancel()
        metrics.wait_for("loopserve_queue_depth", 0)  # the two run as one batch
        leaves_future.cancel()
        got = outputs_of(stays_future.result())
        expect_right(got, stays, None, "the member left in its batch")
        check(metrics.value("loopserve_executions_total", **labels) - executions == 1,
              "the two long requests ran as one execution")
        metrics.wait_for("loopserve_requests_total", cancelled_before + 2, outcome="cancelled",
                         **labels)
        # Every member cancelled: the batch stops.
        blocker = hold()
        both = [stub.ModelInfer.future(request("rnn_cell", case(10 ** 9, b), ["h_final"]),
                                       timeout=300) for b in (1, 2)]
        metrics.wait_for("loopserve_queue_depth", 2)
        blocker.cancel()
        metrics.wait_for("loopserve_queue_depth", 0)
        for future in both:
            future.cancel()
        metrics.wait_for("loopserve_inflight_requests", 0, seconds=30)

        # ---- 3. Stress: many clients, random batch sizes and trip counts ----
        stress(stub, metrics, "queued path", must_merge=True)

        # ---- 4. loopctl perf's geometric concurrency sweep against the batcher ----
        perf = subprocess.run(
            [args.loopctl, "--addr=127.0.0.1:%d" % ports["grpc"], "perf", "rnn_cell_two",
             "--input=M:INT64::4", "--shape=x:1,256", "--shape=h0:1,256",
             "--concurrency_range=1:16:x4", "--requests=96", "--warmup=2"],
            capture_output=True, text=True, timeout=120)
        check(perf.returncode == 0, "loopctl perf: %s" % perf.stderr)
        levels = [line for line in perf.stdout.splitlines() if line.startswith('{"model"')]
        check(['"concurrency":%d,' % c in line for c, line in zip((1, 4, 16), levels)] ==
              [True] * 3 and len(levels) == 3, "perf levels: %s" % perf.stdout)
        check(proc.poll() is None, "loopserve exited")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    check(proc.returncode == 0, "loopserve exit status %s" % proc.returncode)

    # The same stress where a request may run on the gRPC thread (the default inline limit):
    # a lone request runs there at once, holding the version's collector slot, and the others
    # queue and merge meanwhile.
    proc, ports = start_server(args.loopserve, [
        "--model_repository=" + repo, "--model_control_mode=none", "--workers=2",
        "--metrics_port=0", "--inline_run_limit_us=100000"])
    try:
        channel = grpc.insecure_channel("127.0.0.1:%d" % ports["grpc"])
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        metrics = Metrics(ports["metrics"], seconds=60, strict=True)
        labels = {"model": "rnn_cell", "version": "1"}
        lone = case(3, 1)
        expect_right(outputs_of(stub.ModelInfer(request("rnn_cell", lone), timeout=120)), lone,
                     None, "lone request")
        # The version's recent runs are short now: this one runs on the gRPC thread, and the
        # requests sent meanwhile queue and merge (the watcher polls its cancellation).
        blocker = stub.ModelInfer.future(
            request("rnn_cell", case(10 ** 9, 1), ["h_final"]), timeout=300)
        metrics.wait_for("loopserve_inflight_requests", 1)
        goods = [case(4, 2), case(4, 1), case(4, 3)]
        futures = [stub.ModelInfer.future(request("rnn_cell", c), timeout=300) for c in goods]
        metrics.wait_for("loopserve_queue_depth", len(goods))
        executions = metrics.value("loopserve_executions_total", **labels)
        blocker.cancel()
        for k, (inputs, future) in enumerate(zip(goods, futures)):
            expect_right(outputs_of(future.result()), inputs, None, "merged after inline %d" % k)
        check(metrics.value("loopserve_executions_total", **labels) - executions == 1,
              "the three requests queued behind an inline run ran as one execution")
        # Whether requests merge here depends on timing (a server that keeps up runs each at
        # once); every answer must be right.
        stress(stub, metrics, "inline path", must_merge=False)
        stress(stub, metrics, "two instances", must_merge=False, model="rnn_cell_two",
               requests=40)
        check(proc.poll() is None, "loopserve exited")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    check(proc.returncode == 0, "loopserve exit status %s" % proc.returncode)
    print("python batching test: %d checks, %d output comparisons passed" %
          (Checks.count, CHECKS_LOCAL[0]))


if __name__ == "__main__":
    main()
