#!/usr/bin/python3
"""Writes loopserve's bundled example model repository, laid out as Triton's documentation shows.

Usage: /usr/bin/python3 deploy/make_example_models.py OUT_DIR
       /usr/bin/python3 deploy/make_example_models.py --triton_qa OUT_DIR   (Triton's QA models:
       simple, simple_string, simple_identity, for Triton's client examples)

Creates, for every example model,
  OUT_DIR/<model>/1/model.onnx            the model (ONNX opset 13, ir_version 8), or
  OUT_DIR/<model>/1/model.xml + .bin      an OpenVINO IR (ov_counter)
  OUT_DIR/<model>/config.pbtxt            Triton's model configuration, for some models: a full
                                          one (rnn), a partial one with max_batch_size: 8
                                          (rnn_batched), an OpenVINO one (ov_counter); the others
                                          have none and are auto-completed by the server
  OUT_DIR/<model>/warmup/<file>           warm-up data a config names (rnn)
  OUT_DIR/<model>/expected/input_<k>.pb   a fixed input, as ONNX TensorProtos in input order
  OUT_DIR/<model>/expected/output_<k>.pb  what the model must return, computed by the numpy
                                          reference below (never by loopserve's engine)
Some models have further cases in OUT_DIR/<model>/expected_<case>/ with the same layout.
Models without a meaningful expected output (`endless`) get no expected folder.
OUT_DIR/ovms_config.json lists the same models in OpenVINO Model Server's format
(`loopserve --config_path=OUT_DIR/ovms_config.json` serves them as `ovms --config_path` would).

Everything is deterministic (fixed seeds, no timestamps): running the script twice gives byte-identical
files. Needs Debian's /usr/bin/python3 (numpy + onnx 1.12), not the pyenv python3 on PATH.

This file is also imported as a module by tests/models/make_test_models.py.
"""

import json
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
    """A model plus its named test cases: {case_name: (inputs list, expected outputs list)}.

    `model` is an ONNX ModelProto, or None with `files` ({file name: bytes} for the version folder)
    and `io_names` ((input names, output names)) for other formats. `config` is the text of its
    config.pbtxt (None: no config), `warmup` {file name: bytes} for its warmup/ folder.
    """

    def __init__(self, name, model, cases, config=None, files=None, io_names=None, warmup=None):
        self.name = name
        self.model = model
        self.cases = cases
        self.config = config
        self.files = files
        self.io_names = io_names
        self.warmup = warmup or {}


def write_example(out_dir, example):
    model_dir = os.path.join(out_dir, example.name)
    version_dir = os.path.join(model_dir, "1")
    os.makedirs(version_dir, exist_ok=True)
    files = example.files or {"model.onnx": example.model.SerializeToString()}
    for file_name, data in files.items():
        with open(os.path.join(version_dir, file_name), "wb") as f:
            f.write(data)
    if example.config is not None:
        with open(os.path.join(model_dir, "config.pbtxt"), "w") as f:
            f.write(example.config)
    for file_name, data in example.warmup.items():
        os.makedirs(os.path.join(model_dir, "warmup"), exist_ok=True)
        with open(os.path.join(model_dir, "warmup", file_name), "wb") as f:
            f.write(data)
    if example.io_names is not None:
        in_names, out_names = example.io_names
    else:
        in_names = [i.name for i in example.model.graph.input]
        out_names = [o.name for o in example.model.graph.output]
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


