#!/usr/bin/python3
"""Where loopserve and ONNX Runtime part on a dynamically quantized model (DynamicQuantizeLinear ->
ConvInteger / MatMulInteger, as quantize_dynamic writes it): a copy of the model whose outputs are
each DynamicQuantizeLinear's float input and its three outputs (DQL indices [--first, --last) in
graph order), run by looprun and by ONNX Runtime (onnxruntime-node, 1 thread) on the case's
input; per DQL, how many values of each differ between the engines, and whether each engine's
quantization equals the ONNX spec's formula (numpy, float32: scale = (max(0, max x) - min(0,
min x)) / 255, zero point = saturate(round(-min / scale)), y = saturate(round_half_even(x / scale)
+ zero point)) applied to that engine's own input. A difference in `q` where the inputs are
equal would be a quantization bug; differences that start in a float input come from the float
ops before it.

    /usr/bin/python3 bench/quant_divergence.py --case=CASE_DIR --looprun=build/bin/looprun \\
        --node-modules=/tmp/ort/node_modules [--first=0] [--last=16]

CASE_DIR holds model.onnx and test_data_set_0/input_<k>.pb (bench/realmodels/suite.py writes
quant_isnet_small's). Large feature maps go through ORT's JSON output: keep the range short.
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
from onnx import TensorProto, helper  # noqa: E402


def spec_dql(x):
    """DynamicQuantizeLinear as the ONNX spec writes it, in float32."""
    x = x.astype(np.float32)
    lo = np.float32(min(0.0, float(x.min())))
    hi = np.float32(max(0.0, float(x.max())))
    scale = np.float32((hi - lo) / np.float32(255))
    zero = np.uint8(np.clip(np.round(-lo / scale), 0, 255))
    q = np.clip(np.round(x / scale) + np.float32(zero), 0, 255).astype(np.uint8)
    return q, scale, zero


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--case", required=True)
    p.add_argument("--looprun", required=True)
    p.add_argument("--node-modules", required=True)
    p.add_argument("--first", type=int, default=0)
    p.add_argument("--last", type=int, default=16)
    args = p.parse_args()
    m = onnx.load(os.path.join(args.case, "model.onnx"))
    dqls = [n for n in m.graph.node if n.op_type == "DynamicQuantizeLinear"][args.first:args.last]
    kinds = [("in", TensorProto.FLOAT), ("q", TensorProto.UINT8), ("scale", TensorProto.FLOAT),
             ("zero", TensorProto.UINT8)]
    del m.graph.output[:]
    for d in dqls:
        for name, (_, t) in zip([d.input[0]] + list(d.output), kinds):
            m.graph.output.append(helper.make_tensor_value_info(name, t, None))
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "test_data_set_0")
        os.makedirs(data)
        onnx.save(m, os.path.join(tmp, "model.onnx"))
        src = os.path.join(args.case, "test_data_set_0")
        for f in os.listdir(src):
            if f.startswith("input_"):
                with open(os.path.join(src, f), "rb") as a, open(os.path.join(data, f), "wb") as b:
                    b.write(a.read())
        spec = os.path.join(tmp, "spec.json")
        with open(spec, "w") as f:
            json.dump(compare_ort.inputs_json(tmp), f)
        subprocess.run([args.looprun, "--model=" + os.path.join(tmp, "model.onnx"),
                        "--data=" + data, "--threads=1", "--output_dir=" + os.path.join(tmp, "o")],
                       check=True, capture_output=True)
        ours = compare_ort.looprun_outputs(os.path.join(tmp, "model.onnx"), os.path.join(tmp, "o"))
        env = dict(os.environ, NODE_PATH=os.path.abspath(args.node_modules))
        subprocess.run(["node", os.path.join(compare_ort.HERE, "ort_time.js"),
                        os.path.join(tmp, "model.onnx"), spec, "1", "0", "1",
                        os.path.join(tmp, "ort.json")], check=True, env=env, capture_output=True)
        theirs = compare_ort.ort_outputs(os.path.join(tmp, "ort.json"))
    print("| DQL | input | values | input differs | q differs | q differs where inputs equal "
          "| scale, zero equal | loopserve = spec | ORT = spec |")
    print("|---|---|---|---|---|---|---|---|---|")
    for k, d in enumerate(dqls):
        x, q, s, z = d.input[0], d.output[0], d.output[1], d.output[2]
        same_in = ours[x] == theirs[x]
        ok = []
        for side in (ours, theirs):
            sq, ss, sz = spec_dql(side[x])
            ok.append("yes" if np.array_equal(sq, side[q]) and ss == side[s] and sz == side[z]
                      else "NO (%d)" % int((sq != side[q]).sum()))
        print("| %d | %s | %d | %d | %d | %d | %s | %s | %s |" % (
            args.first + k, x, ours[x].size, int((~same_in).sum()),
            int((ours[q] != theirs[q]).sum()), int(((ours[q] != theirs[q]) & same_in).sum()),
            "yes" if ours[s] == theirs[s] and ours[z] == theirs[z] else "NO", ok[0], ok[1]))


if __name__ == "__main__":
    sys.exit(main())
