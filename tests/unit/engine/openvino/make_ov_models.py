#!/usr/bin/python3
"""Writes OpenVINO IR test cases (no OpenVINO runtime needed) in the ONNX backend-test layout:

    OUT/<case>/model.xml + model.bin
    OUT/<case>/test_data_set_0/{input_<k>.pb, output_<k>.pb}   (ONNX TensorProtos)

The IR is written by the small builder below, following the IR v10/v11 format and the Loop-5 /
TensorIterator-1 specs (port_map, back_edges, purpose="current_iteration" / "execution_condition").
Every expected output is computed here by numpy following the OpenVINO op specs, never by loopserve.
Run with Debian's /usr/bin/python3:

    /usr/bin/python3 make_ov_models.py OUT_DIR
"""
import os
import sys
from xml.sax.saxutils import quoteattr

import numpy as np

# onnx 1.12 still uses the numpy aliases removed in numpy 1.24.
np.float, np.int, np.bool, np.object = float, int, bool, object  # noqa: E702
from onnx import numpy_helper  # noqa: E402

PREC = {np.float32: ("FP32", "f32"), np.int64: ("I64", "i64"), np.int32: ("I32", "i32"),
        np.bool_: ("BOOL", "boolean")}


def prec(dtype):
    return PREC[np.dtype(dtype).type]


class T:
    """A tensor in a network under construction: an output port of a layer."""

    def __init__(self, layer, port, dtype, dims):
        self.layer, self.port, self.dtype, self.dims = layer, port, np.dtype(dtype), list(dims)


class Net:
    """A <net> or a Loop <body>. Layer ids are assigned in order unless given."""

    def __init__(self, weights, with_names=True):
        self.weights = weights  # shared bytearray: the .bin
        self.layers = []  # (id, xml text)
        self.edges = []
        self.next_id = 0
        self.used = set()
        self.with_names = with_names

    def _id(self, layer_id):
        if layer_id is None:
            while self.next_id in self.used:
                self.next_id += 1
            layer_id = self.next_id
        assert layer_id not in self.used
        self.used.add(layer_id)
        return layer_id

    @staticmethod
    def _port(pid, dtype, dims, names=None):
        n = " names=%s" % quoteattr(names) if names else ""
        body = "".join("<dim>%d</dim>" % d for d in dims)
        return '<port id="%d" precision="%s"%s>%s</port>' % (pid, prec(dtype)[0], n, body)

    def add(self, type_, inputs, outs, data=None, name=None, layer_id=None, version="opset8",
            extra="", input_ports=None, out_names=None):
        """inputs: list of T (or None for a listed but unconnected port); outs: [(dtype, dims)]."""
        lid = self._id(layer_id)
        name = name or "%s_%d" % (type_.lower(), lid)
        data_xml = ""
        if data:
            data_xml = "<data %s/>" % " ".join("%s=%s" % (k, quoteattr(str(v)))
                                                for k, v in data.items())
        in_xml = []
        ports = input_ports or list(range(len(inputs)))
        for pid, t in zip(ports, inputs):
            if t is None:
                in_xml.append(self._port(pid, np.int64, [], None))
                continue
            in_xml.append(self._port(pid, t.dtype, t.dims))
            self.edges.append((t.layer, t.port, lid, pid))
        first_out = (max(ports) + 1) if ports else 0
        out_xml, result = [], []
        for k, (dtype, dims) in enumerate(outs):
            pid = first_out + k
            names = None
            if self.with_names:
                names = out_names[k] if out_names else (name if len(outs) == 1 else
                                                        "%s:%d" % (name, k))
            out_xml.append(self._port(pid, dtype, dims, names))
            result.append(T(lid, pid, dtype, dims))
        xml = '<layer id="%d" name=%s type="%s" version="%s">%s' % (
            lid, quoteattr(name), type_, version, data_xml)
        if in_xml:
            xml += "<input>%s</input>" % "".join(in_xml)
        if out_xml:
            xml += "<output>%s</output>" % "".join(out_xml)
        xml += extra + "</layer>"
        self.layers.append((lid, xml))
        return result

    def op(self, type_, inputs, dtype, dims, **kw):
        return self.add(type_, inputs, [(dtype, dims)], **kw)[0]

    def param(self, name, dtype, dims, layer_id=None, shape=None):
        shape = ",".join(str(d) for d in dims) if shape is None else shape
        return self.add("Parameter", [], [(dtype, dims)], name=name, layer_id=layer_id,
                        data={"shape": shape, "element_type": prec(dtype)[1]},
                        version="opset1")[0]

    def const(self, array, dtype=None, layer_id=None, name=None):
        a = np.array(np.asarray(array, dtype=dtype), order="C")
        while len(self.weights) % 8:
            self.weights.append(0)
        offset = len(self.weights)
        self.weights.extend(a.tobytes())
        return self.add("Const", [], [(a.dtype, a.shape)], layer_id=layer_id, name=name,
                        version="opset1",
                        data={"element_type": prec(a.dtype)[1],
                              "shape": ",".join(str(d) for d in a.shape),
                              "offset": offset, "size": a.nbytes})[0]

    def result(self, t, name=None, layer_id=None):
        self.add("Result", [t], [], name=name, layer_id=layer_id, version="opset1")

    def xml(self, tag="net", attrs=""):
        layers = "".join(x for _, x in sorted(self.layers, key=lambda p: p[0]))
        edges = "".join('<edge from-layer="%d" from-port="%d" to-layer="%d" to-port="%d"/>' % e
                        for e in self.edges)
        return "<%s%s><layers>%s</layers><edges>%s</edges></%s>" % (tag, attrs, layers, edges, tag)

    def loop(self, inputs, body, port_inputs, port_outputs, back_edges, outs, type_="Loop",
             input_ports=None, name=None):
        """port_inputs/outputs: [(external_port_id, internal_layer_id, {attrs})]."""
        def entry(tag, e):
            ext, internal, attrs = e
            a = "".join(" %s=%s" % (k, quoteattr(str(v))) for k, v in attrs.items())
            return '<%s external_port_id="%d" internal_layer_id="%d"%s/>' % (tag, ext, internal, a)
        extra = "<port_map>%s%s</port_map>" % (
            "".join(entry("input", e) for e in port_inputs),
            "".join(entry("output", e) for e in port_outputs))
        extra += "<back_edges>%s</back_edges>" % "".join(
            '<edge from-layer="%d" to-layer="%d"/>' % e for e in back_edges)
        extra += body.xml("body")
        return self.add(type_, inputs, outs, extra=extra, version="opset5", name=name,
                        input_ports=input_ports)


def write_case(out_dir, name, net, inputs, outputs, version=11):
    case = os.path.join(out_dir, name)
    os.makedirs(os.path.join(case, "test_data_set_0"), exist_ok=True)
    with open(os.path.join(case, "model.xml"), "w") as f:
        f.write('<?xml version="1.0"?>\n')
        f.write(net.xml("net", ' name="%s" version="%d"' % (name, version)))
    with open(os.path.join(case, "model.bin"), "wb") as f:
        f.write(bytes(net.weights))
    for kind, arrays in (("input", inputs), ("output", outputs)):
        for k, a in enumerate(arrays):
            t = numpy_helper.from_array(np.asarray(a))
            with open(os.path.join(case, "test_data_set_0", "%s_%d.pb" % (kind, k)), "wb") as f:
                f.write(t.SerializeToString())


def new_net(with_names=True):
    return Net(bytearray(), with_names)


def body_net(outer):
    return Net(outer.weights)