# The full configuration, as Triton's model-configuration documentation writes one. `dims: [ ]`
# declares a scalar (M): loopserve's reading; Triton's own idiom, `dims: [ 1 ]` with
# `reshape: { shape: [ ] }`, works too (see ov_counter).
RNN_CONFIG = """name: "rnn"
platform: "onnxruntime_onnx"
max_batch_size: 0
version_policy: { latest: { num_versions: 1 } }
input [
  {
    name: "M"
    data_type: TYPE_INT64
    dims: [ ]
  },
  {
    name: "h0"
    data_type: TYPE_FP32
    dims: [ -1, 4 ]
  }
]
output [
  {
    name: "h_final"
    data_type: TYPE_FP32
    dims: [ -1, 4 ]
  },
  {
    name: "h_seq"
    data_type: TYPE_FP32
    dims: [ -1, -1, 4 ]
  }
]
instance_group [
  {
    count: 2
    kind: KIND_CPU
  }
]
parameters: {
  key: "max_loop_iterations"
  value: { string_value: "1000000" }
}
model_warmup [
  {
    name: "16 steps, batch 8"
    inputs {
      key: "M"
      value: { data_type: TYPE_INT64 dims: [ ] input_data_file: "M_16" }
    }
    inputs {
      key: "h0"
      value: { data_type: TYPE_FP32 dims: [ 8, 4 ] random_data: true }
    }
  }
]
"""


def rnn_example():
    rng = np.random.RandomState(99)
    h0 = rng.uniform(-1, 1, (2, RNN_HIDDEN)).astype(np.float32)
    inputs = [np.array(6, np.int64), h0]
    return Example("rnn", build_rnn(), {"": (inputs, reference_rnn(*inputs))}, config=RNN_CONFIG,
                   warmup={"M_16": np.array(16, np.int64).tobytes()})


# ----------------------------------------------------------------------------------------------
# rnn_batched: an Elman RNN over an input sequence, batch first (Triton's batching convention):
# x [batch, T, 4], h0 [batch, 4]; h_t = Tanh(x_t Wx + h_{t-1} Wh + b) for every step t of x;
# outputs h_final [batch, 4] and h_seq [batch, T, 4]. The Loop runs T = x.shape[1] times and reads
# x_t = Gather(x transposed to [T, batch, 4], t) from the enclosing graph.

RNN_BATCHED_CONFIG = """name: "rnn_batched"
backend: "onnxruntime"
max_batch_size: 8
input [
  {
    name: "x"
    data_type: TYPE_FP32
    dims: [ -1, 4 ]
  },
  {
    name: "h0"
    data_type: TYPE_FP32
    dims: [ 4 ]
  }
]
# No outputs: the server completes them from the model (h_final [4], h_seq [-1, 4]).
"""


def rnn_batched_weights():
    rng = np.random.RandomState(4242)
    wx = (rng.standard_normal((RNN_HIDDEN, RNN_HIDDEN)) * 0.5).astype(np.float32)
    wh = (rng.standard_normal((RNN_HIDDEN, RNN_HIDDEN)) * 0.5).astype(np.float32)
    b = (rng.standard_normal((RNN_HIDDEN,)) * 0.1).astype(np.float32)
    return wx, wh, b


def build_rnn_batched():
    wx, wh, b = rnn_batched_weights()
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Gather", ["x_steps", "t"], ["x_t"], axis=0),
            helper.make_node("MatMul", ["x_t", "Wx"], ["xw"]),
            helper.make_node("MatMul", ["h_in", "Wh"], ["hw"]),
            helper.make_node("Add", ["xw", "hw"], ["sum"]),
            helper.make_node("Add", ["sum", "b"], ["pre"]),
            helper.make_node("Tanh", ["pre"], ["h_out"]),
            helper.make_node("Identity", ["h_out"], ["h_scan"]),
        ],
        "rnn_batched_body",
        [vi("t", INT64, []), vi("cond_in", BOOL, []), vi("h_in", FLOAT, ["batch", RNN_HIDDEN])],
        [vi("cond_out", BOOL, []), vi("h_out", FLOAT, ["batch", RNN_HIDDEN]),
         vi("h_scan", FLOAT, ["batch", RNN_HIDDEN])],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Transpose", ["x"], ["x_steps"], perm=[1, 0, 2]),
            helper.make_node("Shape", ["x"], ["x_shape"]),
            helper.make_node("Gather", ["x_shape", "one"], ["steps"], axis=0),
            helper.make_node("Loop", ["steps", "", "h0"], ["h_final", "h_steps"],
                             name="rnn_batched_loop", body=body),
            helper.make_node("Transpose", ["h_steps"], ["h_seq"], perm=[1, 0, 2]),
        ],
        "rnn_batched",
        [vi("x", FLOAT, ["batch", "T", RNN_HIDDEN]), vi("h0", FLOAT, ["batch", RNN_HIDDEN])],
        [vi("h_final", FLOAT, ["batch", RNN_HIDDEN]),
         vi("h_seq", FLOAT, ["batch", "T", RNN_HIDDEN])],
        initializer=[const("Wx", wx), const("Wh", wh), const("b", b),
                     const("one", np.array(1, np.int64))],
    )
    return make_model(graph)


