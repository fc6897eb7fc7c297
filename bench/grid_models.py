#!/usr/bin/python3
"""The benchmark grid: Loop models of the kinds real exported models contain, at batch 1 to 64
and hidden sizes 64 to 1024, written as exporters write them (PyTorch/TorchScript, tf2onnx).

    /usr/bin/python3 bench/grid_models.py OUT_DIR [--only=SUBSTRING,...]

writes OUT_DIR/<case>/model.onnx and OUT_DIR/<case>/test_data_set_0/input_<k>.pb for every case
in CASES; `bench/compare_ort.py --grid` calls write_cases() itself. Weights and inputs are
fixed-seed random, scaled so that recurrences neither explode nor die out (outputs stay
comparable at rtol 1e-3). Trip counts are chosen so that ONNX Runtime takes roughly 5-40 ms per
run at 1 thread: long enough to time, short enough for the whole grid to run in minutes.

Body kinds (issue 12 and ../shared/research/loop-engine-anchors.md section 4):
  rnn        RNN cell over a sequence: x_t = Gather(X, i); Tanh(x_t W + h U + b)
  gru, lstm  GRU and LSTM cells from primitive ops (Gemm/MatMul, Split, Sigmoid, Tanh, Mul, Sub)
  attn       decoder step with dot-product attention over a [B,S,H] memory (batched MatMul,
             Softmax, Concat)
  mamba      selective scan: Softplus, Exp, broadcasting Mul, ReduceSum over a [B,D,N] state
  mlp        residual MLP block with LayerNorm and erf-GELU decomposed as opset-16 exports do
  conv       iterative 3x3 Conv refinement with Relu and a residual Add
  beam       beam-search step: LogSoftmax and TopK over a 1000-word vocabulary, Div/Mod on the
             flat index, Gather of the surviving beams
  gpt        transformer decoder step with a KV cache that grows by Concat every iteration,
             tanh-GELU (Pow), LayerNorm, Transpose, Reshape, Softmax
  tensorarray tf2onnx while_loop: counter and condition in the body (Less), ScatterND into a
             carried buffer, Gather
  paste      Mask R-CNN paste loop: Gather a mask, Resize (bilinear), Concat onto a growing output
  greedy     greedy decoder (Gather embedding, two products, ArgMax, data-dependent stop)
  counter    trivial int64 body with a scan output (per-iteration overhead)
  scan16k    elementwise body with a 16 KB scan slice per iteration
  nested     a Loop in a Loop
  nms        greedy non-max suppression: ArgMax, IoU on [N,1] columns, Where, data-dependent stop
"""
import argparse
import os
import sys
import zlib

import numpy as np

# onnx 1.12 still uses the numpy aliases removed in numpy 1.24.
np.float, np.int, np.bool, np.object = float, int, bool, object  # noqa: E702
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def const(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def node(op, inputs, outputs, **attrs):
    return helper.make_node(op, inputs, outputs, **attrs)


def weights(rng, shape, fan_in, gain=1.0):
    return (rng.standard_normal(shape) * gain / np.sqrt(fan_in)).astype(np.float32)


def make_model(graph, opset):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="loopserve-grid")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def loop_graph(name, body, carried, outputs, initializers, extra_inputs=(), trips=None,
               loop_inputs=None):
    """A top graph holding one Loop(M, cond, carried...) whose outputs are `outputs`."""
    inputs = [vi("M", I64, []), vi("cond", B, [])] + list(extra_inputs) + list(carried)
    names = loop_inputs or (["M", "cond"] + [c.name for c in carried])
    return helper.make_graph(
        [node("Loop", names, [o.name for o in outputs], body=body)], name, inputs, list(outputs),
        initializers)


def body_io(carried, extra_outputs=()):
    """The standard body signature: (i, cond_in, carried...) -> (cond_out, carried..., extra...)."""
    ins = [vi("i", I64, []), vi("cond_in", B, [])] + [vi(n + "_in", t, s) for n, t, s in carried]
    outs = ([vi("cond_out", B, [])] + [vi(n + "_out", t, s) for n, t, s in carried] +
            list(extra_outputs))
    return ins, outs


def feeds(trips, pairs):
    return [("M", np.array(trips, np.int64)), ("cond", np.array(True))] + pairs


# ---- Body kinds --------------------------------------------------------------------------------

def rnn(rng, batch, hidden, trips):
    """PyTorch RNN cell over a sequence: h = Tanh(x_t W + h U + b), x_t = Gather(X, i)."""
    x = (rng.standard_normal((trips, batch, hidden)) * 0.5).astype(np.float32)
    w = weights(rng, (hidden, hidden), hidden)
    u = weights(rng, (hidden, hidden), hidden, 0.9)
    b = (rng.standard_normal(hidden) * 0.1).astype(np.float32)
    ins, outs = body_io([("h", F, [batch, hidden])], [vi("h_scan", F, [batch, hidden])])
    body = helper.make_graph(
        [node("Identity", ["cond_in"], ["cond_out"]),
         node("Gather", ["X", "i"], ["x_t"], axis=0),
         node("MatMul", ["x_t", "W"], ["xw"]),
         node("MatMul", ["h_in", "U"], ["hu"]),
         node("Add", ["xw", "hu"], ["s"]),
         node("Add", ["s", "b"], ["sb"]),
         node("Tanh", ["sb"], ["h_out"]),
         node("Identity", ["h_out"], ["h_scan"])], "rnn_body", ins, outs)
    g = loop_graph("rnn", body, [vi("h0", F, [batch, hidden])],
                   [vi("h", F, [batch, hidden]), vi("hs", F, [trips, batch, hidden])],
                   [const("W", w), const("U", u), const("b", b)], [vi("X", F, list(x.shape))],
                   loop_inputs=["M", "cond", "h0"])
    h0 = (rng.standard_normal((batch, hidden)) * 0.5).astype(np.float32)
    return make_model(g, 13), feeds(trips, [("X", x), ("h0", h0)])


def gru(rng, batch, hidden, trips):
    """GRU cell as torch.onnx exports nn.GRUCell from ops: Gemm(x, W_ih^T, b_ih) and
    Gemm(h, W_hh^T, b_hh), Split into r/z/n, r = Sigmoid(i_r + h_r), z = Sigmoid(i_z + h_z),
    n = Tanh(i_n + r * h_n), h = (1 - z) * n + z * h."""
    x = (rng.standard_normal((trips, batch, hidden)) * 0.5).astype(np.float32)
    w_ih = weights(rng, (3 * hidden, hidden), hidden)
    w_hh = weights(rng, (3 * hidden, hidden), hidden)
    b_ih = (rng.standard_normal(3 * hidden) * 0.1).astype(np.float32)
    b_hh = (rng.standard_normal(3 * hidden) * 0.1).astype(np.float32)
    ins, outs = body_io([("h", F, [batch, hidden])], [vi("h_scan", F, [batch, hidden])])
    body = helper.make_graph(
        [node("Identity", ["cond_in"], ["cond_out"]),
         node("Gather", ["X", "i"], ["x_t"], axis=0),
         node("Gemm", ["x_t", "W_ih", "b_ih"], ["gi"], transB=1),
         node("Gemm", ["h_in", "W_hh", "b_hh"], ["gh"], transB=1),
         node("Split", ["gi"], ["i_r", "i_z", "i_n"], axis=1),
         node("Split", ["gh"], ["h_r", "h_z", "h_n"], axis=1),
         node("Add", ["i_r", "h_r"], ["a_r"]),
         node("Sigmoid", ["a_r"], ["r"]),
         node("Add", ["i_z", "h_z"], ["a_z"]),
         node("Sigmoid", ["a_z"], ["z"]),
         node("Mul", ["r", "h_n"], ["rh"]),
         node("Add", ["i_n", "rh"], ["a_n"]),
         node("Tanh", ["a_n"], ["n"]),
         node("Sub", ["one", "z"], ["omz"]),
         node("Mul", ["omz", "n"], ["t1"]),
         node("Mul", ["z", "h_in"], ["t2"]),
         node("Add", ["t1", "t2"], ["h_out"]),
         node("Identity", ["h_out"], ["h_scan"])], "gru_body", ins, outs,
        [const("one", np.array(1.0, np.float32))])
    g = loop_graph("gru", body, [vi("h0", F, [batch, hidden])],
                   [vi("h", F, [batch, hidden]), vi("hs", F, [trips, batch, hidden])],
                   [const("W_ih", w_ih), const("W_hh", w_hh), const("b_ih", b_ih),
                    const("b_hh", b_hh)], [vi("X", F, list(x.shape))],
                   loop_inputs=["M", "cond", "h0"])
    h0 = (rng.standard_normal((batch, hidden)) * 0.5).astype(np.float32)
    return make_model(g, 13), feeds(trips, [("X", x), ("h0", h0)])


