#!/usr/bin/python3
"""Writes the model repository loopserve's integration tests run against.

Usage: /usr/bin/python3 tests/models/make_test_models.py OUT_DIR

OUT_DIR gets every example model of deploy/make_example_models.py (counter, rnn, rnn_batched,
greedy_decoder, endless, nested, ov_counter; with their config.pbtxt and warm-up files) plus the
test-only models below, all in the same layout:
  OUT_DIR/<model>/1/model.onnx
  OUT_DIR/<model>/expected[_<case>]/input_<k>.pb, output_<k>.pb   (ONNX TensorProtos, numpy-computed)
and OUT_DIR/ovms_config.json listing them all in OpenVINO Model Server's format.

Test-only models:
  identity_dtypes  eleven independent Identity ops, one per fixed-size OIP datatype (FP32, INT64,
                   BOOL, INT32, FP64, UINT8, INT8, INT16, UINT16, UINT32, UINT64): input `in_<t>` [N, 3] -> output `out_<t>` [N, 3]. Used by the
                   protocol tests (dtype/shape/byte-count validation, typed vs raw contents).
  add_scalar       plain (loop-free) FP32 model: y = x + 1.5, x [N, 4]. Used by the perf smoke test.
  strings          BYTES in and out: `text` [N] -> StringNormalizer (stop word "drop", upper case)
                   -> `kept` [M], and Cast(text, FLOAT) of `numbers` [N] -> `values` (the spec's
                   numeric literals).

Deterministic: fixed seeds, byte-identical output on every run.
"""

import os
import sys

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(_REPO_ROOT, "deploy"))

import make_example_models as ex  # noqa: E402  (applies the numpy alias shim before onnx)
import numpy as np  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

# (OIP datatype suffix, ONNX element type, numpy dtype)
IDENTITY_DTYPES = [
    ("fp32", TensorProto.FLOAT, np.float32),
    ("int64", TensorProto.INT64, np.int64),
    ("bool", TensorProto.BOOL, np.bool_),
    ("int32", TensorProto.INT32, np.int32),
    ("fp64", TensorProto.DOUBLE, np.float64),
    ("uint8", TensorProto.UINT8, np.uint8),
    ("int8", TensorProto.INT8, np.int8),
    ("int16", TensorProto.INT16, np.int16),
    ("uint16", TensorProto.UINT16, np.uint16),
    ("uint32", TensorProto.UINT32, np.uint32),
    ("uint64", TensorProto.UINT64, np.uint64),
]


def build_identity_dtypes():
    nodes, inputs, outputs = [], [], []
    for suffix, elem_type, _ in IDENTITY_DTYPES:
        nodes.append(helper.make_node("Identity", ["in_" + suffix], ["out_" + suffix],
                                      name="identity_" + suffix))
        inputs.append(ex.vi("in_" + suffix, elem_type, ["N", 3]))
        outputs.append(ex.vi("out_" + suffix, elem_type, ["N", 3]))
    return ex.make_model(helper.make_graph(nodes, "identity_dtypes", inputs, outputs))


def reference_identity_dtypes(*inputs):
    return [np.array(x, copy=True) for x in inputs]


def identity_dtypes_inputs(rows):
    rng = np.random.RandomState(7)
    values = []
    for suffix, _, dtype in IDENTITY_DTYPES:
        if dtype == np.bool_:
            values.append(rng.randint(0, 2, (rows, 3)).astype(np.bool_))
        elif np.issubdtype(dtype, np.floating):
            values.append(rng.standard_normal((rows, 3)).astype(dtype))
        else:
            info = np.iinfo(dtype)
            low, high = max(info.min, -1000), min(info.max, 1000)
            values.append(rng.randint(low, high + 1, (rows, 3)).astype(dtype))
    if rows > 0:  # extremes survive the wire unchanged
        values[1][0, 0] = np.iinfo(np.int64).max
        values[3][0, 0] = np.iinfo(np.int32).min
        values[5][0, 0] = 255
        values[6][0, 0] = -128
        values[7][0, 0] = np.iinfo(np.int16).min
        values[8][0, 0] = np.iinfo(np.uint16).max
        values[9][0, 0] = np.iinfo(np.uint32).max
        values[10][0, 0] = np.iinfo(np.uint64).max
    return values


def identity_dtypes_example():
    cases = {}
    for case, rows in (("", 2), ("empty", 0)):
        inputs = identity_dtypes_inputs(rows)
        cases[case] = (inputs, reference_identity_dtypes(*inputs))
    return ex.Example("identity_dtypes", build_identity_dtypes(), cases)


def build_add_scalar():
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "c"], ["y"])],
        "add_scalar",
        [ex.vi("x", TensorProto.FLOAT, ["N", 4])],
        [ex.vi("y", TensorProto.FLOAT, ["N", 4])],
        initializer=[ex.const("c", np.array(1.5, np.float32))],
    )
    return ex.make_model(graph)


def add_scalar_example():
    x = np.random.RandomState(3).standard_normal((3, 4)).astype(np.float32)
    return ex.Example("add_scalar", build_add_scalar(),
                      {"": ([x], [(x + np.float32(1.5)).astype(np.float32)])})


def build_strings():
    graph = helper.make_graph(
        [helper.make_node("StringNormalizer", ["text"], ["kept"], case_change_action="UPPER",
                          stopwords=["drop"]),
         helper.make_node("Cast", ["numbers"], ["values"], to=TensorProto.FLOAT)],
        "strings",
        [ex.vi("text", TensorProto.STRING, ["N"]), ex.vi("numbers", TensorProto.STRING, ["K"])],
        [ex.vi("kept", TensorProto.STRING, ["M"]), ex.vi("values", TensorProto.FLOAT, ["K"])],
    )
    return ex.make_model(graph)


def strings_example():
    text = np.array(["hello", "Drop", "a b", "", "naïve"], dtype=object)
    numbers = np.array(["1.5", "-2e3", "INF", "7"], dtype=object)
    kept = np.array([t.upper() for t in text if t.lower() != "drop"], dtype=object)
    values = np.array([1.5, -2000.0, np.inf, 7.0], np.float32)
    return ex.Example("strings", build_strings(), {"": ([text, numbers], [kept, values])})


def test_models():
    return ex.example_models() + [identity_dtypes_example(), add_scalar_example(),
                                  strings_example()]


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: %s OUT_DIR\n" % argv[0])
        return 2
    examples = test_models()
    for example in examples:
        ex.write_example(argv[1], example)
    ex.write_ovms_config(argv[1], examples)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
