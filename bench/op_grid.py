#!/usr/bin/python3
"""The op grid (issue 27): every op type the kernel table registers (looprun --list_ops), as a
single-op ONNX model at two or three realistic shapes, timed through looprun and ONNX Runtime
(onnxruntime-node) with the same inputs and thread count, alternating (bench/compare_ort.py's
time_case), outputs compared (rtol 1e-3, atol 1e-5). Prints the table, the worst op and the
geometric mean, the ops ONNX Runtime refuses (listed, not counted) and the registered ops the
grid has no case for yet.

    /usr/bin/python3 bench/op_grid.py --looprun=build/bin/looprun \\
        --node-modules=/tmp/ort/node_modules [--threads=1] [--rounds=3] [--only=Conv,MatMul]

Shapes: elementwise and normalisation ops at a Loop body's [1, 64], a batch's [16, 1024] and a
convolution feature map's [1, 64, 56, 56]; products, convolutions, pools and recurrent ops at
the sizes of small and mid-size real networks. Exits 1 when an op's outputs differ from ONNX
Runtime's or looprun fails on one. A benchmark, not a test: CI does not run it.
"""
import argparse
import copy
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare_ort  # noqa: E402  (sets the numpy aliases onnx 1.12 needs)
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

sys.path.insert(0, os.path.join(HERE, "realmodels"))
import compare as realmodels_compare  # noqa: E402

OPSET = 17
ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64,
        np.dtype(np.int32): TensorProto.INT32, np.dtype(np.bool_): TensorProto.BOOL,
        np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8}
SMALL, MID, MAP = (1, 64), (16, 1024), (1, 64, 56, 56)
SHAPES = [("1x64", SMALL), ("16x1024", MID), ("1x64x56x56", MAP)]
RNG = np.random.default_rng(27)


def rand(shape, lo=-1.0, hi=1.0):
    return RNG.uniform(lo, hi, shape).astype(np.float32)


class Case:
    """One single-op model: `inputs` fed, `consts` as initializers, one node, typed outputs."""

    def __init__(self, op, label, inputs, outputs, attrs=None, consts=None, opset=OPSET):
        self.op, self.label, self.inputs, self.outputs = op, label, inputs, outputs
        self.attrs, self.consts, self.opset = attrs or {}, consts or [], opset

    def write(self, folder):
        data = os.path.join(folder, "test_data_set_0")
        os.makedirs(data, exist_ok=True)
        names = [n for n, _ in self.inputs] + [n for n, _ in self.consts]
        node = helper.make_node(self.op, names, [n for n, _ in self.outputs], **self.attrs)
        graph = helper.make_graph(
            [node], "op_grid",
            [helper.make_tensor_value_info(n, ELEM[a.dtype], a.shape) for n, a in self.inputs],
            [helper.make_tensor_value_info(n, t, None) for n, t in self.outputs],
            initializer=[numpy_helper.from_array(a, n) for n, a in self.consts])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 8
        with open(os.path.join(folder, "model.onnx"), "wb") as f:
            f.write(model.SerializeToString())
        for k, (n, a) in enumerate(self.inputs):
            with open(os.path.join(data, "input_%d.pb" % k), "wb") as f:
                f.write(numpy_helper.from_array(a, n).SerializeToString())


F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL

# Unary float ops: name -> (input range, attributes)
UNARY = {
    "Abs": (-1, 1), "Acos": (-0.99, 0.99), "Acosh": (1.01, 5), "Asin": (-0.99, 0.99),
    "Asinh": (-3, 3), "Atan": (-3, 3), "Atanh": (-0.99, 0.99), "Ceil": (-5, 5), "Cos": (-3, 3),
    "Cosh": (-3, 3), "Erf": (-3, 3), "Exp": (-5, 5), "Floor": (-5, 5), "Log": (0.01, 10),
    "Neg": (-1, 1), "Reciprocal": (0.1, 10), "Relu": (-1, 1), "Round": (-5, 5),
    "Sigmoid": (-5, 5), "Sign": (-1, 1), "Sin": (-3, 3), "Sinh": (-3, 3), "Softplus": (-5, 5),
    "Softsign": (-5, 5), "Sqrt": (0.01, 10), "Tan": (-1.2, 1.2), "Tanh": (-3, 3),
    "Mish": (-5, 5), "HardSwish": (-5, 5), "Identity": (-1, 1), "Dropout": (-1, 1),
    "Celu": (-3, 3), "Elu": (-3, 3), "Selu": (-3, 3), "LeakyRelu": (-3, 3),
    "HardSigmoid": (-5, 5), "ThresholdedRelu": (-3, 3), "Shrink": (-3, 3),
}
BINARY = ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mean", "Sum", "Mod"]
COMPARE = ["Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual"]
REDUCE = ["ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare",
          "ReduceLogSum", "ReduceLogSumExp", "ReduceL1", "ReduceL2"]


