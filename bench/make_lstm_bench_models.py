#!/usr/bin/python3
"""Writes the LSTM benchmark models (hidden 256, input 256, 64 steps, batch 1 and 16), one network
in two formats with the same fixed-seed weights:

    OUT/lstm_onnx_b<B>/model.onnx                 ONNX LSTM (layout 0); Unsqueeze/Squeeze of the
                                                  direction axis so both formats share I/O
    OUT/lstm_ti_b<B>/model.xml, model.bin         OpenVINO IR: a TensorIterator over the 64 steps
                                                  whose body is Squeeze -> LSTMCell-4 -> Unsqueeze,
                                                  the shape Model Optimizer gives RNN models
    OUT/lstm_ti_b<B>/peer.onnx                    the ONNX model above, which ONNX Runtime runs
                                                  as the TensorIterator's peer
    OUT/<name>/test_data_set_0/input_<k>.pb       X [64, B, 256], initial h and c [B, 256]

Both give the same three outputs in the same order: all hidden states [64, B, 256], the last
hidden state and the last cell state [B, 256] (the ONNX model squeezes its direction axis).
bench/compare_ort.py times each folder against ONNX Runtime. Run with Debian's /usr/bin/python3:

    /usr/bin/python3 make_lstm_bench_models.py OUT_DIR

With --family it writes instead the ONNX form over a family of shapes, lstm_h<H>_b<B> for hidden
(= input) 128, 256, 512 and batch 1, 4, 16, 32 (64 steps), each with its own fixed-seed weights:

    /usr/bin/python3 make_lstm_bench_models.py --family OUT_DIR
"""
import os
import sys
from xml.sax.saxutils import quoteattr

import numpy as np

np.float, np.int, np.bool, np.object = float, int, bool, object  # noqa: E702
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

STEPS, INPUT, HIDDEN = 64, 256, 256
RNG = np.random.default_rng(11)


def onnx_lstm(batch, W, R, B, hidden=HIDDEN, inputs=INPUT):
    """ONNX LSTM, gate order iofc; outputs hs [T, B, H], h [B, H], c [B, H]."""
    f = TensorProto.FLOAT
    HIDDEN, INPUT = hidden, inputs  # noqa: N806
    nodes = [
        helper.make_node("Unsqueeze", ["h0", "axis0"], ["initial_h"]),
        helper.make_node("Unsqueeze", ["c0", "axis0"], ["initial_c"]),
        helper.make_node("LSTM", ["X", "W", "R", "B", "", "initial_h", "initial_c"],
                         ["Y", "Y_h", "Y_c"], hidden_size=HIDDEN),
        helper.make_node("Squeeze", ["Y", "axis1"], ["hs"]),
        helper.make_node("Squeeze", ["Y_h", "axis0"], ["h"]),
        helper.make_node("Squeeze", ["Y_c", "axis0"], ["c"]),
    ]
    inits = [numpy_helper.from_array(a, n) for n, a in
             (("W", W[None]), ("R", R[None]), ("B", B[None]),
              ("axis0", np.array([0], np.int64)), ("axis1", np.array([1], np.int64)))]
    g = helper.make_graph(
        nodes, "lstm",
        [helper.make_tensor_value_info("X", f, [STEPS, batch, INPUT]),
         helper.make_tensor_value_info("h0", f, [batch, HIDDEN]),
         helper.make_tensor_value_info("c0", f, [batch, HIDDEN])],
        [helper.make_tensor_value_info("hs", f, [STEPS, batch, HIDDEN]),
         helper.make_tensor_value_info("h", f, [batch, HIDDEN]),
         helper.make_tensor_value_info("c", f, [batch, HIDDEN])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)],
                          producer_name="loopserve-bench")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def port(pid, dims, names=None):
    return ir_port(pid, dims, "FP32", names)


def ir_port(pid, dims, precision="FP32", names=None):
    n = " names=%s" % quoteattr(names) if names else ""
    return '<port id="%d" precision="%s"%s>%s</port>' % (
        pid, precision, n, "".join("<dim>%d</dim>" % d for d in dims))


