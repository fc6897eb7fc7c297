#!/usr/bin/python3
"""The `precision` setting over the real binary (issue 28): `--precision=bf16` as the server's
default, the `precision` model parameter overriding it either way, the effective precision in the
complete config (`loopctl config`, the ModelConfig RPC) and in the load log, a value that is no
precision refused at load naming the field, outputs of the bf16 version within the bf16 bound
of the spec's result (a numpy Elman RNN in float64) while really differing from the fp32 version,
and a config change of the precision reloading the model in the new precision.

Usage: /usr/bin/python3 python_precision_test.py --loopserve=BIN --loopctl=BIN --models=DIR
       --repo_root=DIR --work=DIR [--protoc=PROTOC]

On a CPU without AVX512_BF16 or AMX-BF16 the server gets --force_precision (the engine refuses
bf16 there otherwise; oneDNN emulates it, with the same numbers).
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from loopserve_py import Checks, check, parse_test_args, start_server

import numpy as np  # noqa: E402  (after loopserve_py: its numpy alias shim)

RNN_HIDDEN = 4
ROWS, STEPS = 16, 2  # 16 rows: the products run in bf16 from 4 rows on


def native_bf16():
    with open("/proc/cpuinfo") as f:
        flags = f.read()
    return " avx512_bf16" in flags or " amx_bf16" in flags


def post(url, body):
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def main():
    args = parse_test_args(loopctl=True)
    sys.path.insert(0, os.path.join(args.repo_root, "deploy"))
    import make_example_models as ex

    # One repository: the rnn example model under four configs.
    repo = os.path.join(args.work, "repo")
    shutil.rmtree(repo, ignore_errors=True)
    configs = {"rnn_default": None, "rnn_fp32": "fp32", "rnn_bf16": "bf16", "rnn_fp16": "fp16"}
    for name, precision in configs.items():
        os.makedirs(os.path.join(repo, name, "1"))
        shutil.copy(os.path.join(args.models, "rnn", "1", "model.onnx"),
                    os.path.join(repo, name, "1", "model.onnx"))
        if precision is not None:
            with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
                f.write('parameters { key: "precision" value: { string_value: "%s" } }\n' %
                        precision)

    flags = ["--model_repository=" + repo, "--precision=bf16", "--metrics_port=-1",
             "--repository_poll_seconds=1"]
    if not native_bf16():
        flags.append("--force_precision")
    with tempfile.TemporaryFile(mode="w+") as log:
        proc, ports = start_server(args.loopserve, flags, kinds=("grpc", "http"), stderr=log)
        try:
            base = "http://127.0.0.1:%d" % ports["http"]
            # ---- outputs: bf16 within its bound of the exact result, fp32 at float32's ----
            rng = np.random.RandomState(7)
            h0 = rng.uniform(-1, 1, (ROWS, RNN_HIDDEN)).astype(np.float32)
            w, b = (a.astype(np.float64) for a in ex.rnn_weights())
            exact = h0.astype(np.float64)
            for _ in range(STEPS):
                exact = np.tanh(exact @ w + b)
            body = {"inputs": [
                {"name": "M", "datatype": "INT64", "shape": [], "data": [STEPS]},
                {"name": "h0", "datatype": "FP32", "shape": list(h0.shape),
                 "data": h0.ravel().tolist()}],
                "outputs": [{"name": "h_final"}]}
            got = {}
            for name in ("rnn_default", "rnn_fp32", "rnn_bf16"):
                status, answer = post(base + "/v2/models/%s/infer" % name, body)
                check(status == 200, "%s: %d %s" % (name, status, answer))
                got[name] = np.array(answer["outputs"][0]["data"],
                                     np.float64).reshape(ROWS, RNN_HIDDEN)
            fp32_err = np.abs(got["rnn_fp32"] - exact).max()
            check(fp32_err < 1e-5, "fp32 version: max |error| %g" % fp32_err)
            # The engine's bf16 bound (engine/kernels/native/bf16_matmul.h): a product is within
            # 2^-7 sum |a| |b| of the exact one. With |h| <= 1 that is 2^-7 G per step, G the
            # largest column sum of |w|; Tanh is 1-Lipschitz and an error carried into a step
            # grows by at most G: e_{k+1} <= G e_k + 2^-7 G.
            gain = np.abs(w).sum(axis=0).max()
            bound = sum(2.0 ** -7 * gain ** (k + 1) for k in range(STEPS))
            for name in ("rnn_default", "rnn_bf16"):
                err = np.abs(got[name] - exact).max()
                check(err <= bound, "%s: max |error| %g above the bf16 bound %g" %
                      (name, err, bound))
                check(np.abs(got[name] - got["rnn_fp32"]).max() > 1e-6,
                      "%s: equal to the fp32 version: the products did not run in bf16" % name)
            print("ok: bf16 versions within %.3g of the exact result (bound %.3g), fp32 %.2g" %
                  (max(np.abs(got[n] - exact).max() for n in ("rnn_default", "rnn_bf16")), bound,
                   fp32_err))

            # ---- the effective precision in the complete config ----
            def loopctl(*argv):
                r = subprocess.run([args.loopctl, "--addr=127.0.0.1:%d" % ports["grpc"]] +
                                   list(argv), capture_output=True, text=True, timeout=60)
                return r.returncode, r.stdout + r.stderr

            want = {"rnn_default": "bf16", "rnn_fp32": "fp32", "rnn_bf16": "bf16"}
            for name, precision in want.items():
                code, out = loopctl("config", name)
                check(code == 0, out)
                entry = r'key: "precision"\s*value \{\s*string_value: "%s"' % precision
                check(re.search(entry, out), "%s: no precision %s in\n%s" % (name, precision, out))
            print("ok: loopctl config shows the effective precision")

            # ---- a value that is no precision fails the load, naming the field ----
            status, index = post(base + "/v2/repository/index", {})
            check(status == 200, index)
            bad = [m for m in index if m["name"] == "rnn_fp16"]
            check(len(bad) == 1 and bad[0].get("state") != "READY", index)
            check("parameters 'precision': string_value must be fp32 or bf16, not 'fp16'" in
                  bad[0].get("reason", ""), bad)
            print("ok: precision fp16 refused: %s" % bad[0]["reason"])

            # ---- a config change of the precision recompiles the model (not a reconfigure) ----
            with open(os.path.join(repo, "rnn_fp32", "config.pbtxt"), "w") as f:
                f.write('parameters { key: "precision" value: { string_value: "bf16" } }\n')
            deadline = time.time() + 60
            while time.time() < deadline:
                code, out = loopctl("config", "rnn_fp32")
                if code == 0 and re.search(r'key: "precision"\s*value \{\s*string_value: "bf16"',
                                           out):
                    break
                time.sleep(0.2)
            check(time.time() < deadline, "rnn_fp32 still fp32 a minute after its config changed")
            status, answer = post(base + "/v2/models/rnn_fp32/infer", body)
            check(status == 200, answer)
            now = np.array(answer["outputs"][0]["data"], np.float64).reshape(ROWS, RNN_HIDDEN)
            check(np.abs(now - got["rnn_bf16"]).max() == 0,
                  "rnn_fp32 with precision bf16 differs from rnn_bf16: it was not recompiled")
            print("ok: precision changed in config.pbtxt -> reloaded in bf16")
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
        log.seek(0)
        text = log.read()
    check(code == 0, "loopserve exited with %d:\n%s" % (code, text))
    for name, precision in want.items():
        line = [ln for ln in text.splitlines() if " loaded model '%s' v1" % name in ln]
        check(len(line) == 1 and ("precision %s)" % precision) in line[0], (name, line))
    start = [ln for ln in text.splitlines() if ", loop_threads " in ln]
    check(len(start) == 1 and ", precision bf16" in start[0], start)
    reload = [ln for ln in text.splitlines() if "reloaded model 'rnn_fp32' v1" in ln]
    check(len(reload) == 1 and "precision bf16)" in reload[0], reload)
    print("ok: the load log names each version's precision")
    print("PASS (%d checks)" % Checks.count)


if __name__ == "__main__":
    main()
