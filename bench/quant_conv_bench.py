#!/usr/bin/python3
"""A dynamically quantized convolution as ORT's quantize_dynamic writes it (DynamicQuantizeLinear ->
ConvInteger, uint8 x uint8 with zero points), timed through looprun (and a second looprun, e.g.
main's, with --baseline) and ONNX Runtime at 1 thread, CPU time per run; outputs compared exactly.

    /usr/bin/python3 bench/quant_conv_bench.py --looprun=build/bin/looprun \\
        --node-modules=/tmp/ort/node_modules [--baseline=/work/main/build/bin/looprun]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

np.float, np.int, np.bool, np.object = float, int, bool, object  # noqa: E702
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_ort  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

# (name, batch, channels in, channels out, size, kernel)
CASES = [("qconv_b1_c16_32x32_k3", 1, 16, 32, 32, 3), ("qconv_b1_c64_16x16_k3", 1, 64, 64, 16, 3)]


def write_case(folder, batch, cin, cout, size, kernel):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((batch, cin, size, size)).astype(np.float32)
    w = rng.integers(0, 256, (cout, cin, kernel, kernel), dtype=np.uint8)
    pad = kernel // 2
    g = helper.make_graph(
        [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
         helper.make_node("ConvInteger", ["xq", "w", "xz", "wz"], ["y"], pads=[pad] * 4)],
        "qconv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.uint8(130), "wz")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    os.makedirs(os.path.join(folder, "test_data_set_0"), exist_ok=True)
    onnx.save(m, os.path.join(folder, "model.onnx"))
    with open(os.path.join(folder, "test_data_set_0", "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(x, "x").SerializeToString())


def looprun(binary, folder, out_dir):
    r = subprocess.run([binary, "--model=" + os.path.join(folder, "model.onnx"),
                        "--data=" + os.path.join(folder, "test_data_set_0"), "--repeat=50",
                        "--warmup=5", "--threads=1", "--output_dir=" + out_dir],
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout)["cpu_median_us"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--looprun", required=True)
    p.add_argument("--node-modules", required=True)
    p.add_argument("--baseline", default="")
    args = p.parse_args()
    env = dict(os.environ, NODE_PATH=os.path.abspath(args.node_modules))
    print("| case | loopserve (us) | baseline (us) | ORT (us) | vs ORT | outputs |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, *shape in CASES:
            folder = os.path.join(tmp, name)
            write_case(folder, *shape)
            spec = os.path.join(tmp, name + ".json")
            with open(spec, "w") as f:
                json.dump(compare_ort.inputs_json(folder), f)
            ours = looprun(args.looprun, folder, os.path.join(tmp, name + ".ours"))
            base = looprun(args.baseline, folder, os.path.join(tmp, name + ".base")) \
                if args.baseline else None
            ort_out = os.path.join(tmp, name + ".ort.json")
            r = subprocess.run(["node", os.path.join(compare_ort.HERE, "ort_time.js"),
                                os.path.join(folder, "model.onnx"), spec, "50", "5", "1", ort_out],
                               capture_output=True, text=True, env=env, check=True)
            ort = json.loads(r.stdout)["cpu_median_us"]
            problems, _ = compare_ort.compare_outputs(
                compare_ort.looprun_outputs(os.path.join(folder, "model.onnx"),
                                            os.path.join(tmp, name + ".ours")),
                compare_ort.ort_outputs(ort_out))
            print("| %s | %.0f | %s | %.0f | %.2fx | %s |"
                  % (name, ours, "%.0f" % base if base else "-", ort, ort / ours,
                     "equal" if not problems else "; ".join(problems)))


if __name__ == "__main__":
    sys.exit(main())