def reference_rnn_batched(x, h0):
    wx, wh, b = rnn_batched_weights()
    h = h0.astype(np.float32)
    seq = []
    for t in range(x.shape[1]):
        h = np.tanh(np.matmul(x[:, t, :], wx) + np.matmul(h, wh) + b).astype(np.float32)
        seq.append(h)
    h_seq = np.stack(seq, axis=1) if seq else np.zeros((x.shape[0], 0, RNN_HIDDEN), np.float32)
    return [h, h_seq.astype(np.float32)]


def rnn_batched_example():
    rng = np.random.RandomState(77)
    x = rng.uniform(-1, 1, (3, 5, RNN_HIDDEN)).astype(np.float32)
    h0 = rng.uniform(-1, 1, (3, RNN_HIDDEN)).astype(np.float32)
    return Example("rnn_batched", build_rnn_batched(),
                   {"": ([x, h0], reference_rnn_batched(x, h0))}, config=RNN_BATCHED_CONFIG)


# ----------------------------------------------------------------------------------------------
# rnn_cell: a 256-wide Elman RNN cell driven for M steps by a constant input, batched for the
# dynamic batcher: h = Tanh(x Wx + h Wh + b), M INT64 [] (no batch dim: requests merge only when
# their M is equal), x and h0 [batch, 256]; outputs h_final [batch, 256] and the scan output
# h_seq [M, batch, 256] (batch axis 1). Its config enables dynamic_batching and declares both.

RNN_CELL_HIDDEN = 256

RNN_CELL_CONFIG = """name: "rnn_cell"
backend: "onnxruntime"
max_batch_size: 32
input [
  { name: "M" data_type: TYPE_INT64 dims: [ ] },
  { name: "x" data_type: TYPE_FP32 dims: [ 256 ] },
  { name: "h0" data_type: TYPE_FP32 dims: [ 256 ] }
]
output [
  { name: "h_final" data_type: TYPE_FP32 dims: [ 256 ] },
  { name: "h_seq" data_type: TYPE_FP32 dims: [ -1, 256 ] }
]
dynamic_batching { max_queue_delay_microseconds: 500 }
# loopserve's batching layout: M has no batch dim (requests merge when their M is equal); h_seq
# [M, batch, 256] has its batch dim at axis 1.
parameters { key: "unbatched_inputs" value: { string_value: "M" } }
parameters { key: "output_batch_axes" value: { string_value: "h_seq:1" } }
"""


def rnn_cell_weights(hidden=RNN_CELL_HIDDEN):
    rng = np.random.RandomState(2468)
    scale = 0.5 / np.sqrt(hidden)  # contracting: long runs stay comparable across roundings
    wx = (rng.standard_normal((hidden, hidden)) * scale).astype(np.float32)
    wh = (rng.standard_normal((hidden, hidden)) * scale).astype(np.float32)
    b = (rng.standard_normal((hidden,)) * 0.1).astype(np.float32)
    return wx, wh, b


