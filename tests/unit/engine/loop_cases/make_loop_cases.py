#!/usr/bin/python3
"""Writes Loop test cases in the ONNX backend-test layout:

    OUT/<case>/model.onnx
    OUT/<case>/test_data_set_0/{input_<k>.pb, output_<k>.pb}

Every expected output is computed here by a plain numpy transcription of the ONNX Loop pseudo-code
(onnx/defs/controlflow/defs.cc), never by loopserve. Run with Debian's /usr/bin/python3:

    /usr/bin/python3 make_loop_cases.py OUT_DIR
"""
import os
import sys

import numpy as np

# onnx 1.12 still uses the numpy aliases removed in numpy 1.24.
np.float, np.int, np.bool, np.object = float, int, bool, object  # noqa: E702
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def const(name, array):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(array), name))


def model(graph, opset=13):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="loopserve-tests")
    m.ir_version = 8 if opset >= 13 else 7
    return m


def loop_semantics(m, cond, state, body):
    """The ONNX Loop pseudo-code. body(i, cond, *state) -> (cond_out, state..., scans...)."""
    scans = None
    i = 0
    n_state = len(state)
    while (m is None or i < m) and (cond is None or cond):
        outs = body(i, True if cond is None else cond, *state)
        cond = bool(outs[0])
        state = list(outs[1:1 + n_state])
        step_scans = outs[1 + n_state:]
        if scans is None:
            scans = [[] for _ in step_scans]
        for k, s in enumerate(step_scans):
            scans[k].append(np.asarray(s))
        i += 1
    return state, scans, i


def write_case(out_dir, name, onnx_model, inputs, outputs, atol=None):
    """atol: the case's absolute tolerance (an ATOL file, engine/tools/conformance.h) in place of
    1e-7, for references that float32 rounding alone can miss by more."""
    onnx.checker.check_model(onnx_model)
    case = os.path.join(out_dir, name)
    data = os.path.join(case, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    if atol is not None:
        with open(os.path.join(case, "ATOL"), "w") as f:
            f.write("%g\n" % atol)
    onnx.save(onnx_model, os.path.join(case, "model.onnx"))
    graph = onnx_model.graph
    for k, value in enumerate(inputs):
        t = numpy_helper.from_array(np.asarray(value), graph.input[k].name)
        with open(os.path.join(data, f"input_{k}.pb"), "wb") as f:
            f.write(t.SerializeToString())
    for k, value in enumerate(outputs):
        t = numpy_helper.from_array(np.asarray(value), graph.output[k].name)
        with open(os.path.join(data, f"output_{k}.pb"), "wb") as f:
            f.write(t.SerializeToString())


def counter_body(elem, np_type):
    """x_out = x + 1, scan = x + 1, cond_out = cond_in."""
    return helper.make_graph(
        [const("one", np.array(1, np_type)),
         helper.make_node("Add", ["x_in", "one"], ["x_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Identity", ["x_out"], ["scan"])],
        "counter_body",
        [vi("i", I64, []), vi("cond_in", B, []), vi("x_in", elem, [])],
        [vi("cond_out", B, []), vi("x_out", elem, []), vi("scan", elem, [])])


def counter_np(m, cond, x, np_type=np.int64):
    def body(i, c, x):
        return c, np_type(x + 1), np_type(x + 1)
    (x_final,), scans, _ = loop_semantics(m, cond, [x], body)
    scan = np.array(scans[0] if scans else [], np_type)
    return x_final, scan


def cases_mode(out_dir):
    """The (M, cond) modes, opsets 1/11/13/16, and M/cond of rank 0 and [1]. Without M the body
    stops itself (cond_out = x_out < 13); with neither M nor cond the spec calls the loop
    infinite, and ONNX Runtime, like loopserve, still ends it when the body's cond_out is false."""
    for opset in (1, 11, 13, 16):
        # Add-1 and Less-1 only take floating-point tensors.
        elem, np_type = (F, np.float32) if opset == 1 else (I64, np.int64)
        for m_given, c_given in ((True, False), (False, True), (True, True), (False, False)):
            name = f"loop{opset}_counter_m{'M' if m_given else 'x'}_c{'C' if c_given else 'x'}"
            inputs, graph_inputs, vals = ["", ""], [], []
            if m_given:
                inputs[0] = "M"
                graph_inputs.append(vi("M", I64, []))
                vals.append(np.array(5, np.int64))
            if c_given:
                inputs[1] = "cond"
                graph_inputs.append(vi("cond", B, []))
                vals.append(np.array(True))
            graph_inputs.append(vi("x0", elem, []))
            vals.append(np.array(10, np_type))
            body = counter_body(elem, np_type)
            if not m_given:
                # A while loop: the body stops itself at x == 13 (cond_out = x_out < 13).
                body = helper.make_graph(
                    [const("one", np.array(1, np_type)), const("lim", np.array(13, np_type)),
                     helper.make_node("Add", ["x_in", "one"], ["x_out"]),
                     helper.make_node("Less", ["x_out", "lim"], ["cond_out"]),
                     helper.make_node("Identity", ["x_out"], ["scan"])],
                    "while_body",
                    [vi("i", I64, []), vi("cond_in", B, []), vi("x_in", elem, [])],
                    [vi("cond_out", B, []), vi("x_out", elem, []), vi("scan", elem, [])])
            loop = helper.make_node("Loop", inputs + ["x0"], ["x_final", "scan_out"], body=body)
            g = helper.make_graph([loop], name, graph_inputs,
                                  [vi("x_final", elem, []), vi("scan_out", elem, [None])])
            if m_given:
                expected = counter_np(5, True, np_type(10), np_type)
            else:
                def body_np(i, c, x):
                    return x + 1 < 13, np_type(x + 1), np_type(x + 1)
                (xf,), scans, _ = loop_semantics(None, True, [np_type(10)], body_np)
                expected = (xf, np.array(scans[0], np_type))
            write_case(out_dir, name, model(g, opset), vals,
                       [np.array(expected[0], np_type), expected[1]])

    # M given as a [1] tensor and cond as [1]; M negative (0 iterations); cond false at entry.
    for name, m_val, c_val in (("loop_m_rank1", np.array([4], np.int64), np.array([True])),
                               ("loop_m_negative", np.array(-3, np.int64), np.array(True)),
                               ("loop_cond_false", np.array(5, np.int64), np.array(False))):
        body = counter_body(I64, np.int64)
        loop = helper.make_node("Loop", ["M", "cond", "x0"], ["x_final", "scan_out"], body=body)
        g = helper.make_graph([loop], name,
                              [vi("M", I64, list(m_val.shape)), vi("cond", B, list(c_val.shape)),
                               vi("x0", I64, [])],
                              [vi("x_final", I64, []), vi("scan_out", I64, [None])])
        m = int(m_val.reshape(-1)[0])
        xf, scan = counter_np(max(m, 0), bool(c_val.reshape(-1)[0]), np.int64(7))
        write_case(out_dir, name, model(g), [m_val, c_val, np.array(7, np.int64)],
                   [np.array(xf, np.int64), scan.reshape(0) if scan.size == 0 else scan])


def case_iteration_and_outer_scope(out_dir):
    """Scan of i * w where w is a main-graph input read from inside the body; cond stops at i==3."""
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["i_f"], to=F),
         helper.make_node("Mul", ["i_f", "w"], ["scan"]),
         helper.make_node("Add", ["acc_in", "scan"], ["acc_out"]),
         const("three", np.array(3, np.int64)),
         helper.make_node("Less", ["i", "three"], ["cond_out"])],
        "body", [vi("i", I64, []), vi("cond_in", B, []), vi("acc_in", F, [2])],
        [vi("cond_out", B, []), vi("acc_out", F, [2]), vi("scan", F, [2])])
    loop = helper.make_node("Loop", ["M", "", "acc0"], ["acc", "scans"], body=body)
    g = helper.make_graph([loop], "outer_scope",
                          [vi("M", I64, []), vi("acc0", F, [2]), vi("w", F, [2])],
                          [vi("acc", F, [2]), vi("scans", F, [None, 2])])
    w = np.array([0.5, -2.0], np.float32)

    def body_np(i, c, acc):
        s = np.float32(i) * w
        return i < 3, acc + s, s
    acc0 = np.array([1.0, 1.0], np.float32)
    (acc,), scans, _ = loop_semantics(10, True, [acc0], body_np)
    write_case(out_dir, "loop_iteration_outer_scope", model(g),
               [np.array(10, np.int64), acc0, w], [acc, np.stack(scans[0])])


