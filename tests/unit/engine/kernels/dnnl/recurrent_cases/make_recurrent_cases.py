#!/usr/bin/python3
"""Writes ONNX RNN / GRU / LSTM test cases in the ONNX backend-test layout:

    OUT/<case>/model.onnx
    OUT/<case>/test_data_set_0/{input_<k>.pb, output_<k>.pb}

Every expected output comes from `reference` below: a float64 numpy transcription of the equations
in the ONNX operator specs (onnx/defs/rnn/defs.cc: the gate equations, activation functions and
their alpha/beta defaults, directions, sequence_lens, layout), never from loopserve. Where the spec
is silent the reading of ONNX Runtime is used and noted: activation_alpha/beta are consumed in
order by the functions that take them; input_forget couples the gates as f = 1 - i; outputs past a
sequence's length are zero and its final state is that of its last step (the initial state for a
length of 0).

Each configuration oneDNN's RNN primitives can run is also written with clip = 1e30 (the same
numbers: nothing is that large) under the suffix `_native`, which routes it to the native
implementation, so both paths are checked against the same expected values.

    /usr/bin/python3 make_recurrent_cases.py OUT_DIR
"""
import os
import sys

import numpy as np

np.float, np.int, np.bool, np.object = float, int, bool, object  # noqa: E702
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
DEFAULT_ACTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
# name: (default alpha or None, default beta or None, function)
ACTIVATIONS = {
    "relu": (None, None, lambda x, a, b: np.maximum(x, 0)),
    "tanh": (None, None, lambda x, a, b: np.tanh(x)),
    "sigmoid": (None, None, lambda x, a, b: 1 / (1 + np.exp(-x))),
    "affine": (1.0, 0.0, lambda x, a, b: a * x + b),
    "leakyrelu": (0.01, None, lambda x, a, b: np.where(x >= 0, x, a * x)),
    "thresholdedrelu": (1.0, None, lambda x, a, b: np.where(x > a, x, 0)),
    "scaledtanh": (1.0, 1.0, lambda x, a, b: a * np.tanh(b * x)),
    "hardsigmoid": (0.2, 0.5, lambda x, a, b: np.minimum(np.maximum(a * x + b, 0), 1)),
    "elu": (1.0, None, lambda x, a, b: np.where(x >= 0, x, a * (np.exp(x) - 1))),
    "softsign": (None, None, lambda x, a, b: x / (1 + np.abs(x))),
    "softplus": (None, None, lambda x, a, b: np.log(1 + np.exp(x))),
}


def parse_activations(names, alphas, betas):
    out = []
    alphas, betas = list(alphas or []), list(betas or [])
    for n in names:
        da, db, fn = ACTIVATIONS[n.lower()]
        a = alphas.pop(0) if da is not None and alphas else da
        b = betas.pop(0) if db is not None and betas else db
        out.append(lambda x, fn=fn, a=a, b=b: fn(x, a, b))
    return out


def reference(op, X, W, R, B=None, lens=None, h0=None, c0=None, P=None, direction="forward",
              activations=None, alphas=None, betas=None, clip=None, input_forget=0, lbr=0,
              layout=0):
    X = X.astype(np.float64)
    if layout == 1:
        X = X.transpose(1, 0, 2)
        h0 = None if h0 is None else h0.transpose(1, 0, 2)
        c0 = None if c0 is None else c0.transpose(1, 0, 2)
    T, N, _ = X.shape
    D = 2 if direction == "bidirectional" else 1
    H = R.shape[-1]
    G = GATES[op]
    F = len(DEFAULT_ACTS[op])
    names = activations or DEFAULT_ACTS[op] * D
    if D == 2 and len(names) == F:
        names = names * 2
        alphas = None if alphas is None else alphas * 2
        betas = None if betas is None else betas * 2
    acts = parse_activations(names, alphas, betas)
    cl = (lambda v: np.clip(v, -clip, clip)) if clip else (lambda v: v)
    Y = np.zeros((T, D, N, H))
    Yh = np.zeros((D, N, H))
    Yc = np.zeros((D, N, H))
    for d in range(D):
        f, g, h = (acts[d * F:(d + 1) * F] + [None, None])[:3]
        rev = direction == "reverse" or d == 1
        Wd, Rd = W[d].astype(np.float64), R[d].astype(np.float64)
        Bd = np.zeros(2 * G * H) if B is None else B[d].astype(np.float64)
        Wb, Rb = Bd[:G * H], Bd[G * H:]
        Pd = np.zeros(3 * H) if P is None else P[d].astype(np.float64)
        for n in range(N):
            L = T if lens is None else int(lens[n])
            ht = np.zeros(H) if h0 is None else h0[d, n].astype(np.float64)
            ct = np.zeros(H) if c0 is None else c0[d, n].astype(np.float64)
            for s in range(L):
                t = L - 1 - s if rev else s
                x = X[t, n]
                if op == "RNN":
                    ht = f(cl(x @ Wd.T + ht @ Rd.T + Wb + Rb))
                elif op == "GRU":
                    wz, wr, wh = np.split(Wd, 3)
                    rz, rr, rh = np.split(Rd, 3)
                    wbz, wbr, wbh = np.split(Wb, 3)
                    rbz, rbr, rbh = np.split(Rb, 3)
                    z = f(cl(x @ wz.T + ht @ rz.T + wbz + rbz))
                    r = f(cl(x @ wr.T + ht @ rr.T + wbr + rbr))
                    if lbr:
                        hh = g(cl(x @ wh.T + r * (ht @ rh.T + rbh) + wbh))
                    else:
                        hh = g(cl(x @ wh.T + (r * ht) @ rh.T + rbh + wbh))
                    ht = (1 - z) * hh + z * ht
                else:
                    gates = x @ Wd.T + ht @ Rd.T + Wb + Rb
                    gi, go, gf, gc = np.split(gates, 4)
                    pi, po, pf = np.split(Pd, 3)
                    i = f(cl(gi + pi * ct))
                    fg = 1 - i if input_forget else f(cl(gf + pf * ct))
                    c = g(cl(gc))
                    ct = fg * ct + i * c
                    o = f(cl(go + po * ct))
                    ht = o * h(ct)
                Y[t, d, n] = ht
            Yh[d, n] = ht
            Yc[d, n] = ct
    if layout == 1:
        Y = Y.transpose(2, 0, 1, 3)
        Yh = Yh.transpose(1, 0, 2)
        Yc = Yc.transpose(1, 0, 2)
    f32 = np.float32
    return Y.astype(f32), Yh.astype(f32), Yc.astype(f32)