def build_rnn_cell(hidden=RNN_CELL_HIDDEN):
    wx, wh, b = rnn_cell_weights(hidden)
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("MatMul", ["x", "Wx"], ["xw"]),
            helper.make_node("MatMul", ["h_in", "Wh"], ["hw"]),
            helper.make_node("Add", ["xw", "hw"], ["sum"]),
            helper.make_node("Add", ["sum", "b"], ["pre"]),
            helper.make_node("Tanh", ["pre"], ["h_out"]),
            helper.make_node("Identity", ["h_out"], ["h_scan"]),
        ],
        "rnn_cell_body",
        [vi("i", INT64, []), vi("cond_in", BOOL, []), vi("h_in", FLOAT, ["batch", hidden])],
        [vi("cond_out", BOOL, []), vi("h_out", FLOAT, ["batch", hidden]),
         vi("h_scan", FLOAT, ["batch", hidden])],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "h0"], ["h_final", "h_seq"], name="rnn_cell_loop",
                          body=body)],
        "rnn_cell",
        [vi("M", INT64, []), vi("x", FLOAT, ["batch", hidden]), vi("h0", FLOAT, ["batch", hidden])],
        [vi("h_final", FLOAT, ["batch", hidden]),
         vi("h_seq", FLOAT, ["steps", "batch", hidden])],
        initializer=[const("Wx", wx), const("Wh", wh), const("b", b)],
    )
    return make_model(graph)


def reference_rnn_cell(m, x, h0):
    wx, wh, b = rnn_cell_weights(h0.shape[1])
    h = h0.astype(np.float32)
    xw = np.matmul(x.astype(np.float32), wx)
    seq = []
    for _ in range(max(int(m), 0)):
        h = np.tanh(xw + np.matmul(h, wh) + b).astype(np.float32)
        seq.append(h)
    h_seq = np.stack(seq) if seq else np.zeros((0,) + h0.shape, np.float32)
    return [h, h_seq.astype(np.float32)]


def rnn_cell_example():
    rng = np.random.RandomState(135)
    x = rng.uniform(-1, 1, (2, RNN_CELL_HIDDEN)).astype(np.float32)
    h0 = rng.uniform(-1, 1, (2, RNN_CELL_HIDDEN)).astype(np.float32)
    inputs = [np.array(4, np.int64), x, h0]
    return Example("rnn_cell", build_rnn_cell(), {"": (inputs, reference_rnn_cell(*inputs))},
                   config=RNN_CELL_CONFIG)


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
# ov_counter: an OpenVINO IR (v11) Loop-5: `trip` iterations of acc = acc + 1 from `start`;
# outputs final (the last acc, [1]) and counts (every iteration's acc concatenated on axis 0, [trip]).
# The config declares the scalar trip count Triton's way: dims [1] reshaped to [].

