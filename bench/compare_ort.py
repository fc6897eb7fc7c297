#!/usr/bin/python3
"""Times Loop models through looprun and through ONNX Runtime, alternating, with the same inputs
and the same thread count, and prints a table of medians, ratios and output agreement.

Benchmark models (bench/make_bench_models.py):

    /usr/bin/python3 bench/make_bench_models.py build/bench_models
    /usr/bin/python3 bench/compare_ort.py --models=build/bench_models \\
        --looprun=build/bin/looprun --node-modules=build/ort/node_modules --threads=1

The grid (bench/grid_models.py: 49 generated Loop models over the body kinds real exported models
contain, batch 1-64, hidden 64-1024), at 1 and 2 threads, with the minimum and geometric mean of
the speedups, the CPU and the vector ISA in use:

    /usr/bin/python3 bench/compare_ort.py --grid --looprun=build/bin/looprun \\
        --node-modules=build/ort/node_modules [--isa=avx2] [--only=rnn,gru]

--grid writes its models itself (into --grid-dir, default a temporary folder). It takes about
12 minutes on a 2-vCPU machine (5 rounds per case and thread count); --rounds=3 takes about 8.
--isa=avx2 caps loopserve's own kernels (LOOPSERVE_MAX_ISA=avx2) and oneDNN's
(ONEDNN_MAX_CPU_ISA=AVX2) to AVX2, to measure the AVX2 path on an AVX-512 machine; ONNX Runtime
(MLAS) has no such switch and keeps using everything the CPU has, so the comparison is
conservative for loopserve. It is a benchmark, not a test: CI does not run it.

ONNX Runtime comes from the npm package onnxruntime-node (install it once, outside CI:
`npm install --prefix build/ort --ignore-scripts onnxruntime-node`, then pass
--node-modules=build/ort/node_modules). Each round runs looprun then ORT (or the reverse on odd
rounds) with --repeat runs after --warmup; the reported figure per engine is the median over all
rounds of each round's median, and speedup = ORT / loopserve. With --cpu-time the figure is the
process's CPU time per run (looprun's and ort_time.js's cpu_median_us) instead of wall time: on a
machine other processes load, at 1 thread, it measures the work rather than the share of a core
the scheduler gave.

After the speedups comes a roofline table (--no-roofline skips it): per case the FLOPs of its
products and the weight bytes they read again every iteration (bench/roofline.py's walk of the
ONNX graph), each engine's FLOP/s and % of the core's FMA peak, the floor (the least time any
engine could take, from the peak and the cache re-read rates lstm_bound_bench --peak measures at
the start of the run: it must sit beside --looprun, or pass --peak-bench) and the cap (ORT's
time / floor: the most any engine could gain); then the geometric means of the caps and of the
speedups, and the cases with headroom.

On the first round of each model both engines also write the outputs of their last run (looprun
--output_dir, ort_time.js's 6th argument; writing happens after the timed runs) and every output
is compared: same shape, integers and booleans exactly, floats with
np.allclose(rtol=RTOL, atol=ATOL) (the engines use different tanh/exp approximations and summation
orders). The script exits with status 1 if any model's outputs differ or any model fails to run.
"""
import argparse
import base64
import json
import math
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
sys.path.insert(0, HERE)
import grid_models  # noqa: E402
import roofline  # noqa: E402

