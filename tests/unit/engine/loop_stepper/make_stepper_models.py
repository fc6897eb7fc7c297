#!/usr/bin/python3
"""Models for LoopStepper (iteration-level batching) tests and bench/iteration_batching_bench.py.

    /usr/bin/python3 make_stepper_models.py OUT_DIR [HIDDEN VOCAB]

writes OUT_DIR/<name>/model.onnx for:

  decoder_rows   a greedy decoder Loop whose rows stop on their own: carried h [B,H], the last
                 token tok [B] and a budget [B]; each iteration embeds tok, steps a tanh RNN cell,
                 takes the argmax of the logits (the end token is never the argmax) and emits the
                 end token once the budget runs out; the condition is per row, tok != END ([B]).
                 Scan outputs: the tokens [T,B] and the hidden states [T,B,H].
  decoder_any    the same decoder with one condition for the whole batch (any row still running),
                 as request-level dynamic batching needs; finished rows keep emitting END. Refused
                 by the stepper (its ReduceMax reduces over the batch axis).
  counter_reads_i a body that reads the iteration counter (refused).
  carried_and_captured  x0 starts the carried x and the body also reads it: x <- x / 2 + x0.
  scaled         an unbatched scalar s the body reads: x <- x / 2 + s.

and OUT_DIR/decoder_rows/expected.txt: rows computed by a numpy transcription of the decoder (never
by loopserve), for the C++ test to compare with:

    <rows> <H>
    then per row: "<M> <budget> <tok0> <T>", a line of H floats h0, a line of T tokens, a line of H
    floats h_final.
"""
import os
import sys

import numpy as np

# onnx 1.12 still uses the numpy aliases removed in numpy 1.24.
np.float, np.int, np.bool, np.object = float, int, bool, object  # noqa: E702
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
END = 0


def weights(hidden, vocab, seed=7):
    rng = np.random.default_rng(seed)
    s = 1.0 / np.sqrt(hidden)
    w = {
        "E": rng.standard_normal((vocab, hidden)).astype(np.float32),
        "W": (rng.standard_normal((hidden, hidden)) * s).astype(np.float32),
        "U": (rng.standard_normal((hidden, hidden)) * s).astype(np.float32),
        "b": (rng.standard_normal(hidden) * 0.1).astype(np.float32),
        "O": (rng.standard_normal((hidden, vocab)) * s).astype(np.float32),
        "ob": np.zeros(vocab, np.float32),
    }
    w["ob"][END] = -1e4  # the argmax is never the end token: the budget decides the length
    return w


