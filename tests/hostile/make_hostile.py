#!/usr/bin/python3
"""Writes the hostile-input suite's files (tests/hostile/hostile_test.cc runs them).

Usage: /usr/bin/python3 tests/hostile/make_hostile.py OUT_DIR

OUT_DIR/repo/             a model repository: well-formed models the suite serves and attacks with
                          requests, plus one folder per hostile model file (each must fail its own
                          load and leave every other model serving)
  counter, endless        the example models (deploy/make_example_models.py)
  doubling                y = x after M iterations of x = Concat(x, x): a carried value that
                          doubles every iteration (the memory bomb)
  fill                    y = ConstantOfShape(shape) (float 1.0): 8 request bytes may ask for
                          gigabytes
  ov_add                  OpenVINO IR: y = x + c, c a 2-float constant from the .bin
  <hostile models>        listed in OUT_DIR/expected_failures.tsv
OUT_DIR/expected_failures.tsv
                          <model> TAB <canonical code in the load error, "-" for a model-level
                          failure (config.pbtxt)> TAB <text the reason holds>
OUT_DIR/drop/<name>/model.onnx
                          hostile files the hot-reload test drops into the repository under traffic
Deterministic. Sizes: the largest file is 2 MB (sparse where the file system allows).
"""

import os
import shutil
import struct
import sys

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(_REPO_ROOT, "deploy"))

import make_example_models as ex  # noqa: E402  (applies the numpy alias shim before onnx)
import numpy as np  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

FLOAT, INT64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def model_bytes(graph, check=True):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


# ---- well-formed models -----------------------------------------------------------------------

def doubling():
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("Concat", ["x_in", "x_in"], ["x_out"], axis=0, name="double")],
        "doubling_body",
        [ex.vi("i", INT64, []), ex.vi("c_in", BOOL, []), ex.vi("x_in", FLOAT, ["N"])],
        [ex.vi("c_out", BOOL, []), ex.vi("x_out", FLOAT, ["N"])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "x"], ["y"], body=body, name="doubling_loop")],
        "doubling", [ex.vi("M", INT64, []), ex.vi("x", FLOAT, ["N"])],
        [ex.vi("y", FLOAT, ["N"])])
    return ex.make_model(graph).SerializeToString()


def fill():
    graph = helper.make_graph(
        [helper.make_node("ConstantOfShape", ["shape"], ["y"], name="fill",
                          value=helper.make_tensor("v", FLOAT, [1], [1.0]))],
        "fill", [ex.vi("shape", INT64, [1])], [ex.vi("y", FLOAT, ["K"])])
    return ex.make_model(graph).SerializeToString()


def ov_xml(shape="2", offset=0, size=8, dims="<dim>2</dim>", extra_attrs="", doctype=""):
    return (
        '<?xml version="1.0"?>\n' + doctype +
        '<net name="ov_add" version="11"><layers>'
        '<layer id="0" name="x" type="Parameter" version="opset1"><data shape="2" '
        'element_type="f32"/><output><port id="0" precision="FP32" names="x"><dim>2</dim></port>'
        '</output></layer>'
        '<layer id="1" name="c" type="Const" version="opset1"><data element_type="f32" '
        'shape="%s" offset="%s" size="%s"%s/><output><port id="0" precision="FP32" names="c">%s'
        '</port></output></layer>'
        '<layer id="2" name="add" type="Add" version="opset1"><input><port id="0" '
        'precision="FP32"><dim>2</dim></port><port id="1" precision="FP32">%s</port></input>'
        '<output><port id="2" precision="FP32" names="y"><dim>2</dim></port></output></layer>'
        '<layer id="3" name="y_out" type="Result" version="opset1"><input><port id="0" '
        'precision="FP32"><dim>2</dim></port></input></layer></layers><edges>'
        '<edge from-layer="0" from-port="0" to-layer="2" to-port="0"/>'
        '<edge from-layer="1" from-port="0" to-layer="2" to-port="1"/>'
        '<edge from-layer="2" from-port="2" to-layer="3" to-port="0"/></edges></net>\n'
    ) % (shape, offset, size, extra_attrs, dims, dims)