# --------------------------------------------------------------------------------------------
# The Loop-5 semantics in numpy (the spec's pseudo-code). body(i, *carried, *slices) returns
# (cond, carried..., per-iteration outputs...). Concatenation per output: axis or None (last).
# --------------------------------------------------------------------------------------------
def ov_loop(trip, cond, carried, body, slices=(), max_iter=10000):
    if trip is not None and trip < 0:
        trip = None  # -1: infinite
    for s, axis, stride in slices:
        n = s.shape[axis]
        trip = n if trip is None else min(trip, n)
    i, per_iter = 0, []
    while (trip is None or i < trip) and cond:
        parts = []
        for s, axis, stride in slices:
            j = i if stride > 0 else s.shape[axis] - 1 - i
            parts.append(np.take(s, [j], axis=axis))
        outs = body(i, *carried, *parts)
        cond = bool(np.asarray(outs[0]).reshape(-1)[0])
        carried = list(outs[1:1 + len(carried)])
        per_iter.append(outs[1 + len(carried):])
        i += 1
        assert i < max_iter
    return carried, per_iter, i


def concat(per_iter, k, axis, empty_shape, dtype=np.float32, stride=1):
    if not per_iter:
        return np.zeros(empty_shape, dtype)
    parts = [np.atleast_1d(np.asarray(o[k])) for o in per_iter]
    if stride < 0:
        parts = parts[::-1]
    return np.concatenate(parts, axis=axis)


rng = np.random.default_rng(7)


def randf(*shape):
    return rng.standard_normal(shape).astype(np.float32)


# --------------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------------
def case_spec_port_map(out):
    """The port map of the spec's Example 1 (external ports 0 and 1 feed body Parameters 0 and 1,
    current_iteration is Parameter 2, outputs 3 and 4, concat axis 1, condition from Result 22)."""
    net = new_net()
    trip = net.param("trip", np.int64, [])
    cond = net.param("cond", np.bool_, [])
    x = net.param("x", np.float32, [2, 3])
    b = body_net(net)
    p_trip = b.param("b_trip", np.int64, [], layer_id=0)
    p_cond = b.param("b_cond", np.bool_, [], layer_id=1)
    p_iter = b.param("b_iter", np.int64, [], layer_id=2)
    p_acc = b.param("b_acc", np.float32, [2, 3], layer_id=5)
    b.next_id = 30
    it_f = b.op("Convert", [p_iter], np.float32, [], data={"destination_type": "f32"})
    tr_f = b.op("Convert", [p_trip], np.float32, [], data={"destination_type": "f32"})
    acc1 = b.op("Add", [p_acc, it_f], np.float32, [2, 3])
    acc2 = b.op("Add", [acc1, tr_f], np.float32, [2, 3])
    scan = b.op("Multiply", [acc2, b.const(np.float32(2))], np.float32, [2, 3])
    nxt = b.op("Add", [p_iter, b.const(np.int64(1))], np.int64, [])
    less = b.op("Less", [nxt, b.const(np.int64(3))], np.bool_, [])
    c_out = b.op("LogicalAnd", [less, p_cond], np.bool_, [])
    b.result(acc2, layer_id=4)
    b.result(scan, layer_id=10)
    b.result(c_out, layer_id=22)
    outs = net.loop([trip, cond, x], b,
                    [(0, 0, {}), (1, 1, {}), (-1, 2, {"purpose": "current_iteration"}),
                     (2, 5, {})],
                    [(3, 4, {}), (4, 10, {"axis": 1}),
                     (-1, 22, {"purpose": "execution_condition"})],
                    [(4, 5)], [(np.float32, [2, 3]), (np.float32, [2, -1])])
    net.result(outs[0], "final")
    net.result(outs[1], "scan")
    xv = randf(2, 3)

    def body(i, acc):
        a = acc + np.float32(i) + np.float32(5)
        return (i + 1 < 3), a, a * 2
    (acc,), per, _ = ov_loop(5, True, [xv], body)
    write_case(out, "spec_port_map_example", net, [np.int64(5), np.bool_(True), xv],
               [acc, concat(per, 0, 1, [2, 0])])


def counter_loop(out, name, trip_dtype, trip_dims, trip_value, cond_value=True, trip_const=False,
                 version=11, scan_axis=0):
    """acc += x * (i + 1); scan output: acc (concat along scan_axis)."""
    net = new_net(with_names=version == 11)
    inputs = []
    if trip_const:
        trip = net.const(np.array(trip_value, dtype=trip_dtype).reshape(trip_dims))
    else:
        trip = net.param("trip", trip_dtype, trip_dims)
        inputs.append(np.array(trip_value, dtype=trip_dtype).reshape(trip_dims))
    cond = net.param("cond", np.bool_, [])
    inputs.append(np.bool_(cond_value))
    x = net.param("x", np.float32, [1, 3])
    xv = randf(1, 3)
    inputs.append(xv)
    b = body_net(net)
    p_it = b.param("it", np.int64, [])
    p_acc = b.param("acc", np.float32, [1, 3])
    p_x = b.param("bx", np.float32, [1, 3])
    one = b.const(np.float32(1))
    f = b.op("Add", [b.op("Convert", [p_it], np.float32, [], data={"destination_type": "f32"}),
                     one], np.float32, [])
    acc = b.op("Add", [p_acc, b.op("Multiply", [p_x, f], np.float32, [1, 3])], np.float32,
               [1, 3])
    true = b.const(np.bool_(True))
    b.result(acc)  # id: acc result
    r_acc = max(b.used)
    b.result(true)
    r_cond = max(b.used)
    outs = net.loop([trip, cond, x, x], b,
                    [(-1, p_it.layer, {"purpose": "current_iteration"}), (2, p_acc.layer, {}),
                     (3, p_x.layer, {})],
                    [(4, r_acc, {}), (5, r_acc, {"axis": scan_axis}),
                     (-1, r_cond, {"purpose": "execution_condition"})],
                    [(r_acc, p_acc.layer)],
                    [(np.float32, [1, 3]), (np.float32, [-1, 3] if scan_axis in (0, -2) else [1, -1])])
    net.result(outs[0], "acc_out")
    net.result(outs[1], "scan_out")

    def body(i, acc):
        a = acc + xv * np.float32(i + 1)
        return True, a, a
    t = int(np.array(trip_value).reshape(-1)[0])
    (acc_v,), per, _ = ov_loop(t, cond_value, [xv], body)
    empty = [0, 3] if scan_axis in (0, -2) else [1, 0]
    write_case(out, name, net, inputs, [acc_v, concat(per, 0, scan_axis, empty)], version=version)