def decoder(hidden, vocab, per_row_condition=True):
    w = weights(hidden, vocab)
    c = lambda name, v: numpy_helper.from_array(np.asarray(v), name)  # noqa: E731
    nodes = [
        helper.make_node("Gather", ["E", "tok"], ["e"], axis=0),
        helper.make_node("MatMul", ["h", "W"], ["hw"]),
        helper.make_node("MatMul", ["e", "U"], ["eu"]),
        helper.make_node("Add", ["hw", "eu"], ["s0"]),
        helper.make_node("Add", ["s0", "b"], ["s1"]),
        helper.make_node("Tanh", ["s1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "O"], ["l0"]),
        helper.make_node("Add", ["l0", "ob"], ["logits"]),
        helper.make_node("ArgMax", ["logits"], ["am"], axis=1, keepdims=0),
        helper.make_node("Sub", ["budget", "one"], ["budget2"]),
        helper.make_node("LessOrEqual", ["budget2", "zero"], ["stop"]),
        helper.make_node("Where", ["stop", "end", "am"], ["tok2"]),
        helper.make_node("Equal", ["tok2", "end"], ["is_end"]),
        helper.make_node("Not", ["is_end"], ["running"]),
        helper.make_node("Identity", ["tok2"], ["tok_scan"]),
        helper.make_node("Identity", ["h2"], ["h_scan"]),
    ]
    if per_row_condition:
        nodes.append(helper.make_node("Identity", ["running"], ["cond_out"]))
    else:
        nodes += [
            helper.make_node("Cast", ["running"], ["running_i"], to=I64),
            helper.make_node("ReduceMax", ["running_i"], ["any_i"], keepdims=0),
            helper.make_node("Cast", ["any_i"], ["cond_out"], to=B),
        ]
    body = helper.make_graph(
        nodes, "body",
        [helper.make_tensor_value_info("i", I64, []),
         helper.make_tensor_value_info("cond_in", B, []),
         helper.make_tensor_value_info("h", F, ["B", hidden]),
         helper.make_tensor_value_info("tok", I64, ["B"]),
         helper.make_tensor_value_info("budget", I64, ["B"])],
        [helper.make_tensor_value_info("cond_out", B, None),
         helper.make_tensor_value_info("h2", F, ["B", hidden]),
         helper.make_tensor_value_info("tok2", I64, ["B"]),
         helper.make_tensor_value_info("budget2", I64, ["B"]),
         helper.make_tensor_value_info("tok_scan", I64, ["B"]),
         helper.make_tensor_value_info("h_scan", F, ["B", hidden])],
        [c("one", np.int64(1)), c("zero", np.int64(0)), c("end", np.int64(END))])
    loop = helper.make_node("Loop", ["M", "cond", "h0", "tok0", "budget0"],
                            ["h_final", "tok_final", "budget_final", "tokens", "hs"], body=body)
    graph = helper.make_graph(
        [loop], "decoder",
        [helper.make_tensor_value_info("M", I64, []), helper.make_tensor_value_info("cond", B, []),
         helper.make_tensor_value_info("h0", F, ["B", hidden]),
         helper.make_tensor_value_info("tok0", I64, ["B"]),
         helper.make_tensor_value_info("budget0", I64, ["B"])],
        [helper.make_tensor_value_info("h_final", F, ["B", hidden]),
         helper.make_tensor_value_info("tok_final", I64, ["B"]),
         helper.make_tensor_value_info("budget_final", I64, ["B"]),
         helper.make_tensor_value_info("tokens", I64, [None, "B"]),
         helper.make_tensor_value_info("hs", F, [None, "B", hidden])],
        [numpy_helper.from_array(v, k) for k, v in w.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                          producer_name="loopserve-tests")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m, w


def counter_reads_i():
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=F),
         helper.make_node("Add", ["x", "fi"], ["x2"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", I64, []),
         helper.make_tensor_value_info("cond_in", B, []),
         helper.make_tensor_value_info("x", F, ["B", 1])],
        [helper.make_tensor_value_info("cond_out", B, []),
         helper.make_tensor_value_info("x2", F, ["B", 1])])
    loop = helper.make_node("Loop", ["M", "", "x0"], ["x_final"], body=body)
    graph = helper.make_graph(
        [loop], "counter",
        [helper.make_tensor_value_info("M", I64, []),
         helper.make_tensor_value_info("x0", F, ["B", 1])],
        [helper.make_tensor_value_info("x_final", F, ["B", 1])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def carried_and_captured():
    """x0 both starts the carried x and is read by the body (a capture): x <- x * 0.5 + x0."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["x", "half"], ["xh"]),
         helper.make_node("Add", ["xh", "x0"], ["x2"]),
         helper.make_node("Identity", ["x2"], ["x_scan"])],
        "body",
        [helper.make_tensor_value_info("i", I64, []),
         helper.make_tensor_value_info("cond_in", B, []),
         helper.make_tensor_value_info("x", F, ["B", 4])],
        [helper.make_tensor_value_info("cond_out", B, []),
         helper.make_tensor_value_info("x2", F, ["B", 4]),
         helper.make_tensor_value_info("x_scan", F, ["B", 4])],
        [numpy_helper.from_array(np.float32(0.5), "half"),
         numpy_helper.from_array(np.array(True), "cond_out")])
    loop = helper.make_node("Loop", ["M", "", "x0"], ["x_final", "xs"], body=body)
    graph = helper.make_graph(
        [loop], "carried_and_captured",
        [helper.make_tensor_value_info("M", I64, []),
         helper.make_tensor_value_info("x0", F, ["B", 4])],
        [helper.make_tensor_value_info("x_final", F, ["B", 4]),
         helper.make_tensor_value_info("xs", F, [None, "B", 4])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def scaled():
    """An unbatched input the body reads: x <- x / 2 + s (s a scalar shared by the batch)."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["x", "half"], ["xh"]),
         helper.make_node("Add", ["xh", "s"], ["x2"])],
        "body",
        [helper.make_tensor_value_info("i", I64, []),
         helper.make_tensor_value_info("cond_in", B, []),
         helper.make_tensor_value_info("x", F, ["B", 4])],
        [helper.make_tensor_value_info("cond_out", B, []),
         helper.make_tensor_value_info("x2", F, ["B", 4])],
        [numpy_helper.from_array(np.float32(0.5), "half"),
         numpy_helper.from_array(np.array(True), "cond_out")])
    loop = helper.make_node("Loop", ["M", "", "x0"], ["x_final"], body=body)
    graph = helper.make_graph(
        [loop], "scaled",
        [helper.make_tensor_value_info("M", I64, []), helper.make_tensor_value_info("s", F, []),
         helper.make_tensor_value_info("x0", F, ["B", 4])],
        [helper.make_tensor_value_info("x_final", F, ["B", 4])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def scaled_text():
    """scaled with the unbatched s a string [1] the body parses: x <- x / 2 + Cast<float>(s), s
    looked up per element (Gather by zeros made from x) so the parse stays in the body."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["x", "zero"], ["x0s"]),
         helper.make_node("Cast", ["x0s"], ["zeros"], to=TensorProto.INT64),
         helper.make_node("Gather", ["s", "zeros"], ["st"], axis=0),
         helper.make_node("Cast", ["st"], ["sf"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["x", "half"], ["xh"]),
         helper.make_node("Add", ["xh", "sf"], ["x2"])],
        "body",
        [helper.make_tensor_value_info("i", I64, []),
         helper.make_tensor_value_info("cond_in", B, []),
         helper.make_tensor_value_info("x", F, ["B", 4])],
        [helper.make_tensor_value_info("cond_out", B, []),
         helper.make_tensor_value_info("x2", F, ["B", 4])],
        [numpy_helper.from_array(np.float32(0.5), "half"),
         numpy_helper.from_array(np.float32(0), "zero"),
         numpy_helper.from_array(np.array(True), "cond_out")])
    loop = helper.make_node("Loop", ["M", "", "x0"], ["x_final"], body=body)
    graph = helper.make_graph(
        [loop], "scaled_text",
        [helper.make_tensor_value_info("M", I64, []),
         helper.make_tensor_value_info("s", TensorProto.STRING, [1]),
         helper.make_tensor_value_info("x0", F, ["B", 4])],
        [helper.make_tensor_value_info("x_final", F, ["B", 4])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def reference(w, m, budget, tok0, h0):
    """The decoder for one row, in numpy (ONNX Loop semantics: runs while i < M and cond)."""
    h, tok, bud = h0.astype(np.float32), int(tok0), int(budget)
    tokens = []
    for _ in range(m):
        s = h @ w["W"] + w["E"][tok] @ w["U"] + w["b"]
        h = np.tanh(s).astype(np.float32)
        logits = h @ w["O"] + w["ob"]
        bud -= 1
        tok = END if bud <= 0 else int(np.argmax(logits))
        tokens.append(tok)
        if tok == END:
            break
    return tokens, h


def main(out, hidden=16, vocab=12):
    for name, per_row in (("decoder_rows", True), ("decoder_any", False)):
        m, w = decoder(hidden, vocab, per_row)
        os.makedirs(os.path.join(out, name), exist_ok=True)
        onnx.save(m, os.path.join(out, name, "model.onnx"))
    os.makedirs(os.path.join(out, "carried_and_captured"), exist_ok=True)
    onnx.save(carried_and_captured(), os.path.join(out, "carried_and_captured", "model.onnx"))
    os.makedirs(os.path.join(out, "scaled"), exist_ok=True)
    onnx.save(scaled(), os.path.join(out, "scaled", "model.onnx"))
    os.makedirs(os.path.join(out, "scaled_text"), exist_ok=True)
    onnx.save(scaled_text(), os.path.join(out, "scaled_text", "model.onnx"))
    os.makedirs(os.path.join(out, "counter_reads_i"), exist_ok=True)
    onnx.save(counter_reads_i(), os.path.join(out, "counter_reads_i", "model.onnx"))
    if hidden != 16 or vocab != 12:
        return  # bench models (bench/loop_stepper_bench.cc): no expected rows
    rng = np.random.default_rng(3)
    rows = [(64, 1), (64, 5), (64, 9), (3, 20), (64, 2), (64, 13), (0, 4), (64, 7)]
    with open(os.path.join(out, "decoder_rows", "expected.txt"), "w") as f:
        f.write(f"{len(rows)} {hidden}\n")
        for m_trip, budget in rows:
            tok0 = int(rng.integers(1, vocab))
            h0 = rng.standard_normal(hidden).astype(np.float32)
            tokens, h = reference(w, m_trip, budget, tok0, h0)
            f.write(f"{m_trip} {budget} {tok0} {len(tokens)}\n")
            f.write(" ".join(f"{v:.9g}" for v in h0) + "\n")
            f.write(" ".join(str(t) for t in tokens) + "\n")
            f.write(" ".join(f"{v:.9g}" for v in (h if tokens else h0)) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], *(int(v) for v in sys.argv[2:4]))