def ti_lstm(batch, W, R, B):
    """The same network as an OpenVINO IR v11 TensorIterator with an LSTMCell-4 body (fico)."""
    order = {"i": 0, "o": 1, "f": 2, "c": 3}  # ONNX iofc -> index

    def fico(a):
        parts = np.split(a, 4)
        return np.concatenate([parts[order[g]] for g in "fico"])
    w, r, b = fico(W), fico(R), fico(B[:4 * HIDDEN] + B[4 * HIDDEN:])
    weights = bytearray()
    consts = {}
    for name, a in (("W", w), ("R", r), ("B", b), ("axis", np.array([0], np.int64))):
        while len(weights) % 8:
            weights.append(0)
        consts[name] = (len(weights), a)
        weights.extend(np.ascontiguousarray(a).tobytes())

    def const(lid, name):
        offset, a = consts[name]
        et, prec = ("i64", "I64") if a.dtype == np.int64 else ("f32", "FP32")
        return ('<layer id="%d" name="%s" type="Const" version="opset1"><data element_type="%s" '
                'shape="%s" offset="%d" size="%d"/><output>%s</output></layer>'
                % (lid, name, et, ",".join(map(str, a.shape)), offset, a.nbytes,
                   ir_port(0, a.shape, prec)))

    B_, T, I, H = batch, STEPS, INPUT, HIDDEN
    body = "".join([
        '<layer id="0" name="xt" type="Parameter" version="opset1"><data shape="1,%d,%d" '
        'element_type="f32"/><output>%s</output></layer>' % (B_, I, port(0, [1, B_, I])),
        '<layer id="1" name="h" type="Parameter" version="opset1"><data shape="%d,%d" '
        'element_type="f32"/><output>%s</output></layer>' % (B_, H, port(0, [B_, H])),
        '<layer id="2" name="c" type="Parameter" version="opset1"><data shape="%d,%d" '
        'element_type="f32"/><output>%s</output></layer>' % (B_, H, port(0, [B_, H])),
        const(3, "axis"),
        '<layer id="4" name="squeeze" type="Squeeze" version="opset1"><input>%s%s</input>'
        '<output>%s</output></layer>' % (port(0, [1, B_, I]), ir_port(1, [1], "I64"),
                                         port(2, [B_, I])),
        const(5, "W"), const(6, "R"), const(7, "B"),
        '<layer id="8" name="cell" type="LSTMCell" version="opset4"><data hidden_size="%d"/>'
        '<input>%s%s%s%s%s%s</input><output>%s%s</output></layer>'
        % (H, port(0, [B_, I]), port(1, [B_, H]), port(2, [B_, H]), port(3, [4 * H, I]),
           port(4, [4 * H, H]), port(5, [4 * H]), port(6, [B_, H]), port(7, [B_, H])),
        '<layer id="9" name="unsqueeze" type="Unsqueeze" version="opset1"><input>%s%s</input>'
        '<output>%s</output></layer>' % (port(0, [B_, H]), ir_port(1, [1], "I64"),
                                         port(2, [1, B_, H])),
        '<layer id="10" name="h_out" type="Result" version="opset1"><input>%s</input></layer>'
        % port(0, [B_, H]),
        '<layer id="11" name="c_out" type="Result" version="opset1"><input>%s</input></layer>'
        % port(0, [B_, H]),
        '<layer id="12" name="hs_out" type="Result" version="opset1"><input>%s</input></layer>'
        % port(0, [1, B_, H]),
    ])
    body_edges = [(0, 0, 4, 0), (3, 0, 4, 1), (4, 2, 8, 0), (1, 0, 8, 1), (2, 0, 8, 2),
                  (5, 0, 8, 3), (6, 0, 8, 4), (7, 0, 8, 5), (8, 6, 10, 0), (8, 7, 11, 0),
                  (8, 6, 9, 0), (3, 0, 9, 1), (9, 2, 12, 0)]
    edges_xml = "".join('<edge from-layer="%d" from-port="%d" to-layer="%d" to-port="%d"/>' % e
                        for e in body_edges)
    ti = ('<layer id="3" name="lstm" type="TensorIterator" version="opset1">'
          '<input>%s%s%s</input><output>%s%s%s</output>'
          '<port_map><input external_port_id="0" internal_layer_id="0" axis="0"/>'
          '<input external_port_id="1" internal_layer_id="1"/>'
          '<input external_port_id="2" internal_layer_id="2"/>'
          '<output external_port_id="3" internal_layer_id="12" axis="0"/>'
          '<output external_port_id="4" internal_layer_id="10"/>'
          '<output external_port_id="5" internal_layer_id="11"/></port_map>'
          '<back_edges><edge from-layer="10" to-layer="1"/><edge from-layer="11" to-layer="2"/>'
          '</back_edges><body><layers>%s</layers><edges>%s</edges></body></layer>'
          % (port(0, [T, B_, I]), port(1, [B_, H]), port(2, [B_, H]), port(3, [T, B_, H]),
             port(4, [B_, H]), port(5, [B_, H]), body, edges_xml))
    params = "".join(
        '<layer id="%d" name="%s" type="Parameter" version="opset1"><data shape="%s" '
        'element_type="f32"/><output>%s</output></layer>'
        % (lid, name, ",".join(map(str, dims)), port(0, dims, name))
        for lid, name, dims in ((0, "X", [T, B_, I]), (1, "h0", [B_, H]), (2, "c0", [B_, H])))
    results = "".join(
        '<layer id="%d" name="%s" type="Result" version="opset1"><input>%s</input></layer>'
        % (lid, name, port(0, dims)) for lid, name, dims in
        ((4, "hs", [T, B_, H]), (5, "h", [B_, H]), (6, "c", [B_, H])))
    edges = [(0, 0, 3, 0), (1, 0, 3, 1), (2, 0, 3, 2), (3, 3, 4, 0), (3, 4, 5, 0), (3, 5, 6, 0)]
    xml = ('<?xml version="1.0"?>\n<net name="lstm_ti" version="11"><layers>%s%s%s</layers>'
           '<edges>%s</edges></net>\n'
           % (params, ti, results,
              "".join('<edge from-layer="%d" from-port="%d" to-layer="%d" to-port="%d"/>' % e
                      for e in edges)))
    return xml, bytes(weights)