rng = np.random.default_rng(13)


def randf(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def write_case(out_dir, name, model, inputs, outputs):
    onnx.checker.check_model(model)
    case = os.path.join(out_dir, name)
    data = os.path.join(case, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    onnx.save(model, os.path.join(case, "model.onnx"))
    for kind, names, values in (("input", [i.name for i in model.graph.input], inputs),
                                ("output", [o.name for o in model.graph.output], outputs)):
        for k, (n, v) in enumerate(zip(names, values)):
            t = numpy_helper.from_array(np.asarray(v), n)
            with open(os.path.join(data, "%s_%d.pb" % (kind, k)), "wb") as f:
                f.write(t.SerializeToString())


def case(out_dir, name, op, T=4, N=3, I=5, H=6, direction="forward", bias=True, lens=None,
         h0=False, c0=False, peephole=False, layout=0, activations=None, alphas=None, betas=None,
         clip=None, input_forget=0, lbr=0, outputs=("Y", "Y_h", "Y_c"), opset=14,
         hidden_attr=True, weights_as_inputs=False, also_native=True):
    D = 2 if direction == "bidirectional" else 1
    G = GATES[op]
    X = randf(T, N, I) if layout == 0 else randf(N, T, I)
    W = randf(D, G * H, I, scale=0.4)
    R = randf(D, G * H, H, scale=0.4)
    B = randf(D, 2 * G * H, scale=0.3) if bias else None
    L = None if lens is None else np.array(lens, np.int32)
    state_shape = (D, N, H) if layout == 0 else (N, D, H)
    H0 = randf(*state_shape) if h0 else None
    C0 = randf(*state_shape) if c0 else None
    P = randf(D, 3 * H, scale=0.5) if peephole else None
    Y, Yh, Yc = reference(op, X, W, R, B, L, H0, C0, P, direction, activations, alphas, betas,
                          clip, input_forget, lbr, layout)
    names = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]
    values = [X, W, R, B, L, H0, C0, P]
    if op != "LSTM":
        names, values = names[:6], values[:6]
    node_inputs = [n if v is not None else "" for n, v in zip(names, values)]
    while node_inputs and node_inputs[-1] == "":
        node_inputs.pop()
    n_out = 3 if op == "LSTM" else 2
    node_outputs = [o if o in outputs else "" for o in ("Y", "Y_h", "Y_c")[:n_out]]
    while node_outputs[-1] == "":
        node_outputs.pop()
    attrs = {}
    if hidden_attr:
        attrs["hidden_size"] = H
    if direction != "forward":
        attrs["direction"] = direction
    if activations:
        attrs["activations"] = activations
    if alphas:
        attrs["activation_alpha"] = alphas
    if betas:
        attrs["activation_beta"] = betas
    if input_forget:
        attrs["input_forget"] = input_forget
    if lbr:
        attrs["linear_before_reset"] = lbr
    if layout:
        attrs["layout"] = layout

    def build(clip_value):
        a = dict(attrs)
        if clip_value is not None:
            a["clip"] = clip_value
        node = helper.make_node(op, node_inputs, node_outputs, **a)
        graph_inputs, feeds, inits = [], [], []
        for n, v in zip(names, values):
            if v is None:
                continue
            elem = TensorProto.INT32 if n == "sequence_lens" else TensorProto.FLOAT
            if n in ("W", "R", "B", "P") and not weights_as_inputs:
                inits.append(numpy_helper.from_array(v, n))
            else:
                graph_inputs.append(helper.make_tensor_value_info(n, elem, list(v.shape)))
                feeds.append(v)
        out_values = {"Y": Y, "Y_h": Yh, "Y_c": Yc}
        graph_outputs = [helper.make_tensor_value_info(o, TensorProto.FLOAT,
                                                       list(out_values[o].shape))
                         for o in node_outputs if o]
        g = helper.make_graph([node], name, graph_inputs, graph_outputs, inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 7
        return m, feeds, [out_values[o] for o in node_outputs if o]

    m, feeds, expected = build(clip)
    write_case(out_dir, name, m, feeds, expected)
    if also_native and clip is None and not input_forget:
        m, feeds, expected = build(1e30)
        write_case(out_dir, name + "_native", m, feeds, expected)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for op in ("RNN", "GRU", "LSTM"):
        o = op.lower()
        case(out, o + "_forward", op)
        case(out, o + "_reverse_initial_state", op, direction="reverse", h0=True, c0=True)
        case(out, o + "_bidirectional", op, direction="bidirectional", h0=True, c0=True)
        case(out, o + "_batchwise_bidirectional", op, direction="bidirectional", layout=1,
             h0=True, c0=True)
        case(out, o + "_batchwise", op, layout=1, h0=True, c0=True)
        case(out, o + "_no_bias_hidden_from_r", op, bias=False, hidden_attr=False)
        case(out, o + "_batch1_long", op, T=12, N=1, I=7, H=20, h0=True)
        case(out, o + "_weights_as_inputs", op, weights_as_inputs=True, h0=True)
        case(out, o + "_only_y_h", op, outputs=("Y_h",))
        case(out, o + "_sequence_lens", op, lens=[4, 2, 0], h0=True, c0=True)
        case(out, o + "_sequence_lens_reverse", op, direction="reverse", lens=[1, 4, 3],
             h0=True, c0=True)
        case(out, o + "_sequence_lens_bidirectional_batchwise", op, direction="bidirectional",
             layout=1, lens=[3, 4, 2], h0=True, c0=True)
        case(out, o + "_clip", op, clip=0.7, h0=True, c0=True)
        case(out, o + "_empty_sequence", op, T=0, h0=True, c0=True)
        case(out, o + "_opset7", op, opset=7, direction="bidirectional")
    # Activations: every ONNX function, with and without alpha/beta.
    case(out, "rnn_relu", "RNN", activations=["Relu"])
    case(out, "rnn_sigmoid_bidirectional", "RNN", activations=["Sigmoid", "Sigmoid"],
         direction="bidirectional")
    case(out, "rnn_leakyrelu_alpha", "RNN", activations=["LeakyRelu"], alphas=[0.2])
    case(out, "rnn_mixed_directions", "RNN", activations=["Tanh", "Relu"],
         direction="bidirectional")
    for name in ("Affine", "LeakyRelu", "ThresholdedRelu", "ScaledTanh", "HardSigmoid", "Elu",
                 "Softsign", "Softplus"):
        case(out, "rnn_" + name.lower() + "_defaults", "RNN", activations=[name])
    case(out, "rnn_affine_alpha_beta", "RNN", activations=["Affine"], alphas=[0.5], betas=[0.25])
    case(out, "gru_hardsigmoid_softsign", "GRU", activations=["HardSigmoid", "Softsign"],
         alphas=[0.3], betas=[0.6])
    case(out, "lstm_scaledtanh_elu_mixed", "LSTM", activations=["Sigmoid", "ScaledTanh", "Elu"],
         alphas=[0.9, 0.7], betas=[1.1])
    case(out, "lstm_one_set_for_both_directions", "LSTM",
         activations=["HardSigmoid", "Tanh", "Softsign"], direction="bidirectional")
    # LSTM: peepholes, input_forget; GRU: linear_before_reset.
    case(out, "lstm_peepholes", "LSTM", peephole=True, h0=True, c0=True)
    case(out, "lstm_peepholes_bidirectional_lens", "LSTM", peephole=True,
         direction="bidirectional", lens=[2, 4, 1], c0=True)
    case(out, "lstm_peepholes_clip", "LSTM", peephole=True, clip=0.5, c0=True)
    case(out, "lstm_input_forget", "LSTM", input_forget=1, h0=True, c0=True)
    case(out, "lstm_batch1_hidden64", "LSTM", T=8, N=1, I=16, H=64)
    case(out, "gru_linear_before_reset", "GRU", lbr=1, h0=True)
    case(out, "gru_linear_before_reset_bidirectional", "GRU", lbr=1, direction="bidirectional")
    case(out, "gru_linear_before_reset_batch1", "GRU", lbr=1, N=1, T=6, H=16)
    case(out, "gru_linear_before_reset_lens_clip", "GRU", lbr=1, lens=[4, 1, 3], clip=0.8)


if __name__ == "__main__":
    main()
