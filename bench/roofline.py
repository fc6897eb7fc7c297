#!/usr/bin/python3
"""Roofline accounting for Loop models: the floating-point work of the products (MatMul, Gemm,
Conv) a model runs per inference and the bytes of loop-invariant operands (weights) they read
again every iteration (those of the products that depend on the carried state: the others could
be hoisted out of the loop), from a walk of its ONNX graph with static shapes; and the FP32 FMA
peak and cache re-read rates of one core, from which `bench/compare_ort.py --grid` prints each
case's FLOP/s, % of peak, floor (the least time any engine could take: per product the longer of
its FLOPs at the peak and its weights re-read at the cache's rate, summed) and cap (ORT's time
over the floor: the most any engine could gain on that case).

    /usr/bin/python3 bench/roofline.py MODEL_DIR...   (FLOPs and weight bytes per run of each)

Counting: a product's multiply-adds are (elements of its output) x (its reduction length):
MatMul K = A's last dim (batched and broadcast MatMul included), Gemm K = A's dim 0 with transA
else dim 1, Conv K = C_in / group x kernel elements. FLOPs = 2 x multiply-adds. Elementwise ops,
reductions, Softmax, TopK are not counted: on the grid's product-bound cases they are a few % of
the work, and the cap is an upper bound on the gain either way.

The walk: a Loop's body is shape-inferred (onnx.shape_inference) with the concrete shapes of its
inputs, once per distinct set of input shapes: a carried value that grows (a KV cache Concat-ed
every iteration) gives each iteration its own shapes. The trip count is the Loop's M (a feed or an
initializer); a Loop without M (stopped by its condition) takes `loop_iterations` from looprun's
JSON line when the caller passes it. Nested Loops recurse.
"""
import os
import subprocess
import sys

import numpy as np

np.float, np.int, np.bool, np.object = float, int, bool, object  # noqa: E702
import onnx  # noqa: E402
from onnx import helper, numpy_helper, shape_inference  # noqa: E402

PRODUCT_OPS = ("MatMul", "Gemm", "Conv")
# Initializers up to this many elements keep their values in the shape-inference model (Reshape
# targets, axes, split sizes); larger ones (weights) are passed as shapes only.
SMALL = 64


class Value:
    """A value's element type, shape (tuple of ints, None where unknown) and, for small integer
    constants, the data (numpy array)."""

    def __init__(self, elem, shape, data=None):
        self.elem, self.shape, self.data = elem, tuple(shape), data


def value_of_tensor(t):
    a = numpy_helper.to_array(t)
    return Value(t.data_type, a.shape, a if a.size <= SMALL else None)


def shape_of(vi):
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)


def product_macs(n, shapes):
    """Multiply-adds of one product node given {name: shape}; None if a shape is unknown."""
    out = shapes.get(n.output[0])
    a = shapes.get(n.input[0])
    if out is None or a is None or None in out or None in a:
        return None
    numel = int(np.prod(out, dtype=np.int64)) if out else 1
    if n.op_type == "MatMul":
        k = a[-1]
    elif n.op_type == "Gemm":
        trans_a = next((x.i for x in n.attribute if x.name == "transA"), 0)
        k = a[0] if trans_a else a[1]
    else:  # Conv: weight [C_out, C_in / group, k...]
        w = shapes.get(n.input[1])
        if w is None or None in w:
            return None
        k = int(np.prod(w[1:], dtype=np.int64))
    return numel * int(k)