def lstm(rng, batch, hidden, trips):
    """LSTM cell from ops: z = x_t W + h U + b (MatMul, MatMul, Add, Add), Split into four gates,
    Sigmoid/Tanh, c = f * c + i * g, h = o * Tanh(c)."""
    x = (rng.standard_normal((trips, batch, hidden)) * 0.5).astype(np.float32)
    w = weights(rng, (hidden, 4 * hidden), hidden)
    u = weights(rng, (hidden, 4 * hidden), hidden)
    b = (rng.standard_normal(4 * hidden) * 0.1).astype(np.float32)
    ins, outs = body_io([("h", F, [batch, hidden]), ("c", F, [batch, hidden])],
                        [vi("h_scan", F, [batch, hidden])])
    body = helper.make_graph(
        [node("Identity", ["cond_in"], ["cond_out"]),
         node("Gather", ["X", "i"], ["x_t"], axis=0),
         node("MatMul", ["x_t", "W"], ["xw"]),
         node("MatMul", ["h_in", "U"], ["hu"]),
         node("Add", ["xw", "hu"], ["s"]),
         node("Add", ["s", "b"], ["z"]),
         node("Split", ["z"], ["zi", "zf", "zg", "zo"], axis=1),
         node("Sigmoid", ["zi"], ["gi"]),
         node("Sigmoid", ["zf"], ["gf"]),
         node("Tanh", ["zg"], ["gg"]),
         node("Sigmoid", ["zo"], ["go"]),
         node("Mul", ["gf", "c_in"], ["fc"]),
         node("Mul", ["gi", "gg"], ["ig"]),
         node("Add", ["fc", "ig"], ["c_out"]),
         node("Tanh", ["c_out"], ["tc"]),
         node("Mul", ["go", "tc"], ["h_out"]),
         node("Identity", ["h_out"], ["h_scan"])], "lstm_body", ins, outs)
    g = loop_graph("lstm", body, [vi("h0", F, [batch, hidden]), vi("c0", F, [batch, hidden])],
                   [vi("h", F, [batch, hidden]), vi("c", F, [batch, hidden]),
                    vi("hs", F, [trips, batch, hidden])],
                   [const("W", w), const("U", u), const("b", b)], [vi("X", F, list(x.shape))],
                   loop_inputs=["M", "cond", "h0", "c0"])
    h0 = (rng.standard_normal((batch, hidden)) * 0.5).astype(np.float32)
    c0 = (rng.standard_normal((batch, hidden)) * 0.5).astype(np.float32)
    return make_model(g, 13), feeds(trips, [("X", x), ("h0", h0), ("c0", c0)])


def attn(rng, batch, seq, hidden, trips):
    """Decoder step with dot-product attention over memory [B,S,H]: q = h Wq;
    a = Softmax(memory @ q[:, :, None]); ctx = a[:, None, :] @ memory;
    h = Tanh(Concat(ctx, h) Wc + bc)."""
    mem = (rng.standard_normal((batch, seq, hidden)) * 0.5).astype(np.float32)
    wq = weights(rng, (hidden, hidden), hidden, 0.5)
    wc = weights(rng, (2 * hidden, hidden), 2 * hidden)
    bc = (rng.standard_normal(hidden) * 0.1).astype(np.float32)
    ins, outs = body_io([("h", F, [batch, hidden])], [vi("h_scan", F, [batch, hidden])])
    body = helper.make_graph(
        [node("Identity", ["cond_in"], ["cond_out"]),
         node("MatMul", ["h_in", "Wq"], ["q"]),
         node("Unsqueeze", ["q", "ax_last"], ["q3"]),
         node("MatMul", ["Mem", "q3"], ["scores3"]),
         node("Squeeze", ["scores3", "ax_last"], ["scores"]),
         node("Softmax", ["scores"], ["a"], axis=-1),
         node("Unsqueeze", ["a", "ax_1"], ["a3"]),
         node("MatMul", ["a3", "Mem"], ["ctx3"]),
         node("Squeeze", ["ctx3", "ax_1"], ["ctx"]),
         node("Concat", ["ctx", "h_in"], ["cat"], axis=1),
         node("MatMul", ["cat", "Wc"], ["hc"]),
         node("Add", ["hc", "bc"], ["hb"]),
         node("Tanh", ["hb"], ["h_out"]),
         node("Identity", ["h_out"], ["h_scan"])], "attn_body", ins, outs,
        [const("ax_last", np.array([-1], np.int64)), const("ax_1", np.array([1], np.int64))])
    g = loop_graph("attn", body, [vi("h0", F, [batch, hidden])],
                   [vi("h", F, [batch, hidden]), vi("hs", F, [trips, batch, hidden])],
                   [const("Wq", wq), const("Wc", wc), const("bc", bc)],
                   [vi("Mem", F, list(mem.shape))], loop_inputs=["M", "cond", "h0"])
    h0 = (rng.standard_normal((batch, hidden)) * 0.5).astype(np.float32)
    return make_model(g, 13), feeds(trips, [("Mem", mem), ("h0", h0)])


