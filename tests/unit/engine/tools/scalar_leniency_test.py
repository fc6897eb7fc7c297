#!/usr/bin/python3
"""looprun takes a scalar input sent as a one-element [1] tensor, and a declared [1] sent as a
scalar, as ONNX Runtime does (issue 27: Silero VAD's packages send the scalar `sr` as [1]); other
shape mismatches stay errors.

    scalar_leniency_test.py LOOPRUN

The model: y = sr + x with sr int64[] and x int64[1]; expected outputs come from numpy. Prints one
line per case and 'N passed, M failed'; exits 1 on any failure.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

np.float, np.int, np.bool, np.object = float, int, bool, object  # noqa: E702  (onnx 1.12)
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def write_model(path):
    graph = helper.make_graph(
        [helper.make_node("Add", ["sr", "x"], ["y"])], "scalar_leniency",
        [helper.make_tensor_value_info("sr", TensorProto.INT64, []),
         helper.make_tensor_value_info("x", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with open(path, "wb") as f:
        f.write(model.SerializeToString())


def write_case(folder, sr, x):
    os.makedirs(folder)
    for k, a in enumerate((sr, x)):
        with open(os.path.join(folder, "input_%d.pb" % k), "wb") as f:
            f.write(numpy_helper.from_array(a).SerializeToString())
    if sr.size != 1 or x.size != 1:
        return  # a refused case: looprun stops before comparing
    # Whatever one-element shapes were sent, the model computes on the declared ones: y is [1].
    y = (sr.reshape(()) + x.reshape((1,))).astype(np.int64)
    with open(os.path.join(folder, "output_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(y).SerializeToString())


def main():
    looprun = sys.argv[1]
    sr, x = np.int64(16000), np.int64(7)
    # (name, sr, x, expected exit status, text stderr must hold)
    cases = [
        ("declared_shapes", np.array(sr), np.array([x]), 0, ""),
        ("scalar_as_vector_of_one", np.array([sr]), np.array([x]), 0, ""),
        ("vector_of_one_as_scalar", np.array(sr), np.array(x), 0, ""),
        ("both_swapped", np.array([sr]), np.array(x), 0, ""),
        ("scalar_as_two", np.array([sr, sr]), np.array([x]), 2,
         "input 'sr': shape [2] does not match the declared int64[]"),
        ("scalar_as_matrix_of_one", np.array([[sr]]), np.array([x]), 2,
         "input 'sr': shape [1,1] does not match the declared int64[]"),
        ("vector_of_one_as_matrix_of_one", np.array(sr), np.array([[x]]), 2,
         "input 'x': shape [1,1] does not match the declared int64[1]"),
    ]
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "model.onnx")
        write_model(model)
        for name, sr_in, x_in, want_rc, want_text in cases:
            folder = os.path.join(tmp, name)
            write_case(folder, sr_in, x_in)
            proc = subprocess.run([looprun, "--model=" + model, "--data=" + folder, "--threads=1"],
                                  capture_output=True, text=True, timeout=60)
            ok = proc.returncode == want_rc and want_text in proc.stderr
            failed += not ok
            print("%s %s: exit %d%s" % ("PASS" if ok else "FAIL", name, proc.returncode,
                                        "" if ok else " (want %d and %r) stderr: %s" %
                                        (want_rc, want_text, proc.stderr.strip()[-300:])))
    print("%d passed, %d failed" % (len(cases) - failed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
