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

On the first round of each model both engines also write the outputs of their last run (looprun
--output_dir, ort_time.js's 6th argument; writing happens after the timed runs) and every output
is compared: same shape, integers and booleans exactly, floats with
np.allclose(rtol=RTOL, atol=ATOL) (the engines use different tanh/exp approximations and summation
orders). The script exits with status 1 if any model's outputs differ.
"""
import argparse
import base64
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
DEFAULT_MODELS = [
    "counter", "rnn_b1", "rnn_b16", "greedy", "large_scan", "nested", "lstm_b1", "gemm_rnn",
]
RTOL, ATOL = 1e-4, 1e-5
ORT_DTYPES = {"float32": np.float32, "float64": np.float64, "int64": np.int64, "int32": np.int32,
              "int8": np.int8, "uint8": np.uint8, "bool": np.bool_, "float16": np.float16}


def model_paths(folder):
    """(the model looprun runs, the ONNX model ONNX Runtime runs): model.onnx for both, or for an
    OpenVINO IR folder model.xml and its ONNX twin peer.onnx (same inputs and outputs, in order)."""
    if os.path.exists(os.path.join(folder, "model.xml")):
        return os.path.join(folder, "model.xml"), os.path.join(folder, "peer.onnx")
    onnx_path = os.path.join(folder, "model.onnx")
    return onnx_path, onnx_path


def inputs_json(folder):
    """The model's inputs as {name: {dtype, dims, data}} for ort_time.js."""
    m = onnx.load(model_paths(folder)[1])
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


def looprun_outputs(model_path, out_dir):
    """looprun --output_dir's output_<k>.pb as {name: array}, k in the output order of the ONNX
    model at `model_path` (an IR model's Results come in the same order as its twin's outputs)."""
    m = onnx.load(model_path, load_external_data=False)
    outputs = {}
    for k, graph_output in enumerate(m.graph.output):
        t = onnx.TensorProto()
        with open(os.path.join(out_dir, "output_%d.pb" % k), "rb") as f:
            t.ParseFromString(f.read())
        outputs[graph_output.name] = numpy_helper.to_array(t)
    return outputs


def ort_outputs(path):
    """ort_time.js's outputs JSON as {name: array}."""
    with open(path) as f:
        spec = json.load(f)
    outputs = {}
    for name, t in spec.items():
        if t["dtype"] == "string":
            a = np.array(t["data"], dtype=object)
        else:
            a = np.frombuffer(base64.b64decode(t["data"]), dtype=ORT_DTYPES[t["dtype"]])
        outputs[name] = a.reshape(t["dims"])
    return outputs


def compare_outputs(ours, theirs):
    """(problems, max abs diff over float outputs): problems is empty when they agree."""
    problems, max_diff = [], 0.0
    for name in ours.keys() | theirs.keys():
        if name not in ours or name not in theirs:
            problems.append("%s: only from %s" % (name, "looprun" if name in ours else "ORT"))
            continue
        a, b = ours[name], theirs[name]
        if a.shape != b.shape:
            problems.append("%s: shape %s vs ORT %s" % (name, a.shape, b.shape))
            continue
        if a.dtype.kind == "f" or b.dtype.kind == "f":
            if a.dtype != b.dtype:
                problems.append("%s: dtype %s vs ORT %s" % (name, a.dtype, b.dtype))
                continue
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            finite = np.isfinite(a64) & np.isfinite(b64)
            diff = float(np.abs(a64 - b64)[finite].max()) if finite.any() else 0.0
            max_diff = max(max_diff, diff)
            close = np.isclose(a64, b64, rtol=RTOL, atol=ATOL, equal_nan=True)
            if not close.all():
                bad = np.argwhere(~close)
                first = tuple(int(i) for i in bad[0])
                problems.append("%s: %d of %d elements differ beyond rtol=%g atol=%g, max abs diff "
                                "%.3g, first at %s (%r vs ORT %r)"
                                % (name, len(bad), a.size, RTOL, ATOL, diff, first, a[first],
                                   b[first]))
        elif not np.array_equal(a, b):
            bad = np.argwhere(a != b)
            first = tuple(int(i) for i in bad[0])
            problems.append("%s: %d of %d elements differ, first at %s (%r vs ORT %r)"
                            % (name, len(bad), a.size, first, a[first], b[first]))
    return problems, max_diff


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
    rows, failed = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only.split(","):
            folder = os.path.join(args.models, name)
            model, ort_model = model_paths(folder)
            spec_path = os.path.join(tmp, name + ".json")
            with open(spec_path, "w") as f:
                json.dump(inputs_json(folder), f)
            ours_cmd = [args.looprun, "--model=" + model,
                        "--data=" + os.path.join(folder, "test_data_set_0"),
                        "--repeat=%d" % args.repeat, "--warmup=%d" % args.warmup,
                        "--threads=%d" % args.threads]
            ort_cmd = ["node", os.path.join(HERE, "ort_time.js"), ort_model, spec_path,
                       str(args.repeat), str(args.warmup), str(args.threads)]
            ours_out = os.path.join(tmp, name + ".looprun_out")
            ort_out = os.path.join(tmp, name + ".ort_out.json")
            ours, theirs = [], []
            agree = "not checked"
            for r in range(args.rounds):
                # The first round also writes the outputs (after its timed runs).
                extra_ours = ["--output_dir=" + ours_out] if r == 0 else []
                extra_ort = [ort_out] if r == 0 else []
                order = [(ours, ours_cmd + extra_ours, None), (theirs, ort_cmd + extra_ort, env)]
                if r % 2:
                    order.reverse()
                for sink, cmd, e in order:
                    sink.append(run_json(cmd, e)["median_us"])
                if r == 0:
                    problems, max_diff = compare_outputs(looprun_outputs(ort_model, ours_out),
                                                         ort_outputs(ort_out))
                    if problems:
                        failed.append(name)
                        agree = "DIFFER (max abs diff %.2g)" % max_diff
                        print("%-12s OUTPUTS DIFFER: %s" % (name, "; ".join(problems)),
                              file=sys.stderr, flush=True)
                    else:
                        agree = "agree (max abs diff %.2g)" % max_diff
                        print("%-12s outputs agree (max abs diff %.3g)" % (name, max_diff),
                              file=sys.stderr, flush=True)
            o, t = statistics.median(ours), statistics.median(theirs)
            rows.append((name, o, t, t / o, agree))
            print("%-12s loopserve %10.1f us   onnxruntime %10.1f us   speedup %6.2fx"
                  % rows[-1][:4], file=sys.stderr, flush=True)
    print("\n| model | threads | loopserve median (us) | ONNX Runtime median (us) | speedup | "
          "outputs |")
    print("|---|---|---|---|---|---|")
    for name, o, t, ratio, agree in rows:
        print("| %s | %d | %.1f | %.1f | %.2fx | %s |" % (name, args.threads, o, t, ratio, agree))
    if failed:
        print("outputs differ from ONNX Runtime: %s" % ", ".join(failed), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