DEFAULT_MODELS = [
    "counter", "rnn_b1", "rnn_b16", "greedy", "large_scan", "nested", "lstm_b1", "gemm_rnn",
]
RTOL, ATOL = 1e-3, 1e-5
# Quantized grid cases (names starting with "q", issue 28): the engines agree to ~2e-7 per step
# until a last-bit difference (tanh's approximation) moves one value of a per-tensor
# DynamicQuantizeLinear across a rounding boundary, or moves the tensor's min/max and with it the
# scale; the recurrence carries that one quantization step on (max abs diff ~0.017 in tanh
# outputs over 200 steps). They are compared within a few quantization steps instead.
QUANTIZED_ATOL = 0.05
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
    """The model's inputs as {name: {dtype, dims, data (base64 of the raw bytes)}}."""
    m = onnx.load(model_paths(folder)[1])
    spec = {}
    for k, graph_input in enumerate(m.graph.input):
        path = os.path.join(folder, "test_data_set_0", "input_%d.pb" % k)
        t = onnx.TensorProto()
        with open(path, "rb") as f:
            t.ParseFromString(f.read())
        a = numpy_helper.to_array(t)
        dtype = {"float32": "float32", "int64": "int64", "bool": "bool",
                 "int32": "int32"}[str(a.dtype)]
        raw = np.ascontiguousarray(a.astype(np.uint8) if dtype == "bool" else a).tobytes()
        spec[graph_input.name] = {"dtype": dtype, "dims": list(a.shape),
                                  "data": base64.b64encode(raw).decode()}
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


def compare_outputs(ours, theirs, atol=ATOL):
    """(problems, max abs diff over float outputs): problems is empty when they agree."""
    problems, max_diff = [], 0.0
    for name in sorted(ours.keys() | theirs.keys()):
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
            close = np.isclose(a64, b64, rtol=RTOL, atol=atol, equal_nan=True)
            if not close.all():
                bad = np.argwhere(~close)
                first = tuple(int(i) for i in bad[0])
                problems.append("%s: %d of %d elements differ beyond rtol=%g atol=%g, max abs diff "
                                "%.3g, first at %s (%r vs ORT %r)"
                                % (name, len(bad), a.size, RTOL, atol, diff, first, a[first],
                                   b[first]))
        elif not np.array_equal(a, b):
            bad = np.argwhere(a != b)
            first = tuple(int(i) for i in bad[0])
            problems.append("%s: %d of %d elements differ, first at %s (%r vs ORT %r)"
                            % (name, len(bad), a.size, first, a[first], b[first]))
    return problems, max_diff


def run_json(cmd, env=None):
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (os.path.basename(cmd[0]) if cmd[0] != "node"
                                                 else "ort_time.js", proc.returncode,
                                                 (proc.stderr or proc.stdout).strip()[-500:]))
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError("no JSON line from %s: %s" % (cmd, proc.stdout))


def cpu_description():
    """(model name, the vector ISA the CPU has) from /proc/cpuinfo."""
    name, flags = "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and name == "unknown CPU":
                    name = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    if "avx512f" in flags:
        isa = "AVX-512 (" + " ".join(sorted(f for f in flags if f.startswith("avx512"))) + ")"
    elif "avx2" in flags:
        isa = "AVX2" + (" + FMA" if "fma" in flags else "")
    else:
        isa = "no AVX2"
    return name, isa