class Counter:
    """Counts product FLOPs of one model; `unknown` lists what could not be counted."""

    def __init__(self, loop_iterations=None):
        self.loop_iterations = loop_iterations
        self.unknown = []
        # Bytes of loop-invariant product operands (weights, a Loop's outer-scope inputs) read
        # per run, and the largest set of them one Loop body reads every iteration.
        self.invariant_bytes = 0
        self.footprint = 0
        # Per product node (by output name): [FLOPs, invariant bytes read] over the run.
        self.products = {}
        self._cache = {}

    def graph(self, g, env, in_loop=False):
        """FLOPs of one run of graph `g` whose inputs (and outer-scope names) are in `env`
        ({name: Value}); returns (flops, {output name: Value}). In a Loop body (`in_loop`), the
        product operands that are the same every iteration (outer-scope names, initializers) are
        counted in invariant_bytes and footprint."""
        invariant = set(env) - {i.name for i in g.input} if in_loop else set()
        invariant |= {t.name for t in g.initializer} if in_loop else set()
        # Values that depend on the carried state (not only on the iteration number and
        # loop-invariant data): a product of two values that do not could be hoisted out of the
        # loop as one batched product over all iterations (x_t W with x_t = Gather(X, i)), which
        # reads its weights once; only the others re-read their weights every iteration.
        carried = {i.name for i in g.input[2:]} if in_loop else set()
        for n in g.node:
            reads = list(n.input) + [x for a in n.attribute if a.type == a.GRAPH
                                     for x in subgraph_free_names(a.g)]
            if any(x in carried for x in reads):
                carried.update(o for o in n.output if o)
        env = dict(env)
        for t in g.initializer:
            env[t.name] = value_of_tensor(t)
        for n in g.node:
            if n.op_type == "Constant":
                for a in n.attribute:
                    if a.name == "value":
                        env[n.output[0]] = value_of_tensor(a.t)
        shapes = self._infer(g, env)
        for name, shape in shapes.items():
            if name not in env or env[name].shape is None:
                env[name] = Value(0, shape)
        flops, read = 0, {}
        for n in g.node:
            if n.op_type in PRODUCT_OPS:
                macs = product_macs(n, shapes)
                tally = self.products.setdefault(n.output[0], [0, 0])
                if macs is None:
                    self.unknown.append("%s %s (shape unknown)" % (n.op_type, n.output[0]))
                else:
                    flops += 2 * macs
                    tally[0] += 2 * macs
                for x in n.input[:2] if any(y in carried for y in n.input[:2]) else ():
                    if x in invariant and shapes.get(x) is not None and None not in shapes[x]:
                        size = 4 * int(np.prod(shapes[x], dtype=np.int64))
                        self.invariant_bytes += size
                        tally[1] += size
                        read[x] = size
            elif n.op_type == "Loop":
                flops += self.loop(n, env, shapes)
        self.footprint = max(self.footprint, sum(read.values()))
        return flops, {o.name: env.get(o.name) for o in g.output}

    def loop(self, n, env, shapes):
        body = next(a.g for a in n.attribute if a.name == "body")
        m_name = n.input[0] if n.input else ""
        trips = None
        if m_name and m_name in env and env[m_name].data is not None:
            trips = int(env[m_name].data.reshape(-1)[0])
        elif self.loop_iterations is not None:
            trips = self.loop_iterations
        if trips is None:
            self.unknown.append("Loop %s (trip count unknown)" % n.output[0])
            return 0
        carried = [env.get(x) for x in n.input[2:]]
        i_in, cond_in = body.input[0].name, body.input[1].name
        total = 0
        for _ in range(trips):
            body_env = dict(env)
            body_env[i_in] = Value(onnx.TensorProto.INT64, ())
            body_env[cond_in] = Value(onnx.TensorProto.BOOL, ())
            for vi, v in zip(body.input[2:], carried):
                body_env[vi.name] = v if v is not None else Value(
                    vi.type.tensor_type.elem_type, shape_of(vi) or ())
            flops, outs = self.graph(body, body_env, in_loop=True)
            total += flops
            carried = [outs.get(o.name) for o in body.output[1:1 + len(carried)]]
        return total

    def _infer(self, g, env):
        """{name: shape} of every value of `g` (inputs, outer-scope names, node outputs) by onnx
        shape inference on `g` with `env`'s shapes; cached by the shapes fed."""
        produced = {o for n in g.node for o in n.output}
        needed = []
        for n in g.node:
            for x in list(n.input) + [x for a in n.attribute if a.type == a.GRAPH
                                      for x in subgraph_free_names(a.g)]:
                if x and x not in produced and x not in needed:
                    needed.append(x)
        key = (id(g), tuple((x, env[x].shape if x in env else None) for x in needed))
        if key in self._cache:
            return self._cache[key]
        inputs, inits = [], []
        for x in needed:
            v = env.get(x)
            if v is None:
                continue
            if v.data is not None:
                inits.append(numpy_helper.from_array(v.data, x))
            else:
                inputs.append(helper.make_tensor_value_info(x, v.elem or 1, list(v.shape)))
        flat = helper.make_graph(list(g.node), "walk", inputs, [], inits)
        model = helper.make_model(flat, opset_imports=[helper.make_opsetid("", OPSET[0])])
        model.ir_version = 8
        inferred = shape_inference.infer_shapes(model)
        shapes = {x: env[x].shape for x in needed if x in env}
        for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
            s = shape_of(vi)
            if s is not None:
                shapes[vi.name] = s
        self._cache[key] = shapes
        return shapes


OPSET = [13]


def subgraph_free_names(g):
    """Names a subgraph reads from its enclosing scope."""
    defined = {i.name for i in g.input} | {t.name for t in g.initializer}
    defined |= {o for n in g.node for o in n.output}
    free = []
    for n in g.node:
        for x in n.input:
            if x and x not in defined and x not in free:
                free.append(x)
        for a in n.attribute:
            if a.type == a.GRAPH:
                free += [x for x in subgraph_free_names(a.g) if x not in defined]
    return free


