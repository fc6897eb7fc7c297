"""Writes the tiny ONNX models server_unit_test runs through the real engine.

  counter.onnx: inputs M (int64 scalar trip count) and x (float32 [2]); a Loop (opset 13) adds 1 to
                x M times and returns it as y. M = 2^63-1 makes it run until a deadline,
                cancellation or iteration cap stops it.
  matmul.onnx:  y = Relu(x @ W), x float32 [N, 64], W a 64x64 constant: its oneDNN primitive is
                made on the first run of each N (the warm-up tests).
  string_counter.onnx: counter.onnx whose trip count comes as a string: s (string [1], a decimal
                number) -> Cast to int64 -> Reshape to a scalar -> M (the BYTES warm-up tests).

Usage: /usr/bin/python3 make_server_test_models.py OUT_DIR
"""
import os
import sys

import numpy as np

# onnx 1.12 still refers to these removed numpy aliases.
np.float = float
np.int = int
np.bool = bool
np.object = object

import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402


def counter_model():
    one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["x_in", "one"], ["x_out"]),
        ],
        "counter_body",
        [
            helper.make_tensor_value_info("iter", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x_in", TensorProto.FLOAT, [2]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x_out", TensorProto.FLOAT, [2]),
        ],
        [one],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "x"], ["y"], name="count_loop", body=body)],
        "counter",
        [
            helper.make_tensor_value_info("M", TensorProto.INT64, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.checker.check_model(model)
    return model


def matmul_model():
    rng = np.random.RandomState(5)
    w = helper.make_tensor("W", TensorProto.FLOAT, [64, 64],
                           rng.uniform(-1, 1, (64, 64)).astype(np.float32).flatten().tolist())
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Relu", ["xw"], ["y"])],
        "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 64])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.checker.check_model(model)
    return model


def string_counter_model():
    counter = counter_model()
    scalar = helper.make_tensor("scalar", TensorProto.INT64, [0], [])
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["s"], ["m1"], to=TensorProto.INT64),
            helper.make_node("Reshape", ["m1", "scalar"], ["M"]),
            counter.graph.node[0],
        ],
        "string_counter",
        [
            helper.make_tensor_value_info("s", TensorProto.STRING, [1]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [scalar],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.checker.check_model(model)
    return model


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    onnx.save(counter_model(), os.path.join(out_dir, "counter.onnx"))
    onnx.save(matmul_model(), os.path.join(out_dir, "matmul.onnx"))
    onnx.save(string_counter_model(), os.path.join(out_dir, "string_counter.onnx"))


if __name__ == "__main__":
    main()