def case_growing_carried(out_dir):
    """A carried value that grows every iteration: y = Concat(y, [i])."""
    body = helper.make_graph(
        [const("axes", np.array([0], np.int64)),
         helper.make_node("Unsqueeze", ["i", "axes"], ["i1"]),
         helper.make_node("Concat", ["y_in", "i1"], ["y_out"], axis=0),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "grow", [vi("i", I64, []), vi("cond_in", B, []), vi("y_in", I64, [None])],
        [vi("cond_out", B, []), vi("y_out", I64, [None])])
    loop = helper.make_node("Loop", ["M", "", "y0"], ["y"], body=body)
    g = helper.make_graph([loop], "grow", [vi("M", I64, []), vi("y0", I64, [None])],
                          [vi("y", I64, [None])])
    y0 = np.array([100], np.int64)
    (y,), _, _ = loop_semantics(6, None, [y0],
                                lambda i, c, y: (True, np.concatenate([y, [i]])))
    write_case(out_dir, "loop_growing_carried", model(g), [np.array(6, np.int64), y0], [y])


def case_tensor_array(out_dir, name, trips, read_old=False, alias=False):
    """tf2onnx's TensorArray write: ta = ScatterND(ta, [[i]], Unsqueeze(h)) with h = Tanh(X[i] * w
    + h). loopserve updates the carried array in place when nothing else reads its old value
    (KernelContext::TakeInput). read_old: a scan output also reads the old array (ReduceSum), so
    it must be copied; alias: the new array is also a second carried value's result (one result
    feeding two back edges)."""
    T, Bt, H = 5, 2, 3
    nodes = [helper.make_node("Gather", ["X", "i"], ["x_t"], axis=0),
             helper.make_node("Mul", ["x_t", "w"], ["xw"]),
             helper.make_node("Add", ["xw", "h_in"], ["pre"]),
             helper.make_node("Tanh", ["pre"], ["h_out"]),
             const("idx_shape", np.array([1, 1], np.int64)),
             const("ax0", np.array([0], np.int64)),
             helper.make_node("Reshape", ["i", "idx_shape"], ["idx"]),
             helper.make_node("Unsqueeze", ["h_out", "ax0"], ["upd"]),
             helper.make_node("ScatterND", ["ta_in", "idx", "upd"], ["ta_out"]),
             helper.make_node("Identity", ["cond_in"], ["cond_out"])]
    ins = [vi("i", I64, []), vi("cond_in", B, []), vi("h_in", F, [Bt, H]),
           vi("ta_in", F, [T, Bt, H])]
    outs = [vi("cond_out", B, []), vi("h_out", F, [Bt, H]), vi("ta_out", F, [T, Bt, H])]
    loop_in, loop_out = ["M", "", "h0", "ta0"], ["h", "ta"]
    g_outs = [vi("h", F, [Bt, H]), vi("ta", F, [T, Bt, H])]
    if alias:
        ins.append(vi("ta2_in", F, [T, Bt, H]))
        outs.append(vi("ta_out2", F, [T, Bt, H]))
        nodes.append(helper.make_node("Identity", ["ta_out"], ["ta_out2"]))
        loop_in.append("ta0")
        loop_out.append("ta2")
        g_outs.append(vi("ta2", F, [T, Bt, H]))
    if read_old:
        outs.append(vi("old_sum", F, []))
        nodes.append(helper.make_node("ReduceSum", ["ta_in"], ["old_sum"], keepdims=0))
        loop_out.append("old_sums")
        g_outs.append(vi("old_sums", F, [None]))
    body = helper.make_graph(nodes, "ta_body", ins, outs)
    loop = helper.make_node("Loop", loop_in, loop_out, body=body)
    g = helper.make_graph([loop], name,
                          [vi("M", I64, []), vi("X", F, [T, Bt, H]), vi("w", F, [H]),
                           vi("h0", F, [Bt, H]), vi("ta0", F, [T, Bt, H])], g_outs)
    rng = np.random.default_rng(21)
    X = rng.standard_normal((T, Bt, H)).astype(np.float32)
    w = rng.uniform(0.5, 1.0, H).astype(np.float32)
    h0 = np.zeros((Bt, H), np.float32)
    ta0 = rng.standard_normal((T, Bt, H)).astype(np.float32)

    def body_np(i, c, h, ta, *rest):
        h = np.tanh(X[i] * w + h).astype(np.float32)
        new = ta.copy()
        new[i] = h
        outs = [c, h, new] + ([new] if alias else [])
        if read_old:
            outs.append(np.float32(ta.sum(dtype=np.float32)))
        return tuple(outs)
    state = [h0, ta0] + ([ta0] if alias else [])
    final, scans, _ = loop_semantics(trips, None, state, body_np)
    expected = list(final)
    if read_old:
        expected.append(np.array(scans[0] if scans else [], np.float32))
    write_case(out_dir, name, model(g), [np.array(trips, np.int64), X, w, h0, ta0], expected)


def case_append(out_dir, name, trips, axis, read_old=False, alias=False):
    """res = Concat(res, row) along axis 0 of a [n, 3] carried value (a0), axis 1 of [1, n, 3]
    (a1: the old value is a prefix of the new one) or of [2, n, 3] (a1b), axis 2 of [2, 3, n, 3]
    (a2: a KV cache's layout; the old rows move apart in the buffer), row from X[i]; read_old /
    alias as in case_tensor_array."""
    lead = {"a0": [], "a1": [1], "a1b": [2], "a2": [2, 3]}[axis]
    ax = len(lead)
    X = np.random.default_rng(22).standard_normal([max(trips, 1)] + lead + [1, 3]).astype(
        np.float32)
    nodes = [helper.make_node("Gather", ["X", "i"], ["row"], axis=0),
             helper.make_node("Concat", ["res_in", "row"], ["res_out"], axis=ax),
             helper.make_node("Identity", ["cond_in"], ["cond_out"])]
    shape = lead + [None, 3]
    ins = [vi("i", I64, []), vi("cond_in", B, []), vi("res_in", F, shape)]
    outs = [vi("cond_out", B, []), vi("res_out", F, shape)]
    loop_in, loop_out, g_outs = ["M", "", "r0"], ["res"], [vi("res", F, shape)]
    if alias:
        ins.append(vi("res2_in", F, shape))
        outs.append(vi("res_out2", F, shape))
        nodes.append(helper.make_node("Identity", ["res_out"], ["res_out2"]))
        loop_in.append("r0")
        loop_out.append("res2")
        g_outs.append(vi("res2", F, shape))
    if read_old:
        outs.append(vi("old_sum", F, []))
        nodes.append(helper.make_node("ReduceSum", ["res_in"], ["old_sum"], keepdims=0))
        loop_out.append("old_sums")
        g_outs.append(vi("old_sums", F, [None]))
    body = helper.make_graph(nodes, "append_body", ins, outs)
    loop = helper.make_node("Loop", loop_in, loop_out, body=body)
    g = helper.make_graph([loop], name, [vi("M", I64, []), vi("X", F, list(X.shape)),
                                         vi("r0", F, lead + [2, 3])], g_outs)
    r0 = np.arange(np.prod(lead + [2, 3]), dtype=np.float32).reshape(lead + [2, 3])

    def body_np(i, c, res, *rest):
        new = np.concatenate([res, X[i]], axis=ax)
        outs = [c, new] + ([new] if alias else [])
        if read_old:
            outs.append(np.float32(res.sum(dtype=np.float32)))
        return tuple(outs)
    final, scans, _ = loop_semantics(trips, None, [r0] + ([r0] if alias else []), body_np)
    expected = list(final)
    if read_old:
        expected.append(np.array(scans[0] if scans else [], np.float32))
    write_case(out_dir, name, model(g), [np.array(trips, np.int64), X, r0], expected)


def case_sequence_append(out_dir, name, trips, read_old=False):
    """A scripted PyTorch loop's list.append: a carried sequence grows by SequenceInsert(seq,
    X[i] * 2) every iteration (appended in place when nothing else reads the old list); the main
    graph stacks it (ConcatFromSequence, new_axis=1) after an initial element. read_old: a scan
    output also reads the old list (SequenceLength)."""
    X = np.random.default_rng(23).standard_normal((max(trips, 1), 2, 3)).astype(np.float32)
    seq_t = helper.make_tensor_sequence_value_info
    nodes = [helper.make_node("Gather", ["X", "i"], ["x_t"], axis=0),
             const("two", np.array(2, np.float32)),
             helper.make_node("Mul", ["x_t", "two"], ["x2"]),
             helper.make_node("SequenceInsert", ["seq_in", "x2"], ["seq_out"]),
             helper.make_node("Identity", ["cond_in"], ["cond_out"])]
    outs = [vi("cond_out", B, []), seq_t("seq_out", F, [2, 3])]
    loop_out = ["seq"]
    if read_old:
        nodes.append(helper.make_node("SequenceLength", ["seq_in"], ["old_len"]))
        outs.append(vi("old_len", I64, []))
        loop_out.append("old_lens")
    body = helper.make_graph(nodes, "seq_body",
                             [vi("i", I64, []), vi("cond_in", B, []), seq_t("seq_in", F, [2, 3])],
                             outs)
    g_nodes = [helper.make_node("SequenceConstruct", ["first"], ["seq0"]),
               helper.make_node("Loop", ["M", "", "seq0"], loop_out, body=body),
               helper.make_node("ConcatFromSequence", ["seq"], ["stacked"], axis=0, new_axis=1)]
    g_outs = [vi("stacked", F, [None, 2, 3])]
    if read_old:
        g_outs.append(vi("old_lens", I64, [None]))
    g = helper.make_graph(g_nodes, name, [vi("M", I64, []), vi("X", F, list(X.shape)),
                                          vi("first", F, [2, 3])], g_outs)
    first = np.full((2, 3), 0.5, np.float32)
    stacked = [first] + [X[i] * np.float32(2) for i in range(trips)]
    expected = [np.stack(stacked)]
    if read_old:
        expected.append(np.arange(1, trips + 1, dtype=np.int64))
    write_case(out_dir, name, model(g), [np.array(trips, np.int64), X, first], expected)


def case_nested_tensor_array(out_dir):
    """An outer Loop carries a [T, 2] array; its body hands the array to an inner Loop (as the
    inner carried value's initial value) which writes rows 0..N-1 in place, then writes row
    T-1-oi itself and also reads the array it started from (ReduceSum, a scan output): the
    outer value must survive the inner Loop and the in-place writes."""
    T, N = 6, 2
    inner = helper.make_graph(
        [const("idx_shape", np.array([1, 1], np.int64)),
         const("ones", np.ones((1, 2), np.float32)),
         const("ten", np.array(10, np.int64)),
         helper.make_node("Mul", ["oi", "ten"], ["oi10"]),
         helper.make_node("Add", ["oi10", "j"], ["v"]),
         helper.make_node("Cast", ["v"], ["v_f"], to=F),
         helper.make_node("Mul", ["ones", "v_f"], ["upd"]),
         helper.make_node("Reshape", ["j", "idx_shape"], ["idx"]),
         helper.make_node("ScatterND", ["a_in", "idx", "upd"], ["a_out"]),
         helper.make_node("Identity", ["c_in"], ["c_out"])],
        "inner", [vi("j", I64, []), vi("c_in", B, []), vi("a_in", F, [T, 2])],
        [vi("c_out", B, []), vi("a_out", F, [T, 2])])
    outer = helper.make_graph(
        [helper.make_node("Loop", ["N", "", "a_in"], ["a_mid"], body=inner),
         const("idx_shape", np.array([1, 1], np.int64)),
         const("last", np.array(T - 1, np.int64)),
         const("neg1", np.full((1, 2), -1.0, np.float32)),
         helper.make_node("Sub", ["last", "oi"], ["r"]),
         helper.make_node("Reshape", ["r", "idx_shape"], ["idx"]),
         helper.make_node("Add", ["oi", "one"], ["oi1"]),
         helper.make_node("Cast", ["oi1"], ["oi1_f"], to=F),
         helper.make_node("Mul", ["neg1", "oi1_f"], ["upd"]),
         helper.make_node("ScatterND", ["a_mid", "idx", "upd"], ["a_out"]),
         helper.make_node("ReduceSum", ["a_in"], ["old_sum"], keepdims=0),
         helper.make_node("Identity", ["c_in"], ["c_out"])],
        "outer", [vi("oi", I64, []), vi("c_in", B, []), vi("a_in", F, [T, 2])],
        [vi("c_out", B, []), vi("a_out", F, [T, 2]), vi("old_sum", F, [])])
    outer.initializer.append(numpy_helper.from_array(np.array(1, np.int64), "one"))
    loop = helper.make_node("Loop", ["M", "", "a0"], ["a", "old_sums"], body=outer)
    g = helper.make_graph([loop], "nested_ta",
                          [vi("M", I64, []), vi("N", I64, []), vi("a0", F, [T, 2])],
                          [vi("a", F, [T, 2]), vi("old_sums", F, [None])])
    a0 = np.arange(T * 2, dtype=np.float32).reshape(T, 2) * 0.5

    def outer_np(oi, c, a):
        mid = a.copy()
        for j in range(N):
            mid[j] = np.float32(oi * 10 + j)
        out = mid.copy()
        out[T - 1 - oi] = -np.float32(oi + 1)
        return c, out, np.float32(a.sum(dtype=np.float32))
    (a,), scans, _ = loop_semantics(3, None, [a0], outer_np)
    write_case(out_dir, "loop_nested_tensor_array", model(g),
               [np.array(3, np.int64), np.array(N, np.int64), a0],
               [a, np.array(scans[0], np.float32)])


def case_nested(out_dir):
    """Nested loops: the inner body reads the main graph's `step` (two scopes up) and the outer
    body's iteration number; both loops have scan outputs."""
    inner = helper.make_graph(
        [helper.make_node("Cast", ["oi"], ["oi_f"], to=F),
         helper.make_node("Mul", ["oi_f", "step"], ["d"]),
         helper.make_node("Add", ["s_in", "d"], ["s_out"]),
         helper.make_node("Identity", ["s_out"], ["inner_scan"]),
         helper.make_node("Identity", ["c_in"], ["c_out"])],
        "inner", [vi("j", I64, []), vi("c_in", B, []), vi("s_in", F, [])],
        [vi("c_out", B, []), vi("s_out", F, []), vi("inner_scan", F, [])])
    outer = helper.make_graph(
        [helper.make_node("Loop", ["N", "", "s_in"], ["s_mid", "inner_scans"], body=inner),
         helper.make_node("Identity", ["s_mid"], ["s_out"]),
         helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("ReduceSum", ["inner_scans"], ["row_sum"], keepdims=0)],
        "outer", [vi("oi", I64, []), vi("c_in", B, []), vi("s_in", F, [])],
        [vi("c_out", B, []), vi("s_out", F, []), vi("row_sum", F, [])])
    loop = helper.make_node("Loop", ["M", "", "s0"], ["s", "sums"], body=outer)
    g = helper.make_graph([loop], "nested",
                          [vi("M", I64, []), vi("N", I64, []), vi("s0", F, []), vi("step", F, [])],
                          [vi("s", F, []), vi("sums", F, [None])])
    step = np.float32(0.25)

    def outer_np(oi, c, s):
        def inner_np(j, c2, s2):
            s2 = np.float32(s2 + np.float32(oi) * step)
            return c2, s2, s2
        (s_mid,), scans, _ = loop_semantics(4, None, [s], inner_np)
        return c, s_mid, np.float32(np.sum(np.array(scans[0], np.float32)))
    (s,), scans, _ = loop_semantics(3, None, [np.float32(1.0)], outer_np)
    write_case(out_dir, "loop_nested", model(g),
               [np.array(3, np.int64), np.array(4, np.int64), np.array(1.0, np.float32),
                np.array(step, np.float32)],
               [np.array(s, np.float32), np.array(scans[0], np.float32)])


def case_nested_rnn(out_dir, batch=16, hidden=128, outer_trips=3, inner_trips=4, seed=16):
    """An RNN cell (Tanh(MatMul(h, W) + b), products large enough to split over the Loop's
    SpinTeam) in an inner Loop, inside an outer Loop that halves h after each inner run and scans
    it: the inner Loop runs inside the outer one's thread mode (loop_test.cc)."""
    rng = np.random.default_rng(seed)
    W = (rng.standard_normal((hidden, hidden)) * 0.02).astype(np.float32)
    b = rng.standard_normal((hidden,)) * 0.1
    b = (b + np.sign(b) * 0.5).astype(np.float32)
    half = np.array(0.5, np.float32)
    inner = helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "W"], ["mm"]),
         helper.make_node("Add", ["mm", "b"], ["pre"]),
         helper.make_node("Tanh", ["pre"], ["h_out"]),
         helper.make_node("Identity", ["c_in"], ["c_out"])],
        "inner", [vi("j", I64, []), vi("c_in", B, []), vi("h_in", F, [batch, hidden])],
        [vi("c_out", B, []), vi("h_out", F, [batch, hidden])])
    outer = helper.make_graph(
        [helper.make_node("Loop", ["N", "", "h_in"], ["h_mid"], body=inner),
         helper.make_node("Mul", ["h_mid", "half"], ["h_out"]),
         helper.make_node("Identity", ["h_out"], ["hs"]),
         helper.make_node("Identity", ["c_in"], ["c_out"])],
        "outer", [vi("i", I64, []), vi("c_in", B, []), vi("h_in", F, [batch, hidden])],
        [vi("c_out", B, []), vi("h_out", F, [batch, hidden]), vi("hs", F, [batch, hidden])])
    loop = helper.make_node("Loop", ["M", "", "h0"], ["h", "hs_all"], body=outer)
    g = helper.make_graph([loop], "nested_rnn",
                          [vi("M", I64, []), vi("N", I64, []), vi("h0", F, [batch, hidden])],
                          [vi("h", F, [batch, hidden]), vi("hs_all", F, [None, batch, hidden])],
                          initializer=[numpy_helper.from_array(a, n) for a, n in
                                       ((W, "W"), (b, "b"), (half, "half"))])
    h0 = rng.standard_normal((batch, hidden)).astype(np.float32)

    def outer_np(i, c, h):
        for _ in range(inner_trips):
            h = np.tanh(h.astype(np.float64) @ W + b).astype(np.float32)
        h = (h * half).astype(np.float32)
        return True, h, h
    (h,), scans, _ = loop_semantics(outer_trips, None, [h0], outer_np)
    write_case(out_dir, "loop_nested_rnn", model(g),
               [np.array(outer_trips, np.int64), np.array(inner_trips, np.int64), h0],
               [h, np.stack(scans[0])])