def while_loop(out, name, trip_mode, cond_rank1=False):
    """x doubles while x_sum < limit; trip_mode: 'minus1', 'minus1_i32', 'unconnected',
    'omitted'. Outputs: final x, concat of current iterations (int64 [1] per iteration)."""
    net = new_net()
    x = net.param("x", np.float32, [2])
    limit = net.param("limit", np.float32, [])
    cond = net.const(np.bool_(True))
    b = body_net(net)
    p_it = b.param("it", np.int64, [1], shape="1")
    p_x = b.param("bx", np.float32, [2])
    p_lim = b.param("blim", np.float32, [])
    x2 = b.op("Multiply", [p_x, b.const(np.float32(2))], np.float32, [2])
    s = b.op("ReduceSum", [x2, b.const(np.array([0], np.int64))], np.float32, [],
             data={"keep_dims": "false"})
    c = b.op("Less", [s, p_lim], np.bool_, [])
    if cond_rank1:
        c = b.op("Unsqueeze", [c, b.const(np.int64(0))], np.bool_, [1])
    b.result(x2)
    r_x = max(b.used)
    b.result(c)
    r_c = max(b.used)
    b.result(p_it)
    r_it = max(b.used)
    pin = [(-1, p_it.layer, {"purpose": "current_iteration"}), (2, p_x.layer, {}),
           (3, p_lim.layer, {})]
    pout = [(4, r_x, {}), (5, r_it, {"axis": 0}), (-1, r_c, {"purpose": "execution_condition"})]
    outs_spec = [(np.float32, [2]), (np.int64, [-1])]
    if trip_mode == "minus1":
        trip = net.const(np.int64(-1))
        outs = net.loop([trip, cond, x, limit], b, pin, pout, [(r_x, p_x.layer)], outs_spec)
    elif trip_mode == "minus1_i32":
        trip = net.const(np.array([-1], np.int32))
        outs = net.loop([trip, cond, x, limit], b, pin, pout, [(r_x, p_x.layer)], outs_spec)
    elif trip_mode == "unconnected":
        outs = net.loop([None, cond, x, limit], b, pin, pout, [(r_x, p_x.layer)], outs_spec)
    else:  # omitted: no trip-count port at all
        outs = net.loop([cond, x, limit], b, pin, pout, [(r_x, p_x.layer)], outs_spec,
                        input_ports=[1, 2, 3])
    net.result(outs[0], "x_out")
    net.result(outs[1], "iters")
    xv = np.array([0.5, 0.25], np.float32)

    def body(i, xx):
        x2v = xx * 2
        return x2v.sum() < 20, x2v, np.array([i], np.int64)
    (x_v,), per, _ = ov_loop(-1, True, [xv], body)
    write_case(out, name, net, [xv, np.float32(20)],
               [x_v, concat(per, 0, 0, [0], np.int64)])


def sliced_case(out, name, axis, stride, trip, out_axis, rank_axis=None):
    """Sliced input x[2,4,3] along `axis` with `stride`; running sum carried; concat of 2*slice
    along out_axis (may be negative)."""
    net = new_net()
    x = net.param("x", np.float32, [2, 4, 3])
    xv = randf(2, 4, 3)
    part = [2, 4, 3]
    part[axis] = 1
    trip_t = net.const(np.int64(trip))
    cond = net.const(np.bool_(True))
    init = net.param("init", np.float32, part)
    b = body_net(net)
    p_s = b.param("slice", np.float32, part)
    p_acc = b.param("acc", np.float32, part)
    acc = b.op("Add", [p_acc, p_s], np.float32, part)
    dbl = b.op("Multiply", [p_s, b.const(np.float32(2))], np.float32, part)
    b.result(acc)
    r_acc = max(b.used)
    b.result(dbl)
    r_d = max(b.used)
    b.result(b.const(np.bool_(True)))
    r_c = max(b.used)
    slice_attrs = {"axis": axis}
    if stride < 0:
        slice_attrs.update({"stride": -1, "start": -1, "end": 0})
    outs = net.loop([trip_t, cond, x, init], b,
                    [(2, p_s.layer, slice_attrs), (3, p_acc.layer, {})],
                    [(4, r_acc, {}), (5, r_d, {"axis": out_axis}),
                     (-1, r_c, {"purpose": "execution_condition"})],
                    [(r_acc, p_acc.layer)], [(np.float32, part), (np.float32, [2, 4, 3])])
    net.result(outs[0], "sum")
    net.result(outs[1], "doubled")
    iv = randf(*part)

    def body(i, acc, s):
        return True, acc + s, s * 2
    (acc_v,), per, _ = ov_loop(trip, True, [iv], body, slices=[(xv, axis, stride)])
    write_case(out, name, net, [xv, iv], [acc_v, concat(per, 0, out_axis, None)])


def zero_iterations(out, name, by):
    """by='cond': initial condition false; by='trip': trip count 0. Carried values come back as
    given; concatenations are empty along their axis."""
    net = new_net()
    trip = net.param("trip", np.int64, [1], shape="1")
    cond = net.param("cond", np.bool_, [1], shape="1")
    x = net.param("x", np.float32, [2, 3])
    b = body_net(net)
    p_x = b.param("bx", np.float32, [2, 3])
    y = b.op("Add", [p_x, b.const(np.float32(1))], np.float32, [2, 3])
    u = b.op("Unsqueeze", [y, b.const(np.array([1], np.int64))], np.float32, [2, 1, 3])
    b.result(y)
    r_y = max(b.used)
    b.result(u)
    r_u = max(b.used)
    b.result(b.const(np.array([True])))
    r_c = max(b.used)
    outs = net.loop([trip, cond, x], b, [(2, p_x.layer, {})],
                    [(3, r_y, {}), (4, r_u, {"axis": 1}), (5, r_y, {"axis": -1}),
                     (-1, r_c, {"purpose": "execution_condition"})],
                    [(r_y, p_x.layer)],
                    [(np.float32, [2, 3]), (np.float32, [2, -1, 3]), (np.float32, [2, -1])])
    for k, n in enumerate(["y", "stacked", "joined"]):
        net.result(outs[k], n)
    xv = randf(2, 3)
    t, c = (np.array([3]), np.array([False])) if by == "cond" else (np.array([0]), np.array([True]))
    write_case(out, name, net, [t.astype(np.int64), c, xv],
               [xv, np.zeros([2, 0, 3], np.float32), np.zeros([2, 0], np.float32)])


def nested_loops(out):
    """Outer Loop (3 iterations) carrying acc[2]; inner Loop (i_outer + 1 iterations) adds
    x * (j + 1) to its carried value; outer concatenates the inner's result along axis 0."""
    net = new_net()
    x = net.param("x", np.float32, [2])
    acc0 = net.param("acc0", np.float32, [2])
    ob = body_net(net)
    o_it = ob.param("o_it", np.int64, [])
    o_acc = ob.param("o_acc", np.float32, [2])
    o_x = ob.param("o_x", np.float32, [2])
    ib = body_net(ob)
    i_it = ib.param("i_it", np.int32, [1], shape="1")
    i_v = ib.param("i_v", np.float32, [2])
    i_x = ib.param("i_x", np.float32, [2])
    jf = ib.op("Convert", [i_it], np.float32, [1], data={"destination_type": "f32"})
    j1 = ib.op("Add", [jf, ib.const(np.float32(1))], np.float32, [1])
    v = ib.op("Add", [i_v, ib.op("Multiply", [i_x, j1], np.float32, [2])], np.float32, [2])
    ib.result(v)
    r_v = max(ib.used)
    ib.result(ib.const(np.bool_(True)))
    r_c = max(ib.used)
    inner_trip = ob.op("Add", [o_it, ob.const(np.int64(1))], np.int64, [])
    inner = ob.loop([inner_trip, ob.const(np.bool_(True)), o_acc, o_x], ib,
                    [(-1, i_it.layer, {"purpose": "current_iteration"}), (2, i_v.layer, {}),
                     (3, i_x.layer, {})],
                    [(4, r_v, {}), (-1, r_c, {"purpose": "execution_condition"})],
                    [(r_v, i_v.layer)], [(np.float32, [2])], name="inner_loop")
    ob.result(inner[0])
    r_acc = max(ob.used)
    ob.result(ob.const(np.bool_(True)))
    r_oc = max(ob.used)
    outs = net.loop([net.const(np.int32(3)), net.const(np.bool_(True)), acc0, x], ob,
                    [(-1, o_it.layer, {"purpose": "current_iteration"}), (2, o_acc.layer, {}),
                     (3, o_x.layer, {})],
                    [(4, r_acc, {}), (5, r_acc, {"axis": 0}),
                     (-1, r_oc, {"purpose": "execution_condition"})],
                    [(r_acc, o_acc.layer)], [(np.float32, [2]), (np.float32, [-1])],
                    name="outer_loop")
    net.result(outs[0], "acc")
    net.result(outs[1], "history")
    xv, av = randf(2), randf(2)

    def outer(i, acc):
        def inner_body(j, vv):
            return True, vv + xv * np.float32(j + 1)
        (r,), _, _ = ov_loop(i + 1, True, [acc], inner_body)
        return True, r, r
    (acc_v,), per, _ = ov_loop(3, True, [av], outer)
    write_case(out, "nested_loops", net, [xv, av], [acc_v, concat(per, 0, 0, [0])])


