#!/usr/bin/python3
"""Writes OpenVINO int8 IR test cases (issue 28) in the layout of make_ov_models.py:

    OUT/<case>/model.xml + model.bin, OUT/<case>/test_data_set_0/{input,output}_<k>.pb, OUT/<case>/ATOL

  fq_formula       FakeQuantize-1 on its own: ranges as inputs (not constants), per-channel ranges,
                   output ranges other than the input ranges, levels 2, 5, 16 and 256
  mlp_int8         what NNCF writes for a two-layer perceptron: FakeQuantize (256 levels, per
                   tensor) on each activation before a MatMul, FakeQuantize (255 levels, symmetric,
                   per output column) on each constant weight; and a weight-only compressed
                   MatMul (Convert of u8 weights, Subtract zero point, Multiply scale)
  mlp_fp32         the same network without the quantization (mlp_int8's fp32 model)
  fq_compressed    POT's compressed weight: i8 Const -> Convert -> FakeQuantize to the float range
  qrnn_loop        an Elman RNN cell in a Loop-5 body with the same FakeQuantize placement
  fq_bad_levels,   refused at load (EXPECT_ERROR): levels 1; integer data
  fq_int_data

Expected outputs are computed here in float64 by numpy from the FakeQuantize-1 spec
(docs.openvino.ai, FakeQuantize-1), never by loopserve. For mlp_int8 the tolerance (ATOL) is one
quantization step of the activations times the largest weight row sum: the int8 product may put
an activation on the neighbouring level where the float32 arithmetic of the reference and of the
engine round a value that lies on a half step differently.

    /usr/bin/python3 make_ov_int8_models.py OUT_DIR [--batch=B --width=N]   (--width: bench sizes)
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_ov_models as ov  # noqa: E402  (applies the numpy alias shim)
import numpy as np  # noqa: E402

F32 = np.float32
ov.PREC.update({np.uint8: ("U8", "u8"), np.int8: ("I8", "i8")})


def fake_quantize(x, il, ih, ol, oh, levels):
    """FakeQuantize-1 as its spec writes it, in float64 (ranges broadcast to x)."""
    x, il, ih, ol, oh = (np.asarray(a, np.float64) for a in (x, il, ih, ol, oh))
    inside = np.round((x - il) / (ih - il) * (levels - 1)) / (levels - 1) * (oh - ol) + ol
    return np.where(x <= np.minimum(il, ih), ol, np.where(x > np.maximum(il, ih), oh, inside))


def write_atol(out, name, atol):
    with open(os.path.join(out, name, "ATOL"), "w") as f:
        f.write("%.9g\n" % atol)


def fq_formula(out):
    rng = np.random.RandomState(5)
    n = ov.new_net()
    x = n.param("x", F32, [2, 3, 4])
    il = n.param("il", F32, [1, 3, 1])
    ih = n.param("ih", F32, [1, 3, 1])
    results, expected = [], []
    xv = rng.uniform(-2, 2, (2, 3, 4)).astype(F32)
    ilv = np.array([-1.0, -0.5, 0.25], F32).reshape(1, 3, 1)
    ihv = np.array([1.0, 1.5, 0.75], F32).reshape(1, 3, 1)
    # Ranges from the inputs (not constants), output ranges equal and other.
    ol_c = n.const(np.array([[[-4.0]], [[0.0]], [[1.0]]], F32).reshape(1, 3, 1))
    oh_c = n.const(np.array([4.0], F32))
    for levels in (2, 5, 16, 256):
        y = n.op("FakeQuantize", [x, il, ih, il, ih], F32, [2, 3, 4], data={"levels": levels},
                 version="opset1", name="fq_in_%d" % levels)
        n.result(y, name="same_%d" % levels)
        expected.append(fake_quantize(xv, ilv, ihv, ilv, ihv, levels).astype(F32))
        y = n.op("FakeQuantize", [x, il, ih, ol_c, oh_c], F32, [2, 3, 4],
                 data={"levels": levels}, version="opset1", name="fq_out_%d" % levels)
        n.result(y, name="other_%d" % levels)
        expected.append(fake_quantize(xv, ilv, ihv, np.array([-4.0, 0.0, 1.0]).reshape(1, 3, 1),
                                      4.0, levels).astype(F32))
    # Constant ranges with input_low > input_high (allowed: min/max decide the clipping).
    rl, rh = n.const(np.array(1.0, F32)), n.const(np.array(-1.0, F32))
    y = n.op("FakeQuantize", [x, rl, rh, rl, rh], F32, [2, 3, 4], data={"levels": 256},
             version="opset1", name="fq_reversed")
    n.result(y, name="reversed")
    expected.append(fake_quantize(xv, 1.0, -1.0, 1.0, -1.0, 256).astype(F32))
    ov.write_case(out, "fq_formula", n, [xv, ilv, ihv], expected)
    write_atol(out, "fq_formula", 1e-5)


def fq_errors(out):
    """Models FakeQuantize must refuse at load: levels below 2, integer data."""
    for name, levels, dtype in (("fq_bad_levels", 1, F32), ("fq_int_data", 256, np.int64)):
        n = ov.new_net()
        x = n.param("x", dtype, [4])
        lo, hi = n.const(np.array(0, dtype)), n.const(np.array(3, dtype))
        n.result(n.op("FakeQuantize", [x, lo, hi, lo, hi], dtype, [4], data={"levels": levels},
                      version="opset1", name="fq"))
        ov.write_case(out, name, n, [], [])
        open(os.path.join(out, name, "EXPECT_ERROR"), "w").close()


def aligned_range(lo, hi):
    """An activation range as NNCF aligns it: zero on the 256-level grid."""
    s = (hi - lo) / 255.0
    zp = round(-lo / s)
    lo = -zp * s
    return F32(lo), F32(lo + 255 * s)


def mlp(out, batch, width, seed=11):
    """mlp_int8 and mlp_fp32: y = relu(x W1 + b1) W2 + b2 and z = x Wc with Wc weight-only
    compressed (u8, per-column zero point and scale)."""
    rng = np.random.RandomState(seed)
    k, h, m = width, width, width // 2
    xv = rng.uniform(-1, 1, (batch, k)).astype(F32)
    w1 = (rng.standard_normal((k, h)) / np.sqrt(k)).astype(F32)
    b1 = (rng.standard_normal(h) * 0.1).astype(F32)
    w2 = (rng.standard_normal((h, m)) / np.sqrt(h)).astype(F32)
    b2 = (rng.standard_normal(m) * 0.1).astype(F32)
    wc_q = rng.randint(0, 256, (k, m)).astype(np.uint8)
    wc_zp = rng.randint(100, 156, (1, m)).astype(np.uint8)
    wc_s = rng.uniform(0.001, 0.01, (1, m)).astype(F32)
    wc = ((wc_q.astype(np.float64) - wc_zp) * wc_s).astype(F32)
    a1 = aligned_range(-1.0, 1.0)
    a2 = aligned_range(0.0, float(np.maximum(xv @ w1 + b1, 0).max()) * 1.05)
    r1 = np.abs(w1).max(axis=0, keepdims=True).astype(F32)
    r2 = np.abs(w2).max(axis=0, keepdims=True).astype(F32)
    # The second layer and the compressed one are stored as a Linear's [N, K] weight, read by
    # MatMul with transpose_b (their ranges / scales per output row, as NNCF writes them).
    w2t, r2t = np.ascontiguousarray(w2.T), np.ascontiguousarray(r2.T)
    wct_q, wct_zp, wct_s = (np.ascontiguousarray(a.T) for a in (wc_q, wc_zp, wc_s))

    for name, quantized in (("mlp_int8", True), ("mlp_fp32", False)):
        n = ov.new_net()
        x = n.param("x", F32, [-1, k], shape="?,%d" % k)

        def fq(t, lo, hi, levels, dims, label):
            if not quantized:
                return t
            lo_c, hi_c = n.const(lo), n.const(hi)
            return n.op("FakeQuantize", [t, lo_c, hi_c, lo_c, hi_c], F32, dims,
                        data={"levels": levels}, version="opset1", name=label)

        xq = fq(x, np.array(a1[0], F32), np.array(a1[1], F32), 256, [-1, k], "fq_x")
        w1q = fq(n.const(w1), -r1, r1, 255, [k, h], "fq_w1")
        p1 = n.op("MatMul", [xq, w1q], F32, [-1, h], data={"transpose_a": "false",
                                                           "transpose_b": "false"})
        h1 = n.op("Relu", [n.op("Add", [p1, n.const(b1)], F32, [-1, h])], F32, [-1, h])
        hq = fq(h1, np.array(a2[0], F32), np.array(a2[1], F32), 256, [-1, h], "fq_h")
        w2q = fq(n.const(w2t), -r2t, r2t, 255, [m, h], "fq_w2")
        p2 = n.op("MatMul", [hq, w2q], F32, [-1, m], data={"transpose_a": "false",
                                                           "transpose_b": "true"})
        n.result(n.op("Add", [p2, n.const(b2)], F32, [-1, m], name="y"), name="y_result")
        wcf = n.op("Multiply", [n.op("Subtract", [
            n.op("Convert", [n.const(wct_q)], F32, [m, k], data={"destination_type": "f32"}),
            n.op("Convert", [n.const(wct_zp)], F32, [m, 1], data={"destination_type": "f32"})],
            F32, [m, k]), n.const(wct_s)], F32, [m, k])
        z = n.op("MatMul", [xq, wcf], F32, [-1, m], data={"transpose_a": "false",
                                                          "transpose_b": "true"}, name="z")
        n.result(z, name="z_result")

        def ref_fq(v, lo, hi, levels):
            return fake_quantize(v, lo, hi, lo, hi, levels) if quantized else np.float64(v)

        xr = ref_fq(xv, a1[0], a1[1], 256)
        hr = np.maximum(xr @ ref_fq(w1, -r1, r1, 255) + b1, 0)
        yr = ref_fq(hr, a2[0], a2[1], 256) @ ref_fq(w2, -r2, r2, 255) + b2
        zr = xr @ wc.astype(np.float64)
        ov.write_case(out, name, n, [xv], [yr.astype(F32), zr.astype(F32)])
        if quantized:
            # One step of x moves h by up to s1 * max row sum |W1|; one step of h moves y by
            # s2 * max row sum |W2| (see the module docstring).
            s1, s2 = (a1[1] - a1[0]) / 255, (a2[1] - a2[0]) / 255
            step_h = s1 * np.abs(w1).max()
            atol = (step_h + s2) * np.abs(w2).max() + s1 * np.abs(wc).max() + 1e-4
        else:
            atol = 1e-4
        write_atol(out, name, atol)


def fq_compressed(out):
    """fq_compressed: the compressed weight of POT / NNCF IRs, an i8 Const -> Convert ->
    FakeQuantize from the integer range [-128, 127] to the float range (256 levels, per output
    column), read by a MatMul after a FakeQuantize'd activation."""
    rng = np.random.RandomState(8)
    k, m = 16, 8
    xv = rng.uniform(-1, 1, (4, k)).astype(F32)
    q = rng.randint(-128, 128, (k, m)).astype(np.int8)
    s = rng.uniform(0.001, 0.01, (1, m)).astype(F32)
    ilv, ihv = np.full((1, m), -128, F32), np.full((1, m), 127, F32)
    olv, ohv = (-128 * s).astype(F32), (127 * s).astype(F32)
    a = aligned_range(-1.0, 1.0)
    n = ov.new_net()
    x = n.param("x", F32, [4, k])
    lo, hi = n.const(np.array(a[0], F32)), n.const(np.array(a[1], F32))
    xq = n.op("FakeQuantize", [x, lo, hi, lo, hi], F32, [4, k], data={"levels": 256},
              version="opset1", name="fq_x")
    wf = n.op("Convert", [n.const(q)], F32, [k, m], data={"destination_type": "f32"})
    wq = n.op("FakeQuantize", [wf, n.const(ilv), n.const(ihv), n.const(olv), n.const(ohv)], F32,
              [k, m], data={"levels": 256}, version="opset1", name="fq_w")
    n.result(n.op("MatMul", [xq, wq], F32, [4, m], data={"transpose_a": "false",
                                                        "transpose_b": "false"}, name="y"))
    xr = fake_quantize(xv, a[0], a[1], a[0], a[1], 256)
    wr = fake_quantize(q.astype(F32), ilv, ihv, olv, ohv, 256)
    ov.write_case(out, "fq_compressed", n, [xv], [(xr @ wr).astype(F32)])
    write_atol(out, "fq_compressed", (a[1] - a[0]) / 255 * np.abs(wr).max() + 1e-5)


