#!/usr/bin/python3
"""Writes loopserve's bundled example model repository.

Usage: /usr/bin/python3 deploy/make_example_models.py OUT_DIR

Creates, for every example model,
  OUT_DIR/<model>/1/model.onnx            the model (ONNX opset 13, ir_version 8)
  OUT_DIR/<model>/expected/input_<k>.pb   a fixed input, as ONNX TensorProtos in input order
  OUT_DIR/<model>/expected/output_<k>.pb  what the model must return, computed by the numpy
                                          reference below (never by loopserve's engine)
Some models have further cases in OUT_DIR/<model>/expected_<case>/ with the same layout.
Models without a meaningful expected output (`endless`) get no expected folder.

Everything is deterministic (fixed seeds, no timestamps): running the script twice gives byte-identical
files. Needs Debian's /usr/bin/python3 (numpy + onnx 1.12), not the pyenv python3 on PATH.

This file is also imported as a module by tests/models/make_test_models.py.
"""

import os
import sys

import numpy as np

# onnx 1.12 still touches the numpy aliases that numpy 1.24 removed.
np.float = float  # noqa: E305
np.int = int
np.bool = bool
np.object = object

import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

OPSET = 13
IR_VERSION = 8

INT64 = TensorProto.INT64
FLOAT = TensorProto.FLOAT
BOOL = TensorProto.BOOL


# ----------------------------------------------------------------------------------------------
# Small builders.


def vi(name, elem_type, shape):
    """A ValueInfoProto; `shape` entries are ints or strings (symbolic dims), None = unknown rank."""
    return helper.make_tensor_value_info(name, elem_type, shape)


def const(name, array):
    """An initializer from a numpy array."""
    return numpy_helper.from_array(np.asarray(array), name=name)


def make_model(graph):
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="loopserve-make-models",
        producer_version="1",
    )
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


class Example:
    """A model plus its named test cases: {case_name: (inputs list, expected outputs list)}."""

    def __init__(self, name, model, cases):
        self.name = name
        self.model = model
        self.cases = cases


def write_example(out_dir, example):
    model_dir = os.path.join(out_dir, example.name)
    version_dir = os.path.join(model_dir, "1")
    os.makedirs(version_dir, exist_ok=True)
    with open(os.path.join(version_dir, "model.onnx"), "wb") as f:
        f.write(example.model.SerializeToString())
    graph = example.model.graph
    in_names = [i.name for i in graph.input]
    out_names = [o.name for o in graph.output]
    for case, (inputs, outputs) in example.cases.items():
        case_dir = os.path.join(model_dir, "expected" if case == "" else "expected_" + case)
        os.makedirs(case_dir, exist_ok=True)
        assert len(inputs) == len(in_names), (example.name, case)
        assert len(outputs) == len(out_names), (example.name, case)
        for k, (name, array) in enumerate(zip(in_names, inputs)):
            _write_tensor(os.path.join(case_dir, "input_%d.pb" % k), name, array)
        for k, (name, array) in enumerate(zip(out_names, outputs)):
            _write_tensor(os.path.join(case_dir, "output_%d.pb" % k), name, array)


def _write_tensor(path, name, array):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(np.asarray(array), name=name).SerializeToString())


# ----------------------------------------------------------------------------------------------
# counter: Loop with trip count M; a carried int64 counter + 1 per iteration; scan of the counter.


def build_counter():
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["c_in", "one"], ["c_out"]),
            helper.make_node("Identity", ["c_out"], ["c_scan"]),
        ],
        "counter_body",
        [vi("iter", INT64, []), vi("cond_in", BOOL, []), vi("c_in", INT64, [1])],
        [vi("cond_out", BOOL, []), vi("c_out", INT64, [1]), vi("c_scan", INT64, [1])],
        initializer=[const("one", np.array([1], np.int64))],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "start"], ["final", "counts"], name="counter_loop",
                          body=body)],
        "counter",
        [vi("M", INT64, []), vi("start", INT64, [1])],
        [vi("final", INT64, [1]), vi("counts", INT64, ["N", 1])],
    )
    return make_model(graph)


def reference_counter(m, start):
    """ONNX Loop: for (i = 0; i < M; ++i) { c = c + 1; scan c }. M <= 0 runs zero times."""
    c = start.copy()
    scans = []
    for _ in range(max(int(m), 0)):
        c = c + np.int64(1)
        scans.append(c.copy())
    counts = np.stack(scans) if scans else np.zeros((0, 1), np.int64)
    return [c, counts.astype(np.int64)]


def counter_example():
    cases = {}
    for case, m in (("", 5), ("zero", 0), ("negative", -3)):
        inputs = [np.array(m, np.int64), np.array([10], np.int64)]
        cases[case] = (inputs, reference_counter(*inputs))
    return Example("counter", build_counter(), cases)


# ----------------------------------------------------------------------------------------------
# rnn: Loop over a carried hidden state h = Tanh(MatMul(h, W) + b) for M steps; scan of h.