OV_COUNTER_CONFIG = """name: "ov_counter"
platform: "openvino"
input [
  {
    name: "trip"
    data_type: TYPE_INT64
    dims: [ 1 ]
    reshape: { shape: [ ] }
  },
  {
    name: "start"
    data_type: TYPE_FP32
    dims: [ 1 ]
  }
]
output [
  {
    name: "final"
    data_type: TYPE_FP32
    dims: [ 1 ]
  },
  {
    name: "counts"
    data_type: TYPE_FP32
    dims: [ -1 ]
  }
]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


def _ov_port(port_id, precision, dims, names=None):
    names_attr = ' names="%s"' % names if names else ""
    return '<port id="%d" precision="%s"%s>%s</port>' % (
        port_id, precision, names_attr, "".join("<dim>%d</dim>" % d for d in dims))


def build_ov_counter():
    """The IR (.xml text, .bin bytes), written by hand after the IR v11 and Loop-5 specs."""
    weights = bytearray()

    def const(layer_id, name, array, element_type, precision):
        while len(weights) % 8:
            weights.append(0)
        offset = len(weights)
        weights.extend(array.tobytes())
        return ('<layer id="%d" name="%s" type="Const" version="opset1">'
                '<data element_type="%s" shape="%s" offset="%d" size="%d"/>'
                "<output>%s</output></layer>" % (
                    layer_id, name, element_type, ",".join(str(d) for d in array.shape), offset,
                    array.nbytes, _ov_port(0, precision, array.shape, name)))

    body = (
        "<body><layers>"
        '<layer id="0" name="acc_in" type="Parameter" version="opset1">'
        '<data shape="1" element_type="f32"/><output>%s</output></layer>'
        % _ov_port(0, "FP32", [1], "acc_in")
        + const(1, "one", np.array([1.0], np.float32), "f32", "FP32")
        + '<layer id="2" name="acc_out" type="Add" version="opset1"><input>%s%s</input>'
        "<output>%s</output></layer>"
        % (_ov_port(0, "FP32", [1]), _ov_port(1, "FP32", [1]), _ov_port(2, "FP32", [1], "acc_out"))
        + const(3, "go_on", np.array(True), "boolean", "BOOL")
        + '<layer id="4" name="acc_result" type="Result" version="opset1"><input>%s</input></layer>'
        % _ov_port(0, "FP32", [1])
        + '<layer id="5" name="cond_result" type="Result" version="opset1"><input>%s</input>'
        "</layer>" % _ov_port(0, "BOOL", [])
        + "</layers><edges>"
        '<edge from-layer="0" from-port="0" to-layer="2" to-port="0"/>'
        '<edge from-layer="1" from-port="0" to-layer="2" to-port="1"/>'
        '<edge from-layer="2" from-port="2" to-layer="4" to-port="0"/>'
        '<edge from-layer="3" from-port="0" to-layer="5" to-port="0"/>'
        "</edges></body>")
    layers = (
        '<layer id="0" name="trip" type="Parameter" version="opset1">'
        '<data shape="" element_type="i64"/><output>%s</output></layer>'
        % _ov_port(0, "I64", [], "trip")
        + '<layer id="1" name="start" type="Parameter" version="opset1">'
        '<data shape="1" element_type="f32"/><output>%s</output></layer>'
        % _ov_port(0, "FP32", [1], "start")
        + const(2, "cond", np.array(True), "boolean", "BOOL")
        + '<layer id="3" name="counter_loop" type="Loop" version="opset5">'
        "<input>%s%s%s</input><output>%s%s</output>"
        % (_ov_port(0, "I64", []), _ov_port(1, "BOOL", []), _ov_port(2, "FP32", [1]),
           _ov_port(3, "FP32", [1], "final"), _ov_port(4, "FP32", [-1], "counts"))
        + "<port_map>"
        '<input external_port_id="2" internal_layer_id="0"/>'
        '<output external_port_id="3" internal_layer_id="4"/>'
        '<output external_port_id="4" internal_layer_id="4" axis="0"/>'
        '<output external_port_id="-1" internal_layer_id="5" purpose="execution_condition"/>'
        "</port_map>"
        '<back_edges><edge from-layer="4" to-layer="0"/></back_edges>'
        + body + "</layer>"
        + '<layer id="4" name="final" type="Result" version="opset1"><input>%s</input></layer>'
        % _ov_port(0, "FP32", [1])
        + '<layer id="5" name="counts" type="Result" version="opset1"><input>%s</input></layer>'
        % _ov_port(0, "FP32", [-1]))
    edges = ('<edge from-layer="0" from-port="0" to-layer="3" to-port="0"/>'
             '<edge from-layer="2" from-port="0" to-layer="3" to-port="1"/>'
             '<edge from-layer="1" from-port="0" to-layer="3" to-port="2"/>'
             '<edge from-layer="3" from-port="3" to-layer="4" to-port="0"/>'
             '<edge from-layer="3" from-port="4" to-layer="5" to-port="0"/>')
    xml = ('<?xml version="1.0"?>\n<net name="ov_counter" version="11"><layers>%s</layers>'
           "<edges>%s</edges></net>\n" % (layers, edges))
    return xml.encode(), bytes(weights)


def reference_ov_counter(trip, start):
    """Loop-5: trip iterations (0 or less: none) of acc + 1; counts concatenates each acc [1]."""
    acc = start.astype(np.float32)
    counts = []
    for _ in range(max(int(trip.reshape(-1)[0]), 0)):
        acc = acc + np.float32(1)
        counts.append(acc)
    return [acc, np.concatenate(counts) if counts else np.zeros((0,), np.float32)]


def ov_counter_example():
    xml, weights = build_ov_counter()
    cases = {}
    for case, trip in (("", 4), ("zero", 0)):
        # The client sends trip as [1] (the config's dims), the model takes a scalar.
        inputs = [np.array([trip], np.int64), np.array([2.5], np.float32)]
        cases[case] = (inputs, reference_ov_counter(*inputs))
    return Example("ov_counter", None, cases, config=OV_COUNTER_CONFIG,
                   files={"model.xml": xml, "model.bin": weights},
                   io_names=(["trip", "start"], ["final", "counts"]))


# ----------------------------------------------------------------------------------------------
# Stateful sequences (config `sequence_batching`): the server keeps each sequence's state between
# its requests (implicit state) and feeds the control inputs.
#
# simple_sequence: Triton's sequence example model, so that Triton's Python client examples
# (simple_grpc_sequence_*_client.py, simple_http_sequence_sync_infer_client.py) run unmodified:
# OUTPUT = INPUT + START (what those examples check), and SUM, the running sum of the sequence's
# INPUTs, carried in the implicit state ACC (ACC_IN -> ACC_OUT).

INT32 = TensorProto.INT32

SIMPLE_SEQUENCE_CONFIG = """\
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] }
]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
  state [
    {
      input_name: "ACC_IN"
      output_name: "ACC_OUT"
      data_type: TYPE_INT32
      dims: [ 1 ]
      initial_state { name: "zero" data_type: TYPE_INT32 dims: [ 1 ] zero_data: true }
    }
  ]
}
"""


def build_simple_sequence():
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT", "START"], ["OUTPUT"]),
            helper.make_node("Sub", ["one", "START"], ["keep"]),
            helper.make_node("Mul", ["ACC_IN", "keep"], ["kept"]),
            helper.make_node("Add", ["kept", "INPUT"], ["added"]),
            helper.make_node("Mul", ["added", "READY"], ["SUM"]),
            helper.make_node("Identity", ["SUM"], ["ACC_OUT"]),
        ],
        "simple_sequence",
        [vi(name, INT32, ["batch", 1]) for name in ("INPUT", "START", "READY", "ACC_IN")],
        [vi(name, INT32, ["batch", 1]) for name in ("OUTPUT", "SUM", "ACC_OUT")],
        initializer=[const("one", np.array(1, np.int32))],
    )
    return make_model(graph)


def reference_simple_sequence(value, start, ready, acc):
    total = ((1 - start) * acc + value) * ready
    return [value + start, total, total]


def simple_sequence_example():
    inputs = [np.array([[5], [-3]], np.int32), np.array([[1], [0]], np.int32),
              np.array([[1], [1]], np.int32), np.array([[7], [7]], np.int32)]
    return Example("simple_sequence", build_simple_sequence(),
                   {"": (inputs, reference_simple_sequence(*inputs))},
                   config=SIMPLE_SEQUENCE_CONFIG)


# gru_chunk: a streaming recurrent model as voice-activity detectors are built (Silero VAD keeps
# state [2, batch, 128]): each request is one chunk of FEATURES x STEPS frames; an ONNX GRU carries
# the hidden state [1, batch, hidden] (batch axis 1: output_batch_axes "h_out:1") from chunk to
# chunk on the server; `prob` is a per-chunk score. START (fp32 control) zeroes the state.

GRU_CHUNK_STEPS = 4
GRU_CHUNK_FEATURES = 16
GRU_CHUNK_HIDDEN = 64


def gru_chunk_config(hidden=GRU_CHUNK_HIDDEN, strategy="oldest { max_candidate_sequences: 64 }",
                     max_batch_size=64):
    return """\
