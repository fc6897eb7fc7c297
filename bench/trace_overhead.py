#!/usr/bin/python3
"""What tracing costs a request: the counter model (a Loop of M iterations) over gRPC with
trace_level OFF, TIMESTAMPS and LOOP_ITERATIONS (every request traced: trace_rate 1), rounds
interleaved so that load on the machine falls on every mode alike. Prints the median latency per
mode and, for LOOP_ITERATIONS, the extra time per Loop iteration.

Usage: /usr/bin/python3 bench/trace_overhead.py --loopserve=build/bin/loopserve
       --models=build/tests/integration/models [--iterations=1000] [--requests=200] [--rounds=5]
"""

import argparse
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
from loopserve_py import start_server  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--loopserve", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--tritonclient", default=os.path.join(HERE, "..", "..", "shared",
                                                               "tritonclient"))
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(args.tritonclient, "lib"))
    import tritonclient.grpc as grpcclient

    traces = tempfile.mkdtemp(prefix="trace_overhead-")
    proc, ports = start_server(args.loopserve, ["--model_repository=" + args.models,
                                                "--metrics_port=0", "--trace_dir=" + traces,
                                                "--workers=1", "--intra_op_threads=1"])
    try:
        client = grpcclient.InferenceServerClient("127.0.0.1:%d" % ports["grpc"])
        inputs = [grpcclient.InferInput("M", [1], "INT64"),
                  grpcclient.InferInput("start", [1], "INT64")]
        inputs[0].set_data_from_numpy(np.array([args.iterations], np.int64))
        inputs[1].set_data_from_numpy(np.array([0], np.int64))
        modes = {"OFF": ["OFF"], "TIMESTAMPS": ["TIMESTAMPS"],
                 "LOOP_ITERATIONS": ["TIMESTAMPS", "LOOP_ITERATIONS"]}
        client.update_trace_settings(settings={"trace_file": "bench.json", "trace_rate": "1",
                                               "log_frequency": "100"})
        for _ in range(50):  # warm-up
            client.infer("counter", inputs)
        times = {mode: [] for mode in modes}
        for _ in range(args.rounds):
            for mode, level in modes.items():
                client.update_trace_settings(settings={"trace_level": level})
                for _ in range(args.requests):
                    start = time.perf_counter()
                    client.infer("counter", inputs)
                    times[mode].append(time.perf_counter() - start)
        medians = {mode: statistics.median(t) * 1e6 for mode, t in times.items()}
        print("counter model, M=%d iterations, %d requests per mode (%d rounds), gRPC, 1 worker"
              % (args.iterations, args.requests * args.rounds, args.rounds))
        for mode, median in medians.items():
            print("  %-16s median %8.1f us  (x%.3f of OFF)" % (mode, median,
                                                             median / medians["OFF"]))
        extra = (medians["LOOP_ITERATIONS"] - medians["TIMESTAMPS"]) * 1e3 / args.iterations
        print("  LOOP_ITERATIONS over TIMESTAMPS: %.0f ns per iteration" % extra)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        shutil.rmtree(traces, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
