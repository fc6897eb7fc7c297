#!/usr/bin/python3
"""An OpenVINO int8 IR runs its products in int8 (issue 28): the plan `looprun --dump_plan` prints
for mlp_int8 (make_ov_int8_models.py: FakeQuantize on activations and weights, and a weight-only
compressed MatMul) holds integer products only, three of them, and no float product, and so do
the Loop body's two of qrnn_loop (an RNN cell quantized the same way) and fq_compressed's one
(an i8 weight through Convert and FakeQuantize to the float range); the same
check on mlp_fp32 (its fp32 model) finds its three float products, so the check can fail.

Usage: /usr/bin/python3 int8_plan_test.py LOOPRUN CASES_DIR
"""
import re
import subprocess
import sys

FLOAT_PRODUCTS = {"MatMul", "Gemm", "_FusedMatMul", "_FusedGemm", "_Bf16MatMul", "Conv",
                  "_FusedConv", "Einsum"}


def plan_ops(looprun, model):
    """The op types of the nodes the plans run: every graph's (Loop bodies included) ` plan:`
    section of the dump, not its `before the optimizer:` one."""
    r = subprocess.run([looprun, "--model=" + model, "--dump_plan"], capture_output=True,
                       text=True, timeout=60)
    if r.returncode != 0:
        raise AssertionError("looprun %s: exit %d\n%s" % (model, r.returncode, r.stderr))
    ops, in_plan, plans = [], False, 0
    for line in r.stdout.splitlines():
        if line == " plan:":
            in_plan, plans = True, plans + 1
        elif not line.startswith("  "):
            in_plan = False
        elif in_plan:
            m = re.match(r"^  \[\d+\] (\S+) '", line)
            if m:
                ops.append(m.group(1))
    if plans == 0:
        raise AssertionError("no plan section in\n" + r.stdout)
    return ops


def main():
    looprun, cases = sys.argv[1], sys.argv[2]
    ops = plan_ops(looprun, cases + "/mlp_int8/model.xml")
    floats = [op for op in ops if op in FLOAT_PRODUCTS or "Bf16" in op]
    ints = [op for op in ops if "MatMulInteger" in op]
    if floats or len(ints) != 3:
        raise AssertionError("mlp_int8 plan: %s (float products %s, integer products %d, "
                             "expected 0 and 3)" % (ops, floats, len(ints)))
    loop_ops = plan_ops(looprun, cases + "/qrnn_loop/model.xml")
    floats = [op for op in loop_ops if op in FLOAT_PRODUCTS or "Bf16" in op]
    if floats or len([op for op in loop_ops if "MatMulInteger" in op]) != 2 or \
            "Loop" not in loop_ops:
        raise AssertionError("qrnn_loop plans: %s: expected a Loop whose body runs two integer "
                             "products and no float one" % loop_ops)
    compressed = plan_ops(looprun, cases + "/fq_compressed/model.xml")
    if [op for op in compressed if op in FLOAT_PRODUCTS] or \
            len([op for op in compressed if "MatMulInteger" in op]) != 1:
        raise AssertionError("fq_compressed plan: %s: expected one integer product and no float "
                             "one" % compressed)
    ops32 = plan_ops(looprun, cases + "/mlp_fp32/model.xml")
    floats32 = [op for op in ops32 if op in FLOAT_PRODUCTS]
    if len(floats32) != 3:
        raise AssertionError("mlp_fp32 plan: %s: expected 3 float products" % ops32)
    print("PASS: mlp_int8 runs %s; qrnn_loop runs %s; mlp_fp32 runs %s" % (ops, loop_ops, ops32))


if __name__ == "__main__":
    main()