def time_case(name, folder, args, threads, tmp, env_ours, env_ort):
    """Times one model folder; returns (ours_us, ort_us, agree_text, ok, looprun_json, old_us)
    (old_us: with --old-policy, loopserve under the previous fixed policy; else None)."""
    model, ort_model = model_paths(folder)
    spec_path = os.path.join(tmp, name + ".json")
    if not os.path.exists(spec_path):
        with open(spec_path, "w") as f:
            json.dump(inputs_json(folder), f)
    ours_cmd = [args.looprun, "--model=" + model,
                "--data=" + os.path.join(folder, "test_data_set_0"),
                "--repeat=%d" % args.repeat, "--warmup=%d" % args.warmup,
                "--threads=%d" % threads, "--loop_threads=" + args.loop_threads]
    # The policy before the adaptive one: idle OpenMP threads sleep at once, Loops keep the team.
    old_cmd = ours_cmd[:-1] + ["--loop_threads=intra_op"]
    env_old = dict(env_ours, OMP_WAIT_POLICY="PASSIVE")
    if args.baseline_looprun:
        # Another build (e.g. main's) with its own defaults: same flags but --loop_threads.
        old_cmd = [args.baseline_looprun] + ours_cmd[1:-1]
        env_old = env_ours
    ort_cmd = ["node", os.path.join(HERE, "ort_time.js"), ort_model, spec_path,
               str(args.repeat), str(args.warmup), str(threads)]
    ours_out = os.path.join(tmp, "%s.%d.looprun_out" % (name, threads))
    ort_out = os.path.join(tmp, "%s.%d.ort_out.json" % (name, threads))
    ours, theirs, old = [], [], []
    agree, ok, info = "not checked", True, {}
    for r in range(args.rounds):
        # The first round also writes the outputs (after its timed runs).
        extra_ours = ["--output_dir=" + ours_out] if r == 0 else []
        extra_ort = [ort_out] if r == 0 else []
        order = [(ours, ours_cmd + extra_ours, env_ours), (theirs, ort_cmd + extra_ort, env_ort)]
        if args.old_policy or args.baseline_looprun:
            order.append((old, old_cmd, env_old))
        if r % 2:
            order.reverse()
        for sink, cmd, e in order:
            result = run_json(cmd, e)
            if sink is ours:
                info = result
            sink.append(result["cpu_median_us" if args.cpu_time else "median_us"])
        if r == 0:
            problems, max_diff = compare_outputs(
                looprun_outputs(ort_model, ours_out), ort_outputs(ort_out),
                QUANTIZED_ATOL if name.startswith("q") else ATOL)
            if problems:
                ok = False
                agree = "DIFFER (max abs diff %.2g)" % max_diff
                print("%-20s OUTPUTS DIFFER: %s" % (name, "; ".join(problems)),
                      file=sys.stderr, flush=True)
            else:
                agree = "agree (max abs diff %.2g)" % max_diff
    return (statistics.median(ours), statistics.median(theirs), agree, ok, info,
            statistics.median(old) if old else None)


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def roofline_work(names, models_dir, loop_iterations):
    """{name: roofline.Work} by bench/roofline.py's graph walk of each model's ONNX twin."""
    work = {}
    for name in names:
        folder = os.path.join(models_dir, name)
        try:
            work[name] = roofline.model_work(model_paths(folder)[1],
                                             os.path.join(folder, "test_data_set_0"),
                                             loop_iterations.get(name))
        except (OSError, ValueError, onnx.shape_inference.InferenceError) as e:
            work[name] = roofline.Work(0, 0, 0, ["graph walk failed: %s" % e])
    return work


