#!/usr/bin/python3
"""Writes the Loop benchmark models and their inputs:

    OUT/<name>/model.onnx
    OUT/<name>/test_data_set_0/input_<k>.pb

The same folders feed `looprun --model --data`, bench/compare_ort.py (ONNX Runtime) and
bench/engine_bench.cc. Weights are fixed-seed random so every run times the same work. Run with
Debian's /usr/bin/python3 (python3-onnx):

    /usr/bin/python3 make_bench_models.py OUT_DIR
"""
import os
import sys

import numpy as np

# onnx 1.12 still uses the numpy aliases removed in numpy 1.24.
np.float, np.int, np.bool, np.object = float, int, bool, object  # noqa: E702
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
RNG = np.random.default_rng(7)


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def model(graph):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                          producer_name="loopserve-bench")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def write(out_dir, name, m, inputs):
    folder = os.path.join(out_dir, name)
    data = os.path.join(folder, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    onnx.save(m, os.path.join(folder, "model.onnx"))
    for k, (input_name, array) in enumerate(inputs):
        with open(os.path.join(data, "input_%d.pb" % k), "wb") as f:
            f.write(numpy_helper.from_array(np.asarray(array), input_name).SerializeToString())


def loop_inputs(extra):
    return [vi("M", I64, []), vi("cond", B, [])] + extra


def counter(out_dir, trips=100000):
    """Trivial body: x = x + 1 (int64), cond passed through, x stacked as a scan output."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["x_in", "one"], ["x_out"]),
         helper.make_node("Identity", ["x_out"], ["x_scan"])],
        "counter_body",
        [vi("i", I64, []), vi("cond_in", B, []), vi("x_in", I64, [])],
        [vi("cond_out", B, []), vi("x_out", I64, []), vi("x_scan", I64, [])],
        [init("one", np.array(1, np.int64))])
    g = helper.make_graph(
        [helper.make_node("Loop", ["M", "cond", "x0"], ["x", "xs"], body=body)], "counter",
        loop_inputs([vi("x0", I64, [])]), [vi("x", I64, []), vi("xs", I64, [trips])])
    write(out_dir, "counter", model(g), [("M", np.array(trips, np.int64)),
                                         ("cond", np.array(True)), ("x0", np.array(0, np.int64))])


def rnn(out_dir, batch, trips=2000, hidden=256, name=None, dynamic_batch=False):
    """RNN cell: h = Tanh(MatMul(h, W) + b), h stacked as a scan output. With dynamic_batch the
    model declares its batch dim as symbolic, so the engine makes its primitives on the first run
    of each batch size (not at load)."""
    dims = ["batch", hidden] if dynamic_batch else [batch, hidden]
    w = (RNG.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
    b = (RNG.standard_normal(hidden) * 0.1).astype(np.float32)
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("MatMul", ["h_in", "W"], ["hw"]),
         helper.make_node("Add", ["hw", "b"], ["hb"]),
         helper.make_node("Tanh", ["hb"], ["h_out"]),
         helper.make_node("Identity", ["h_out"], ["h_scan"])],
        "rnn_body",
        [vi("i", I64, []), vi("cond_in", B, []), vi("h_in", F, dims)],
        [vi("cond_out", B, []), vi("h_out", F, dims), vi("h_scan", F, dims)])
    g = helper.make_graph(
        [helper.make_node("Loop", ["M", "cond", "h0"], ["h", "hs"], body=body)],
        "rnn", loop_inputs([vi("h0", F, dims)]),
        [vi("h", F, dims), vi("hs", F, [trips] + dims)],
        [init("W", w), init("b", b)])
    h0 = RNG.standard_normal((batch, hidden)).astype(np.float32)
    write(out_dir, name or "rnn_b%d" % batch, model(g),
          [("M", np.array(trips, np.int64)), ("cond", np.array(True)), ("h0", h0)])


def lstm(out_dir, trips=2000, hidden=128):
    """LSTM cell from primitive ops at batch 1: z = h W + b, four gates by Split, Sigmoid/Tanh,
    c = f * c + i * g, h = o * Tanh(c); h stacked as a scan output."""
    w = (RNG.standard_normal((hidden, 4 * hidden)) / np.sqrt(hidden)).astype(np.float32)
    b = (RNG.standard_normal(4 * hidden) * 0.1).astype(np.float32)
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("MatMul", ["h_in", "W"], ["hw"]),
         helper.make_node("Add", ["hw", "b"], ["z"]),
         helper.make_node("Split", ["z"], ["zi", "zf", "zg", "zo"], axis=1),
         helper.make_node("Sigmoid", ["zi"], ["gi"]),
         helper.make_node("Sigmoid", ["zf"], ["gf"]),
         helper.make_node("Tanh", ["zg"], ["gg"]),
         helper.make_node("Sigmoid", ["zo"], ["go"]),
         helper.make_node("Mul", ["gf", "c_in"], ["fc"]),
         helper.make_node("Mul", ["gi", "gg"], ["ig"]),
         helper.make_node("Add", ["fc", "ig"], ["c_out"]),
         helper.make_node("Tanh", ["c_out"], ["tc"]),
         helper.make_node("Mul", ["go", "tc"], ["h_out"]),
         helper.make_node("Identity", ["h_out"], ["h_scan"])],
        "lstm_body",
        [vi("i", I64, []), vi("cond_in", B, []), vi("h_in", F, [1, hidden]),
         vi("c_in", F, [1, hidden])],
        [vi("cond_out", B, []), vi("h_out", F, [1, hidden]), vi("c_out", F, [1, hidden]),
         vi("h_scan", F, [1, hidden])])
    g = helper.make_graph(
        [helper.make_node("Loop", ["M", "cond", "h0", "c0"], ["h", "c", "hs"], body=body)],
        "lstm", loop_inputs([vi("h0", F, [1, hidden]), vi("c0", F, [1, hidden])]),
        [vi("h", F, [1, hidden]), vi("c", F, [1, hidden]), vi("hs", F, [trips, 1, hidden])],
        [init("W", w), init("b", b)])
    h0 = RNG.standard_normal((1, hidden)).astype(np.float32)
    c0 = RNG.standard_normal((1, hidden)).astype(np.float32)
    write(out_dir, "lstm_b1", model(g), [("M", np.array(trips, np.int64)),
                                          ("cond", np.array(True)), ("h0", h0), ("c0", c0)])


def gemm_rnn(out_dir, trips=2000, hidden=256):
    """The RNN cell as PyTorch exports nn.Linear on a 2-D input: Gemm(h, W^T, b, transB=1), then
    Tanh."""
    wt = (RNG.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
    b = (RNG.standard_normal(hidden) * 0.1).astype(np.float32)
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Gemm", ["h_in", "Wt", "b"], ["hb"], transB=1),
         helper.make_node("Tanh", ["hb"], ["h_out"]),
         helper.make_node("Identity", ["h_out"], ["h_scan"])],
        "gemm_rnn_body",
        [vi("i", I64, []), vi("cond_in", B, []), vi("h_in", F, [1, hidden])],
        [vi("cond_out", B, []), vi("h_out", F, [1, hidden]), vi("h_scan", F, [1, hidden])])
    g = helper.make_graph(
        [helper.make_node("Loop", ["M", "cond", "h0"], ["h", "hs"], body=body)],
        "gemm_rnn", loop_inputs([vi("h0", F, [1, hidden])]),
        [vi("h", F, [1, hidden]), vi("hs", F, [trips, 1, hidden])],
        [init("Wt", wt), init("b", b)])
    h0 = RNG.standard_normal((1, hidden)).astype(np.float32)
    write(out_dir, "gemm_rnn", model(g),
          [("M", np.array(trips, np.int64)), ("cond", np.array(True)), ("h0", h0)])


def greedy(out_dir, trips=1000, hidden=256, vocab=1024):
    """Greedy decoder: h = Tanh(MatMul(h, Wh) + E[tok]); tok = ArgMax(MatMul(h, Wo)); stops
    when tok == eos (data-dependent); tokens stacked as a scan output. eos is -1 here, which is
    never produced, so every run decodes `trips` tokens while still testing the condition."""
    emb = (RNG.standard_normal((vocab, hidden)) * 0.5).astype(np.float32)
    wh = (RNG.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
    wo = (RNG.standard_normal((hidden, vocab)) / np.sqrt(hidden)).astype(np.float32)
    body = helper.make_graph(
        [helper.make_node("Gather", ["E", "tok_in"], ["e"], axis=0),
         helper.make_node("MatMul", ["h_in", "Wh"], ["hw"]),
         helper.make_node("Add", ["hw", "e"], ["he"]),
         helper.make_node("Tanh", ["he"], ["h_out"]),
         helper.make_node("MatMul", ["h_out", "Wo"], ["logits"]),
         helper.make_node("ArgMax", ["logits"], ["tok_out"], axis=1, keepdims=0),
         helper.make_node("Equal", ["tok_out", "eos"], ["is_eos"]),
         helper.make_node("Not", ["is_eos"], ["cond_vec"]),
         helper.make_node("Squeeze", ["cond_vec"], ["cond_out"]),
         helper.make_node("Identity", ["tok_out"], ["tok_scan"])],
        "greedy_body",
        [vi("i", I64, []), vi("cond_in", B, []), vi("h_in", F, [1, hidden]),
         vi("tok_in", I64, [1])],
        [vi("cond_out", B, []), vi("h_out", F, [1, hidden]), vi("tok_out", I64, [1]),
         vi("tok_scan", I64, [1])],
        [init("eos", np.array([-1], np.int64))])
    g = helper.make_graph(
        [helper.make_node("Loop", ["M", "cond", "h0", "tok0"], ["h", "tok", "toks"], body=body)],
        "greedy", loop_inputs([vi("h0", F, [1, hidden]), vi("tok0", I64, [1])]),
        [vi("h", F, [1, hidden]), vi("tok", I64, [1]), vi("toks", I64, [None, 1])],
        [init("E", emb), init("Wh", wh), init("Wo", wo)])
    write(out_dir, "greedy", model(g),
          [("M", np.array(trips, np.int64)), ("cond", np.array(True)),
           ("h0", np.zeros((1, hidden), np.float32)), ("tok0", np.array([1], np.int64))])


def large_scan(out_dir, trips=2000):
    """h = Tanh(Mul(h, A) + B) on [1,256,16] f32 (16 KB), every h stacked (32 MB in all)."""
    shape = [1, 256, 16]
    a = RNG.uniform(0.5, 1.0, shape).astype(np.float32)
    bb = RNG.uniform(-0.1, 0.1, shape).astype(np.float32)
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Mul", ["h_in", "A"], ["ha"]),
         helper.make_node("Add", ["ha", "Bb"], ["hb"]),
         helper.make_node("Tanh", ["hb"], ["h_out"]),
         helper.make_node("Identity", ["h_out"], ["h_scan"])],
        "scan_body", [vi("i", I64, []), vi("cond_in", B, []), vi("h_in", F, shape)],
        [vi("cond_out", B, []), vi("h_out", F, shape), vi("h_scan", F, shape)])
    g = helper.make_graph(
        [helper.make_node("Loop", ["M", "cond", "h0"], ["h", "hs"], body=body)], "large_scan",
        loop_inputs([vi("h0", F, shape)]), [vi("h", F, shape), vi("hs", F, [trips] + shape)],
        [init("A", a), init("Bb", bb)])
    write(out_dir, "large_scan", model(g),
          [("M", np.array(trips, np.int64)), ("cond", np.array(True)),
           ("h0", RNG.standard_normal(shape).astype(np.float32))])


def nested(out_dir, outer=200, inner=100):
    """An outer loop whose body runs an inner loop (x = x * 0.999 + c on 16 floats) and stacks
    the inner result: 20k inner iterations, 200 inner loop executions."""
    inner_body = helper.make_graph(
        [helper.make_node("Identity", ["icond_in"], ["icond_out"]),
         helper.make_node("Mul", ["y_in", "decay"], ["yd"]),
         helper.make_node("Add", ["yd", "c"], ["y_out"])],
        "inner_body", [vi("j", I64, []), vi("icond_in", B, []), vi("y_in", F, [16])],
        [vi("icond_out", B, []), vi("y_out", F, [16])],
        [init("decay", np.full(16, 0.999, np.float32))])
    outer_body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Loop", ["N", "", "x_in"], ["x_out"], body=inner_body),
         helper.make_node("Identity", ["x_out"], ["x_scan"])],
        "outer_body", [vi("i", I64, []), vi("cond_in", B, []), vi("x_in", F, [16])],
        [vi("cond_out", B, []), vi("x_out", F, [16]), vi("x_scan", F, [16])])
    g = helper.make_graph(
        [helper.make_node("Loop", ["M", "cond", "x0"], ["x", "xs"], body=outer_body)],
        "nested", loop_inputs([vi("x0", F, [16])]), [vi("x", F, [16]), vi("xs", F, [outer, 16])],
        [init("N", np.array(inner, np.int64)), init("c", np.full(16, 0.01, np.float32))])
    write(out_dir, "nested", model(g), [("M", np.array(outer, np.int64)), ("cond", np.array(True)),
                                         ("x0", np.zeros(16, np.float32))])


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_bench_models.py OUT_DIR")
    out_dir = sys.argv[1]
    counter(out_dir)
    rnn(out_dir, 1)
    rnn(out_dir, 16)
    greedy(out_dir)
    large_scan(out_dir)
    nested(out_dir)
    lstm(out_dir)
    gemm_rnn(out_dir)
    # The small request bench/serving_bench.cc sends: 10 iterations of a 64-wide RNN cell.
    rnn(out_dir, 1, trips=10, hidden=64, name="serve_rnn")
    # bench/warmup_bench.py: first-request latency with and without model_warmup.
    rnn(out_dir, 16, trips=100, hidden=256, name="rnn_dynamic", dynamic_batch=True)


if __name__ == "__main__":
    main()