# ---- hostile ONNX files ------------------------------------------------------------------------

def initializer_model(tensor):
    graph = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "hostile", [],
                              [ex.vi("y", FLOAT, None)], initializer=[tensor])
    return model_bytes(graph)


def absurd_raw():
    t = TensorProto(name="w", data_type=FLOAT, dims=[1 << 20, 1 << 20], raw_data=b"\0" * 8)
    return initializer_model(t)


def absurd_typed():
    t = TensorProto(name="w", data_type=FLOAT, dims=[1 << 34], float_data=[1.0, 2.0])
    return initializer_model(t)


def absurd_constant():
    t = TensorProto(name="v", data_type=FLOAT, dims=[1 << 18, 1 << 18], raw_data=b"\0" * 4)
    graph = helper.make_graph([helper.make_node("Constant", [], ["y"], value=t)], "hostile", [],
                              [ex.vi("y", FLOAT, None)])
    return model_bytes(graph)


def external_data():
    t = TensorProto(name="w", data_type=FLOAT, dims=[4],
                    data_location=TensorProto.EXTERNAL)
    entry = t.external_data.add()
    entry.key, entry.value = "location", "../../../../etc/passwd"
    return initializer_model(t)


def cycle():
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "b"], ["a"], name="n1"),
         helper.make_node("Relu", ["a"], ["b"], name="n2")],
        "cycle", [ex.vi("x", FLOAT, [2])], [ex.vi("a", FLOAT, [2])])
    return model_bytes(graph)


def loop_arity():
    body = helper.make_graph([helper.make_node("Identity", ["c_in"], ["c_out"])], "body",
                             [ex.vi("i", INT64, []), ex.vi("c_in", BOOL, [])],
                             [ex.vi("c_out", BOOL, [])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "x"], ["y"], body=body, name="bad_loop")],
        "arity", [ex.vi("M", INT64, []), ex.vi("x", FLOAT, [2])], [ex.vi("y", FLOAT, [2])])
    return model_bytes(graph)


def _field(number, payload):
    """A length-delimited protobuf field."""
    key = bytes([(number << 3) | 2])
    n, varint = len(payload), b""
    while True:
        byte = n & 0x7F
        n >>= 7
        varint += bytes([byte | (0x80 if n else 0)])
        if not n:
            return key + varint + payload


def deep_nesting(depth=10000):
    """If nodes nested `depth` deep, encoded by hand (far past protobuf's recursion limit)."""
    graph = b""
    for _ in range(depth):
        attribute = _field(1, b"then_branch") + _field(6, graph) + bytes([20 << 3, 5])
        node = _field(4, b"If") + _field(5, attribute)
        graph = _field(1, node)
    opset = _field(1, b"") + bytes([2 << 3, 13])
    return bytes([1 << 3, 8]) + _field(7, graph) + _field(8, opset)