class Work:
    """What one run of a model does: product FLOPs, bytes of loop-invariant product operands
    read by products that depend on the carried state (each iteration reads those weights
    again, from cache at best; a product that does not could be hoisted out of the loop and is
    counted as FLOPs only), both per product node, the largest set of them one body iteration
    reads (which cache level they come from), what could not be counted."""

    def __init__(self, flops, invariant_bytes, footprint, unknown, products=()):
        self.flops, self.invariant_bytes = flops, invariant_bytes
        self.footprint, self.unknown = footprint, unknown
        self.products = list(products)  # [(FLOPs, invariant bytes)] per product node

    def _rate(self, read_rates):
        """The re-read rate for the footprint: that of the largest size measured that the
        footprint reaches or, below all, the smallest size's (read_rates: [(bytes, bytes/s)],
        ascending). The rate falls with the size, so this is an upper bound on the footprint's."""
        return [r for size, r in read_rates if size <= max(self.footprint, read_rates[0][0])][-1]

    def _terms(self, peak, read_rates):
        """(compute seconds, read seconds) per product node."""
        rate = self._rate(read_rates) if read_rates else None
        return [(f / peak, b / rate if rate else 0.0) for f, b in self.products]

    def floor_seconds(self, peak, read_rates):
        """The least time any engine can take for the products: per product node the longer of
        its FLOPs at the FMA peak and its weights read at the footprint's re-read rate, summed
        over the nodes (the per-kernel roofline: a matrix-vector product is bound by its reads,
        a matrix-matrix one by the FMAs, and one core runs them one after the other)."""
        return sum(max(c, r) for c, r in self._terms(peak, read_rates))

    def bound(self, peak, read_rates):
        """"compute", "cache reads", or "mixed (N% reads)": which term bounds the floor."""
        terms = self._terms(peak, read_rates)
        floor = sum(max(c, r) for c, r in terms)
        reads = sum(r for c, r in terms if r > c)
        if reads == 0:
            return "compute"
        if reads >= 0.95 * floor:
            return "cache reads"
        return "mixed (%.0f%% reads)" % (100 * reads / floor)


def model_work(model_path, data_dir, loop_iterations=None):
    """The Work of one run of the model."""
    m = onnx.load(model_path)
    OPSET[0] = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 13)
    env = {}
    for k, gi in enumerate(m.graph.input):
        path = os.path.join(data_dir, "input_%d.pb" % k)
        if os.path.exists(path):
            t = onnx.TensorProto()
            with open(path, "rb") as f:
                t.ParseFromString(f.read())
            env[gi.name] = value_of_tensor(t)
        else:
            env[gi.name] = Value(gi.type.tensor_type.elem_type, shape_of(gi) or ())
    counter = Counter(loop_iterations)
    flops, _ = counter.graph(m.graph, env)
    return Work(flops, counter.invariant_bytes, counter.footprint, counter.unknown,
                [tuple(v) for v in counter.products.values()])


def machine_bounds(lstm_bound_bench):
    """({"zmm": FLOP/s, "ymm": FLOP/s}, [(bytes, bytes/s)]): the core's FP32 FMA peak per register
    width (zmm only on an AVX-512 CPU) and the rates of re-reading buffers of 16 KB to 8 MB, from
    lstm_bound_bench --peak (thread CPU time, medians of 9)."""
    out = subprocess.run([lstm_bound_bench, "--peak"], capture_output=True, text=True,
                         check=True).stdout
    peaks, rates = {}, []
    for line in out.splitlines():
        if line.startswith("FMA peak"):
            width = line.split("(")[1].split(")")[0]
            peaks[width] = float(line.split(":")[1].split()[0]) * 1e9
        elif line.startswith("re-read"):
            kb = int(line.split()[1])
            rates.append((kb * 1024, float(line.split(":")[1].split()[0]) * 1e9))
    if "ymm" not in peaks or not rates:
        raise RuntimeError("no FMA peak or re-read lines from %s: %s" % (lstm_bound_bench, out))
    return peaks, sorted(rates)


def main():
    for folder in sys.argv[1:]:
        w = model_work(os.path.join(folder, "model.onnx"),
                       os.path.join(folder, "test_data_set_0"))
        print("%-24s %14d FLOPs %12d invariant bytes read, footprint %9d%s" %
              (os.path.basename(folder.rstrip("/")), w.flops, w.invariant_bytes, w.footprint,
               ("  (not counted: %s)" % "; ".join(w.unknown)) if w.unknown else ""))


if __name__ == "__main__":
    main()