def mamba(rng, batch, d, n, trips):
    """Selective scan as torch.jit.script exports it: per step, dt = Softplus(x_t * w + b);
    s = Exp(dt[..., None] * A) * s + (dt * x_t)[..., None] * B_t[:, None, :];
    y_t = ReduceSum(s * C_t[:, None, :], axis -1)."""
    x = (rng.standard_normal((batch, trips, d)) * 0.5).astype(np.float32)
    bs = (rng.standard_normal((batch, trips, n)) * 0.5).astype(np.float32)
    cs = (rng.standard_normal((batch, trips, n)) * 0.5).astype(np.float32)
    a = -np.exp(rng.uniform(-1, 1, (d, n))).astype(np.float32)
    w_dt = rng.uniform(0.5, 1.5, d).astype(np.float32)
    b_dt = rng.uniform(-1.0, 0.0, d).astype(np.float32)
    ins, outs = body_io([("s", F, [batch, d, n])], [vi("y", F, [batch, d])])
    body = helper.make_graph(
        [node("Identity", ["cond_in"], ["cond_out"]),
         node("Gather", ["X", "i"], ["x_t"], axis=1),
         node("Gather", ["Bs", "i"], ["b_t"], axis=1),
         node("Gather", ["Cs", "i"], ["c_t"], axis=1),
         node("Mul", ["x_t", "w_dt"], ["xw"]),
         node("Add", ["xw", "b_dt"], ["dt_pre"]),
         node("Softplus", ["dt_pre"], ["dt"]),
         node("Unsqueeze", ["dt", "ax_last"], ["dt3"]),
         node("Mul", ["dt3", "A"], ["dta"]),
         node("Exp", ["dta"], ["da"]),
         node("Mul", ["dt", "x_t"], ["dtx"]),
         node("Unsqueeze", ["dtx", "ax_last"], ["dtx3"]),
         node("Unsqueeze", ["b_t", "ax_1"], ["b3"]),
         node("Mul", ["dtx3", "b3"], ["dbx"]),
         node("Mul", ["da", "s_in"], ["decayed"]),
         node("Add", ["decayed", "dbx"], ["s_out"]),
         node("Unsqueeze", ["c_t", "ax_1"], ["c3"]),
         node("Mul", ["s_out", "c3"], ["sc"]),
         node("ReduceSum", ["sc", "ax_last"], ["y"], keepdims=0)], "mamba_body", ins, outs,
        [const("ax_last", np.array([-1], np.int64)), const("ax_1", np.array([1], np.int64))])
    g = loop_graph("mamba", body, [vi("s0", F, [batch, d, n])],
                   [vi("s", F, [batch, d, n]), vi("ys", F, [trips, batch, d])],
                   [const("A", a), const("w_dt", w_dt), const("b_dt", b_dt)],
                   [vi("X", F, list(x.shape)), vi("Bs", F, list(bs.shape)),
                    vi("Cs", F, list(cs.shape))], loop_inputs=["M", "cond", "s0"])
    s0 = np.zeros((batch, d, n), np.float32)
    return make_model(g, 13), feeds(trips, [("X", x), ("Bs", bs), ("Cs", cs), ("s0", s0)])


def layer_norm_nodes(x, gamma, beta, out, prefix):
    """LayerNormalization over the last axis as opset < 17 exports write it."""
    p = prefix
    return [node("ReduceMean", [x], [p + "mean"], axes=[-1]),
            node("Sub", [x, p + "mean"], [p + "xc"]),
            node("Pow", [p + "xc", "two"], [p + "sq"]),
            node("ReduceMean", [p + "sq"], [p + "var"], axes=[-1]),
            node("Add", [p + "var", "eps"], [p + "ve"]),
            node("Sqrt", [p + "ve"], [p + "std"]),
            node("Div", [p + "xc", p + "std"], [p + "norm"]),
            node("Mul", [p + "norm", gamma], [p + "scaled"]),
            node("Add", [p + "scaled", beta], [out])]


def mlp(rng, batch, hidden, trips, expand=2):
    """Residual MLP block repeated: h = h + (GELU_erf(LN(h) W1 + b1) W2 + b2), LayerNorm and
    erf-GELU decomposed as torch.onnx opset-16 exports write them."""
    inner = expand * hidden
    w1 = weights(rng, (hidden, inner), hidden)
    b1 = (rng.standard_normal(inner) * 0.1).astype(np.float32)
    # A small output projection keeps the residual stream contracting: after hundreds of steps
    # the two engines' rounding differences must stay within the comparison's tolerance.
    w2 = weights(rng, (inner, hidden), inner, 0.1)
    b2 = (rng.standard_normal(hidden) * 0.05).astype(np.float32)
    gamma = rng.uniform(0.8, 1.2, hidden).astype(np.float32)
    beta = (rng.standard_normal(hidden) * 0.1).astype(np.float32)
    ins, outs = body_io([("h", F, [batch, hidden])], [vi("h_scan", F, [batch, hidden])])
    body = helper.make_graph(
        [node("Identity", ["cond_in"], ["cond_out"])] +
        layer_norm_nodes("h_in", "gamma", "beta", "ln", "ln_") +
        [node("MatMul", ["ln", "W1"], ["u"]),
         node("Add", ["u", "b1"], ["ub"]),
         node("Div", ["ub", "sqrt2"], ["ud"]),
         node("Erf", ["ud"], ["ue"]),
         node("Add", ["ue", "one"], ["up"]),
         node("Mul", ["ub", "up"], ["um"]),
         node("Mul", ["um", "half"], ["g"]),
         node("MatMul", ["g", "W2"], ["v"]),
         node("Add", ["v", "b2"], ["vb"]),
         node("Add", ["h_in", "vb"], ["h_out"]),
         node("Identity", ["h_out"], ["h_scan"])], "mlp_body", ins, outs,
        [const("two", np.array(2.0, np.float32)), const("eps", np.array(1e-5, np.float32)),
         const("sqrt2", np.array(np.sqrt(2.0), np.float32)),
         const("one", np.array(1.0, np.float32)), const("half", np.array(0.5, np.float32))])
    g = loop_graph("mlp", body, [vi("h0", F, [batch, hidden])],
                   [vi("h", F, [batch, hidden]), vi("hs", F, [trips, batch, hidden])],
                   [const("W1", w1), const("b1", b1), const("W2", w2), const("b2", b2),
                    const("gamma", gamma), const("beta", beta)])
    h0 = rng.standard_normal((batch, hidden)).astype(np.float32)
    return make_model(g, 16), feeds(trips, [("h0", h0)])