def hostile_onnx():
    good = fill()
    return {
        "absurd_raw": (absurd_raw(), "INVALID_ARGUMENT", "raw_data has 8 bytes"),
        "absurd_typed": (absurd_typed(), "INVALID_ARGUMENT", "the data fields hold 2 elements"),
        "absurd_constant": (absurd_constant(), "INVALID_ARGUMENT", "raw_data has 4 bytes"),
        "external_data": (external_data(), "UNIMPLEMENTED", "external tensor data"),
        "truncated": (good[: len(good) // 2], "INVALID_ARGUMENT", "not a valid ONNX ModelProto"),
        "garbage": (bytes(range(256)) * 16, "INVALID_ARGUMENT", "not a valid ONNX ModelProto"),
        "cycle": (cycle(), "INVALID_ARGUMENT", "cycle"),
        "loop_arity": (loop_arity(), "INVALID_ARGUMENT", "bad_loop"),
        "deep_nesting": (deep_nesting(), "INVALID_ARGUMENT", "not a valid ONNX ModelProto"),
    }


BILLION_LAUGHS = (
    '<!DOCTYPE net [<!ENTITY lol "lol">'
    + "".join('<!ENTITY lol%d "%s">' % (i, ("&lol%d;" % (i - 1) if i > 1 else "&lol;") * 10)
              for i in range(1, 10))
    + "]>\n")


def hostile_openvino():
    return {
        # offsets past the end of a 3-byte .bin
        "ov_truncated_bin": (ov_xml(), b"\0\0\0", "INVALID_ARGUMENT", "outside the .bin file"),
        # a constant claiming 2^40 floats in 8 bytes
        "ov_huge_const": (ov_xml(shape="1048576,1048576", size=8,
                                 dims="<dim>1048576</dim><dim>1048576</dim>"),
                          b"\0" * 8, "INVALID_ARGUMENT", "needs"),
        # entity expansion: pugixml does not expand DTD entities; the reference stays text
        "ov_entity": (ov_xml(shape="&lol9;", doctype=BILLION_LAUGHS), b"\0" * 8,
                      "INVALID_ARGUMENT", "shape"),
        # unparsable attributes
        "ov_bad_attrs": (ov_xml(offset="-5", size="99999999999999999999999"), b"\0" * 8,
                         "INVALID_ARGUMENT", "layer"),
    }


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: %s OUT_DIR\n" % argv[0])
        return 2
    out = argv[1]
    shutil.rmtree(out, ignore_errors=True)
    repo = os.path.join(out, "repo")
    write(os.path.join(repo, "counter", "1", "model.onnx"),
          ex.build_counter().SerializeToString())
    write(os.path.join(repo, "endless", "1", "model.onnx"),
          ex.build_endless().SerializeToString())
    write(os.path.join(repo, "doubling", "1", "model.onnx"), doubling())
    write(os.path.join(repo, "fill", "1", "model.onnx"), fill())
    write(os.path.join(repo, "ov_add", "1", "model.xml"), ov_xml())
    write(os.path.join(repo, "ov_add", "1", "model.bin"), struct.pack("<2f", 1.5, -2.0))

    expected = []
    for name, (data, code, text) in sorted(hostile_onnx().items()):
        write(os.path.join(repo, name, "1", "model.onnx"), data)
        expected.append((name, code, text))
    for name, (xml, weights, code, text) in sorted(hostile_openvino().items()):
        write(os.path.join(repo, name, "1", "model.xml"), xml)
        write(os.path.join(repo, name, "1", "model.bin"), weights)
        expected.append((name, code, text))
    # A 2 MB model file: over the suite's --max_model_file_bytes=1048576, refused unread.
    big = os.path.join(repo, "too_big", "1", "model.onnx")
    os.makedirs(os.path.dirname(big))
    with open(big, "wb") as f:
        f.truncate(2 << 20)
    expected.append(("too_big", "INVALID_ARGUMENT", "more than the limit of 1048576"))
    # A config.pbtxt that does not parse, and one over the size limit.
    write(os.path.join(repo, "bad_config", "1", "model.onnx"), fill())
    write(os.path.join(repo, "bad_config", "config.pbtxt"), "version_policy { nonsense")
    expected.append(("bad_config", "-", "config.pbtxt"))
    write(os.path.join(repo, "huge_config", "1", "model.onnx"), fill())
    write(os.path.join(repo, "huge_config", "config.pbtxt"), "# " + "x" * (2 << 20))
    expected.append(("huge_config", "-", "more than the limit"))
    with open(os.path.join(out, "expected_failures.tsv"), "w") as f:
        for row in expected:
            f.write("\t".join(row) + "\n")

    for name in ("absurd_raw", "absurd_constant", "deep_nesting"):
        write(os.path.join(out, "drop", name, "model.onnx"), hostile_onnx()[name][0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