def cases_for(op):
    """The grid's cases of `op` (empty: none yet)."""
    out = []
    if op in UNARY:
        lo, hi = UNARY[op]
        for label, shape in SHAPES:
            out.append(Case(op, label, [("x", rand(shape, lo, hi))], [("y", F)],
                            opset=18 if op == "Mish" else OPSET))  # Mish is opset 18
        if op in ("Relu", "Abs", "Neg"):
            out.append(Case(op, "int64 16x1024" if op != "Relu" else "16x1024 int32",
                            [("x", RNG.integers(-100, 100, MID).astype(
                                np.int32 if op == "Relu" else np.int64))],
                            [("y", TensorProto.INT32 if op == "Relu" else I64)]))
    elif op == "Clip":
        for label, shape in SHAPES:
            out.append(Case(op, label, [("x", rand(shape, -3, 3))], [("y", F)],
                            consts=[("lo", np.array(-1, np.float32)),
                                    ("hi", np.array(1, np.float32))]))
    elif op in BINARY or op == "PRelu":
        for label, shape in SHAPES:
            b_shape = shape if op != "PRelu" else (shape[1],) + (1,) * (len(shape) - 2)
            a, b = rand(shape, 0.5, 2), rand(b_shape, 0.5, 2)
            attrs = {"fmod": 1} if op == "Mod" else {}
            out.append(Case(op, label, [("a", a), ("b", b)], [("y", F)], attrs))
        if op in ("Add", "Mul", "Sub", "Max", "Min"):
            out.append(Case(op, "16x1024 bcast [1024]", [("a", rand(MID)), ("b", rand(MID[1:]))],
                            [("y", F)]))
            out.append(Case(op, "int64 16x1024", [
                ("a", RNG.integers(-50, 50, MID).astype(np.int64)),
                ("b", RNG.integers(-50, 50, MID).astype(np.int64))], [("y", I64)]))
    elif op in COMPARE:
        for label, shape in SHAPES[:2]:
            out.append(Case(op, label, [("a", rand(shape)), ("b", rand(shape))], [("y", B)]))
        out.append(Case(op, "int64 16x1024", [
            ("a", RNG.integers(0, 4, MID).astype(np.int64)),
            ("b", RNG.integers(0, 4, MID).astype(np.int64))], [("y", B)]))
    elif op in ("And", "Or", "Xor"):
        for label, shape in SHAPES[:2]:
            out.append(Case(op, label, [("a", RNG.random(shape) < 0.5),
                                        ("b", RNG.random(shape) < 0.5)], [("y", B)]))
    elif op == "Not":
        for label, shape in SHAPES[:2]:
            out.append(Case(op, label, [("a", RNG.random(shape) < 0.5)], [("y", B)]))
    elif op in ("IsNaN", "IsInf"):
        for label, shape in SHAPES[:2]:
            x = rand(shape)
            x.reshape(-1)[::7] = np.nan if op == "IsNaN" else np.inf
            out.append(Case(op, label, [("x", x)], [("y", B)]))
    elif op == "Where":
        for label, shape in SHAPES:
            out.append(Case(op, label, [("c", RNG.random(shape) < 0.5), ("a", rand(shape)),
                                        ("b", rand(shape))], [("y", F)]))
    elif op in REDUCE or op == "ReduceSum":
        for label, shape in SHAPES:
            if op == "ReduceSum":
                out.append(Case(op, label + " last axis", [("x", rand(shape, 0.1, 1))],
                                [("y", F)], consts=[("axes", np.array([-1], np.int64))]))
            else:
                out.append(Case(op, label + " last axis", [("x", rand(shape, 0.1, 1))], [("y", F)],
                                {"axes": [-1]}))
    elif op in ("ArgMax", "ArgMin"):
        for label, shape in SHAPES:
            out.append(Case(op, label + " last axis", [("x", rand(shape))], [("y", I64)],
                            {"axis": -1}))
    elif op in ("Softmax", "LogSoftmax", "Hardmax"):
        for label, shape in SHAPES[:2] + [("8x12x128x128 attention", (8, 12, 128, 128))]:
            out.append(Case(op, label, [("x", rand(shape, -4, 4))], [("y", F)], {"axis": -1}))
    elif op == "CumSum":
        for label, shape in SHAPES[:2]:
            out.append(Case(op, label, [("x", rand(shape))], [("y", F)],
                            consts=[("axis", np.array(-1, np.int64))]))
    elif op == "TopK":
        for label, shape, k in (("1x1000 k5", (1, 1000), 5), ("16x1024 k10", MID, 10)):
            out.append(Case(op, label, [("x", rand(shape))], [("v", F), ("i", I64)],
                            consts=[("k", np.array([k], np.int64))]))
    elif op == "MatMul":
        for m, k, n in ((1, 256, 256), (16, 512, 512), (128, 768, 768)):
            out.append(Case(op, "%dx%d @ %dx%d const" % (m, k, k, n), [("a", rand((m, k)))],
                            [("y", F)], consts=[("b", rand((k, n), -0.1, 0.1))]))
        out.append(Case(op, "batched 8x64x64 @ 8x64x64", [("a", rand((8, 64, 64))),
                                                          ("b", rand((8, 64, 64)))], [("y", F)]))
    elif op == "Gemm":
        for m, k, n in ((1, 256, 256), (16, 512, 512), (128, 768, 768)):
            out.append(Case(op, "%dx%d, W %dx%d transB" % (m, k, n, k), [("a", rand((m, k)))],
                            [("y", F)], {"transB": 1},
                            consts=[("b", rand((n, k), -0.1, 0.1)), ("c", rand((n,)))]))
    elif op == "Conv":
        for label, x, w, attrs in (
                ("3x3 32->32 on 56x56", (1, 32, 56, 56), (32, 32, 3, 3), {"pads": [1] * 4}),
                ("3x3 s2 3->32 on 224x224", (1, 3, 224, 224), (32, 3, 3, 3),
                 {"pads": [1] * 4, "strides": [2, 2]}),
                ("1x1 64->128 on 28x28", (1, 64, 28, 28), (128, 64, 1, 1), {}),
                ("depthwise 3x3 96 on 56x56", (1, 96, 56, 56), (96, 1, 3, 3),
                 {"pads": [1] * 4, "group": 96})):
            out.append(Case(op, label, [("x", rand(x))], [("y", F)], attrs,
                            consts=[("w", rand(w, -0.2, 0.2)), ("b", rand((w[0],)))]))
    elif op == "ConvTranspose":
        for label, x, w in (("2x2 s2 64->32 on 28x28", (1, 64, 28, 28), (64, 32, 2, 2)),
                            ("2x2 s2 24->24 on 80x80", (1, 24, 80, 80), (24, 24, 2, 2))):
            out.append(Case(op, label, [("x", rand(x))], [("y", F)], {"strides": [2, 2]},
                            consts=[("w", rand(w, -0.2, 0.2)), ("b", rand((w[1],)))]))
    elif op in ("MaxPool", "AveragePool", "LpPool"):
        for label, x, attrs in (("3x3 s2 on 64x112x112", (1, 64, 112, 112),
                                 {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1] * 4}),
                                ("2x2 s2 on 128x56x56", (1, 128, 56, 56),
                                 {"kernel_shape": [2, 2], "strides": [2, 2]})):
            out.append(Case(op, label, [("x", rand(x))], [("y", F)], attrs))
    elif op in ("GlobalAveragePool", "GlobalMaxPool"):
        for label, x in (("64x56x56", MAP), ("512x7x7", (1, 512, 7, 7))):
            out.append(Case(op, label, [("x", rand(x))], [("y", F)]))
    elif op == "BatchNormalization":
        for label, x in (("1x64x56x56", MAP), ("16x1024 (N, C)", MID)):
            c = x[1]
            out.append(Case(op, label, [("x", rand(x))], [("y", F)], consts=[
                ("s", rand((c,), 0.5, 1.5)), ("b", rand((c,))), ("m", rand((c,))),
                ("v", rand((c,), 0.5, 2))]))
    elif op == "InstanceNormalization":
        for label, x in (("1x64x56x56", MAP), ("4x32x32x32", (4, 32, 32, 32))):
            c = x[1]
            out.append(Case(op, label, [("x", rand(x))], [("y", F)],
                            consts=[("s", rand((c,), 0.5, 1.5)), ("b", rand((c,)))]))
    elif op == "LayerNormalization":
        for label, x in (("1x64", SMALL), ("16x1024", MID), ("8x128x768", (8, 128, 768))):
            c = x[-1]
            out.append(Case(op, label, [("x", rand(x))], [("y", F)], {"axis": -1},
                            consts=[("s", rand((c,), 0.5, 1.5)), ("b", rand((c,)))]))
    elif op == "LRN":
        out.append(Case(op, "size 5 on 1x64x56x56", [("x", rand(MAP))], [("y", F)], {"size": 5}))
    elif op == "MeanVarianceNormalization":
        out.append(Case(op, "1x64x56x56", [("x", rand(MAP))], [("y", F)]))
    elif op == "Resize":
        for label, x, mode in (("nearest x2 on 1x64x56x56", MAP, "nearest"),
                               ("linear x2 on 1x64x56x56", MAP, "linear"),
                               ("nearest x2 on 1x96x20x20", (1, 96, 20, 20), "nearest")):
            out.append(Case(op, label, [("x", rand(x))], [("y", F)], {"mode": mode},
                            consts=[("roi", np.zeros(0, np.float32)),
                                    ("scales", np.array([1, 1, 2, 2], np.float32))]))
    elif op == "Transpose":
        for label, x, perm in (("16x1024 -> 1024x16", MID, [1, 0]),
                               ("1x64x56x56 NCHW->NHWC", MAP, [0, 2, 3, 1]),
                               ("8x128x12x64 heads", (8, 128, 12, 64), [0, 2, 1, 3])):
            out.append(Case(op, label, [("x", rand(x))], [("y", F)], {"perm": perm}))
    elif op == "Reshape":
        out.append(Case(op, "1x64x56x56 -> 64x3136", [("x", rand(MAP))], [("y", F)],
                        consts=[("s", np.array([64, -1], np.int64))]))
    elif op == "Flatten":
        out.append(Case(op, "1x64x56x56", [("x", rand(MAP))], [("y", F)], {"axis": 1}))
    elif op in ("Squeeze", "Unsqueeze"):
        x = rand((16, 1, 1024)) if op == "Squeeze" else rand(MID)
        out.append(Case(op, "16x1024", [("x", x)], [("y", F)],
                        consts=[("axes", np.array([1], np.int64))]))
    elif op == "Concat":
        for label, shape, axis in (("2 x 1x64 axis 1", SMALL, 1), ("2 x 16x1024 axis 0", MID, 0),
                                   ("2 x 1x64x56x56 axis 1", MAP, 1)):
            out.append(Case(op, label, [("a", rand(shape)), ("b", rand(shape))], [("y", F)],
                            {"axis": axis}))
    elif op == "Split":
        for label, shape in (("16x1024 in 2 on axis 1", MID), ("1x64x56x56 in 2 on axis 1", MAP)):
            out.append(Case(op, label, [("x", rand(shape))], [("y0", F), ("y1", F)],
                            {"axis": 1}))
    elif op == "Slice":
        for label, shape in (("16x1024 [:, 256:768]", MID), ("1x64x56x56 [:, :, 1:55, 1:55]",
                                                              MAP)):
            if len(shape) == 2:
                consts = [("st", np.array([256], np.int64)), ("en", np.array([768], np.int64)),
                          ("ax", np.array([1], np.int64))]
            else:
                consts = [("st", np.array([1, 1], np.int64)), ("en", np.array([55, 55], np.int64)),
                          ("ax", np.array([2, 3], np.int64))]
            out.append(Case(op, label, [("x", rand(shape))], [("y", F)], consts=consts))
    elif op == "Gather":
        for label, table, n in (("embedding 30000x256, 128 ids", (30000, 256), 128),
                                ("16x1024 rows, 8 ids", MID, 8)):
            out.append(Case(op, label, [("t", rand(table)),
                                        ("i", RNG.integers(0, table[0], (n,)).astype(np.int64))],
                            [("y", F)], {"axis": 0}))
    elif op == "GatherElements":
        out.append(Case(op, "16x1024 axis 1", [("x", rand(MID)),
                                               ("i", RNG.integers(0, 1024, MID).astype(np.int64))],
                        [("y", F)], {"axis": 1}))
    elif op == "GatherND":
        out.append(Case(op, "16x1024 by 64 index pairs", [
            ("x", rand(MID)), ("i", np.stack([RNG.integers(0, 16, 64), RNG.integers(0, 1024, 64)],
                                             1).astype(np.int64))], [("y", F)]))
    elif op == "Expand":
        out.append(Case(op, "1x1024 -> 16x1024", [("x", rand((1, 1024)))], [("y", F)],
                        consts=[("s", np.array([16, 1024], np.int64))]))
    elif op == "Tile":
        out.append(Case(op, "1x64x28x28 x (1,2,2,2)", [("x", rand((1, 64, 28, 28)))], [("y", F)],
                        consts=[("r", np.array([1, 2, 2, 2], np.int64))]))
    elif op == "Pad":
        for label, shape in (("1x64x56x56 by 1", MAP), ("16x1024 by 8", MID)):
            pads = [0, 0, 1, 1, 0, 0, 1, 1] if len(shape) == 4 else [0, 8, 0, 8]
            out.append(Case(op, label, [("x", rand(shape))], [("y", F)],
                            consts=[("p", np.array(pads, np.int64))]))
    elif op in ("DepthToSpace", "SpaceToDepth"):
        x = (1, 64, 56, 56) if op == "SpaceToDepth" else (1, 256, 28, 28)
        out.append(Case(op, "blocksize 2 on %s" % "x".join(map(str, x)), [("x", rand(x))],
                        [("y", F)], {"blocksize": 2}))
    elif op in ("Cast", "CastLike"):
        for label, shape in SHAPES[:2]:
            if op == "Cast":
                out.append(Case(op, label + " float->int64", [("x", rand(shape, -100, 100))],
                                [("y", I64)], {"to": I64}))
            else:
                out.append(Case(op, label + " float->int64", [("x", rand(shape, -100, 100))],
                                [("y", I64)], consts=[("like", np.zeros(1, np.int64))]))
    elif op in ("Shape", "Size"):
        out.append(Case(op, "1x64x56x56", [("x", rand(MAP))], [("y", I64)]))
    elif op == "Trilu":
        out.append(Case(op, "8x128x128", [("x", rand((8, 128, 128)))], [("y", F)]))
    elif op == "OneHot":
        out.append(Case(op, "128 ids depth 1000", [("i", RNG.integers(0, 1000, 128).astype(
            np.int64))], [("y", F)], consts=[("d", np.array(1000, np.int64)),
                                             ("v", np.array([0, 1], np.float32))]))
    elif op == "NonZero":
        out.append(Case(op, "16x1024", [("x", (rand(MID) > 0.5).astype(np.float32))],
                        [("y", I64)]))
    elif op == "Einsum":
        out.append(Case(op, "bij,bjk->bik 8x64x64", [("a", rand((8, 64, 64))),
                                                     ("b", rand((8, 64, 64)))], [("y", F)],
                        {"equation": "bij,bjk->bik"}))
        out.append(Case(op, "bhqd->bqhd 1x12x128x64", [("a", rand((1, 12, 128, 64)))], [("y", F)],
                        {"equation": "bhqd->bqhd"}))
        out.append(Case(op, "bij->bj 16x64x256", [("a", rand((16, 64, 256)))], [("y", F)],
                        {"equation": "bij->bj"}))
    elif op in ("LSTM", "GRU", "RNN"):
        gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
        for label, seq, batch, inp, hid in (("seq 32 b1 in 64 h 64", 32, 1, 64, 64),
                                             ("seq 16 b16 in 256 h 256", 16, 16, 256, 256)):
            out.append(Case(op, label, [("x", rand((seq, batch, inp)))], [("y", F)],
                            {"hidden_size": hid}, consts=[
                                ("w", rand((1, gates * hid, inp), -0.1, 0.1)),
                                ("r", rand((1, gates * hid, hid), -0.1, 0.1)),
                                ("b", rand((1, 2 * gates * hid), -0.1, 0.1))]))
    else:
        out = more_cases_for(op)
    return out