def rnn(out, name, kind, reverse=False):
    """h_t = tanh(x_t W^T + h_{t-1} R + b) over T=5 steps; kind='ti' (TensorIterator, x [T,B,I]
    sliced on axis 0) or 'loop' (Loop-5, x [B,T,I] sliced on axis 1, trip count -1).
    Outputs: all h (concat on the time axis) and the last h."""
    T_, B_, I_, H_ = 5, 2, 3, 4
    net = new_net()
    xshape = [T_, B_, I_] if kind == "ti" else [B_, T_, I_]
    taxis = 0 if kind == "ti" else 1
    x = net.param("x", np.float32, xshape)
    h0 = net.param("h0", np.float32, [B_, H_])
    W, R, bias = randf(H_, I_), randf(H_, H_) * 0.5, randf(H_)
    b = body_net(net)
    part = list(xshape)
    part[taxis] = 1
    p_x = b.param("xt", np.float32, part)
    p_h = b.param("h", np.float32, [B_, H_])
    xt = b.op("Squeeze", [p_x, b.const(np.array([taxis], np.int64))], np.float32, [B_, I_])
    xw = b.op("MatMul", [xt, b.const(W)], np.float32, [B_, H_],
              data={"transpose_a": "false", "transpose_b": "true"})
    hr = b.op("MatMul", [p_h, b.const(R)], np.float32, [B_, H_],
              data={"transpose_a": "false", "transpose_b": "false"})
    s = b.op("Add", [b.op("Add", [xw, hr], np.float32, [B_, H_]), b.const(bias)], np.float32,
             [B_, H_])
    h = b.op("Tanh", [s], np.float32, [B_, H_])
    hu = b.op("Unsqueeze", [h, b.const(np.array([taxis], np.int64))], np.float32,
              [1, B_, H_] if taxis == 0 else [B_, 1, H_])
    b.result(h)
    r_h = max(b.used)
    b.result(hu)
    r_hu = max(b.used)
    sl = {"axis": taxis}
    if reverse:
        sl.update({"stride": -1, "start": -1, "end": 0, "part_size": 1})
    osl = {"axis": taxis}
    if reverse:
        osl.update({"stride": -1, "start": -1, "end": 0, "part_size": 1})
    hs_shape = [T_, B_, H_] if taxis == 0 else [B_, T_, H_]
    if kind == "ti":
        outs = net.loop([x, h0], b, [(0, p_x.layer, sl), (1, p_h.layer, {})],
                        [(2, r_hu, osl), (3, r_h, {})], [(r_h, p_h.layer)],
                        [(np.float32, hs_shape), (np.float32, [B_, H_])], type_="TensorIterator")
    else:
        b.result(b.const(np.bool_(True)))
        r_c = max(b.used)
        outs = net.loop([net.const(np.int64(-1)), net.const(np.bool_(True)), x, h0], b,
                        [(2, p_x.layer, sl), (3, p_h.layer, {})],
                        [(4, r_hu, osl), (5, r_h, {}),
                         (-1, r_c, {"purpose": "execution_condition"})],
                        [(r_h, p_h.layer)], [(np.float32, hs_shape), (np.float32, [B_, H_])])
    net.result(outs[0], "hs")
    net.result(outs[1], "h_last")
    xv, hv = randf(*xshape), randf(B_, H_)

    def body(i, hh, xs):
        xt_ = np.squeeze(xs, axis=taxis)
        hn = np.tanh(xt_ @ W.T + hh @ R + bias).astype(np.float32)
        return True, hn, np.expand_dims(hn, taxis)
    (h_last,), per, _ = ov_loop(-1, True, [hv], body, slices=[(xv, taxis, -1 if reverse else 1)])
    write_case(out, name, net, [xv, hv], [concat(per, 0, taxis, None, stride=-1 if reverse else 1),
                                         h_last])


