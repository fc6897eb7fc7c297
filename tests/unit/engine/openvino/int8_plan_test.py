#!/usr/bin/python3
"""An OpenVINO int8 IR runs its products in int8 (issue 28): the plan `looprun --dump_plan` prints
for mlp_int8 (make_ov_int8_models.py: FakeQuantize on activations and weights, and a weight-only
compressed MatMul) holds integer products only, three of them, and no float product; the same
check on mlp_fp32 (its fp32 model) finds its three float products, so the check can fail.

Usage: /usr/bin/python3 int8_plan_test.py LOOPRUN CASES_DIR
"""
import re
import subprocess
import sys

FLOAT_PRODUCTS = {"MatMul", "Gemm", "_FusedMatMul", "_FusedGemm", "_Bf16MatMul", "Conv",
                  "_FusedConv", "Einsum"}


def plan_ops(looprun, model):
    r = subprocess.run([looprun, "--model=" + model, "--dump_plan"], capture_output=True,
                       text=True, timeout=60)
    if r.returncode != 0:
        raise AssertionError("looprun %s: exit %d\n%s" % (model, r.returncode, r.stderr))
    plan = r.stdout.split("\n plan:\n", 1)
    if len(plan) != 2:
        raise AssertionError("no plan section in\n" + r.stdout)
    return re.findall(r"^  \[\d+\] (\S+) '", plan[1], re.M)


def main():
    looprun, cases = sys.argv[1], sys.argv[2]
    ops = plan_ops(looprun, cases + "/mlp_int8/model.xml")
    floats = [op for op in ops if op in FLOAT_PRODUCTS or "Bf16" in op]
    ints = [op for op in ops if "MatMulInteger" in op]
    if floats or len(ints) != 3:
        raise AssertionError("mlp_int8 plan: %s (float products %s, integer products %d, "
                             "expected 0 and 3)" % (ops, floats, len(ints)))
    ops32 = plan_ops(looprun, cases + "/mlp_fp32/model.xml")
    floats32 = [op for op in ops32 if op in FLOAT_PRODUCTS]
    if len(floats32) != 3:
        raise AssertionError("mlp_fp32 plan: %s: expected 3 float products" % ops32)
    print("PASS: mlp_int8 runs %s; mlp_fp32 runs %s" % (ops, ops32))


if __name__ == "__main__":
    main()