def case_if_inside_loop(out_dir):
    """An If inside the body picks x*2 on even iterations and x-1 on odd ones."""
    then_g = helper.make_graph([helper.make_node("Mul", ["x_in", "two"], ["r"])], "then", [],
                               [vi("r", F, [2])])
    else_g = helper.make_graph([helper.make_node("Sub", ["x_in", "onef"], ["r2"])], "else", [],
                               [vi("r2", F, [2])])
    body = helper.make_graph(
        [const("two_i", np.array(2, np.int64)), const("zero_i", np.array(0, np.int64)),
         const("two", np.array(2.0, np.float32)), const("onef", np.array(1.0, np.float32)),
         helper.make_node("Mod", ["i", "two_i"], ["m"]),
         helper.make_node("Equal", ["m", "zero_i"], ["even"]),
         helper.make_node("If", ["even"], ["x_out"], then_branch=then_g, else_branch=else_g),
         helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Identity", ["x_out"], ["scan"])],
        "body", [vi("i", I64, []), vi("cond_in", B, []), vi("x_in", F, [2])],
        [vi("cond_out", B, []), vi("x_out", F, [2]), vi("scan", F, [2])])
    loop = helper.make_node("Loop", ["M", "", "x0"], ["x", "xs"], body=body)
    g = helper.make_graph([loop], "if_in_loop", [vi("M", I64, []), vi("x0", F, [2])],
                          [vi("x", F, [2]), vi("xs", F, [None, 2])])

    def body_np(i, c, x):
        r = x * np.float32(2) if i % 2 == 0 else x - np.float32(1)
        return True, r, r
    x0 = np.array([1.0, 3.0], np.float32)
    (x,), scans, _ = loop_semantics(5, None, [x0], body_np)
    write_case(out_dir, "loop_if_inside", model(g), [np.array(5, np.int64), x0],
               [x, np.stack(scans[0])])


def case_rnn(out_dir, name="loop_rnn", hidden=8, trips=6, seed=7, scale=0.3, batch=1,
             bias_floor=0.0):
    """h = Tanh(MatMul(h, W) + b), scan of h: the RNN-cell body. As loop_rnn_wide, 300 hidden
    units at batch 1: the packed one-row matmul's column tail (300 = 2 x 128 + 44) inside a Loop
    body, weights an initializer. As loop_rnn_batch, 6 rows: a oneDNN product with packed
    constant weights (under ONEDNN_MAX_CPU_ISA=AVX2, ctest loop_cases_avx2, a 1x1 convolution)."""
    rng = np.random.default_rng(seed)
    W = (rng.standard_normal((hidden, hidden)) * scale).astype(np.float32)
    b = rng.standard_normal((hidden,)) * 0.1
    # bias_floor keeps every pre-activation away from 0, where a long float32 dot product's
    # rounding (~1e-7) would exceed the comparison's absolute tolerance.
    b = (b + np.sign(b) * bias_floor).astype(np.float32)
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "W"], ["mm"]),
         helper.make_node("Add", ["mm", "b"], ["pre"]),
         helper.make_node("Tanh", ["pre"], ["h_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Identity", ["h_out"], ["hs"])],
        "rnn_body", [vi("i", I64, []), vi("cond_in", B, []), vi("h_in", F, [batch, hidden])],
        [vi("cond_out", B, []), vi("h_out", F, [batch, hidden]), vi("hs", F, [batch, hidden])])
    loop = helper.make_node("Loop", ["M", "", "h0"], ["h", "hs_all"], body=body)
    g = helper.make_graph([loop], "rnn", [vi("M", I64, []), vi("h0", F, [batch, hidden])],
                          [vi("h", F, [batch, hidden]), vi("hs_all", F, [None, batch, hidden])],
                          initializer=[numpy_helper.from_array(W, "W"), numpy_helper.from_array(b, "b")])
    h0 = (rng.standard_normal((batch, hidden))).astype(np.float32)

    def body_np(i, c, h):
        h = np.tanh(h.astype(np.float64) @ W + b).astype(np.float32)
        return True, h, h
    (h,), scans, _ = loop_semantics(trips, None, [h0], body_np)
    write_case(out_dir, name, model(g), [np.array(trips, np.int64), h0], [h, np.stack(scans[0])])


