#!/usr/bin/python3
"""bench/roofline.py's graph walk against FLOPs and weight bytes counted by hand from the grid's
parameters (bench/grid_models.py CASES), for one case of each product shape it must handle: plain
MatMul (rnn), Gemm with transB (gru), Conv (conv), batched MatMul over a KV cache that grows every
iteration (gpt), a hoistable input projection (rnn: x_t W reads its weights once), outer-scope
operands of a batched MatMul (attn's memory).

    roofline_test.py REPO_ROOT

Prints one line per case and 'N passed, M failed'; exits 1 on any failure.
"""
import os
import sys
import tempfile


def hand_counts(name, kw):
    """(FLOPs, bytes of weights re-read per run) from the case's parameters alone."""
    t = kw.get("trips")
    if name.startswith("rnn"):
        b, h = kw["batch"], kw["hidden"]
        # x_t W and h U, [b, h] x [h, h] each; only U's product depends on the carried h.
        return 2 * 2 * b * h * h * t, 4 * h * h * t
    if name.startswith("gru"):
        b, h = kw["batch"], kw["hidden"]
        # Gemm(x_t, W_ih^T) and Gemm(h, W_hh^T): [b, h] x [h, 3h] each.
        return 2 * 2 * b * h * 3 * h * t, 4 * 3 * h * h * t
    if name.startswith("conv"):
        b, c, s = kw["batch"], kw["channels"], kw["size"]
        # 3x3, pads 1: every output element reduces c * 9 products; the weights are re-read.
        return 2 * b * c * s * s * c * 9 * t, 4 * c * c * 9 * t
    if name.startswith("attn"):
        b, s, h = kw["batch"], kw["seq"], kw["hidden"]
        # h Wq [b,h]x[h,h]; Mem @ q [b,s,h]x[b,h,1]; a @ Mem [b,1,s]x[b,s,h]; cat Wc [b,2h]x[2h,h].
        flops = 2 * (b * h * h + b * s * h + b * s * h + b * 2 * h * h) * t
        return flops, 4 * (h * h + b * s * h + b * s * h + 2 * h * h) * t
    if name.startswith("gpt"):
        b, h = kw["batch"], kw["hidden"]
        past = 16
        # Wqkv [h,3h], Wo [h,h], W1 [h,2h], W2 [2h,h] per step; attention q K^T and p V over
        # past + i + 1 cached steps: b * h multiply-adds per cached step each.
        weights = 3 * h * h + h * h + 2 * h * h + 2 * h * h
        cached = sum(past + i + 1 for i in range(t))
        return 2 * (b * weights * t + 2 * b * h * cached), 4 * weights * t
    raise ValueError(name)


def main():
    root = sys.argv[1]
    sys.path.insert(0, os.path.join(root, "bench"))
    import grid_models  # noqa: E402  (sets the numpy aliases onnx 1.12 needs)
    import roofline  # noqa: E402

    names = ["rnn_b8_h128", "gru_b16_h256", "conv_b8_c32_16x16", "attn_b8_s128_h256",
             "gpt_b4_h128"]
    cases = {c[0]: c for c in grid_models.CASES}
    passed, failed = 0, []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            _, builder, kw = cases[name]
            grid_models.write_case(tmp, name, builder, kw)
            folder = os.path.join(tmp, name)
            work = roofline.model_work(os.path.join(folder, "model.onnx"),
                                       os.path.join(folder, "test_data_set_0"))
            flops, weight_bytes = hand_counts(name, kw)
            got = (work.flops, work.invariant_bytes, work.unknown)
            if got != (flops, weight_bytes, []):
                failed.append(name)
                print("FAIL %s: walk %r, by hand (%d, %d, [])" % (name, got, flops, weight_bytes))
            else:
                passed += 1
                print("PASS %s: %d FLOPs, %d weight bytes" % (name, flops, weight_bytes))
    print("%d passed, %d failed" % (passed, len(failed)))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
