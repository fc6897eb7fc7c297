#!/usr/bin/python3
"""Times the benchmark models through looprun and through ONNX Runtime, alternating, with the
same inputs and the same thread count, and prints a table of medians and ratios.

    /usr/bin/python3 bench/make_bench_models.py build/bench_models
    /usr/bin/python3 bench/compare_ort.py --models=build/bench_models \
        --looprun=build/bin/looprun --node-modules=/tmp/ort/node_modules --threads=1

ONNX Runtime comes from the npm package onnxruntime-node (install it once, outside CI:
`npm install --prefix build/ort --ignore-scripts onnxruntime-node`, then pass
--node-modules=build/ort/node_modules). Each round runs looprun then ORT (or the reverse on odd
rounds) with --repeat runs after --warmup; the reported figure per engine is the median over all
rounds of each round's median, and speedup = ORT / loopserve.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

np.float, np.int, np.bool, np.object = float, int, bool, object  # noqa: E702
import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MODELS = ["counter", "rnn_b1", "rnn_b16", "greedy", "large_scan", "nested"]


def inputs_json(folder):
    """The model's inputs as {name: {dtype, dims, data}} for ort_time.js."""
    m = onnx.load(os.path.join(folder, "model.onnx"))
    spec = {}
    for k, graph_input in enumerate(m.graph.input):
        path = os.path.join(folder, "test_data_set_0", "input_%d.pb" % k)
        t = onnx.TensorProto()
        with open(path, "rb") as f:
            t.ParseFromString(f.read())
        a = numpy_helper.to_array(t)
        dtype = {"float32": "float32", "int64": "int64", "bool": "bool", "int32": "int32"}[str(a.dtype)]
        data = a.astype(np.uint8).ravel().tolist() if dtype == "bool" else a.ravel().tolist()
        spec[graph_input.name] = {"dtype": dtype, "dims": list(a.shape), "data": data}
    return spec


def run_json(cmd, env=None):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    for line in reversed(out.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError("no JSON line from %s: %s" % (cmd, out))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", required=True, help="folder written by make_bench_models.py")
    p.add_argument("--looprun", required=True)
    p.add_argument("--node-modules", required=True, help="node_modules holding onnxruntime-node")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--only", default=",".join(DEFAULT_MODELS))
    args = p.parse_args()

    env = dict(os.environ, NODE_PATH=os.path.abspath(args.node_modules))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only.split(","):
            folder = os.path.join(args.models, name)
            model = os.path.join(folder, "model.onnx")
            spec_path = os.path.join(tmp, name + ".json")
            with open(spec_path, "w") as f:
                json.dump(inputs_json(folder), f)
            ours_cmd = [args.looprun, "--model=" + model,
                        "--data=" + os.path.join(folder, "test_data_set_0"),
                        "--repeat=%d" % args.repeat, "--warmup=%d" % args.warmup,
                        "--threads=%d" % args.threads]
            ort_cmd = ["node", os.path.join(HERE, "ort_time.js"), model, spec_path,
                       str(args.repeat), str(args.warmup), str(args.threads)]
            ours, theirs = [], []
            for r in range(args.rounds):
                order = [(ours, ours_cmd, None), (theirs, ort_cmd, env)]
                if r % 2:
                    order.reverse()
                for sink, cmd, e in order:
                    sink.append(run_json(cmd, e)["median_us"])
            o, t = statistics.median(ours), statistics.median(theirs)
            rows.append((name, o, t, t / o))
            print("%-12s loopserve %10.1f us   onnxruntime %10.1f us   speedup %6.2fx" % rows[-1],
                  file=sys.stderr, flush=True)
    print("\n| model | threads | loopserve median (us) | ONNX Runtime median (us) | speedup |")
    print("|---|---|---|---|---|")
    for name, o, t, ratio in rows:
        print("| %s | %d | %.1f | %.1f | %.2fx |" % (name, args.threads, o, t, ratio))


if __name__ == "__main__":
    main()