RNN_HIDDEN = 4


def rnn_weights():
    rng = np.random.RandomState(1234)
    w = (rng.standard_normal((RNN_HIDDEN, RNN_HIDDEN)) * 0.5).astype(np.float32)
    b = (rng.standard_normal((RNN_HIDDEN,)) * 0.1).astype(np.float32)
    return w, b


def build_rnn():
    w, b = rnn_weights()
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("MatMul", ["h_in", "W"], ["hw"]),
            helper.make_node("Add", ["hw", "b"], ["pre"]),
            helper.make_node("Tanh", ["pre"], ["h_out"]),
            helper.make_node("Identity", ["h_out"], ["h_scan"]),
        ],
        "rnn_body",
        [vi("iter", INT64, []), vi("cond_in", BOOL, []), vi("h_in", FLOAT, ["batch", RNN_HIDDEN])],
        [vi("cond_out", BOOL, []), vi("h_out", FLOAT, ["batch", RNN_HIDDEN]),
         vi("h_scan", FLOAT, ["batch", RNN_HIDDEN])],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "h0"], ["h_final", "h_seq"], name="rnn_loop",
                          body=body)],
        "rnn",
        [vi("M", INT64, []), vi("h0", FLOAT, ["batch", RNN_HIDDEN])],
        [vi("h_final", FLOAT, ["batch", RNN_HIDDEN]),
         vi("h_seq", FLOAT, ["steps", "batch", RNN_HIDDEN])],
        # W and b live in the outer graph: the body reads them from the enclosing scope.
        initializer=[const("W", w), const("b", b)],
    )
    return make_model(graph)


def reference_rnn(m, h0):
    w, b = rnn_weights()
    h = h0.astype(np.float32)
    seq = []
    for _ in range(max(int(m), 0)):
        h = np.tanh(np.matmul(h, w) + b).astype(np.float32)
        seq.append(h)
    h_seq = np.stack(seq) if seq else np.zeros((0,) + h0.shape, np.float32)
    return [h, h_seq.astype(np.float32)]


def rnn_example():
    rng = np.random.RandomState(99)
    h0 = rng.uniform(-1, 1, (2, RNN_HIDDEN)).astype(np.float32)
    inputs = [np.array(6, np.int64), h0]
    return Example("rnn", build_rnn(), {"": (inputs, reference_rnn(*inputs))})


# ----------------------------------------------------------------------------------------------
# greedy_decoder: token -> Gather(embedding) -> MatMul -> ArgMax -> next token; stops when the
# token is EOS (data-dependent condition) or after max_len steps; scan of the tokens.

VOCAB = 8
EOS = 0
# Greedy transitions the weights encode: 1 -> 3 -> 5 -> 2 -> 6 -> 0 (EOS); 4 <-> 7 never ends.
NEXT_TOKEN = {0: 0, 1: 3, 2: 6, 3: 5, 4: 7, 5: 2, 6: 0, 7: 4}


def decoder_weights():
    rng = np.random.RandomState(4321)
    embedding = (np.eye(VOCAB) + rng.uniform(-0.05, 0.05, (VOCAB, VOCAB))).astype(np.float32)
    logits = rng.uniform(-1, 1, (VOCAB, VOCAB))
    for t, n in NEXT_TOKEN.items():
        logits[t, n] = 4.0  # wide margin: float rounding never changes the argmax
    projection = logits.astype(np.float32)
    return embedding, projection


def build_greedy_decoder():
    embedding, projection = decoder_weights()
    body = helper.make_graph(
        [
            helper.make_node("Gather", ["embedding", "tok_in"], ["emb"], axis=0),
            helper.make_node("MatMul", ["emb", "projection"], ["logits"]),
            helper.make_node("ArgMax", ["logits"], ["tok_out"], axis=1, keepdims=0),
            helper.make_node("Equal", ["tok_out", "eos"], ["is_eos"]),
            helper.make_node("Not", ["is_eos"], ["go_on"]),
            helper.make_node("Squeeze", ["go_on", "axes0"], ["cond_out"]),
            helper.make_node("Identity", ["tok_out"], ["tok_scan"]),
        ],
        "greedy_decoder_body",
        [vi("iter", INT64, []), vi("cond_in", BOOL, []), vi("tok_in", INT64, [1])],
        [vi("cond_out", BOOL, []), vi("tok_out", INT64, [1]), vi("tok_scan", INT64, [1])],
        initializer=[const("eos", np.array([EOS], np.int64)),
                     const("axes0", np.array([0], np.int64))],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["max_len", "cond_init", "start_token"], ["last_token", "tokens"],
                          name="decode_loop", body=body)],
        "greedy_decoder",
        [vi("start_token", INT64, [1]), vi("max_len", INT64, [])],
        [vi("last_token", INT64, [1]), vi("tokens", INT64, ["len", 1])],
        initializer=[const("embedding", embedding), const("projection", projection),
                     const("cond_init", np.array(True))],
    )
    return make_model(graph)