def gru_like_loop(out):
    """A body with gates: Split, Sigmoid, Tanh, Multiply, Subtract, Concat, StridedSlice,
    Gather-8, Softmax, ReduceMean, Select, Greater, ShapeOf, Broadcast, Reshape and Range."""
    net = new_net()
    B_, H_ = 2, 3
    x = net.param("x", np.float32, [4, B_, H_])  # 4 steps
    h0 = net.param("h0", np.float32, [B_, H_])
    Wz = randf(2 * H_, 2 * H_) * 0.5
    b = body_net(net)
    p_it = b.param("it", np.int64, [])
    p_x = b.param("x_all", np.float32, [4, B_, H_])
    p_h = b.param("h", np.float32, [B_, H_])
    xt = b.op("Gather", [p_x, p_it, b.const(np.int64(0))], np.float32, [B_, H_],
              data={"batch_dims": 0}, version="opset8")
    cat = b.op("Concat", [xt, p_h], np.float32, [B_, 2 * H_], data={"axis": -1})
    g = b.op("MatMul", [cat, b.const(Wz)], np.float32, [B_, 2 * H_],
             data={"transpose_a": "false", "transpose_b": "false"})
    z_r = b.add("Split", [g, b.const(np.int64(1))], [(np.float32, [B_, H_])] * 2,
                data={"num_splits": 2}, version="opset1")
    z = b.op("Sigmoid", [z_r[0]], np.float32, [B_, H_])
    n = b.op("Tanh", [z_r[1]], np.float32, [B_, H_])
    one_minus = b.op("Subtract", [b.const(np.float32(1)), z], np.float32, [B_, H_])
    h = b.op("Add", [b.op("Multiply", [one_minus, n], np.float32, [B_, H_]),
                     b.op("Multiply", [z, p_h], np.float32, [B_, H_])], np.float32, [B_, H_])
    # Softmax over the last axis, then pick the strided slice [:, ::2] and reduce its mean.
    sm = b.op("Softmax", [h], np.float32, [B_, H_], data={"axis": -1}, version="opset8")
    ss = b.op("StridedSlice", [sm, b.const(np.array([0, 0], np.int64)),
                               b.const(np.array([0, 3], np.int64)),
                               b.const(np.array([1, 2], np.int64))], np.float32, [B_, 2],
              data={"begin_mask": "1,0", "end_mask": "1,0", "new_axis_mask": "",
                    "shrink_axis_mask": "", "ellipsis_mask": ""}, version="opset1")
    mean = b.op("ReduceMean", [ss, b.const(np.array([1], np.int64))], np.float32, [B_, 1],
                data={"keep_dims": "true"})
    # Select(mean > 0.3, h, -h) broadcast over H.
    gt = b.op("Greater", [mean, b.const(np.float32(0.3))], np.bool_, [B_, 1])
    neg = b.op("Negative", [h], np.float32, [B_, H_])
    sel = b.op("Select", [gt, h, neg], np.float32, [B_, H_], version="opset1")
    # Reshape (special_zero) a Range-built ramp to [B, H] via ShapeOf + Broadcast.
    shp = b.op("ShapeOf", [sel], np.int64, [2], data={"output_type": "i64"}, version="opset3")
    ramp = b.op("Range", [b.const(np.float32(0)), b.const(np.float32(H_)),
                          b.const(np.float32(1))], np.float32, [H_],
                data={"output_type": "f32"}, version="opset4")
    ramp2 = b.op("Reshape", [ramp, b.const(np.array([1, -1], np.int64))], np.float32, [1, H_],
                 data={"special_zero": "true"})
    bc = b.op("Broadcast", [ramp2, shp], np.float32, [B_, H_], data={"mode": "numpy"},
              version="opset3")
    out_v = b.op("Add", [sel, b.op("Multiply", [bc, b.const(np.float32(0.01))], np.float32,
                                   [B_, H_])], np.float32, [B_, H_])
    b.result(h)
    r_h = max(b.used)
    b.result(out_v)
    r_o = max(b.used)
    b.result(b.const(np.bool_(True)))
    r_c = max(b.used)
    outs = net.loop([net.const(np.int64(4)), net.const(np.bool_(True)), x, h0], b,
                    [(-1, p_it.layer, {"purpose": "current_iteration"}), (2, p_x.layer, {}),
                     (3, p_h.layer, {})],
                    [(4, r_h, {}), (5, r_o, {"axis": 0}),
                     (-1, r_c, {"purpose": "execution_condition"})],
                    [(r_h, p_h.layer)], [(np.float32, [B_, H_]), (np.float32, [4 * B_, H_])])
    net.result(outs[0], "h")
    net.result(outs[1], "outs")
    xv, hv = randf(4, B_, H_), randf(B_, H_)

    def sigmoid(v):
        return 1 / (1 + np.exp(-v))

    def body(i, hh):
        xt_ = xv[i]
        gg = np.concatenate([xt_, hh], -1) @ Wz
        zz, nn = sigmoid(gg[:, :H_]), np.tanh(gg[:, H_:])
        hn = ((1 - zz) * nn + zz * hh).astype(np.float32)
        e = np.exp(hn - hn.max(-1, keepdims=True))
        smv = e / e.sum(-1, keepdims=True)
        mv = smv[:, 0:3:2].mean(1, keepdims=True)
        s = np.where(mv > 0.3, hn, -hn)
        o = s + np.broadcast_to(np.arange(H_, dtype=np.float32).reshape(1, -1), s.shape) * 0.01
        return True, hn, o.astype(np.float32)
    (h_v,), per, _ = ov_loop(4, True, [hv], body)
    write_case(out, "gru_like_loop", net, [xv, hv], [h_v, concat(per, 0, 0, None)])