def qrnn_loop(out):
    """qrnn_loop: an Elman RNN in a Loop-5 body quantized as NNCF does it (FakeQuantize of 256
    levels on x_t and h_{t-1}, 255 levels per output row on W [H, I] and R [H, H], both read with
    transpose_b): h_t = tanh(FQ(x_t) FQ(W)^T + FQ(h_{t-1}) FQ(R)^T + b), x [B, T, I], 6 steps."""
    rng = np.random.RandomState(21)
    b_, t_, i_, h_ = 4, 6, 16, 16
    xv = rng.uniform(-1, 1, (b_, t_, i_)).astype(F32)
    hv = rng.uniform(-1, 1, (b_, h_)).astype(F32)
    w = (rng.standard_normal((h_, i_)) / np.sqrt(i_)).astype(F32)
    r = (rng.standard_normal((h_, h_)) / np.sqrt(h_)).astype(F32)
    bias = (rng.standard_normal(h_) * 0.1).astype(F32)
    rw = np.abs(w).max(axis=1, keepdims=True).astype(F32)
    rr = np.abs(r).max(axis=1, keepdims=True).astype(F32)
    ax = aligned_range(-1.0, 1.0)
    net = ov.new_net()
    x = net.param("x", F32, [b_, t_, i_])
    h0 = net.param("h0", F32, [b_, h_])
    body = ov.body_net(net)
    p_x = body.param("xt", F32, [b_, 1, i_])
    p_h = body.param("h", F32, [b_, h_])

    def fq(t, lo, hi, levels, dims):
        lo_c, hi_c = body.const(lo), body.const(hi)
        return body.op("FakeQuantize", [t, lo_c, hi_c, lo_c, hi_c], F32, dims,
                       data={"levels": levels}, version="opset1")

    xt = body.op("Squeeze", [p_x, body.const(np.array([1], np.int64))], F32, [b_, i_])
    lo, hi = np.array(ax[0], F32), np.array(ax[1], F32)
    xw = body.op("MatMul", [fq(xt, lo, hi, 256, [b_, i_]), fq(body.const(w), -rw, rw, 255, [h_, i_])],
                 F32, [b_, h_], data={"transpose_a": "false", "transpose_b": "true"})
    hr = body.op("MatMul", [fq(p_h, lo, hi, 256, [b_, h_]), fq(body.const(r), -rr, rr, 255, [h_, h_])],
                 F32, [b_, h_], data={"transpose_a": "false", "transpose_b": "true"})
    s = body.op("Add", [body.op("Add", [xw, hr], F32, [b_, h_]), body.const(bias)], F32, [b_, h_])
    h = body.op("Tanh", [s], F32, [b_, h_])
    body.result(h)
    r_h = max(body.used)
    body.result(body.const(np.bool_(True)))
    r_c = max(body.used)
    outs = net.loop([net.const(np.int64(-1)), net.const(np.bool_(True)), x, h0], body,
                    [(2, p_x.layer, {"axis": 1}), (3, p_h.layer, {})],
                    [(4, r_h, {}), (-1, r_c, {"purpose": "execution_condition"})],
                    [(r_h, p_h.layer)], [(F32, [b_, h_])])
    net.result(outs[0], "h_last")
    hh = hv.astype(np.float64)
    wq, rq = fake_quantize(w, -rw, rw, -rw, rw, 255), fake_quantize(r, -rr, rr, -rr, rr, 255)
    for step in range(t_):
        xq = fake_quantize(xv[:, step, :], lo, hi, lo, hi, 256)
        hq = fake_quantize(hh, lo, hi, lo, hi, 256)
        hh = np.tanh(xq @ wq.T + hq @ rq.T + bias)
    ov.write_case(out, "qrnn_loop", net, [xv, hv], [hh.astype(F32)])
    # A level flipped by float rounding at a half step moves a pre-activation by one step times a
    # weight; allow one such step on the state's path per time step.
    step = (ax[1] - ax[0]) / 255
    write_atol(out, "qrnn_loop", t_ * step * (np.abs(w).max() + np.abs(r).max()) + 1e-5)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--width", type=int, default=0, help="bench sizes: only the mlp cases")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.width:
        mlp(args.out, args.batch, args.width)
        return
    fq_formula(args.out)
    fq_errors(args.out)
    qrnn_loop(args.out)
    fq_compressed(args.out)
    mlp(args.out, args.batch, 64)


if __name__ == "__main__":
    main()