max_batch_size: %d
input [ { name: "chunk" data_type: TYPE_FP32 dims: [ %d, %d ] } ]
output [ { name: "prob" data_type: TYPE_FP32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 10000000
  control_input [
    { name: "start" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] }
  ]
  state [
    {
      input_name: "h_in"
      output_name: "h_out"
      data_type: TYPE_FP32
      dims: [ 1, %d ]
      initial_state { name: "zeros" data_type: TYPE_FP32 dims: [ 1, %d ] zero_data: true }
    }
  ]
  %s
}
parameters { key: "output_batch_axes" value: { string_value: "h_out:1" } }
""" % (max_batch_size, GRU_CHUNK_STEPS, GRU_CHUNK_FEATURES, hidden, hidden, strategy)


def gru_chunk_weights(hidden=GRU_CHUNK_HIDDEN):
    rng = np.random.RandomState(8642)
    w = (rng.standard_normal((1, 3 * hidden, GRU_CHUNK_FEATURES)) * 0.3).astype(np.float32)
    r = (rng.standard_normal((1, 3 * hidden, hidden)) * (0.5 / np.sqrt(hidden))).astype(np.float32)
    b = (rng.standard_normal((1, 6 * hidden)) * 0.1).astype(np.float32)
    wo = (rng.standard_normal((hidden, 1)) / np.sqrt(hidden)).astype(np.float32)
    return w, r, b, wo


def build_gru_chunk(hidden=GRU_CHUNK_HIDDEN):
    w, r, b, wo = gru_chunk_weights(hidden)
    graph = helper.make_graph(
        [
            helper.make_node("Sub", ["one", "start"], ["keep"]),          # [batch, 1]
            helper.make_node("Mul", ["h_in", "keep"], ["h0"]),            # [1, batch, hidden]
            helper.make_node("Transpose", ["chunk"], ["x"], perm=[1, 0, 2]),
            helper.make_node("GRU", ["x", "W", "R", "B", "", "h0"], ["y", "h_out"],
                             hidden_size=hidden),
            helper.make_node("Squeeze", ["h_out", "axis0"], ["h"]),
            helper.make_node("MatMul", ["h", "Wo"], ["logit"]),
            helper.make_node("Sigmoid", ["logit"], ["prob"]),
        ],
        "gru_chunk",
        [vi("chunk", FLOAT, ["batch", GRU_CHUNK_STEPS, GRU_CHUNK_FEATURES]),
         vi("start", FLOAT, ["batch", 1]), vi("h_in", FLOAT, [1, "batch", hidden])],
        [vi("prob", FLOAT, ["batch", 1]), vi("h_out", FLOAT, [1, "batch", hidden])],
        initializer=[const("W", w), const("R", r), const("B", b), const("Wo", wo),
                     const("one", np.array(1, np.float32)), const("axis0", np.array([0], np.int64))],
    )
    return make_model(graph)


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def reference_gru_chunk(chunk, start, h_in, hidden=GRU_CHUNK_HIDDEN):
    """ONNX GRU (linear_before_reset 0, gates z, r, h) over the chunk's frames, then the score."""
    w, r, b, wo = gru_chunk_weights(hidden)
    w, r, b = w[0].astype(np.float64), r[0].astype(np.float64), b[0].astype(np.float64)
    wz, wr, wh = np.split(w, 3)
    rz, rr, rh = np.split(r, 3)
    wbz, wbr, wbh, rbz, rbr, rbh = np.split(b, 6)
    h = (h_in[0] * (1 - start)).astype(np.float64)  # [batch, hidden]
    for t in range(chunk.shape[1]):
        x = chunk[:, t, :].astype(np.float64)
        z = _sigmoid(x @ wz.T + h @ rz.T + wbz + rbz)
        rg = _sigmoid(x @ wr.T + h @ rr.T + wbr + rbr)
        n = np.tanh(x @ wh.T + (rg * h) @ rh.T + rbh + wbh)
        h = (1 - z) * n + z * h
    prob = _sigmoid(h @ wo.astype(np.float64))
    return [prob.astype(np.float32), h[None].astype(np.float32)]