def case_input_projection(out_dir, name, batch, hidden, inputs, trips, seed, atol=None):
    """An RNN over a sequence input as exporters write it: x_t = Gather(X, i), h = Tanh(x_t W +
    Gemm(x_t, G, c, alpha=0.5, beta=2, transB=1) + h U). engine/transform/hoist_loop_projections
    computes x_t W and the Gemm for all steps before the Loop at batch <= 4 (at 5 they stay in
    the body); the Loop runs only `trips` of X's steps (fewer than X has). atol: see write_case;
    at batch 5 and 16 some outputs sit near 0 after cancellation (-6.4e-5, -2.6e-5), where
    float32 rounding carried through the steps misses the float64 reference by ~1e-7: numpy in
    float32 with a correctly rounded tanh reaches 0.62 of the 1e-7 tolerance there, and with
    tanh results moved by up to 2 ulps (SLEEF's tanh is specified to 3.5) up to 1.45 of it."""
    rng = np.random.default_rng(seed)
    steps = trips + 2
    X = (rng.standard_normal((steps, batch, inputs)) * 0.5).astype(np.float32)
    W = (rng.standard_normal((inputs, hidden)) / np.sqrt(inputs)).astype(np.float32)
    G = (rng.standard_normal((hidden, inputs)) / np.sqrt(inputs)).astype(np.float32)
    c = (rng.standard_normal((hidden,)) * 0.1).astype(np.float32)
    U = (rng.standard_normal((hidden, hidden)) * 0.8 / np.sqrt(hidden)).astype(np.float32)
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Gather", ["X", "i"], ["x_t"], axis=0),
         helper.make_node("MatMul", ["x_t", "W"], ["xw"]),
         helper.make_node("Gemm", ["x_t", "G", "c"], ["xg"], alpha=0.5, beta=2.0, transB=1),
         helper.make_node("MatMul", ["h_in", "U"], ["hu"]),
         helper.make_node("Add", ["xw", "xg"], ["s1"]),
         helper.make_node("Add", ["s1", "hu"], ["s2"]),
         helper.make_node("Tanh", ["s2"], ["h_out"]),
         helper.make_node("Identity", ["h_out"], ["hs"])],
        "proj_body", [vi("i", I64, []), vi("cond_in", B, []), vi("h_in", F, [batch, hidden])],
        [vi("cond_out", B, []), vi("h_out", F, [batch, hidden]), vi("hs", F, [batch, hidden])])
    loop = helper.make_node("Loop", ["M", "", "h0"], ["h", "hs_all"], body=body)
    g = helper.make_graph([loop], name,
                          [vi("M", I64, []), vi("h0", F, [batch, hidden]),
                           vi("X", F, [steps, batch, inputs])],
                          [vi("h", F, [batch, hidden]), vi("hs_all", F, [None, batch, hidden])],
                          initializer=[numpy_helper.from_array(a, n) for a, n in
                                       ((W, "W"), (G, "G"), (c, "c"), (U, "U"))])
    h0 = rng.standard_normal((batch, hidden)).astype(np.float32)

    def body_np(i, cond, h):
        x = X[i].astype(np.float64)
        h = np.tanh(x @ W + 0.5 * (x @ G.T) + 2.0 * c + h.astype(np.float64) @ U)
        h = h.astype(np.float32)
        return True, h, h
    (h,), scans, _ = loop_semantics(trips, None, [h0], body_np)
    write_case(out_dir, name, model(g), [np.array(trips, np.int64), h0, X],
               [h, np.stack(scans[0])], atol=atol)