def print_roofline(rows, work, bounds, used_isa, threads_list, cpu_time):
    """The roofline table: per case the products' FLOPs and the weight bytes they re-read per
    run, each engine's FLOP/s and % of the FMA peak (one core's x threads), the floor (the least
    time any engine could take: per product its FLOPs at the peak or its weights at the cache's
    re-read rate, whichever is longer, summed) and
    the cap (ORT's time / floor: the most any engine could gain over ORT); then per thread count
    the geometric means of the caps and of the speedups over the cases with products, the
    geometric mean over all cases if every such case ran at its floor, and the cases with
    headroom."""
    peaks, rates = bounds
    width = "zmm" if "avx512" in used_isa and "zmm" in peaks else "ymm"
    peak = peaks[width]
    print("\nRoofline (bench/roofline.py): FP32 FMA peak of one core %.1f GFLOP/s (%s%s); cache "
          "re-read rates %s (lstm_bound_bench --peak, CPU time). At N threads the peak and the "
          "rates are taken as N x these. FLOPs = 2 x multiply-adds of MatMul, Gemm, Conv per run "
          "(graph walk); weights = loop-invariant operands of the products that depend on the "
          "carried state, re-read every iteration (a product that does not could be hoisted out "
          "of the loop: FLOPs only); "
          "floor = sum over the products of max(FLOPs / peak, weights / re-read rate of the "
          "body's weight footprint); "
          "cap = ONNX Runtime's time / floor%s." %
          (peak / 1e9, width, ", ymm %.1f" % (peaks["ymm"] / 1e9) if width == "zmm" else "",
           ", ".join("%d KB %.0f GB/s" % (b // 1024, r / 1e9) for b, r in rates),
           "; times are CPU time (--cpu-time)" if cpu_time else ""))
    print("\n| model | threads | GFLOP per run | weights read per run (MB) | weight footprint (KB) "
          "| bound | loopserve GFLOP/s | loopserve % of peak | ONNX Runtime GFLOP/s | "
          "ONNX Runtime % of peak | floor (us) | loopserve % of floor | cap | speedup |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, threads, o, t, ratio, *_ in rows:
        w = work.get(name)
        if o is None or w is None or w.flops == 0:
            note = "; ".join(w.unknown) if w is not None and w.unknown else ""
            print("| %s | %d | %s | - | - | no products%s | - | - | - | - | - | - | - | %s |" %
                  (name, threads, "0" if o is not None else "-", " (%s)" % note if note else "",
                   "%.2fx" % ratio if ratio else "-"))
            continue
        p = peak * threads
        scaled = [(b, r * threads) for b, r in rates]
        floor_us = w.floor_seconds(p, scaled) * 1e6
        print("| %s | %d | %.3f%s | %.1f | %d | %s | %.1f | %.0f%% | %.1f | %.0f%% | %.1f | %.0f%% "
              "| %.2fx | %.2fx |" %
              (name, threads, w.flops / 1e9, " (not counted: %s)" % "; ".join(w.unknown)
               if w.unknown else "", w.invariant_bytes / 1e6, w.footprint // 1024,
               w.bound(p, scaled), w.flops / o / 1e3, 100 * w.flops * 1e6 / (o * p),
               w.flops / t / 1e3, 100 * w.flops * 1e6 / (t * p), floor_us, 100 * floor_us / o,
               t / floor_us, ratio))
    print()
    for threads in threads_list:
        p = peak * threads
        scaled = [(b, r * threads) for b, r in rates]
        bound = [(name, o, t, ratio, work[name].floor_seconds(p, scaled) * 1e6)
                 for name, th, o, t, ratio, *_ in rows
                 if th == threads and o is not None and name in work and work[name].flops > 0]
        if not bound:
            continue
        caps = [t / floor for _, _, t, _, floor in bound]
        with_products = {b[0] for b in bound}
        others = [r[4] for r in rows if r[1] == threads and r[4] is not None and
                  r[0] not in with_products]
        print("%d thread%s: %d cases with products: geometric mean of the caps %.2fx, of the "
              "speedups %.2fx; all %d cases: speedups %.2fx, %.2fx if every case with products "
              "ran at its floor" %
              (threads, "" if threads == 1 else "s", len(bound), geomean(caps),
               geomean([b[3] for b in bound]), len(bound) + len(others),
               geomean([b[3] for b in bound] + others), geomean(caps + others)))
        # Headroom: loopserve takes more than 1.5x its floor on a case whose cap is above 1.5x.
        room = ["%s (%.0f%% of floor, cap %.2fx)" % (name, 100 * floor / o, t / floor)
                for name, o, t, _, floor in bound if o > 1.5 * floor and t > 1.5 * floor]
        print("  headroom (loopserve > 1.5x its floor, cap > 1.5x): %s" % (", ".join(room) or
                                                                         "none"))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", help="folder written by make_bench_models.py")
    p.add_argument("--grid", action="store_true", help="run the generated grid (grid_models.py)")
    p.add_argument("--grid-dir", default="", help="where --grid writes its models (default: tmp)")
    p.add_argument("--looprun", required=True)
    p.add_argument("--node-modules", required=True, help="node_modules holding onnxruntime-node")
    p.add_argument("--threads", default="", help="thread counts, comma-separated (default: 1, "
                   "or 1,2 with --grid)")
    p.add_argument("--isa", default="", choices=["", "avx2", "avx512"],
                   help="cap loopserve's and oneDNN's vector ISA")
    p.add_argument("--repeat", type=int, default=0, help="timed runs per round (default 20, "
                   "grid 7)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--only", default="", help="comma-separated model names (grid: substrings)")
    p.add_argument("--ort-no-spin", action="store_true",
                   help="ONNX Runtime's idle intra-op threads sleep instead of spinning "
                   "(session.intra_op.allow_spinning=0), as loopserve's do (OMP_WAIT_POLICY "
                   "PASSIVE): the fair setting at 2+ threads on a shared machine")
    p.add_argument("--cpu-time", action="store_true",
                   help="compare the processes' CPU time per run (every thread) instead of wall "
                   "time: at 1 thread the work itself, which other processes on a loaded machine "
                   "inflate far less than wall time; at 2+ threads it also counts spinning and "
                   "idle-thread wake-ups, so use it at 1 thread")
    p.add_argument("--no-roofline", action="store_true",
                   help="skip the roofline table (FLOPs and weight reads per case, %% of the FMA "
                   "peak, floors, caps)")
    p.add_argument("--peak-bench", default="", help="lstm_bound_bench for the FMA peak "
                   "(default: beside --looprun)")
    p.add_argument("--loop-threads", default="adaptive", choices=["adaptive", "intra_op", "one"],
                   help="looprun --loop_threads: how Loops use 2+ intra-op threads (default "
                   "adaptive: measured per Loop)")
    p.add_argument("--old-policy", action="store_true",
                   help="also time loopserve with every Loop on its intra-op team "
                   "(--loop_threads=intra_op, OMP_WAIT_POLICY=PASSIVE: the fixed policy before "
                   "the adaptive one) in the same rounds, and print its speedup beside the "
                   "current one")
    p.add_argument("--baseline-looprun", default="",
                   help="instead of --old-policy's settings, time this looprun build (e.g. "
                   "main's) in the same rounds, with its own defaults, in the old-policy column")
    args = p.parse_args()
    args.old_policy = args.old_policy or bool(args.baseline_looprun)
    if not args.grid and not args.models:
        p.error("pass --models=DIR or --grid")
    threads_list = [int(t) for t in (args.threads or ("1,2" if args.grid else "1")).split(",")]
    args.repeat = args.repeat or (7 if args.grid else 20)

    env_ort = dict(os.environ, NODE_PATH=os.path.abspath(args.node_modules))
    if args.ort_no_spin:
        env_ort["ORT_ALLOW_SPINNING"] = "0"
    env_ours = dict(os.environ)
    if args.isa == "avx2":
        env_ours.update(LOOPSERVE_MAX_ISA="avx2", ONEDNN_MAX_CPU_ISA="AVX2")
    elif args.isa == "avx512":
        env_ours.update(LOOPSERVE_MAX_ISA="avx512", ONEDNN_MAX_CPU_ISA="AVX512_CORE")
    cpu, cpu_isa = cpu_description()

    with tempfile.TemporaryDirectory() as tmp:
        if args.grid:
            models_dir = args.grid_dir or os.path.join(tmp, "grid")
            names = grid_models.write_cases(models_dir, args.only)
        else:
            models_dir = args.models
            names = (args.only or ",".join(DEFAULT_MODELS)).split(",")
        rows, failed, used_isa, loop_iterations = [], [], "?", {}
        for threads in threads_list:
            for name in names:
                folder = os.path.join(models_dir, name)
                try:
                    o, t, agree, ok, info, old_us = time_case(name, folder, args, threads, tmp, env_ours,
                                                      env_ort)
                except (RuntimeError, OSError, KeyError, ValueError) as e:
                    print("%-20s FAILED: %s" % (name, e), file=sys.stderr, flush=True)
                    failed.append("%s (%d threads)" % (name, threads))
                    rows.append((name, threads, None, None, None, "FAILED", "-", "-", None))
                    continue
                used_isa = info.get("isa", used_isa)
                if info.get("loop_executions") == 1:
                    loop_iterations[name] = info.get("loop_iterations")
                if not ok:
                    failed.append("%s (%d threads)" % (name, threads))
                ref = info.get("reference_steps", "?")
                # The share of the last run's Loop iterations run on one thread (the adaptive
                # policy's choice at 2+ threads); "+team" when products were split over the
                # SpinTeam meanwhile (looprun --loop_team).
                iters = info.get("loop_iterations", 0)
                one = ("%d%%%s" % (round(100.0 * info.get("one_thread_iterations", 0) / iters),
                                   "+team" if info.get("team_splits", 0) else "")
                       if iters else "-")
                old_ratio = t / old_us if old_us else None
                rows.append((name, threads, o, t, t / o, agree, ref, one, old_ratio))
                print("%-20s %d thr  loopserve %10.1f us   onnxruntime %10.1f us   speedup %6.2fx"
                      "   one-thread %9s%s   %s" %
                      (name, threads, o, t, t / o, one,
                       "   old policy %10.1f us %6.2fx" % (old_us, old_ratio) if old_us else "",
                       agree), file=sys.stderr, flush=True)
        if not args.no_roofline:
            work = roofline_work(names, models_dir, loop_iterations)
            bounds = roofline.machine_bounds(args.peak_bench or os.path.join(
                os.path.dirname(os.path.abspath(args.looprun)), "lstm_bound_bench"))

    print("\nCPU: %s; vector ISA: %s; loopserve kernels dispatched for: %s%s" %
          (cpu, cpu_isa, used_isa, " (capped with --isa=%s)" % args.isa if args.isa else ""))
    print("OpenMP wait policy (loopserve): %s; ONNX Runtime intra-op spinning: %s; load average "
          "at the end: %s" % (os.environ.get("OMP_WAIT_POLICY", "PASSIVE (looprun's default)") +
                              ", Loops: --loop_threads=" + args.loop_threads,
                              "off (--ort-no-spin)" if args.ort_no_spin else "on (ORT's default)",
                              " ".join(open("/proc/loadavg").read().split()[:3])))
    what = "CPU time" if args.cpu_time else "median"
    print("\nTimes: %s per run (us)" % ("process CPU time (--cpu-time)" if args.cpu_time
                                        else "wall clock"))
    old_col = " old policy |" if args.old_policy else ""
    print("\n| model | threads | loopserve %s (us) | ONNX Runtime %s (us) | speedup |%s "
          "one-thread iterations | outputs | reference steps |" % (what, what, old_col))
    print("|---|---|---|---|---|---|---|---|" + ("---|" if args.old_policy else ""))
    for name, threads, o, t, ratio, agree, ref, one, old_ratio in rows:
        old_cell = (" %.2fx |" % old_ratio if old_ratio else " - |") if args.old_policy else ""
        if o is None:
            print("| %s | %d | - | - | - |%s - | %s | - |" % (name, threads, old_cell, agree))
        else:
            print("| %s | %d | %.1f | %.1f | %.2fx |%s %s | %s | %s |" %
                  (name, threads, o, t, ratio, old_cell, one, agree, ref))
    if not args.no_roofline:
        print_roofline(rows, work, bounds, used_isa, threads_list, args.cpu_time)
    print()
    for threads in threads_list:
        ratios = [(r[4], r[0]) for r in rows if r[1] == threads and r[4] is not None]
        if ratios:
            worst = min(ratios)
            print("%d thread%s: %d models, min %.2fx (%s), geometric mean %.2fx, %d below 1.0" %
                  (threads, "" if threads == 1 else "s", len(ratios), worst[0], worst[1],
                   geomean([r[0] for r in ratios]), sum(1 for r in ratios if r[0] < 1.0)))
        olds = [(r[8], r[0]) for r in rows if r[1] == threads and r[8] is not None]
        if olds:
            worst = min(olds)
            print("%d thread%s, old policy: min %.2fx (%s), geometric mean %.2fx, %d below 1.0" %
                  (threads, "" if threads == 1 else "s", worst[0], worst[1],
                   geomean([r[0] for r in olds]), sum(1 for r in olds if r[0] < 1.0)))
    if failed:
        print("failed or outputs differ from ONNX Runtime: %s" % ", ".join(failed),
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