def write_inputs(folder, names, arrays):
    data = os.path.join(folder, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    for k, (n, a) in enumerate(zip(names, arrays)):
        with open(os.path.join(data, "input_%d.pb" % k), "wb") as f:
            f.write(numpy_helper.from_array(a, n).SerializeToString())


def family(out):
    for hidden in (128, 256, 512):
        rng = np.random.default_rng(hidden)
        scale = 1 / np.sqrt(hidden)
        W = (rng.standard_normal((4 * hidden, hidden)) * scale).astype(np.float32)
        R = (rng.standard_normal((4 * hidden, hidden)) * scale).astype(np.float32)
        B = (rng.standard_normal(8 * hidden) * 0.1).astype(np.float32)
        for batch in (1, 4, 16, 32):
            x = rng.standard_normal((STEPS, batch, hidden)).astype(np.float32)
            h0 = (rng.standard_normal((batch, hidden)) * 0.5).astype(np.float32)
            c0 = (rng.standard_normal((batch, hidden)) * 0.5).astype(np.float32)
            folder = os.path.join(out, "lstm_h%d_b%d" % (hidden, batch))
            os.makedirs(folder, exist_ok=True)
            onnx.save(onnx_lstm(batch, W, R, B, hidden, hidden), os.path.join(folder, "model.onnx"))
            write_inputs(folder, ["X", "h0", "c0"], [x, h0, c0])


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--family":
        return family(sys.argv[2])
    if len(sys.argv) != 2:
        sys.exit("usage: make_lstm_bench_models.py [--family] OUT_DIR")
    out = sys.argv[1]
    scale = 1 / np.sqrt(HIDDEN)
    W = (RNG.standard_normal((4 * HIDDEN, INPUT)) * scale).astype(np.float32)
    R = (RNG.standard_normal((4 * HIDDEN, HIDDEN)) * scale).astype(np.float32)
    B = (RNG.standard_normal(8 * HIDDEN) * 0.1).astype(np.float32)
    for batch in (1, 16):
        x = RNG.standard_normal((STEPS, batch, INPUT)).astype(np.float32)
        h0 = (RNG.standard_normal((batch, HIDDEN)) * 0.5).astype(np.float32)
        c0 = (RNG.standard_normal((batch, HIDDEN)) * 0.5).astype(np.float32)
        m = onnx_lstm(batch, W, R, B)
        folder = os.path.join(out, "lstm_onnx_b%d" % batch)
        os.makedirs(folder, exist_ok=True)
        onnx.save(m, os.path.join(folder, "model.onnx"))
        write_inputs(folder, ["X", "h0", "c0"], [x, h0, c0])
        folder = os.path.join(out, "lstm_ti_b%d" % batch)
        os.makedirs(folder, exist_ok=True)
        xml, weights = ti_lstm(batch, W, R, B)
        with open(os.path.join(folder, "model.xml"), "w") as f:
            f.write(xml)
        with open(os.path.join(folder, "model.bin"), "wb") as f:
            f.write(weights)
        onnx.save(m, os.path.join(folder, "peer.onnx"))
        write_inputs(folder, ["X", "h0", "c0"], [x, h0, c0])


if __name__ == "__main__":
    main()