def conv(rng, batch, channels, size, trips):
    """Iterative refinement: x = x + Relu(Conv3x3(x) + b) * 0.1, x carried, no scan output."""
    w = weights(rng, (channels, channels, 3, 3), channels * 9, 0.5)
    b = (rng.standard_normal(channels) * 0.05).astype(np.float32)
    shape = [batch, channels, size, size]
    ins, outs = body_io([("x", F, shape)])
    body = helper.make_graph(
        [node("Identity", ["cond_in"], ["cond_out"]),
         node("Conv", ["x_in", "Wc", "bc"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
         node("Relu", ["y"], ["r"]),
         node("Mul", ["r", "step"], ["d"]),
         node("Add", ["x_in", "d"], ["x_out"])], "conv_body", ins, outs,
        [const("step", np.array(0.1, np.float32))])
    g = loop_graph("conv", body, [vi("x0", F, shape)], [vi("x", F, shape)],
                   [const("Wc", w), const("bc", b)])
    x0 = rng.standard_normal(shape).astype(np.float32)
    return make_model(g, 13), feeds(trips, [("x0", x0)])


def beam(rng, beams, hidden, trips, vocab=1000):
    """Beam-search step: logp = LogSoftmax(h Wo); s = logp + score[:, None]; TopK over the
    flattened beams x vocab; beam = idx / V, tok = idx % V; h = Tanh(h[beam] Wh + E[tok])."""
    # Large logits keep the TopK candidates well apart: different summation orders in two
    # engines must not reorder near-ties (the tokens feed back into the next step).
    wo = weights(rng, (hidden, vocab), hidden, 6.0)
    wh = weights(rng, (hidden, hidden), hidden)
    emb = (rng.standard_normal((vocab, hidden)) * 0.5).astype(np.float32)
    ins, outs = body_io([("h", F, [beams, hidden]), ("score", F, [beams])],
                        [vi("tok_scan", I64, [beams])])
    body = helper.make_graph(
        [node("Identity", ["cond_in"], ["cond_out"]),
         node("MatMul", ["h_in", "Wo"], ["logits"]),
         node("LogSoftmax", ["logits"], ["logp"], axis=-1),
         node("Unsqueeze", ["score_in", "ax_last"], ["score2"]),
         node("Add", ["logp", "score2"], ["total"]),
         node("Reshape", ["total", "flat_shape"], ["flat"]),
         node("TopK", ["flat", "k"], ["best", "idx2"], axis=-1),
         node("Squeeze", ["best", "ax_0"], ["score_out"]),
         node("Squeeze", ["idx2", "ax_0"], ["idx"]),
         node("Div", ["idx", "V"], ["beam_idx"]),
         node("Mod", ["idx", "V"], ["tok"]),
         node("Gather", ["h_in", "beam_idx"], ["h_sel"], axis=0),
         node("MatMul", ["h_sel", "Wh"], ["hw"]),
         node("Gather", ["E", "tok"], ["e"], axis=0),
         node("Add", ["hw", "e"], ["he"]),
         node("Tanh", ["he"], ["h_out"]),
         node("Identity", ["tok"], ["tok_scan"])], "beam_body", ins, outs,
        [const("ax_last", np.array([-1], np.int64)), const("ax_0", np.array([0], np.int64)),
         const("flat_shape", np.array([1, -1], np.int64)),
         const("k", np.array([beams], np.int64)), const("V", np.array(vocab, np.int64))])
    g = loop_graph("beam", body, [vi("h0", F, [beams, hidden]), vi("score0", F, [beams])],
                   [vi("h", F, [beams, hidden]), vi("score", F, [beams]),
                    vi("toks", I64, [trips, beams])],
                   [const("Wo", wo), const("Wh", wh), const("E", emb)])
    h0 = (rng.standard_normal((beams, hidden)) * 0.5).astype(np.float32)
    # Distinct starting scores keep TopK free of exact ties between beams.
    score0 = -np.arange(beams, dtype=np.float32) * 0.37
    return make_model(g, 13), feeds(trips, [("h0", h0), ("score0", score0)])


def gpt(rng, batch, hidden, trips, heads=4, past=16):
    """Transformer decoder step with a KV cache: per step LN -> q, k, v; K = Concat(K, k) and
    V = Concat(V, v) grow along the sequence axis every iteration; multi-head attention with
    Reshape/Transpose, Softmax; tanh-GELU MLP (Pow 3, Tanh) as GPT-2 exports write it."""
    hd = hidden // heads
    wqkv = weights(rng, (hidden, 3 * hidden), hidden)
    wo = weights(rng, (hidden, hidden), hidden, 0.5)
    w1 = weights(rng, (hidden, 2 * hidden), hidden)
    w2 = weights(rng, (2 * hidden, hidden), 2 * hidden, 0.3)
    gamma = rng.uniform(0.8, 1.2, hidden).astype(np.float32)
    beta = (rng.standard_normal(hidden) * 0.1).astype(np.float32)
    kv_shape = [batch, heads, None, hd]
    ins, outs = body_io([("x", F, [batch, 1, hidden]), ("K", F, kv_shape), ("V", F, kv_shape)],
                        [vi("x_scan", F, [batch, 1, hidden])])
    nodes = [node("Identity", ["cond_in"], ["cond_out"])]
    nodes += layer_norm_nodes("x_in", "gamma", "beta", "ln", "ln1_")
    nodes += [node("MatMul", ["ln", "Wqkv"], ["qkv"]),
              node("Split", ["qkv"], ["q", "k", "v"], axis=-1),
              node("Reshape", ["q", "head_shape"], ["q4"]),
              node("Transpose", ["q4"], ["qh"], perm=[0, 2, 1, 3]),
              node("Reshape", ["k", "head_shape"], ["k4"]),
              node("Transpose", ["k4"], ["kh"], perm=[0, 2, 1, 3]),
              node("Reshape", ["v", "head_shape"], ["v4"]),
              node("Transpose", ["v4"], ["vh"], perm=[0, 2, 1, 3]),
              node("Concat", ["K_in", "kh"], ["K_out"], axis=2),
              node("Concat", ["V_in", "vh"], ["V_out"], axis=2),
              node("Transpose", ["K_out"], ["kt"], perm=[0, 1, 3, 2]),
              node("MatMul", ["qh", "kt"], ["att"]),
              node("Mul", ["att", "scale"], ["att_s"]),
              node("Softmax", ["att_s"], ["p"], axis=-1),
              node("MatMul", ["p", "V_out"], ["ctx_h"]),
              node("Transpose", ["ctx_h"], ["ctx_t"], perm=[0, 2, 1, 3]),
              node("Reshape", ["ctx_t", "model_shape"], ["ctx"]),
              node("MatMul", ["ctx", "Wo"], ["o"]),
              node("Add", ["x_in", "o"], ["x1"])]
    nodes += layer_norm_nodes("x1", "gamma", "beta", "ln2", "ln2_")
    nodes += [node("MatMul", ["ln2", "W1"], ["m"]),
              node("Pow", ["m", "three"], ["m3"]),
              node("Mul", ["m3", "c044"], ["m3c"]),
              node("Add", ["m", "m3c"], ["inner"]),
              node("Mul", ["inner", "sqrt2pi"], ["inner_s"]),
              node("Tanh", ["inner_s"], ["th"]),
              node("Add", ["th", "one"], ["th1"]),
              node("Mul", ["m", "th1"], ["mh"]),
              node("Mul", ["mh", "half"], ["gelu"]),
              node("MatMul", ["gelu", "W2"], ["f"]),
              node("Add", ["x1", "f"], ["x_out"]),
              node("Identity", ["x_out"], ["x_scan"])]
    body = helper.make_graph(
        nodes, "gpt_body", ins, outs,
        [const("two", np.array(2.0, np.float32)), const("eps", np.array(1e-5, np.float32)),
         const("three", np.array(3.0, np.float32)), const("c044", np.array(0.044715, np.float32)),
         const("sqrt2pi", np.array(np.sqrt(2 / np.pi), np.float32)),
         const("one", np.array(1.0, np.float32)), const("half", np.array(0.5, np.float32)),
         const("scale", np.array(1 / np.sqrt(hd), np.float32)),
         const("head_shape", np.array([batch, 1, heads, hd], np.int64)),
         const("model_shape", np.array([batch, 1, hidden], np.int64))])
    g = loop_graph("gpt", body,
                   [vi("x0", F, [batch, 1, hidden]), vi("K0", F, [batch, heads, past, hd]),
                    vi("V0", F, [batch, heads, past, hd])],
                   [vi("x", F, [batch, 1, hidden]), vi("K", F, kv_shape), vi("V", F, kv_shape),
                    vi("xs", F, [trips, batch, 1, hidden])],
                   [const("Wqkv", wqkv), const("Wo", wo), const("W1", w1), const("W2", w2),
                    const("gamma", gamma), const("beta", beta)])
    x0 = rng.standard_normal((batch, 1, hidden)).astype(np.float32)
    k0 = (rng.standard_normal((batch, heads, past, hd)) * 0.5).astype(np.float32)
    v0 = (rng.standard_normal((batch, heads, past, hd)) * 0.5).astype(np.float32)
    return make_model(g, 13), feeds(trips, [("x0", x0), ("K0", k0), ("V0", v0)])


def tensorarray(rng, batch, hidden, trips):
    """tf2onnx while_loop writing a TensorArray: carried (i, ta); cond = Less(i + 1, n) computed
    in the body; ta = ScatterND(ta, [[i]], Tanh(Gather(X, i) * w + h)); h carried."""
    x = (rng.standard_normal((trips, batch, hidden)) * 0.5).astype(np.float32)
    w = rng.uniform(0.5, 1.0, hidden).astype(np.float32)
    ins = [vi("it", I64, []), vi("cond_in", B, []), vi("h_in", F, [batch, hidden]),
           vi("ta_in", F, [trips, batch, hidden])]
    outs = [vi("cond_out", B, []), vi("h_out", F, [batch, hidden]),
            vi("ta_out", F, [trips, batch, hidden])]
    body = helper.make_graph(
        [node("Gather", ["X", "it"], ["x_t"], axis=0),
         node("Mul", ["x_t", "w"], ["xw"]),
         node("Add", ["xw", "h_in"], ["pre"]),
         node("Tanh", ["pre"], ["h_out"]),
         node("Reshape", ["it", "idx_shape"], ["idx"]),
         node("Unsqueeze", ["h_out", "ax_0"], ["upd"]),
         node("ScatterND", ["ta_in", "idx", "upd"], ["ta_out"]),
         node("Add", ["it", "one"], ["next"]),
         node("Less", ["next", "n"], ["cond_out"])], "ta_body", ins, outs,
        [const("idx_shape", np.array([1, 1], np.int64)), const("ax_0", np.array([0], np.int64)),
         const("one", np.array(1, np.int64)), const("n", np.array(trips, np.int64))])
    g = helper.make_graph(
        [node("Loop", ["", "cond", "h0", "ta0"], ["h", "ta"], body=body)], "tensorarray",
        [vi("cond", B, []), vi("X", F, list(x.shape)), vi("h0", F, [batch, hidden]),
         vi("ta0", F, [trips, batch, hidden])],
        [vi("h", F, [batch, hidden]), vi("ta", F, [trips, batch, hidden])],
        [const("w", w)])
    return make_model(g, 13), [("cond", np.array(True)), ("X", x),
                               ("h0", np.zeros((batch, hidden), np.float32)),
                               ("ta0", np.zeros((trips, batch, hidden), np.float32))]


def paste(rng, detections, size, scale=2):
    """Mask R-CNN's paste loop (torchvision _onnx_paste_masks_in_image_loop, simplified): for each
    detection, Gather its [1, S, S] mask, Resize it bilinearly to [1, 2S, 2S], threshold-free
    Sigmoid, and Concat it onto a carried result that grows along axis 0 every iteration."""
    masks = rng.standard_normal((detections, 1, size, size)).astype(np.float32)
    out = scale * size
    ins = [vi("i", I64, []), vi("cond_in", B, []), vi("res_in", F, [None, 1, out, out])]
    outs = [vi("cond_out", B, []), vi("res_out", F, [None, 1, out, out])]
    body = helper.make_graph(
        [node("Identity", ["cond_in"], ["cond_out"]),
         node("Gather", ["Masks", "i"], ["m"], axis=0),
         node("Unsqueeze", ["m", "ax_0"], ["m4"]),
         node("Resize", ["m4", "", "scales"], ["r"], mode="linear"),
         node("Sigmoid", ["r"], ["s"]),
         node("Squeeze", ["s", "ax_0"], ["s3"]),
         node("Unsqueeze", ["s3", "ax_0"], ["s4"]),
         node("Concat", ["res_in", "s4"], ["res_out"], axis=0)], "paste_body", ins, outs,
        [const("ax_0", np.array([0], np.int64)),
         const("scales", np.array([1, 1, scale, scale], np.float32))])
    g = loop_graph("paste", body, [vi("res0", F, [0, 1, out, out])],
                   [vi("res", F, [None, 1, out, out])], [],
                   [vi("Masks", F, list(masks.shape))], loop_inputs=["M", "cond", "res0"])
    return make_model(g, 13), feeds(detections, [("Masks", masks),
                                                 ("res0", np.zeros((0, 1, out, out), np.float32))])


def greedy(rng, hidden, trips, vocab=1024):
    """Greedy decoder: h = Tanh(h Wh + E[tok]); tok = ArgMax(h Wo); stop when tok == eos (never
    produced here, so every run decodes `trips` tokens while still testing the condition)."""
    emb = (rng.standard_normal((vocab, hidden)) * 0.5).astype(np.float32)
    wh = weights(rng, (hidden, hidden), hidden)
    wo = weights(rng, (hidden, vocab), hidden)
    ins = [vi("i", I64, []), vi("cond_in", B, []), vi("h_in", F, [1, hidden]),
           vi("tok_in", I64, [1])]
    outs = [vi("cond_out", B, []), vi("h_out", F, [1, hidden]), vi("tok_out", I64, [1]),
            vi("tok_scan", I64, [1])]
    body = helper.make_graph(
        [node("Gather", ["E", "tok_in"], ["e"], axis=0),
         node("MatMul", ["h_in", "Wh"], ["hw"]),
         node("Add", ["hw", "e"], ["he"]),
         node("Tanh", ["he"], ["h_out"]),
         node("MatMul", ["h_out", "Wo"], ["logits"]),
         node("ArgMax", ["logits"], ["tok_out"], axis=1, keepdims=0),
         node("Equal", ["tok_out", "eos"], ["is_eos"]),
         node("Not", ["is_eos"], ["cond_vec"]),
         node("Squeeze", ["cond_vec"], ["cond_out"]),
         node("Identity", ["tok_out"], ["tok_scan"])], "greedy_body", ins, outs,
        [const("eos", np.array([-1], np.int64))])
    g = loop_graph("greedy", body, [vi("h0", F, [1, hidden]), vi("tok0", I64, [1])],
                   [vi("h", F, [1, hidden]), vi("tok", I64, [1]), vi("toks", I64, [None, 1])],
                   [const("E", emb), const("Wh", wh), const("Wo", wo)])
    return make_model(g, 13), feeds(trips, [("h0", np.zeros((1, hidden), np.float32)),
                                            ("tok0", np.array([1], np.int64))])


def counter(rng, trips):
    """x = x + 1 (int64), cond passed through, x stacked as a scan output."""
    del rng
    ins, outs = body_io([("x", I64, [])], [vi("x_scan", I64, [])])
    body = helper.make_graph(
        [node("Identity", ["cond_in"], ["cond_out"]),
         node("Add", ["x_in", "one"], ["x_out"]),
         node("Identity", ["x_out"], ["x_scan"])], "counter_body", ins, outs,
        [const("one", np.array(1, np.int64))])
    g = loop_graph("counter", body, [vi("x0", I64, [])],
                   [vi("x", I64, []), vi("xs", I64, [trips])], [])
    return make_model(g, 13), feeds(trips, [("x0", np.array(0, np.int64))])


def scan16k(rng, trips):
    """h = Tanh(h * A + B) on [1,256,16] (16 KB), every h stacked."""
    shape = [1, 256, 16]
    a = rng.uniform(0.5, 1.0, shape).astype(np.float32)
    bb = rng.uniform(-0.1, 0.1, shape).astype(np.float32)
    ins, outs = body_io([("h", F, shape)], [vi("h_scan", F, shape)])
    body = helper.make_graph(
        [node("Identity", ["cond_in"], ["cond_out"]),
         node("Mul", ["h_in", "A"], ["ha"]),
         node("Add", ["ha", "Bb"], ["hb"]),
         node("Tanh", ["hb"], ["h_out"]),
         node("Identity", ["h_out"], ["h_scan"])], "scan_body", ins, outs)
    g = loop_graph("scan16k", body, [vi("h0", F, shape)],
                   [vi("h", F, shape), vi("hs", F, [trips] + shape)],
                   [const("A", a), const("Bb", bb)])
    return make_model(g, 13), feeds(trips, [("h0", rng.standard_normal(shape).astype(np.float32))])


def nested(rng, outer, inner):
    """An outer loop whose body runs an inner loop (y = y * 0.999 + c on 16 floats)."""
    del rng
    inner_body = helper.make_graph(
        [node("Identity", ["icond_in"], ["icond_out"]),
         node("Mul", ["y_in", "decay"], ["yd"]),
         node("Add", ["yd", "c"], ["y_out"])],
        "inner_body", [vi("j", I64, []), vi("icond_in", B, []), vi("y_in", F, [16])],
        [vi("icond_out", B, []), vi("y_out", F, [16])],
        [const("decay", np.full(16, 0.999, np.float32))])
    ins, outs = body_io([("x", F, [16])], [vi("x_scan", F, [16])])
    outer_body = helper.make_graph(
        [node("Identity", ["cond_in"], ["cond_out"]),
         node("Loop", ["N", "", "x_in"], ["x_out"], body=inner_body),
         node("Identity", ["x_out"], ["x_scan"])], "outer_body", ins, outs)
    g = loop_graph("nested", outer_body, [vi("x0", F, [16])],
                   [vi("x", F, [16]), vi("xs", F, [outer, 16])],
                   [const("N", np.array(inner, np.int64)), const("c", np.full(16, 0.01, np.float32))])
    return make_model(g, 13), feeds(outer, [("x0", np.zeros(16, np.float32))])


# --- quantized bodies (issue 28): begin ---
def quantize_weight_int8(w):
    """ORT quantize_dynamic's default weight format: int8, per tensor, symmetric (zero point 0,
    scale max|w| / 127)."""
    scale = np.float32(np.abs(w).max() / 127.0)
    q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
    return q, scale


def dynamic_quantized_matmul(x, name):
    """The nodes quantize_dynamic writes for MatMul(x, <name>): DynamicQuantizeLinear ->
    MatMulInteger -> Cast -> Mul(Mul(x_scale, w_scale)); reads <name>_q, _scale, _zp."""
    p = x + "_" + name
    return [node("DynamicQuantizeLinear", [x], [p + "_xq", p + "_xs", p + "_xz"]),
            node("MatMulInteger", [p + "_xq", name + "_q", p + "_xz", name + "_zp"], [p + "_i32"]),
            node("Cast", [p + "_i32"], [p + "_f"], to=F),
            node("Mul", [p + "_xs", name + "_scale"], [p + "_s"]),
            node("Mul", [p + "_f", p + "_s"], [p + "_out"])], p + "_out"


def quantized_weight_consts(name, w):
    q, scale = quantize_weight_int8(w)
    return [const(name + "_q", q), const(name + "_scale", scale),
            const(name + "_zp", np.int8(0))]


def qrnn(rng, batch, hidden, trips):
    """The rnn case's cell (same shapes and weight scales) as ORT's quantize_dynamic writes it:
    each MatMul a dynamically quantized uint8 x int8 MatMulInteger."""
    x = (rng.standard_normal((trips, batch, hidden)) * 0.5).astype(np.float32)
    w = weights(rng, (hidden, hidden), hidden)
    u = weights(rng, (hidden, hidden), hidden, 0.9)
    b = (rng.standard_normal(hidden) * 0.1).astype(np.float32)
    ins, outs = body_io([("h", F, [batch, hidden])], [vi("h_scan", F, [batch, hidden])])
    xw_nodes, xw = dynamic_quantized_matmul("x_t", "W")
    hu_nodes, hu = dynamic_quantized_matmul("h_in", "U")
    body = helper.make_graph(
        [node("Identity", ["cond_in"], ["cond_out"]),
         node("Gather", ["X", "i"], ["x_t"], axis=0)] + xw_nodes + hu_nodes +
        [node("Add", [xw, hu], ["s"]),
         node("Add", ["s", "b"], ["sb"]),
         node("Tanh", ["sb"], ["h_out"]),
         node("Identity", ["h_out"], ["h_scan"])], "qrnn_body", ins, outs)
    g = loop_graph("qrnn", body, [vi("h0", F, [batch, hidden])],
                   [vi("h", F, [batch, hidden]), vi("hs", F, [trips, batch, hidden])],
                   quantized_weight_consts("W", w) + quantized_weight_consts("U", u) +
                   [const("b", b)], [vi("X", F, list(x.shape))],
                   loop_inputs=["M", "cond", "h0"])
    h0 = (rng.standard_normal((batch, hidden)) * 0.5).astype(np.float32)
    return make_model(g, 13), feeds(trips, [("X", x), ("h0", h0)])


def qdq(x, scale, zero_point):
    """quantize_static's activation pair: x -> QuantizeLinear -> DequantizeLinear (uint8)."""
    return [node("QuantizeLinear", [x, scale, zero_point], [x + "_q"]),
            node("DequantizeLinear", [x + "_q", scale, zero_point], [x + "_dq"])], x + "_dq"


def qdq_weight_consts(name, w, per_channel):
    """quantize_static's weight format: int8, symmetric (zero point 0), per tensor or per output
    column (axis 1 of the [K, N] MatMul weight), behind a DequantizeLinear."""
    if per_channel:
        scale = (np.abs(w).max(axis=0) / 127.0).astype(np.float32)
        zp = np.zeros(w.shape[1], np.int8)
    else:
        scale = np.float32(np.abs(w).max() / 127.0)
        zp = np.int8(0)
    q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
    return [const(name + "_q", q), const(name + "_scale", np.asarray(scale, np.float32)),
            const(name + "_zp", np.asarray(zp, np.int8))]


def qdq_rnn(rng, batch, hidden, trips):
    """The rnn case's cell in the QDQ format ORT's quantize_static writes (uint8 activations,
    int8 symmetric weights: W per tensor, U per output column): every MatMul's inputs and output
    behind QuantizeLinear -> DequantizeLinear pairs, the Adds and Tanh in float. Activation
    ranges as a calibration over the inputs would set them: x and the products in [-3, 3], the
    state in [-1, 1]."""
    x = (rng.standard_normal((trips, batch, hidden)) * 0.5).astype(np.float32)
    w = weights(rng, (hidden, hidden), hidden)
    u = weights(rng, (hidden, hidden), hidden, 0.9)
    b = (rng.standard_normal(hidden) * 0.1).astype(np.float32)
    ins, outs = body_io([("h", F, [batch, hidden])], [vi("h_scan", F, [batch, hidden])])
    x_nodes, x_dq = qdq("x_t", "s_wide", "zp")
    h_nodes, h_dq = qdq("h_in", "s_state", "zp")
    xw_nodes, xw_dq = qdq("xw", "s_wide", "zp")
    hu_nodes, hu_dq = qdq("hu", "s_wide", "zp")
    body = helper.make_graph(
        [node("Identity", ["cond_in"], ["cond_out"]),
         node("Gather", ["X", "i"], ["x_t"], axis=0)] + x_nodes + h_nodes +
        [node("DequantizeLinear", ["W_q", "W_scale", "W_zp"], ["W_dq"]),
         node("DequantizeLinear", ["U_q", "U_scale", "U_zp"], ["U_dq"], axis=1),
         node("MatMul", [x_dq, "W_dq"], ["xw"]),
         node("MatMul", [h_dq, "U_dq"], ["hu"])] + xw_nodes + hu_nodes +
        [node("Add", [xw_dq, hu_dq], ["s"]),
         node("Add", ["s", "b"], ["sb"]),
         node("Tanh", ["sb"], ["h_out"]),
         node("Identity", ["h_out"], ["h_scan"])], "qdq_rnn_body", ins, outs)
    g = loop_graph("qdq_rnn", body, [vi("h0", F, [batch, hidden])],
                   [vi("h", F, [batch, hidden]), vi("hs", F, [trips, batch, hidden])],
                   qdq_weight_consts("W", w, False) + qdq_weight_consts("U", u, True) +
                   [const("b", b), const("s_wide", np.float32(6.0 / 255)),
                    const("s_state", np.float32(2.0 / 255)), const("zp", np.uint8(128))],
                   [vi("X", F, list(x.shape))], loop_inputs=["M", "cond", "h0"])
    h0 = np.tanh(rng.standard_normal((batch, hidden))).astype(np.float32)
    return make_model(g, 13), feeds(trips, [("X", x), ("h0", h0)])


def qdq_rnn_reference(inputs, init):
    """numpy QDQ RNN cell over the qdq_rnn case (QuantizeLinear's division in float32, round half
    to even, then float64): {"h": last state, "hs": every state}."""
    def fake_quant(x, scale, zp):
        q = np.clip(np.rint(x.astype(np.float32) / scale) + float(zp), 0, 255)
        return (q - float(zp)) * np.float64(scale)

    def weight(name):
        return (init[name + "_q"].astype(np.float64) - init[name + "_zp"]) * init[name + "_scale"]

    w, u, zp = weight("W"), weight("U"), init["zp"]
    wide, state = init["s_wide"], init["s_state"]
    h = inputs["h0"].astype(np.float64)
    hs = []
    for t in range(int(inputs["M"])):
        xw = fake_quant(fake_quant(inputs["X"][t], wide, zp) @ w, wide, zp)
        hu = fake_quant(fake_quant(h, state, zp) @ u, wide, zp)
        h = np.tanh(xw + hu + init["b"])
        hs.append(h)
    return {"h": h, "hs": np.stack(hs)}


# The QDQ cases' tolerance: the reference quantizes as the spec does (float32 division, round half
# to even), so the engine's outputs agree to float rounding (1.2e-7 measured on qdq_rnn_b3_h96);
# 1e-3 is well below one quantization step (2 / 255 for the state), so a QuantizeLinear that
# rounded otherwise, or a product that skipped the quantization, fails.
REFERENCE_ATOL = {"qdq_rnn_": 1e-3}
# --- quantized bodies (issue 28): end ---

# --- NMS loops and odd widths (issue 27 part 6): begin ---
def nms(rng, boxes, trips, iou_threshold=0.5):
    """Greedy NMS as TF/torchvision exporters write it as a Loop over [N,1] columns: each
    iteration takes the ArgMax of the remaining scores, Gathers that box, computes its IoU against
    every box (Slice the x1/y1/x2/y2 columns, Max/Min/Sub/Mul/Div), suppresses the boxes above the
    threshold (the chosen one included: IoU 1) with Greater/Where, and scan-outputs the index;
    it stops after `trips` boxes or when no positive score is left (ReduceMax/Greater)."""
    xy = rng.uniform(0.0, 1.0, (boxes, 2)).astype(np.float32)
    wh = rng.uniform(0.02, 0.2, (boxes, 2)).astype(np.float32)
    bxs = np.concatenate([xy, xy + wh], axis=1).astype(np.float32)
    scores = rng.uniform(0.01, 1.0, (boxes, 1)).astype(np.float32)
    ins = [vi("i", I64, []), vi("cond_in", B, []), vi("s_in", F, [boxes, 1])]
    outs = [vi("cond_out", B, []), vi("s_out", F, [boxes, 1]), vi("idx_scan", I64, [1])]
    cols = []
    for k, c in enumerate(("x1", "y1", "x2", "y2")):
        cols += [node("Slice", ["Boxes", "c%d" % k, "c%d" % (k + 1), "ax_1"], [c]),
                 node("Slice", ["box", "c%d" % k, "c%d" % (k + 1), "ax_1"], ["b" + c])]
    body = helper.make_graph(
        [node("ArgMax", ["s_in"], ["idx"], axis=0, keepdims=0),
         node("Gather", ["Boxes", "idx"], ["box"], axis=0)] + cols +
        [node("Max", ["x1", "bx1"], ["ix1"]),
         node("Max", ["y1", "by1"], ["iy1"]),
         node("Min", ["x2", "bx2"], ["ix2"]),
         node("Min", ["y2", "by2"], ["iy2"]),
         node("Sub", ["ix2", "ix1"], ["iw0"]),
         node("Sub", ["iy2", "iy1"], ["ih0"]),
         node("Max", ["iw0", "zero"], ["iw"]),
         node("Max", ["ih0", "zero"], ["ih"]),
         node("Mul", ["iw", "ih"], ["inter"]),
         node("Sub", ["x2", "x1"], ["w"]),
         node("Sub", ["y2", "y1"], ["h"]),
         node("Mul", ["w", "h"], ["area"]),
         node("Sub", ["bx2", "bx1"], ["bw"]),
         node("Sub", ["by2", "by1"], ["bh"]),
         node("Mul", ["bw", "bh"], ["barea"]),
         node("Add", ["area", "barea"], ["sum"]),
         node("Sub", ["sum", "inter"], ["union"]),
         node("Div", ["inter", "union"], ["iou"]),
         node("Greater", ["iou", "thr"], ["sup"]),
         node("Where", ["sup", "gone", "s_in"], ["s_out"]),
         node("ReduceMax", ["s_out"], ["best"], keepdims=0),
         node("Greater", ["best", "zero"], ["cond_out"]),
         node("Identity", ["idx"], ["idx_scan"])], "nms_body", ins, outs,
        [const("c%d" % k, np.array([k], np.int64)) for k in range(5)] +
        [const("ax_1", np.array([1], np.int64)), const("zero", np.array(0.0, np.float32)),
         const("thr", np.array(iou_threshold, np.float32)),
         const("gone", np.array(-1.0, np.float32))])
    g = loop_graph("nms", body, [vi("s0", F, [boxes, 1])],
                   [vi("s", F, [boxes, 1]), vi("keep", I64, [None, 1])], [],
                   [vi("Boxes", F, [boxes, 4])], loop_inputs=["M", "cond", "s0"])
    return make_model(g, 13), feeds(trips, [("Boxes", bxs), ("s0", scores)])


def nms_reference(inputs):
    """numpy greedy NMS over the nms case's inputs: {"s": scores left, "keep": [K,1] indices}."""
    boxes, s = inputs["Boxes"], inputs["s0"].copy()
    x1, y1, x2, y2 = (boxes[:, k:k + 1] for k in range(4))
    area = (x2 - x1) * (y2 - y1)
    keep = []
    for _ in range(int(inputs["M"])):
        j = int(np.argmax(s[:, 0]))
        keep.append(j)
        iw = np.maximum(np.minimum(x2, x2[j]) - np.maximum(x1, x1[j]), np.float32(0))
        ih = np.maximum(np.minimum(y2, y2[j]) - np.maximum(y1, y1[j]), np.float32(0))
        inter = iw * ih
        iou = inter / (area + area[j] - inter)
        s = np.where(iou > np.float32(0.5), np.float32(-1), s)
        if not s.max() > 0:
            break
    return {"s": s, "keep": np.array(keep, np.int64).reshape(-1, 1)}


def rnn_reference(inputs, init):
    """numpy RNN cell over the rnn case: {"h": last state, "hs": every state}."""
    h = inputs["h0"].astype(np.float64)
    hs = []
    for t in range(int(inputs["M"])):
        h = np.tanh(inputs["X"][t] @ init["W"] + h @ init["U"] + init["b"])
        hs.append(h)
    return {"h": h, "hs": np.stack(hs)}


def mlp_reference(inputs, init):
    """numpy residual MLP block (LayerNorm eps 1e-5, erf-GELU) over the mlp case."""
    from math import erf
    verf = np.vectorize(erf)
    h = inputs["h0"].astype(np.float64)
    hs = []
    for _ in range(int(inputs["M"])):
        xc = h - h.mean(-1, keepdims=True)
        ln = xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + 1e-5) * init["gamma"] + init["beta"]
        u = ln @ init["W1"] + init["b1"]
        h = h + (0.5 * u * (1.0 + verf(u / np.sqrt(2.0)))) @ init["W2"] + init["b2"]
        hs.append(h)
    return {"h": h, "hs": np.stack(hs)}


# Case name prefix -> numpy reference(inputs by name, initializers by name) -> {output: array}:
# tests/unit/engine/tools/grid_reference_test.py checks looprun against these.
REFERENCES = {
    "nms_": lambda inputs, init: nms_reference(inputs),
    "rnn_": rnn_reference,
    "mlp_": mlp_reference,
    "qdq_rnn_": qdq_rnn_reference,
}
# The cases that test checks (the others of these kinds are large; ORT is their peer).
REFERENCE_CASES = ("nms_n200_k20", "nms_n1000_k50", "rnn_b1_h333", "mlp_b7_h100",
                   "qdq_rnn_b3_h96")
# --- NMS loops and odd widths (issue 27 part 6): end ---

# ---- The grid ----------------------------------------------------------------------------------

# (case name, builder, keyword arguments). Trip counts keep ORT's time per run near 5-40 ms.
CASES = [
    ("rnn_b1_h128", rnn, dict(batch=1, hidden=128, trips=2000)),
    ("rnn_b8_h128", rnn, dict(batch=8, hidden=128, trips=1000)),
    ("rnn_b32_h128", rnn, dict(batch=32, hidden=128, trips=500)),
    ("rnn_b1_h512", rnn, dict(batch=1, hidden=512, trips=500)),
    ("rnn_b8_h512", rnn, dict(batch=8, hidden=512, trips=200)),
    ("rnn_b16_h512", rnn, dict(batch=16, hidden=512, trips=200)),
    ("rnn_b32_h512", rnn, dict(batch=32, hidden=512, trips=100)),
    ("rnn_b64_h64", rnn, dict(batch=64, hidden=64, trips=1000)),
    ("rnn_b64_h1024", rnn, dict(batch=64, hidden=1024, trips=20)),
    ("gru_b1_h256", gru, dict(batch=1, hidden=256, trips=1000)),
    ("gru_b16_h256", gru, dict(batch=16, hidden=256, trips=300)),
    ("gru_b64_h128", gru, dict(batch=64, hidden=128, trips=300)),
    ("lstm_b1_h128", lstm, dict(batch=1, hidden=128, trips=1000)),
    ("lstm_b16_h256", lstm, dict(batch=16, hidden=256, trips=200)),
    ("lstm_b64_h512", lstm, dict(batch=64, hidden=512, trips=30)),
    ("attn_b1_s64_h256", attn, dict(batch=1, seq=64, hidden=256, trips=500)),
    ("attn_b8_s128_h256", attn, dict(batch=8, seq=128, hidden=256, trips=200)),
    ("attn_b32_s32_h128", attn, dict(batch=32, seq=32, hidden=128, trips=300)),
    ("mamba_b1_d256", mamba, dict(batch=1, d=256, n=16, trips=512)),
    ("mamba_b4_d512", mamba, dict(batch=4, d=512, n=16, trips=256)),
    ("mamba_b16_d64", mamba, dict(batch=16, d=64, n=16, trips=512)),
    ("mlp_b1_h256", mlp, dict(batch=1, hidden=256, trips=300)),
    ("mlp_b16_h512", mlp, dict(batch=16, hidden=512, trips=100)),
    ("mlp_b64_h1024", mlp, dict(batch=64, hidden=1024, trips=10)),
    ("conv_b1_c16_32x32", conv, dict(batch=1, channels=16, size=32, trips=100)),
    ("conv_b8_c32_16x16", conv, dict(batch=8, channels=32, size=16, trips=50)),
    ("beam_k4_h256", beam, dict(beams=4, hidden=256, trips=200)),
    ("beam_k16_h512", beam, dict(beams=16, hidden=512, trips=30)),
    ("gpt_b1_h256", gpt, dict(batch=1, hidden=256, trips=128)),
    ("gpt_b4_h128", gpt, dict(batch=4, hidden=128, trips=128)),
    ("tensorarray_b1_h64", tensorarray, dict(batch=1, hidden=64, trips=500)),
    ("tensorarray_b8_h256", tensorarray, dict(batch=8, hidden=256, trips=200)),
    ("paste_n50_28", paste, dict(detections=50, size=28)),
    ("greedy_h256", greedy, dict(hidden=256, trips=1000)),
    ("counter", counter, dict(trips=100000)),
    ("scan16k", scan16k, dict(trips=2000)),
    ("nested", nested, dict(outer=200, inner=100)),
    # Quantized bodies (issue 28): compare each with the rnn case of the same batch and hidden.
    ("qrnn_b1_h512", qrnn, dict(batch=1, hidden=512, trips=500)),
    ("qrnn_b8_h512", qrnn, dict(batch=8, hidden=512, trips=200)),
    ("qrnn_b16_h512", qrnn, dict(batch=16, hidden=512, trips=200)),
    ("qrnn_b1_h128", qrnn, dict(batch=1, hidden=128, trips=2000)),
    ("qdq_rnn_b1_h512", qdq_rnn, dict(batch=1, hidden=512, trips=500)),
    ("qdq_rnn_b8_h512", qdq_rnn, dict(batch=8, hidden=512, trips=200)),
    ("qdq_rnn_b16_h512", qdq_rnn, dict(batch=16, hidden=512, trips=200)),
    ("qdq_rnn_b3_h96", qdq_rnn, dict(batch=3, hidden=96, trips=40)),
    # NMS loops and odd widths, not multiples of 16 (issue 27 part 6).
    ("nms_n200_k20", nms, dict(boxes=200, trips=20)),
    ("nms_n1000_k50", nms, dict(boxes=1000, trips=50)),
    ("rnn_b1_h333", rnn, dict(batch=1, hidden=333, trips=1000)),
    ("mlp_b7_h100", mlp, dict(batch=7, hidden=100, trips=300)),
]


# Keyword arguments that are iteration counts (capped by write_cases(max_trips=...)).
TRIP_ARGS = ("trips", "detections", "outer", "inner")


def write_case(out_dir, name, builder, kwargs, max_trips=None):
    """Builds one case into out_dir/name (model.onnx + test_data_set_0/input_<k>.pb); with
    max_trips, every iteration count is capped to it (same shapes per iteration, fewer steps:
    what tests/unit/engine/tools/no_reference_steps_test.py runs)."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))  # fixed per case, across runs
    if max_trips is not None:
        kwargs = {k: (min(v, max_trips) if k in TRIP_ARGS else v) for k, v in kwargs.items()}
    m, inputs = builder(rng, **kwargs)
    folder = os.path.join(out_dir, name)
    data = os.path.join(folder, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    onnx.save(m, os.path.join(folder, "model.onnx"))
    declared = [i.name for i in m.graph.input]
    by_name = dict(inputs)
    if sorted(declared) != sorted(by_name):
        raise ValueError("%s: inputs %s vs fed %s" % (name, declared, sorted(by_name)))
    for k, input_name in enumerate(declared):
        with open(os.path.join(data, "input_%d.pb" % k), "wb") as f:
            f.write(numpy_helper.from_array(np.asarray(by_name[input_name]),
                                            input_name).SerializeToString())


def selected(only):
    """CASES whose name contains one of the comma-separated substrings (all when empty)."""
    if not only:
        return CASES
    keys = only.split(",")
    return [c for c in CASES if any(k in c[0] for k in keys)]


def write_cases(out_dir, only="", max_trips=None):
    cases = selected(only)
    for name, builder, kwargs in cases:
        write_case(out_dir, name, builder, kwargs, max_trips)
    return [c[0] for c in cases]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("out_dir")
    p.add_argument("--only", default="")
    p.add_argument("--max-trips", type=int, default=None, help="cap every iteration count")
    args = p.parse_args()
    for name in write_cases(args.out_dir, args.only, args.max_trips):
        print(name)


if __name__ == "__main__":
    sys.exit(main())