def ops_case(out):
    """Ops outside a Loop: StridedSlice masks, Slice-8, Gather-8 batch_dims, VariadicSplit,
    Broadcast explicit, Reshape special_zero=false, Squeeze, Transpose, Power, Maximum, Minimum,
    Divide (float and floor integer), Exp, Sqrt, Relu, Equal, LogicalNot/Or, ReduceSum,
    Convert, Range-4 int."""
    net = new_net()
    x = net.param("x", np.float32, [2, 3, 4])
    idx = net.param("idx", np.int64, [2, 2])
    a = net.param("a", np.int32, [4])
    xv = randf(2, 3, 4)
    iv = np.array([[0, 2], [1, -1]], np.int64)
    av = np.array([7, -7, 9, -3], np.int32)
    res = []

    def ret(t, v, name):
        net.result(t, name)
        res.append(v)
    # StridedSlice: x[1, ::-1, newaxis, 1:] -> shrink, reverse, new axis.
    ss = net.op("StridedSlice", [x, net.const(np.array([1, -1, 0, 1], np.int64)),
                                 net.const(np.array([2, -4, 0, 4], np.int64)),
                                 net.const(np.array([1, -1, 1, 1], np.int64))],
                np.float32, [3, 1, 3],
                data={"begin_mask": "0,0,0,0", "end_mask": "0,1,0,0", "new_axis_mask": "0,0,1,0",
                      "shrink_axis_mask": "1,0,0,0", "ellipsis_mask": "0,0,0,0"},
                version="opset1")
    ret(ss, xv[1, ::-1, np.newaxis, 1:], "strided")
    # StridedSlice with an ellipsis: x[..., 2]
    se = net.op("StridedSlice", [x, net.const(np.array([0, 2], np.int64)),
                                 net.const(np.array([0, 3], np.int64))],
                np.float32, [2, 3],
                data={"begin_mask": "0,0", "end_mask": "0,0", "ellipsis_mask": "1,0",
                      "shrink_axis_mask": "0,1"}, version="opset1")
    ret(se, xv[..., 2], "ellipsis")
    # StridedSlice with steps far past the axis sizes (an openvino_importer_fuzz finding: the
    # step times the input stride overflowed): x[:, ::2**62, ::-2**62]
    big = 1 << 62
    sb = net.op("StridedSlice", [x, net.const(np.array([0, 0, 0], np.int64)),
                                 net.const(np.array([0, 0, 0], np.int64)),
                                 net.const(np.array([1, big, -big], np.int64))],
                np.float32, [2, 1, 1],
                data={"begin_mask": "1,1,1", "end_mask": "1,1,1", "new_axis_mask": "0,0,0",
                      "shrink_axis_mask": "0,0,0", "ellipsis_mask": "0,0,0"},
                version="opset1")
    ret(sb, xv[:, ::big, ::-big], "strided_big_step")
    # Slice-8: x[:, 2:0:-1, ::3] with axes [1, 2]
    sl = net.op("Slice", [x, net.const(np.array([2, 0], np.int64)),
                          net.const(np.array([0, 100], np.int64)),
                          net.const(np.array([-1, 3], np.int64)),
                          net.const(np.array([1, 2], np.int64))], np.float32, [2, 2, 2])
    ret(sl, xv[:, 2:0:-1, ::3], "slice8")
    # Gather-8 with batch_dims=1 and a negative index: out[b, j, :] = x[b, :, idx[b, j]]... axis 2
    g = net.op("Gather", [x, idx, net.const(np.int64(2))], np.float32, [2, 3, 2],
               data={"batch_dims": 1}, version="opset8")
    ret(g, np.stack([xv[bb][:, iv[bb]] for bb in range(2)]), "gather_bd")
    # VariadicSplit along axis -1 into [1, -1]
    vs = net.add("VariadicSplit", [x, net.const(np.int64(-1)),
                                   net.const(np.array([1, -1], np.int64))],
                 [(np.float32, [2, 3, 1]), (np.float32, [2, 3, 3])], version="opset1")
    ret(vs[1], xv[..., 1:], "vsplit")
    # Broadcast explicit: a[3] -> [2, 3, 4] with axes_mapping [1]
    v3 = net.const(np.array([1.0, 2.0, 3.0], np.float32))
    be = net.op("Broadcast", [v3, net.const(np.array([2, 3, 4], np.int64)),
                              net.const(np.array([1], np.int64))], np.float32, [2, 3, 4],
                data={"mode": "explicit"}, version="opset3")
    ret(be, np.broadcast_to(np.array([1, 2, 3], np.float32).reshape(1, 3, 1), (2, 3, 4)),
        "bcast_explicit")
    # Reshape special_zero=false with an i32 shape, then Transpose and Squeeze.
    r = net.op("Reshape", [x, net.const(np.array([4, 1, 6], np.int32))], np.float32, [4, 1, 6],
               data={"special_zero": "false"})
    t = net.op("Transpose", [r, net.const(np.array([2, 1, 0], np.int64))], np.float32, [6, 1, 4])
    sq = net.op("Squeeze", [t, net.const(np.array([1], np.int64))], np.float32, [6, 4])
    ret(sq, xv.reshape(4, 1, 6).transpose(2, 1, 0).reshape(6, 4), "reshaped")
    # Elementwise math on |x|.
    ab = net.op("Abs", [x], np.float32, [2, 3, 4], version="opset1")
    pw = net.op("Power", [ab, net.const(np.float32(1.5))], np.float32, [2, 3, 4])
    mx = net.op("Maximum", [pw, net.op("Sqrt", [ab], np.float32, [2, 3, 4])], np.float32,
                [2, 3, 4])
    mn = net.op("Minimum", [mx, net.op("Exp", [x], np.float32, [2, 3, 4])], np.float32, [2, 3, 4])
    dv = net.op("Divide", [mn, net.const(np.float32(4))], np.float32, [2, 3, 4])
    rl = net.op("Relu", [net.op("Subtract", [dv, net.const(np.float32(0.1))], np.float32,
                                [2, 3, 4])], np.float32, [2, 3, 4])
    axv = np.abs(xv)
    ret(rl, np.maximum(np.minimum(np.maximum(axv ** 1.5, np.sqrt(axv)), np.exp(xv)) / 4 - 0.1,
                       0).astype(np.float32), "math")
    # Integer Divide floors (Python division).
    di = net.op("Divide", [a, net.const(np.int32(2))], np.int32, [4],
                data={"m_pythondiv": "true", "auto_broadcast": "numpy"})
    ret(di, av // 2, "floordiv")
    # Comparisons and logic: not(a == 7) or (a > 8); ReduceSum of Convert(bool -> f32).
    eq = net.op("Equal", [a, net.const(np.int32(7))], np.bool_, [4])
    gt = net.op("Greater", [a, net.const(np.int32(8))], np.bool_, [4])
    lo = net.op("LogicalOr", [net.op("LogicalNot", [eq], np.bool_, [4], version="opset1"), gt],
                np.bool_, [4], version="opset1")
    ret(lo, np.logical_or(av != 7, av > 8), "logic")
    cf = net.op("Convert", [lo], np.float32, [4], data={"destination_type": "f32"})
    rs = net.op("ReduceSum", [cf, net.const(np.array([0], np.int32))], np.float32, [1],
                data={"keep_dims": "true"})
    ret(rs, np.array([np.logical_or(av != 7, av > 8).sum()], np.float32), "count")
    rg = net.op("Range", [net.const(np.int32(2)), net.const(np.int32(11)),
                          net.const(np.int32(3))], np.int64, [3],
                data={"output_type": "i64"}, version="opset4")
    ret(rg, np.arange(2, 11, 3, dtype=np.int64), "range")
    write_case(out, "ops_outside_loop", net, [xv, iv, av], res)


# --------------------------------------------------------------------------------------------
# Recurrent cells and sequences (RNNCell-3, GRUCell-3, LSTMCell-1/-4, *Sequence-5), in numpy
# from the OpenVINO op specs: gate order fico (LSTM), zrh (GRU), B the per-gate sum Wb + Rb (GRU
# with linear_before_reset: [z, r, Wbh, Rbh]); f, g, h activations; clip on every activation's
# input. Sequences: X [B,T,I], states [B,D,H], Y [B,D,T,H]; outputs past a sequence's length are 0.
# And TensorIterator slicing as OpenVINO's core op reads it: the inclusive range [start, end]
# (negative from the end) cut into parts of part_size, taken in the stride's direction.
# --------------------------------------------------------------------------------------------
def act(name):
    return {"sigmoid": lambda v: 1 / (1 + np.exp(-v)), "tanh": np.tanh,
            "relu": lambda v: np.maximum(v, 0)}[name]


def ov_lstm_cell(x, h, c, W, R, B, acts=("sigmoid", "tanh", "tanh"), clip=0.0, order="fico"):
    f, g, hf = (act(a) for a in acts)
    cl = (lambda v: np.clip(v, -clip, clip)) if clip > 0 else (lambda v: v)
    gates = x @ W.T + h @ R.T + B
    parts = dict(zip(order, np.split(gates, 4, axis=-1)))
    i, fg, cc, o = f(cl(parts["i"])), f(cl(parts["f"])), g(cl(parts["c"])), f(cl(parts["o"]))
    c_new = fg * c + i * cc
    return (o * hf(c_new)).astype(np.float32), c_new.astype(np.float32)


def ov_gru_cell(x, h, W, R, B, acts=("sigmoid", "tanh"), clip=0.0, lbr=False):
    f, g = act(acts[0]), act(acts[1])
    cl = (lambda v: np.clip(v, -clip, clip)) if clip > 0 else (lambda v: v)
    H = h.shape[-1]
    wz, wr, wh = np.split(W, 3)
    rz, rr, rh = np.split(R, 3)
    bz, br, bh = B[:H], B[H:2 * H], B[2 * H:3 * H]
    z = f(cl(x @ wz.T + h @ rz.T + bz))
    r = f(cl(x @ wr.T + h @ rr.T + br))
    if lbr:
        hh = g(cl(x @ wh.T + bh + r * (h @ rh.T + B[3 * H:])))
    else:
        hh = g(cl(x @ wh.T + (r * h) @ rh.T + bh))
    return ((1 - z) * hh + z * h).astype(np.float32)


def ov_rnn_cell(x, h, W, R, B, acts=("tanh",), clip=0.0):
    cl = (lambda v: np.clip(v, -clip, clip)) if clip > 0 else (lambda v: v)
    return act(acts[0])(cl(x @ W.T + h @ R.T + B)).astype(np.float32)


def ti_slices(arr, axis, stride=1, part=1, start=0, end=-1):
    """The parts a TensorIterator sliced input gives, in iteration order."""
    d = arr.shape[axis]
    lo = start if start >= 0 else d + start
    hi = end if end >= 0 else d + end
    first, last = min(lo, hi), max(lo, hi)
    n = (last - first + 1) // part
    offs = [first + k * part if stride > 0 else last + 1 - (k + 1) * part for k in range(n)]
    return [np.take(arr, range(o, o + part), axis=axis) for o in offs]


def cell_layer(b, kind, inputs, B_, H_, data, version):
    n_out = 2 if kind == "LSTMCell" else 1
    return b.add(kind, inputs, [(np.float32, [B_, H_])] * n_out, data=data, version=version)


def ti_cell_case(out, name, kind, reverse=False, version=None, data=None, acts=None, clip=0.0,
                 lbr=False, order="fico", explicit_format=None, loop5=False):
    """A TensorIterator (or Loop-5) over x [B, T, I] on axis 1 whose body is one cell:
    Squeeze -> cell -> Unsqueeze, states carried by back edges; outputs: the concatenated hidden
    states and the last states."""
    B_, T_, I_, H_ = 2, 5, 3, 4
    G = {"LSTMCell": 4, "GRUCell": 3, "RNNCell": 1}[kind]
    net = new_net()
    x = net.param("x", np.float32, [B_, T_, I_])
    h0 = net.param("h0", np.float32, [B_, H_])
    xv, hv = randf(B_, T_, I_), randf(B_, H_)
    inputs_v = [xv, hv]
    outer = [x, h0]
    if kind == "LSTMCell":
        c0 = net.param("c0", np.float32, [B_, H_])
        cv = randf(B_, H_)
        outer.append(c0)
        inputs_v.append(cv)
    W = randf(G * H_, I_) * 0.5
    R = randf(G * H_, H_) * 0.5
    Bv = randf((G + (1 if lbr else 0)) * H_) * 0.3
    b = body_net(net)
    p_x = b.param("xt", np.float32, [B_, 1, I_])
    p_h = b.param("h", np.float32, [B_, H_])
    p_c = b.param("c", np.float32, [B_, H_]) if kind == "LSTMCell" else None
    xt = b.op("Squeeze", [p_x, b.const(np.array([1], np.int64))], np.float32, [B_, I_])
    attrs = {"hidden_size": H_}
    if acts:
        attrs["activations"] = ",".join(acts)
    if clip:
        attrs["clip"] = clip
    if lbr:
        attrs["linear_before_reset"] = "true"
    if explicit_format:
        attrs["weights_format"] = explicit_format
    attrs.update(data or {})
    cell_in = [xt, p_h] + ([p_c] if p_c else []) + [b.const(W), b.const(R), b.const(Bv)]
    ver = version or {"LSTMCell": "opset4", "GRUCell": "opset3", "RNNCell": "opset3"}[kind]
    cell = cell_layer(b, kind, cell_in, B_, H_, attrs, ver)
    hu = b.op("Unsqueeze", [cell[0], b.const(np.array([1], np.int64))], np.float32,
              [B_, 1, H_])
    b.result(cell[0])
    r_h = max(b.used)
    b.result(hu)
    r_hu = max(b.used)
    r_c = None
    if p_c:
        b.result(cell[1])
        r_c = max(b.used)
    sl = {"axis": 1}
    if reverse:
        sl.update({"stride": -1, "start": -1, "end": 0})
    back = [(r_h, p_h.layer)] + ([(r_c, p_c.layer)] if p_c else [])
    outs_spec = [(np.float32, [B_, T_, H_]), (np.float32, [B_, H_])] + (
        [(np.float32, [B_, H_])] if p_c else [])
    if loop5:
        b.result(b.const(np.bool_(True)))
        r_cond = max(b.used)
        pin = [(2, p_x.layer, sl), (3, p_h.layer, {})] + ([(4, p_c.layer, {})] if p_c else [])
        base = 2 + len(outer)
        pout = [(base, r_hu, dict(sl)), (base + 1, r_h, {})] + (
            [(base + 2, r_c, {})] if p_c else []) + [
            (-1, r_cond, {"purpose": "execution_condition"})]
        outs = net.loop([net.const(np.int64(-1)), net.const(np.bool_(True))] + outer, b, pin,
                        pout, back, outs_spec)
    else:
        pin = [(0, p_x.layer, sl), (1, p_h.layer, {})] + ([(2, p_c.layer, {})] if p_c else [])
        base = len(outer)
        pout = [(base, r_hu, dict(sl)), (base + 1, r_h, {})] + (
            [(base + 2, r_c, {})] if p_c else [])
        outs = net.loop(outer, b, pin, pout, back, outs_spec, type_="TensorIterator")
    net.result(outs[0], "hs")
    net.result(outs[1], "h_last")
    if p_c:
        net.result(outs[2], "c_last")
    h, c = hv, (cv if p_c else None)
    hs = []
    for xt_v in ti_slices(xv, 1, -1 if reverse else 1):
        xt_v = xt_v[:, 0]
        if kind == "LSTMCell":
            h, c = ov_lstm_cell(xt_v, h, c, W, R, Bv, acts or ("sigmoid", "tanh", "tanh"), clip,
                                order)
        elif kind == "GRUCell":
            h = ov_gru_cell(xt_v, h, W, R, Bv, acts or ("sigmoid", "tanh"), clip, lbr)
        else:
            h = ov_rnn_cell(xt_v, h, W, R, Bv, acts or ("tanh",), clip)
        hs.append(h[:, None])
    if reverse:
        hs = hs[::-1]
    expected = [np.concatenate(hs, axis=1), h] + ([c] if p_c else [])
    write_case(out, name, net, inputs_v, expected)


def sequence_case(out, name, kind, direction="forward", lens=None, lbr=False, acts=None,
                  clip=0.0):
    """RNN/GRU/LSTMSequence-5 on x [B, T, I] with sequence_lengths; Y [B, D, T, H]."""
    B_, T_, I_, H_ = 2, 5, 3, 4
    D = 2 if direction == "bidirectional" else 1
    cell = kind.replace("Sequence", "")
    G = {"LSTM": 4, "GRU": 3, "RNN": 1}[cell]
    net = new_net()
    x = net.param("x", np.float32, [B_, T_, I_])
    h0 = net.param("h0", np.float32, [B_, D, H_])
    xv, hv = randf(B_, T_, I_), randf(B_, D, H_)
    ins, vals = [x, h0], [xv, hv]
    if cell == "LSTM":
        c0 = net.param("c0", np.float32, [B_, D, H_])
        cv = randf(B_, D, H_)
        ins.append(c0)
        vals.append(cv)
    lv = np.array(lens if lens else [T_] * B_, np.int32)
    seq = net.param("lens", np.int32, [B_])
    ins.append(seq)
    vals.append(lv)
    W = randf(D, G * H_, I_) * 0.5
    R = randf(D, G * H_, H_) * 0.5
    Bv = randf(D, (G + (1 if lbr else 0)) * H_) * 0.3
    ins += [net.const(W), net.const(R), net.const(Bv)]
    attrs = {"hidden_size": H_, "direction": direction}
    if acts:
        attrs["activations"] = ",".join(acts)
    if clip:
        attrs["clip"] = clip
    if lbr:
        attrs["linear_before_reset"] = "true"
    n_out = 3 if cell == "LSTM" else 2
    outs = net.add(kind, ins, [(np.float32, [B_, D, T_, H_])] + [(np.float32, [B_, D, H_])] *
                   (n_out - 1), data=attrs, version="opset5")
    for k, o in enumerate(outs):
        net.result(o, ["Y", "Ho", "Co"][k])
    Y = np.zeros((B_, D, T_, H_), np.float32)
    Ho = np.zeros((B_, D, H_), np.float32)
    Co = np.zeros((B_, D, H_), np.float32)
    for d in range(D):
        rev = direction == "reverse" or d == 1
        for bb in range(B_):
            h = hv[bb, d:d + 1]
            c = cv[bb, d:d + 1] if cell == "LSTM" else None
            n = int(lv[bb])
            for s in range(n):
                t = n - 1 - s if rev else s
                xt_v = xv[bb, t:t + 1]
                if cell == "LSTM":
                    h, c = ov_lstm_cell(xt_v, h, c, W[d], R[d], Bv[d],
                                        acts or ("sigmoid", "tanh", "tanh"), clip)
                elif cell == "GRU":
                    h = ov_gru_cell(xt_v, h, W[d], R[d], Bv[d], acts or ("sigmoid", "tanh"),
                                    clip, lbr)
                else:
                    h = ov_rnn_cell(xt_v, h, W[d], R[d], Bv[d], acts or ("tanh",), clip)
                Y[bb, d, t] = h[0]
            Ho[bb, d] = h[0]
            if cell == "LSTM":
                Co[bb, d] = c[0]
    write_case(out, name, net, vals, [Y, Ho, Co][:n_out])


def ti_slicing_case(out, name, part=1, stride=1, start=None, end=None, back_edge_on_slice=False,
                    out_stride=None):
    """TensorIterator slicing x [2, 8, 3] on axis 1: parts of `part` along [start, end] in the
    stride's direction; the body adds its part to a carried [2, part, 3] accumulator and outputs
    2 * part, concatenated on axis 1 (in reverse for a negative output stride)."""
    net = new_net()
    x = net.param("x", np.float32, [2, 8, 3])
    a0 = net.param("a0", np.float32, [2, part, 3])
    xv, av = randf(2, 8, 3), randf(2, part, 3)
    b = body_net(net)
    p_x = b.param("xt", np.float32, [2, part, 3])
    p_a = b.param("acc", np.float32, [2, part, 3])
    acc = b.op("Add", [p_a, p_x], np.float32, [2, part, 3])
    dbl = b.op("Multiply", [p_x, b.const(np.float32(2))], np.float32, [2, part, 3])
    b.result(acc)
    r_a = max(b.used)
    b.result(dbl)
    r_d = max(b.used)
    sl = {"axis": 1}
    if part != 1:
        sl["part_size"] = part
    if stride != 1:
        sl["stride"] = stride
    if start is not None:
        sl["start"] = start
    if end is not None:
        sl["end"] = end
    osl = {"axis": 1}
    os_ = out_stride if out_stride is not None else (1 if stride > 0 else -1)
    if os_ != 1:
        osl["stride"] = os_
    back = [(r_a, p_a.layer)]
    if back_edge_on_slice:
        # Listed by the IR; OpenVINO's reader makes the Parameter a sliced input and ignores it.
        back.append((r_d, p_x.layer))
    parts = ti_slices(xv, 1, stride, part, 0 if start is None else start,
                      -1 if end is None else end)
    outs = net.loop([x, a0], b, [(0, p_x.layer, sl), (1, p_a.layer, {})],
                    [(2, r_d, osl), (3, r_a, {})], back,
                    [(np.float32, [2, part * len(parts), 3]), (np.float32, [2, part, 3])],
                    type_="TensorIterator")
    net.result(outs[0], "doubled")
    net.result(outs[1], "acc_out")
    accv = av
    per = []
    for pv in parts:
        accv = (accv + pv).astype(np.float32)
        per.append(pv * np.float32(2))
    if os_ < 0:
        per = per[::-1]
    write_case(out, name, net, [xv, av], [np.concatenate(per, axis=1), accv])


def recurrent_cases(out):
    ti_cell_case(out, "ti_lstm_cell4", "LSTMCell")
    ti_cell_case(out, "ti_lstm_cell4_reverse_clip", "LSTMCell", reverse=True, clip=0.9)
    ti_cell_case(out, "loop5_lstm_cell4", "LSTMCell", loop5=True)
    ti_cell_case(out, "ti_lstm_cell1_default_format_ifco", "LSTMCell", version="opset1",
                 order="ifco")
    ti_cell_case(out, "ti_lstm_cell1_format_fico", "LSTMCell", version="opset1", order="fico",
                 explicit_format="fico")
    ti_cell_case(out, "ti_lstm_cell4_relu_activations", "LSTMCell",
                 acts=("sigmoid", "relu", "tanh"))
    ti_cell_case(out, "ti_gru_cell3", "GRUCell")
    ti_cell_case(out, "ti_gru_cell3_linear_before_reset_reverse", "GRUCell", lbr=True,
                 reverse=True)
    ti_cell_case(out, "ti_gru_cell3_clip", "GRUCell", clip=0.5)
    ti_cell_case(out, "ti_rnn_cell3", "RNNCell")
    ti_cell_case(out, "ti_rnn_cell3_relu", "RNNCell", acts=("relu",))
    ti_cell_case(out, "loop5_rnn_cell3_sigmoid", "RNNCell", acts=("sigmoid",), loop5=True)
    sequence_case(out, "lstm_sequence5", "LSTMSequence")
    sequence_case(out, "lstm_sequence5_bidirectional_lengths", "LSTMSequence",
                  direction="bidirectional", lens=[5, 3])
    sequence_case(out, "lstm_sequence5_reverse_clip", "LSTMSequence", direction="reverse",
                  clip=0.6)
    sequence_case(out, "gru_sequence5_linear_before_reset", "GRUSequence", lbr=True)
    sequence_case(out, "gru_sequence5_bidirectional_lengths", "GRUSequence",
                  direction="bidirectional", lens=[2, 5])
    sequence_case(out, "rnn_sequence5_reverse", "RNNSequence", direction="reverse")
    sequence_case(out, "rnn_sequence5_relu_lengths", "RNNSequence", acts=("relu",), lens=[4, 1])
    ti_slicing_case(out, "ti_part_size_2", part=2, stride=2)
    ti_slicing_case(out, "ti_part_size_2_stride_1", part=2)
    ti_slicing_case(out, "ti_part_size_2_reverse", part=2, stride=-2, start=-1, end=0)
    ti_slicing_case(out, "ti_range_1_to_4", start=1, end=4)
    ti_slicing_case(out, "ti_range_negative", start=-6, end=-3)
    ti_slicing_case(out, "ti_reverse_default_start_end", stride=-1)
    ti_slicing_case(out, "ti_back_edge_on_sliced_input", back_edge_on_slice=True)
    ti_slicing_case(out, "ti_forward_slices_reverse_concat", out_stride=-1)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    case_spec_port_map(out)
    counter_loop(out, "trip_count_i64_scalar", np.int64, [], 4)
    counter_loop(out, "trip_count_i32_scalar", np.int32, [], 3)
    counter_loop(out, "trip_count_i64_1d", np.int64, [1], 5)
    counter_loop(out, "trip_count_i32_1d_const", np.int32, [1], 2, trip_const=True)
    counter_loop(out, "ir_v10_without_names", np.int64, [], 3, version=10)
    counter_loop(out, "concat_negative_axis_minus1", np.int64, [], 3, scan_axis=-1)
    counter_loop(out, "concat_negative_axis_minus2", np.int64, [], 3, scan_axis=-2)
    counter_loop(out, "zero_iterations_negative_trip_is_infinite_cond_false", np.int64, [], -1,
                 cond_value=False)
    while_loop(out, "infinite_trip_minus1_ended_by_condition", "minus1")
    while_loop(out, "infinite_trip_minus1_i32_1d_condition_1d", "minus1_i32", cond_rank1=True)
    while_loop(out, "unconnected_trip_count_port", "unconnected")
    while_loop(out, "omitted_trip_count_port", "omitted")
    sliced_case(out, "sliced_axis1_concat_axis1", 1, 1, 4, 1)
    sliced_case(out, "sliced_axis1_stride_minus1", 1, -1, 4, -2)
    sliced_case(out, "sliced_axis_minus1_trip_limits", -1, 1, 2, -1)
    sliced_case(out, "sliced_axis0_trip_minus1", 0, 1, -1, 0)
    zero_iterations(out, "zero_iterations_condition_false", "cond")
    zero_iterations(out, "zero_iterations_trip_count_0", "trip")
    nested_loops(out)
    rnn(out, "tensor_iterator_rnn", "ti")
    rnn(out, "tensor_iterator_rnn_reverse", "ti", reverse=True)
    rnn(out, "loop_rnn_batch_first", "loop")
    gru_like_loop(out)
    ops_case(out)
    recurrent_cases(out)


if __name__ == "__main__":
    main()