def reference_greedy_decoder(start_token, max_len):
    embedding, projection = decoder_weights()
    tok = start_token.astype(np.int64)
    tokens = []
    i = 0
    cond = True
    while i < int(max_len) and cond:
        emb = embedding[tok]  # Gather axis 0: [1, D]
        logits = np.matmul(emb, projection)
        tok = np.argmax(logits, axis=1).astype(np.int64)  # first max on ties, as ONNX ArgMax
        cond = bool(tok[0] != EOS)
        tokens.append(tok)
        i += 1
    scan = np.stack(tokens) if tokens else np.zeros((0, 1), np.int64)
    return [tok, scan.astype(np.int64)]


def greedy_decoder_example():
    cases = {}
    for case, start, max_len in (("", 1, 10), ("no_eos", 4, 7)):
        inputs = [np.array([start], np.int64), np.array(max_len, np.int64)]
        cases[case] = (inputs, reference_greedy_decoder(*inputs))
    return Example("greedy_decoder", build_greedy_decoder(), cases)


# ----------------------------------------------------------------------------------------------
# endless: no trip count, a condition that stays true. Only a deadline, a cancellation or the
# server's iteration cap ends it. No scan output (it would grow without bound).


def build_endless():
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["x_in", "one"], ["x_out"]),
        ],
        "endless_body",
        [vi("iter", INT64, []), vi("cond_in", BOOL, []), vi("x_in", INT64, [1])],
        [vi("cond_out", BOOL, []), vi("x_out", INT64, [1])],
        initializer=[const("one", np.array([1], np.int64))],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["", "cond_init", "x"], ["y"], name="endless_loop", body=body)],
        "endless",
        [vi("x", INT64, [1])],
        [vi("y", INT64, [1])],
        initializer=[const("cond_init", np.array(True))],
    )
    return make_model(graph)


def endless_example():
    return Example("endless", build_endless(), {})


# ----------------------------------------------------------------------------------------------
# nested: a Loop inside a Loop. The inner body reads the outer iteration number and the inner trip
# count N from enclosing scopes: s += i_outer + j_inner; scans at both levels.


def build_nested():
    inner_body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in_j"], ["cond_out_j"]),
            helper.make_node("Add", ["i", "j"], ["ij"]),
            helper.make_node("Add", ["s_in_j", "ij"], ["s_out_j"]),
            helper.make_node("Identity", ["s_out_j"], ["s_scan_j"]),
        ],
        "nested_inner_body",
        [vi("j", INT64, []), vi("cond_in_j", BOOL, []), vi("s_in_j", INT64, [1])],
        [vi("cond_out_j", BOOL, []), vi("s_out_j", INT64, [1]), vi("s_scan_j", INT64, [1])],
    )
    outer_body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in_i"], ["cond_out_i"]),
            helper.make_node("Loop", ["N", "", "s_in_i"], ["s_out_i", "inner_seq"],
                             name="inner_loop", body=inner_body),
            helper.make_node("Identity", ["s_out_i"], ["s_scan_i"]),
        ],
        "nested_outer_body",
        [vi("i", INT64, []), vi("cond_in_i", BOOL, []), vi("s_in_i", INT64, [1])],
        [vi("cond_out_i", BOOL, []), vi("s_out_i", INT64, [1]), vi("s_scan_i", INT64, [1]),
         vi("inner_seq", INT64, ["inner", 1])],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "s0"], ["s_final", "outer_seq", "all_seq"],
                          name="outer_loop", body=outer_body)],
        "nested",
        [vi("M", INT64, []), vi("N", INT64, []), vi("s0", INT64, [1])],
        [vi("s_final", INT64, [1]), vi("outer_seq", INT64, ["outer", 1]),
         vi("all_seq", INT64, ["outer", "inner", 1])],
    )
    return make_model(graph)


def reference_nested(m, n, s0):
    s = s0.astype(np.int64)
    outer_seq, all_seq = [], []
    for i in range(max(int(m), 0)):
        inner = []
        for j in range(max(int(n), 0)):
            s = s + np.int64(i + j)
            inner.append(s)
        outer_seq.append(s)
        all_seq.append(np.stack(inner) if inner else np.zeros((0, 1), np.int64))
    outer = np.stack(outer_seq) if outer_seq else np.zeros((0, 1), np.int64)
    every = np.stack(all_seq) if all_seq else np.zeros((0, max(int(n), 0), 1), np.int64)
    return [s, outer.astype(np.int64), every.astype(np.int64)]


def nested_example():
    inputs = [np.array(3, np.int64), np.array(4, np.int64), np.array([100], np.int64)]
    return Example("nested", build_nested(), {"": (inputs, reference_nested(*inputs))})


# ----------------------------------------------------------------------------------------------


def example_models():
    return [counter_example(), rnn_example(), greedy_decoder_example(), endless_example(),
            nested_example()]


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: %s OUT_DIR\n" % argv[0])
        return 2
    for example in example_models():
        write_example(argv[1], example)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