def case_conv(out_dir, name, batch, channels, height, width, trips, seed):
    """x = x + 0.1 * Relu(Conv3x3(x, W, b), pads 1), x carried: the iterative-refinement body. The
    weights are an initializer, so the oneDNN Conv runs on its own (blocked) layouts with the
    source and result reordered around it; 16 channels fill a 16-channel block, 5 leave a tail."""
    rng = np.random.default_rng(seed)
    W = (rng.standard_normal((channels, channels, 3, 3)) / np.sqrt(channels * 9)).astype(np.float32)
    b = (rng.standard_normal((channels,)) * 0.05).astype(np.float32)
    shape = [batch, channels, height, width]
    body = helper.make_graph(
        [helper.make_node("Conv", ["x_in", "W", "b"], ["y"], kernel_shape=[3, 3],
                          pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["y"], ["r"]),
         const("step", np.array(0.1, np.float32)),
         helper.make_node("Mul", ["r", "step"], ["d"]),
         helper.make_node("Add", ["x_in", "d"], ["x_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "conv_body", [vi("i", I64, []), vi("cond_in", B, []), vi("x_in", F, shape)],
        [vi("cond_out", B, []), vi("x_out", F, shape)])
    loop = helper.make_node("Loop", ["M", "", "x0"], ["x"], body=body)
    g = helper.make_graph([loop], "conv", [vi("M", I64, []), vi("x0", F, shape)],
                          [vi("x", F, shape)],
                          initializer=[numpy_helper.from_array(W, "W"),
                                       numpy_helper.from_array(b, "b")])
    x0 = rng.standard_normal(shape).astype(np.float32)
    w64 = W.astype(np.float64)

    def conv3x3(x):
        xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
        y = np.zeros((batch, channels, height, width))
        for dy in range(3):
            for dx in range(3):
                patch = xp[:, :, dy:dy + height, dx:dx + width]
                y += np.einsum("nchw,mc->nmhw", patch, w64[:, :, dy, dx])
        return y + b.reshape(1, channels, 1, 1)

    def body_np(i, c, x):
        return True, (x + np.maximum(conv3x3(x), 0) * 0.1).astype(np.float32)
    (x,), _, _ = loop_semantics(trips, None, [x0], body_np)
    write_case(out_dir, name, model(g), [np.array(trips, np.int64), x0], [x])


def case_conv_chain(out_dir, name, channels, height, width, trips, seed):
    """x = x + 0.5 * Conv3x3(Relu(Conv3x3(x, W1, b1)), W2), x carried: two Convs in a row, which
    the blocked_layout pass keeps in oneDNN's layout (engine/transform/blocked_layout.h) with the
    carried x reordered in and the result out once per iteration."""
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((channels, channels, 3, 3)) / np.sqrt(channels * 9)).astype(np.float32)
    w2 = (rng.standard_normal((channels, channels, 3, 3)) / np.sqrt(channels * 9)).astype(np.float32)
    b1 = (rng.standard_normal((channels,)) * 0.05).astype(np.float32)
    shape = [1, channels, height, width]
    body = helper.make_graph(
        [helper.make_node("Conv", ["x_in", "W1", "b1"], ["y1"], kernel_shape=[3, 3],
                          pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["y1"], ["r1"]),
         helper.make_node("Conv", ["r1", "W2"], ["y2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
         const("half", np.array(0.5, np.float32)),
         helper.make_node("Mul", ["y2", "half"], ["d"]),
         helper.make_node("Add", ["x_in", "d"], ["x_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "conv_chain_body", [vi("i", I64, []), vi("cond_in", B, []), vi("x_in", F, shape)],
        [vi("cond_out", B, []), vi("x_out", F, shape)])
    loop = helper.make_node("Loop", ["M", "", "x0"], ["x"], body=body)
    g = helper.make_graph([loop], "conv_chain", [vi("M", I64, []), vi("x0", F, shape)],
                          [vi("x", F, shape)],
                          initializer=[numpy_helper.from_array(w1, "W1"),
                                       numpy_helper.from_array(w2, "W2"),
                                       numpy_helper.from_array(b1, "b1")])
    x0 = rng.standard_normal(shape).astype(np.float32)

    def conv3x3(x, w):
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        y = np.zeros((1, channels, height, width))
        for dy in range(3):
            for dx in range(3):
                patch = xp[:, :, dy:dy + height, dx:dx + width]
                y += np.einsum("nchw,mc->nmhw", patch, w.astype(np.float64)[:, :, dy, dx])
        return y

    def body_np(i, c, x):
        r = np.maximum(conv3x3(x.astype(np.float64), w1) + b1.reshape(1, channels, 1, 1), 0)
        return True, (x + 0.5 * conv3x3(r, w2)).astype(np.float32)
    (x,), _, _ = loop_semantics(trips, None, [x0], body_np)
    write_case(out_dir, name, model(g), [np.array(trips, np.int64), x0], [x], atol=1e-5)


def case_scan_wide_slices(out_dir):
    """x = x * 0.5 + 1 on 1030 floats with a scan of x: 4120-byte slices, past the size at which
    scan appends stream to memory (and not a multiple of the 64-byte copy step)."""
    rng = np.random.default_rng(9)
    body = helper.make_graph(
        [const("half", np.array(0.5, np.float32)), const("one", np.array(1.0, np.float32)),
         helper.make_node("Mul", ["x_in", "half"], ["scaled"]),
         helper.make_node("Add", ["scaled", "one"], ["x_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Identity", ["x_out"], ["xs"])],
        "wide_body", [vi("i", I64, []), vi("cond_in", B, []), vi("x_in", F, [1030])],
        [vi("cond_out", B, []), vi("x_out", F, [1030]), vi("xs", F, [1030])])
    loop = helper.make_node("Loop", ["M", "", "x0"], ["x", "xs_all"], body=body)
    g = helper.make_graph([loop], "scan_wide", [vi("M", I64, []), vi("x0", F, [1030])],
                          [vi("x", F, [1030]), vi("xs_all", F, [None, 1030])])
    x0 = rng.standard_normal((1030,)).astype(np.float32)

    def body_np(i, c, x):
        x = (x * np.float32(0.5) + np.float32(1.0)).astype(np.float32)
        return True, x, x
    (x,), scans, _ = loop_semantics(7, None, [x0], body_np)
    write_case(out_dir, "loop_scan_wide_slices", model(g), [np.array(7, np.int64), x0],
               [x, np.stack(scans[0])])


def case_scan_only(out_dir):
    """No loop-carried values: only a scan output of i*i."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["i", "i"], ["sq"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "sq", [vi("i", I64, []), vi("cond_in", B, [])], [vi("cond_out", B, []), vi("sq", I64, [])])
    loop = helper.make_node("Loop", ["M", ""], ["squares"], body=body)
    g = helper.make_graph([loop], "scan_only", [vi("M", I64, [])], [vi("squares", I64, [None])])
    write_case(out_dir, "loop_scan_only", model(g), [np.array(5, np.int64)],
               [np.array([i * i for i in range(5)], np.int64)])


def scan_semantics(states, scans, in_axes, in_dirs, out_axes, out_dirs, body):
    """The ONNX Scan-9/11/16 pseudo-code (onnx/defs/controlflow/defs.cc). body(*states,
    *slices) -> (states..., scan outputs...). Axes may be negative (inputs: of the input's rank;
    outputs: of the output's, one more than the body result's)."""
    axes = [a % s.ndim for a, s in zip(in_axes, scans)]
    n = scans[0].shape[axes[0]]
    per = []
    for t in range(n):
        slices = [np.take(s, t if d == 0 else n - 1 - t, axis=a)
                  for s, a, d in zip(scans, axes, in_dirs)]
        outs = body(*states, *slices)
        states = list(outs[:len(states)])
        per.append([np.asarray(o) for o in outs[len(states):]])
    outputs = []
    for k, (axis, d) in enumerate(zip(out_axes, out_dirs)):
        parts = [p[k] for p in per]
        if not parts:
            outputs.append(None)  # zero iterations: the caller knows the empty shape
            continue
        if d == 1:
            parts = parts[::-1]
        outputs.append(np.stack(parts, axis=axis % (parts[0].ndim + 1)))
    return states, outputs


def scan_body_two_inputs():
    """States (acc [2], scale []), scan slices (a [2], b [3]) -> acc' = acc + a * scale,
    scale' = scale * 0.5 + sum(b), outputs acc' * 2 and b + scale."""
    return helper.make_graph(
        [const("half", np.array(0.5, np.float32)), const("two", np.array(2.0, np.float32)),
         helper.make_node("Mul", ["a", "scale_in"], ["a_scaled"]),
         helper.make_node("Add", ["acc_in", "a_scaled"], ["acc_out"]),
         helper.make_node("ReduceSum", ["b"], ["b_sum"], keepdims=0),
         helper.make_node("Mul", ["scale_in", "half"], ["scale_half"]),
         helper.make_node("Add", ["scale_half", "b_sum"], ["scale_out"]),
         helper.make_node("Mul", ["acc_out", "two"], ["y1"]),
         helper.make_node("Add", ["b", "scale_in"], ["y2"])],
        "scan_body",
        [vi("acc_in", F, [2]), vi("scale_in", F, []), vi("a", F, [2]), vi("b", F, [3])],
        [vi("acc_out", F, [2]), vi("scale_out", F, []), vi("y1", F, [2]), vi("y2", F, [3])])


def scan_body_two_inputs_np(acc, scale, a, b):
    f = np.float32
    acc2 = (acc + a * scale).astype(f)
    return acc2, f(scale * f(0.5) + b.sum(dtype=f)), acc2 * f(2), (b + scale).astype(f)


def case_scan(out_dir):
    """ONNX Scan at opsets 9, 11 and 16: two states, two scan inputs on different (and negative)
    axes, one read in reverse, two scan outputs stacked on different (and negative) axes, one in
    reverse; a zero-length scan; a body that reads an outer value; Scan-8 with a batch axis and
    sequence_lens (outputs past a sequence's end are zeros)."""
    rng = np.random.default_rng(11)
    f = np.float32
    # a: [2, T=4] scanned on axis 1 (forward); b: [4, 3] scanned on axis -2 (reverse).
    configs = [
        ("scan9_axes_directions", 9, [1, 0], [0, 1], [0, 1], [0, 1], 4),
        ("scan11_negative_axes", 11, [-1, -2], [1, 0], [-1, -2], [1, 0], 4),
        ("scan16_zero_length", 16, [1, 0], [0, 0], [0, 0], [0, 0], 0),
    ]
    for name, opset, in_axes, in_dirs, out_axes, out_dirs, t in configs:
        a = rng.standard_normal((2, t)).astype(f)
        b = rng.standard_normal((t, 3)).astype(f)
        acc0 = rng.standard_normal((2,)).astype(f)
        scale0 = np.array(0.75, f)
        attrs = dict(num_scan_inputs=2)
        if opset >= 9:
            attrs.update(scan_input_axes=in_axes, scan_input_directions=in_dirs,
                         scan_output_axes=out_axes, scan_output_directions=out_dirs)
        node = helper.make_node("Scan", ["acc0", "scale0", "a", "b"],
                                ["acc", "scale", "y1", "y2"], body=scan_body_two_inputs(),
                                **attrs)
        g = helper.make_graph([node], name,
                              [vi("acc0", F, [2]), vi("scale0", F, []), vi("a", F, [2, None]),
                               vi("b", F, [None, 3])],
                              [vi("acc", F, [2]), vi("scale", F, []), vi("y1", F, [None, None]),
                               vi("y2", F, [None, None])])
        (acc, scale), (y1, y2) = scan_semantics(
            [acc0, scale0], [a, b], in_axes, in_dirs, out_axes, out_dirs, scan_body_two_inputs_np)
        if t == 0:
            y1 = np.zeros((0, 2), f)
            y2 = np.zeros((0, 3), f)
        write_case(out_dir, name, model(g, opset), [acc0, scale0, a, b],
                   [acc, np.asarray(scale, f), y1, y2])

    # An outer-scope read: y = x_t * w + s, s' = y, with w an input of the main graph.
    body = helper.make_graph(
        [helper.make_node("Mul", ["x_t", "w"], ["xw"]),
         helper.make_node("Add", ["xw", "s_in"], ["s_out"]),
         helper.make_node("Identity", ["s_out"], ["y"])],
        "outer_read", [vi("s_in", F, [3]), vi("x_t", F, [3])],
        [vi("s_out", F, [3]), vi("y", F, [3])])
    node = helper.make_node("Scan", ["s0", "x"], ["s", "ys"], body=body, num_scan_inputs=1)
    g = helper.make_graph([node], "scan_outer_read",
                          [vi("w", F, [3]), vi("s0", F, [3]), vi("x", F, [5, 3])],
                          [vi("s", F, [3]), vi("ys", F, [5, 3])])
    w = rng.standard_normal((3,)).astype(f)
    s0 = rng.standard_normal((3,)).astype(f)
    x = rng.standard_normal((5, 3)).astype(f)
    (s,), (ys,) = scan_semantics([s0], [x], [0], [0], [0], [0],
                                 lambda si, xt: ((xt * w + si).astype(f),) * 2)
    write_case(out_dir, "scan16_outer_scope_read", model(g, 16), [w, s0, x], [s, ys])

    # Scan-8: batch axis 0, scan axis 1; sequence_lens [3, 1]; the scan input read in reverse.
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
         helper.make_node("Mul", ["s_out", "x_t"], ["y"])],
        "scan8_body", [vi("s_in", F, [2]), vi("x_t", F, [2])],
        [vi("s_out", F, [2]), vi("y", F, [2])])
    batch, t = 2, 4
    s0 = rng.standard_normal((batch, 2)).astype(f)
    x = rng.standard_normal((batch, t, 2)).astype(f)
    for with_lens in (False, True):
        lens = np.array([3, 1] if with_lens else [t, t], np.int64)
        inputs = ["lens" if with_lens else "", "s0", "x"]
        node = helper.make_node("Scan", inputs, ["s", "ys"], body=body, num_scan_inputs=1,
                                directions=[1])
        graph_inputs = ([vi("lens", I64, [batch])] if with_lens else []) + [
            vi("s0", F, [batch, 2]), vi("x", F, [batch, t, 2])]
        name = "scan8_batch_reverse" + ("_sequence_lens" if with_lens else "")
        g = helper.make_graph([node], name, graph_inputs,
                              [vi("s", F, [batch, 2]), vi("ys", F, [batch, t, 2])])
        s_out = np.zeros_like(s0)
        ys = np.zeros((batch, t, 2), f)
        for bi in range(batch):
            n = int(lens[bi])

            def body_np(si, xt):
                so = (si + xt).astype(f)
                return so, (so * xt).astype(f)
            (sb,), (yb,) = scan_semantics([s0[bi]], [x[bi, :n]], [0], [1], [0], [0], body_np)
            s_out[bi] = sb
            ys[bi, :n] = yb
        vals = ([lens] if with_lens else []) + [s0, x]
        write_case(out_dir, name, model(g, 8), vals, [s_out, ys])


def case_strings(out_dir):
    """String tensors through the loop machinery: a Scan over a string input (sliced), a string
    state carried from step to step, string scan outputs (Concat of strings, and a Loop stacking
    Cast(iteration, STRING))."""
    S = TensorProto.STRING
    body = helper.make_graph(
        [helper.make_node("Identity", ["x_t"], ["s_out"]),
         helper.make_node("Concat", ["x_t", "s_in"], ["y"], axis=0)],
        "string_scan_body", [vi("s_in", S, [2]), vi("x_t", S, [2])],
        [vi("s_out", S, [2]), vi("y", S, [4])])
    node = helper.make_node("Scan", ["s0", "x"], ["s", "ys"], body=body, num_scan_inputs=1,
                            scan_output_directions=[1])
    g = helper.make_graph([node], "string_scan", [vi("s0", S, [2]), vi("x", S, [3, 2])],
                          [vi("s", S, [2]), vi("ys", S, [3, 4])])
    s0 = np.array(["start-" + "a" * 30, "b"], dtype=object)
    x = np.array([["x0", "y0"], ["x1-" + "q" * 30, "y1"], ["x2", "y2"]], dtype=object)
    (s_final,), (ys,) = scan_semantics(
        [s0], [x], [0], [0], [0], [1],
        lambda si, xt: (xt, np.concatenate([xt, si])))
    write_case(out_dir, "scan16_strings", model(g, 16), [s0, x], [s_final, ys])

    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["i_text"], to=S),
         helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Identity", ["t_in"], ["t_out"])],
        "string_loop_body", [vi("i", I64, []), vi("cond_in", B, []), vi("t_in", S, [1])],
        [vi("cond_out", B, []), vi("t_out", S, [1]), vi("i_text", S, [])])
    loop = helper.make_node("Loop", ["M", "", "t0"], ["t", "texts"], body=body)
    g = helper.make_graph([loop], "string_loop", [vi("M", I64, []), vi("t0", S, [1])],
                          [vi("t", S, [1]), vi("texts", S, [None])])
    t0 = np.array(["carried"], dtype=object)
    write_case(out_dir, "loop_string_scan_output", model(g, 13), [np.array(3, np.int64), t0],
               [t0, np.array(["0", "1", "2"], dtype=object)])


def special_models(models_dir):
    """Models the C++ tests drive directly (no expected-output data set)."""
    os.makedirs(models_dir, exist_ok=True)
    # endless: no trip count, the body hands its condition straight back: never ends by itself.
    body = helper.make_graph(
        [const("one", np.array(1, np.int64)),
         helper.make_node("Add", ["x_in", "one"], ["x_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "endless_body", [vi("i", I64, []), vi("cond_in", B, []), vi("x_in", I64, [])],
        [vi("cond_out", B, []), vi("x_out", I64, [])])
    loop = helper.make_node("Loop", ["", "cond", "x0"], ["x"], body=body)
    g = helper.make_graph([loop], "endless", [vi("cond", B, []), vi("x0", I64, [])],
                          [vi("x", I64, [])])
    onnx.save(model(g), os.path.join(models_dir, "endless.onnx"))
    # Malformed: the body declares 2 inputs but the Loop passes 2 carried values (needs 4).
    loop = helper.make_node("Loop", ["M", "", "a", "b"], ["a_out", "b_out"], body=body)
    g = helper.make_graph([loop], "bad_arity",
                          [vi("M", I64, []), vi("a", I64, []), vi("b", I64, [])],
                          [vi("a_out", I64, []), vi("b_out", I64, [])])
    onnx.save(model(g), os.path.join(models_dir, "bad_body_arity.onnx"))
    # A scan output whose shape changes between iterations (Range(0, i) grows).
    body = helper.make_graph(
        [const("zero", np.array(0, np.int64)), const("one", np.array(1, np.int64)),
         helper.make_node("Range", ["zero", "i", "one"], ["r"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "grow_scan", [vi("i", I64, []), vi("cond_in", B, [])],
        [vi("cond_out", B, []), vi("r", I64, [None])])
    loop = helper.make_node("Loop", ["M", ""], ["rs"], body=body)
    g = helper.make_graph([loop], "bad_scan", [vi("M", I64, [])], [vi("rs", I64, [None, None])])
    onnx.save(model(g), os.path.join(models_dir, "changing_scan.onnx"))
    # long_lstm: one LSTM layer (input 8, hidden 1024, constant weights) over X [T, B, 8] of any
    # length: a long sequence is one long kernel step that must still notice the deadline.
    rng = np.random.RandomState(21)
    shapes = (("W", (1, 4096, 8)), ("R", (1, 4096, 1024)), ("Bias", (1, 8192)))
    weights = [numpy_helper.from_array((rng.uniform(-1, 1, shape) * 0.03).astype(np.float32), name)
               for name, shape in shapes]
    lstm = helper.make_node("LSTM", ["X", "W", "R", "Bias"], ["", "Y_h"], hidden_size=1024)
    g = helper.make_graph([lstm], "long_lstm", [vi("X", TensorProto.FLOAT, ["T", "B", 8])],
                          [vi("Y_h", TensorProto.FLOAT, [1, "B", 1024])], weights)
    onnx.save(model(g, 14), os.path.join(models_dir, "long_lstm.onnx"))


def case_lstm_in_loop(out_dir, name, batch, hidden, inputs, steps, trips, seed):
    """An ONNX LSTM (one direction, bias, initial states) inside a Loop body, its final states
    carried: Y_h, Y_c = LSTM(X, W, R, B, h, c) per iteration, h scanned. At batch > 1 the layer runs
    on oneDNN's lstm_forward primitive, which the Loop's thread modes create per thread count
    (loop_test.cc, RecurrentPrimitivesFollowTheThreadMode). Expected values: the ONNX LSTM
    equations (gates i, o, f, c; sigmoid, tanh, tanh) in float64."""
    rng = np.random.default_rng(seed)
    X = (rng.standard_normal((steps, batch, inputs)) * 0.5).astype(np.float32)
    W = (rng.standard_normal((1, 4 * hidden, inputs)) / np.sqrt(inputs)).astype(np.float32)
    R = (rng.standard_normal((1, 4 * hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
    Bias = (rng.standard_normal((1, 8 * hidden)) * 0.1).astype(np.float32)
    h0 = (rng.standard_normal((1, batch, hidden)) * 0.5).astype(np.float32)
    c0 = (rng.standard_normal((1, batch, hidden)) * 0.5).astype(np.float32)
    body = helper.make_graph(
        [helper.make_node("LSTM", ["X", "W", "R", "Bias", "", "h_in", "c_in"],
                          ["", "h_out", "c_out"], hidden_size=hidden),
         helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Identity", ["h_out"], ["hs"])],
        "lstm_body", [vi("i", I64, []), vi("cond_in", B, []), vi("h_in", F, [1, batch, hidden]),
                      vi("c_in", F, [1, batch, hidden])],
        [vi("cond_out", B, []), vi("h_out", F, [1, batch, hidden]),
         vi("c_out", F, [1, batch, hidden]), vi("hs", F, [1, batch, hidden])])
    loop = helper.make_node("Loop", ["M", "", "h0", "c0"], ["h", "c", "hs_all"], body=body)
    state = [1, batch, hidden]
    g = helper.make_graph(
        [loop], "lstm_loop", [vi("M", I64, []), vi("h0", F, state), vi("c0", F, state)],
        [vi("h", F, state), vi("c", F, state), vi("hs_all", F, [None] + state)],
        initializer=[numpy_helper.from_array(X, "X"), numpy_helper.from_array(W, "W"),
                     numpy_helper.from_array(R, "R"), numpy_helper.from_array(Bias, "Bias")])

    def sigmoid(v):
        return 1 / (1 + np.exp(-v))
    w, r = W[0].astype(np.float64), R[0].astype(np.float64)
    b = Bias[0, :4 * hidden].astype(np.float64) + Bias[0, 4 * hidden:].astype(np.float64)

    def lstm(h, c):
        h, c = h[0].astype(np.float64), c[0].astype(np.float64)
        for t in range(steps):
            gates = X[t].astype(np.float64) @ w.T + h @ r.T + b
            i, o, f, cc = np.split(gates, 4, axis=1)
            c = sigmoid(f) * c + sigmoid(i) * np.tanh(cc)
            h = sigmoid(o) * np.tanh(c)
        return h[None].astype(np.float32), c[None].astype(np.float32)

    def body_np(it, cond, h, c):
        h, c = lstm(h, c)
        return True, h, c, h
    (h, c), scans, _ = loop_semantics(trips, None, [h0, c0], body_np)
    write_case(out_dir, name, model(g, 14),
               [np.array(trips, np.int64), h0, c0], [h, c, np.stack(scans[0])])


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    if len(sys.argv) > 2:
        special_models(sys.argv[2])
    cases_mode(out_dir)
    case_iteration_and_outer_scope(out_dir)
    case_growing_carried(out_dir)
    case_nested(out_dir)
    # In-place updates of carried arrays (ScatterND, Concat), with 0, 1 and more iterations.
    for trips in (0, 1, 5):
        case_tensor_array(out_dir, f"loop_tensor_array_{trips}", trips)
        case_tensor_array(out_dir, f"loop_tensor_array_read_old_{trips}", trips, read_old=True)
        case_tensor_array(out_dir, f"loop_tensor_array_alias_{trips}", trips, alias=True)
        for axis in ("a0", "a1", "a1b", "a2"):
            case_append(out_dir, f"loop_append_{axis}_{trips}", trips, axis)
            case_append(out_dir, f"loop_append_{axis}_read_old_{trips}", trips, axis,
                        read_old=True)
            case_append(out_dir, f"loop_append_{axis}_alias_{trips}", trips, axis, alias=True)
        case_sequence_append(out_dir, f"loop_sequence_append_{trips}", trips)
        case_sequence_append(out_dir, f"loop_sequence_append_read_old_{trips}", trips,
                             read_old=True)
    case_nested_tensor_array(out_dir)
    case_nested_rnn(out_dir)
    case_if_inside_loop(out_dir)
    case_rnn(out_dir)
    case_rnn(out_dir, "loop_rnn_wide", hidden=300, trips=9, seed=8, scale=0.05)
    case_rnn(out_dir, "loop_rnn_batch", hidden=40, trips=5, seed=11, scale=0.2, batch=6)
    # A product big enough for oneDNN's threads (DnnlKernel::kParallelWork): the Loop's thread
    # modes run different primitives for it (loop_test.cc, ThreadModesGiveIdenticalOutputs).
    case_rnn(out_dir, "loop_rnn_parallel", hidden=256, trips=16, seed=15, scale=0.005, batch=64,
             bias_floor=0.5)
    case_input_projection(out_dir, "loop_input_projection", batch=1, hidden=24, inputs=10,
                          trips=9, seed=12)
    case_input_projection(out_dir, "loop_input_projection_batch", batch=4, hidden=40, inputs=33,
                          trips=6, seed=13)
    case_input_projection(out_dir, "loop_input_projection_batch_in_body", batch=5, hidden=40,
                          inputs=33, trips=6, seed=14, atol=1e-6)
    # At batch 16 the products stay in the body and split by rows over the Loop's SpinTeam: the
    # Gemm with alpha, beta and a transposed B too (loop_test.cc, TeamSplitsGiveIdenticalOutputs).
    case_input_projection(out_dir, "loop_input_projection_split", batch=16, hidden=128,
                          inputs=96, trips=6, seed=17, atol=1e-6)
    case_scan_wide_slices(out_dir)
    case_scan_only(out_dir)
    case_conv(out_dir, "loop_conv_c16", batch=2, channels=16, height=12, width=10, trips=5, seed=9)
    case_conv(out_dir, "loop_conv_c5", batch=1, channels=5, height=7, width=9, trips=4, seed=10)
    case_conv_chain(out_dir, "loop_conv_chain_c16", channels=16, height=12, width=10, trips=5,
                    seed=11)
    case_conv_chain(out_dir, "loop_conv_chain_c24", channels=24, height=7, width=9, trips=3,
                    seed=12)
    case_scan(out_dir)
    case_lstm_in_loop(out_dir, "loop_lstm_parallel", batch=16, hidden=128, inputs=32, steps=4,
                      trips=5, seed=16)
    case_strings(out_dir)


if __name__ == "__main__":
    main()