def gru_chunk_example():
    rng = np.random.RandomState(97)
    chunk = rng.uniform(-1, 1, (2, GRU_CHUNK_STEPS, GRU_CHUNK_FEATURES)).astype(np.float32)
    start = np.array([[1], [0]], np.float32)
    h_in = rng.uniform(-1, 1, (1, 2, GRU_CHUNK_HIDDEN)).astype(np.float32)
    inputs = [chunk, start, h_in]
    return Example("gru_chunk", build_gru_chunk(), {"": (inputs, reference_gru_chunk(*inputs))},
                   config=gru_chunk_config())


# ----------------------------------------------------------------------------------------------


def example_models():
    return [counter_example(), rnn_example(), rnn_batched_example(), rnn_cell_example(),
            greedy_decoder_example(), endless_example(), nested_example(), ov_counter_example(),
            simple_sequence_example(), gru_chunk_example()]


# ----------------------------------------------------------------------------------------------
# Triton's QA models, which Triton's client examples (../shared/tritonclient/examples) call:
# `simple` (INT32 [-1,16] INPUT0/INPUT1 -> OUTPUT0 = sum, OUTPUT1 = difference, max_batch_size 8),
# `simple_int8` (the same in INT8), `simple_string` (the same on BYTES holding decimal numbers),
# `simple_identity` (BYTES identity).
# Written only with --triton_qa (not part of the example repository).