U8, I8, I32 = TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32


def more_cases_for(op):
    """Generators, scatters, detection, signal, quantized and loss ops."""
    out = []
    if op == "Compress":
        out.append(Case(op, "16x1024 rows by mask", [("x", rand(MID)),
                                                     ("c", RNG.random(16) < 0.5)], [("y", F)],
                        {"axis": 0}))
    elif op == "ConstantOfShape":
        out.append(Case(op, "16x1024", [("s", np.array(MID, np.int64))], [("y", F)],
                        {"value": numpy_helper.from_array(np.array([0.5], np.float32))}))
    elif op == "EyeLike":
        out.append(Case(op, "256x256", [("x", rand((256, 256)))], [("y", F)]))
    elif op == "Range":
        out.append(Case(op, "0..4096", [("a", np.array(0, np.int64)),
                                        ("b", np.array(4096, np.int64)),
                                        ("d", np.array(1, np.int64))], [("y", I64)]))
    elif op == "ReverseSequence":
        out.append(Case(op, "seq 64 x batch 16 x 256", [
            ("x", rand((64, 16, 256))), ("l", RNG.integers(1, 65, 16).astype(np.int64))],
            [("y", F)], {"batch_axis": 1, "time_axis": 0}))
    elif op in ("ScatterElements", "Scatter"):
        idx = np.stack([RNG.permutation(1024)[:256] for _ in range(16)]).astype(np.int64)
        out.append(Case(op, "16x1024, 16x256 updates on axis 1", [
            ("x", rand(MID)), ("i", idx), ("u", rand((16, 256)))], [("y", F)], {"axis": 1},
            opset=OPSET if op == "ScatterElements" else 10))
    elif op == "ScatterND":
        out.append(Case(op, "16x1024, 8 rows", [
            ("x", rand(MID)), ("i", RNG.permutation(16)[:8].reshape(8, 1).astype(np.int64)),
            ("u", rand((8, 1024)))], [("y", F)]))
    elif op == "Unique":
        out.append(Case(op, "4096 int64 in [0, 512)", [
            ("x", RNG.integers(0, 512, 4096).astype(np.int64))],
            [("y", I64), ("idx", I64), ("inv", I64), ("cnt", I64)], {"sorted": 1}))
    elif op == "Det":
        out.append(Case(op, "64 x 8x8", [("x", rand((64, 8, 8)))], [("y", F)]))
    elif op == "NonMaxSuppression":
        xy = RNG.uniform(0, 600, (1, 1000, 2))
        wh = RNG.uniform(10, 100, (1, 1000, 2))
        boxes = np.concatenate([xy, xy + wh], 2).astype(np.float32)
        out.append(Case(op, "1000 boxes, 1 class, top 100", [
            ("b", boxes), ("s", RNG.random((1, 1, 1000)).astype(np.float32))], [("y", I64)],
            consts=[("k", np.array([100], np.int64)), ("iou", np.array([0.5], np.float32)),
                    ("th", np.array([0.05], np.float32))]))
    elif op == "RoiAlign":
        xy = RNG.uniform(0, 40, (64, 2))
        rois = np.concatenate([xy, xy + RNG.uniform(4, 16, (64, 2))], 1).astype(np.float32)
        out.append(Case(op, "64 rois 7x7 on 1x256x56x56", [
            ("x", rand((1, 256, 56, 56))), ("r", rois), ("bi", np.zeros(64, np.int64))],
            [("y", F)], {"output_height": 7, "output_width": 7, "sampling_ratio": 2}, opset=16))
    elif op == "GridSample":
        out.append(Case(op, "1x32x64x64 on a 64x64 grid", [
            ("x", rand((1, 32, 64, 64))), ("g", rand((1, 64, 64, 2), -1, 1))], [("y", F)],
            opset=16))
    elif op in ("HannWindow", "HammingWindow", "BlackmanWindow"):
        out.append(Case(op, "400", [("n", np.array(400, np.int64))], [("y", F)]))
    elif op == "MelWeightMatrix":
        out.append(Case(op, "80 mel, 512-point FFT, 16 kHz", [
            ("m", np.array(80, np.int64)), ("d", np.array(512, np.int64)),
            ("sr", np.array(16000, np.int64)), ("lo", np.array(20, np.float32)),
            ("hi", np.array(8000, np.float32))], [("y", F)]))
    elif op == "DFT":
        out.append(Case(op, "16 x 512 real, onesided", [("x", rand((16, 512, 1)))], [("y", F)],
                        {"onesided": 1}))
    elif op == "STFT":
        out.append(Case(op, "1 s of 16 kHz, frame 400 step 160", [
            ("x", rand((1, 16000, 1)))], [("y", F)],
            consts=[("step", np.array(160, np.int64)),
                    ("w", np.hanning(400).astype(np.float32)),
                    ("len", np.array(400, np.int64))]))
    elif op == "QuantizeLinear":
        out.append(Case(op, "16x1024 to uint8", [("x", rand(MID))], [("y", U8)],
                        consts=[("s", np.array(0.01, np.float32)), ("z", np.array(128, np.uint8))]))
    elif op == "DequantizeLinear":
        out.append(Case(op, "16x1024 uint8", [("x", RNG.integers(0, 255, MID).astype(np.uint8))],
                        [("y", F)], consts=[("s", np.array(0.01, np.float32)),
                                            ("z", np.array(128, np.uint8))]))
    elif op == "DynamicQuantizeLinear":
        out.append(Case(op, "16x1024", [("x", rand(MID))], [("y", U8), ("s", F), ("z", U8)]))
    elif op == "MatMulInteger":
        out.append(Case(op, "16x512 u8 @ 512x512 i8", [
            ("a", RNG.integers(0, 255, (16, 512)).astype(np.uint8))], [("y", I32)],
            consts=[("b", RNG.integers(-127, 127, (512, 512)).astype(np.int8))]))
    elif op == "QLinearMatMul":
        out.append(Case(op, "16x512 u8 @ 512x512 u8", [
            ("a", RNG.integers(0, 255, (16, 512)).astype(np.uint8))], [("y", U8)], consts=[
            ("as", np.array(0.02, np.float32)), ("az", np.array(128, np.uint8)),
            ("b", RNG.integers(0, 255, (512, 512)).astype(np.uint8)),
            ("bs", np.array(0.02, np.float32)), ("bz", np.array(128, np.uint8)),
            ("ys", np.array(2.0, np.float32)), ("yz", np.array(128, np.uint8))]))
    elif op == "ConvInteger":
        out.append(Case(op, "3x3 32->32 on 56x56 u8", [
            ("x", RNG.integers(0, 255, (1, 32, 56, 56)).astype(np.uint8))], [("y", I32)],
            {"pads": [1] * 4}, consts=[("w", RNG.integers(0, 255, (32, 32, 3, 3)).astype(
                np.uint8))]))
    elif op == "QLinearConv":
        out.append(Case(op, "3x3 32->32 on 56x56 u8", [
            ("x", RNG.integers(0, 255, (1, 32, 56, 56)).astype(np.uint8))], [("y", U8)],
            {"pads": [1] * 4}, consts=[
                ("xs", np.array(0.02, np.float32)), ("xz", np.array(128, np.uint8)),
                ("w", RNG.integers(0, 255, (32, 32, 3, 3)).astype(np.uint8)),
                ("ws", np.array(0.02, np.float32)), ("wz", np.array(128, np.uint8)),
                ("ys", np.array(4.0, np.float32)), ("yz", np.array(128, np.uint8))]))
    elif op == "BitShift":
        out.append(Case(op, "16x1024 uint8 left", [
            ("x", RNG.integers(0, 16, MID).astype(np.uint8)),
            ("n", RNG.integers(0, 4, MID).astype(np.uint8))], [("y", U8)],
            {"direction": "LEFT"}))
    elif op == "SoftmaxCrossEntropyLoss":
        out.append(Case(op, "16 x 1000 classes", [
            ("x", rand((16, 1000))), ("t", RNG.integers(0, 1000, 16).astype(np.int64))],
            [("y", F)]))
    elif op == "NegativeLogLikelihoodLoss":
        out.append(Case(op, "16 x 1000 classes", [
            ("x", rand((16, 1000))), ("t", RNG.integers(0, 1000, 16).astype(np.int64))],
            [("y", F)]))
    elif op == "Upsample":
        out.append(Case(op, "nearest x2 on 1x64x56x56 (opset 9)", [("x", rand(MAP))], [("y", F)],
                        {"mode": "nearest"},
                        consts=[("scales", np.array([1, 1, 2, 2], np.float32))], opset=9))
    elif op == "MaxUnpool":
        x = rand((1, 32, 28, 28))
        idx = (np.arange(28 * 28).reshape(28, 28) // 28 * 112 + np.arange(28) * 2)
        idx = np.broadcast_to(idx, (1, 32, 28, 28)) + (np.arange(32) * 56 * 56).reshape(
            1, 32, 1, 1)
        out.append(Case(op, "2x2 s2 to 1x32x56x56", [("x", x), ("i", idx.astype(np.int64))],
                        [("y", F)], {"kernel_shape": [2, 2], "strides": [2, 2]}))
    return out


def list_ops(looprun):
    proc = subprocess.run([looprun, "--list_ops"], capture_output=True, text=True, check=True)
    return [line.strip() for line in proc.stdout.splitlines() if line.strip()]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--looprun", required=True)
    p.add_argument("--node-modules", required=True, help="node_modules with onnxruntime-node")
    p.add_argument("--threads", default="1")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeat", type=int, default=0, help="timed runs per round (default ~0.3 s)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--only", default="", help="comma-separated op types")
    args = p.parse_args()
    args.loop_threads, args.old_policy, args.baseline_looprun = "adaptive", False, ""
    args.cpu_time = False
    registered = list_ops(args.looprun)
    # The engine's own fused ops (_Name) and the OpenVINO importer's (ov:Name) are no ONNX ops.
    internal = [o for o in registered if o.startswith("_") or ":" in o]
    ops = [o for o in registered if o not in internal]
    if args.only:
        ops = [o for o in ops if o in args.only.split(",")]
    env_ort = dict(os.environ, NODE_PATH=os.path.abspath(args.node_modules))
    env_ours = dict(os.environ)
    cpu, cpu_isa = compare_ort.cpu_description()
    load_start = " ".join(open("/proc/loadavg").read().split()[:3])
    rows, failed, ort_lacks, no_case = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        # Each engine's per-call floor: Identity on one float, through the same harness. ORT's
        # (the Node binding's run() and its output tensors) is paid by every case; a case whose
        # ORT time is within 3x of it measures the binding more than the op.
        floor_case = Case("Identity", "[1]", [("x", rand((1,)))], [("y", F)])
        floor_case.write(os.path.join(tmp, "floor"))
        realmodels_compare.write_spec(os.path.join(tmp, "floor"), os.path.join(tmp, "floor.json"))
        floor_args = copy.copy(args)
        floor_args.repeat = 200
        floor_ours, floor_ort, _, _, _, _ = compare_ort.time_case(
            "floor", os.path.join(tmp, "floor"), floor_args, 1, tmp, env_ours, env_ort)
        for threads in [int(t) for t in args.threads.split(",")]:
            for op in ops:
                cases = cases_for(op)
                if not cases:
                    if threads == int(args.threads.split(",")[0]):
                        no_case.append(op)
                    continue
                for k, case in enumerate(cases):
                    name = "%s_%d" % (op, k)
                    folder = os.path.join(tmp, name)
                    if not os.path.exists(folder):
                        case.write(folder)
                        realmodels_compare.write_spec(folder, os.path.join(tmp, name + ".json"))
                    case_args = copy.copy(args)
                    try:
                        case_args.repeat = args.repeat or realmodels_compare.pick_repeat(
                            args.looprun, folder, threads, env_ours)
                        o, t, agree, ok, _, _ = compare_ort.time_case(
                            name, folder, case_args, threads, tmp, env_ours, env_ort)
                    except (RuntimeError, OSError, KeyError, ValueError) as e:
                        text = str(e)
                        if text.startswith("ort_time.js"):
                            ort_lacks.append("%s (%s): %s" % (op, case.label, text[-160:]))
                        else:
                            failed.append("%s (%s, %d threads): %s" % (op, case.label, threads,
                                                                       text[-200:]))
                        print("%-22s %-32s FAILED: %s" % (op, case.label, text[-200:]),
                              file=sys.stderr, flush=True)
                        continue
                    if not ok:
                        failed.append("%s (%s, %d threads): outputs differ" % (op, case.label,
                                                                               threads))
                    rows.append((op, case.label, threads, o, t, t / o, agree))
                    print("%-22s %-32s %d thr  loopserve %10.1f us  ORT %10.1f us  %5.2fx  %s" %
                          (op, case.label, threads, o, t, t / o, agree), file=sys.stderr,
                          flush=True)
    print("\nCPU: %s; vector ISA: %s; ONNX Runtime %s; load average at the start %s, at the end "
          "%s; %d rounds, alternating; medians in us; speedup = ONNX Runtime / loopserve" %
          (cpu, cpu_isa, realmodels_compare.suite.ORT_PACKAGE, load_start,
           " ".join(open("/proc/loadavg").read().split()[:3]), args.rounds))
    print("Per-call floor (Identity on one float, 1 thread): loopserve %.2f us, ONNX Runtime "
          "%.1f us (onnxruntime-node's run(): every ORT time below includes it; * marks a case "
          "whose ORT time is within 3x of it, where the speedup measures the binding more than "
          "the op)" % (floor_ours, floor_ort))
    print("\n| op | shape | threads | loopserve (us) | ONNX Runtime (us) | speedup | outputs |")
    print("|---|---|---|---|---|---|---|")
    for op, label, threads, o, t, ratio, agree in rows:
        print("| %s | %s | %d | %.1f | %.1f | %.2fx%s | %s |" % (
            op, label, threads, o, t, ratio, " *" if t < 3 * floor_ort else "", agree))
    print()
    for threads in sorted({r[2] for r in rows}):
        ratios = [(r[5], "%s %s" % (r[0], r[1])) for r in rows if r[2] == threads]
        worst = min(ratios)
        bound = [r for r in rows if r[2] == threads and r[4] >= 3 * floor_ort]
        print("%d thread%s: %d cases with ORT above 3x its per-call floor: geometric mean %.2fx"
              % (threads, "" if threads == 1 else "s", len(bound),
                 compare_ort.geomean([r[5] for r in bound])))
        print("%d thread%s: %d cases over %d ops, worst %.2fx (%s), geometric mean %.2fx, %d "
              "below 0.7x: %s" % (threads, "" if threads == 1 else "s", len(ratios),
                                  len({r[0] for r in rows if r[2] == threads}), worst[0],
                                  worst[1], compare_ort.geomean([r[0] for r in ratios]),
                                  sum(1 for r in ratios if r[0] < 0.7),
                                  ", ".join("%s %.2fx" % (n, r) for r, n in sorted(ratios)
                                            if r < 0.7) or "none"))
    if ort_lacks:
        print("\nONNX Runtime refuses (listed, not counted):\n  " + "\n  ".join(ort_lacks))
    print("\nInternal ops (fused by the engine, or the OpenVINO importer's; no ONNX op, not in the "
          "grid): %s" % " ".join(internal))
    print("\nRegistered ops without a grid case yet (%d): %s" % (len(no_case), " ".join(no_case)))
    if failed:
        print("\nfailed or outputs differ:\n  " + "\n  ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