INT32 = TensorProto.INT32
STRING = TensorProto.STRING
TRITON_QA_CONFIG = "max_batch_size: 8\n"


def build_simple(elem_type):
    inputs = [vi("INPUT0", elem_type, ["batch", 16]), vi("INPUT1", elem_type, ["batch", 16])]
    outputs = [vi("OUTPUT0", elem_type, ["batch", 16]), vi("OUTPUT1", elem_type, ["batch", 16])]
    if elem_type == INT32:
        nodes = [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
                 helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])]
    else:  # opset 13 has no Add for int8 or strings: computed in int32 in between
        nodes = [helper.make_node("Cast", ["INPUT0"], ["a"], to=INT32),
                 helper.make_node("Cast", ["INPUT1"], ["b"], to=INT32),
                 helper.make_node("Add", ["a", "b"], ["sum"]),
                 helper.make_node("Sub", ["a", "b"], ["diff"]),
                 helper.make_node("Cast", ["sum"], ["OUTPUT0"], to=elem_type),
                 helper.make_node("Cast", ["diff"], ["OUTPUT1"], to=elem_type)]
    name = {INT32: "simple", STRING: "simple_string", TensorProto.INT8: "simple_int8"}[elem_type]
    return make_model(helper.make_graph(nodes, name, inputs, outputs))


def simple_examples():
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    as_bytes = lambda x: np.array([str(v).encode() for v in x.flatten()], dtype=object).reshape(x.shape)
    simple = Example("simple", build_simple(INT32), {"": ([a, b], [a + b, a - b])},
                     config=TRITON_QA_CONFIG)
    simple_string = Example("simple_string", build_simple(STRING),
                            {"": ([as_bytes(a), as_bytes(b)], [as_bytes(a + b), as_bytes(a - b)])},
                            config=TRITON_QA_CONFIG)
    identity = make_model(helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])], "simple_identity",
        [vi("INPUT0", STRING, ["batch", "n"])], [vi("OUTPUT0", STRING, ["batch", "n"])]))
    words = np.array([b"he\x00llo"] * 16, dtype=object).reshape(1, 16)
    simple_identity = Example("simple_identity", identity, {"": ([words], [words])},
                              config=TRITON_QA_CONFIG)
    a8, b8 = a.astype(np.int8), b.astype(np.int8)
    simple_int8 = Example("simple_int8", build_simple(TensorProto.INT8),
                          {"": ([a8, b8], [a8 + b8, a8 - b8])}, config=TRITON_QA_CONFIG)
    return [simple, simple_string, simple_identity, simple_int8]


def write_ovms_config(out_dir, examples):
    """OUT_DIR/ovms_config.json: the same models as OpenVINO Model Server's config.json lists
    them (base paths relative to the file; nireq as the instance count)."""
    entries = []
    for example in examples:
        config = {"name": example.name, "base_path": example.name}
        if example.name == "rnn":
            config["nireq"] = 2
            config["model_version_policy"] = {"latest": {"num_versions": 1}}
        entries.append({"config": config})
    with open(os.path.join(out_dir, "ovms_config.json"), "w") as f:
        json.dump({"model_config_list": entries}, f, indent=2)
        f.write("\n")


def main(argv):
    if len(argv) == 3 and argv[1] == "--triton_qa":
        for example in simple_examples():
            write_example(argv[2], example)
        return 0
    if len(argv) != 2:
        sys.stderr.write("usage: %s [--triton_qa] OUT_DIR\n" % argv[0])
        return 2
    examples = example_models()
    for example in examples:
        write_example(argv[1], example)
    write_ovms_config(argv[1], examples)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
