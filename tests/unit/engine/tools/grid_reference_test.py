#!/usr/bin/python3
"""The grid cases with a numpy reference (bench/grid_models.py REFERENCE_CASES: the NMS loops and
the odd-width cells of issue 27 part 6) run through looprun at their full size, and every output
must match the reference: integer outputs (NMS's kept indices) exactly, floats with
np.allclose(rtol=1e-3, atol=1e-4) (the reference runs in float64; the QDQ cases within
grid_models.REFERENCE_ATOL, and their products must be folded into integer products by fold_qdq).

    grid_reference_test.py LOOPRUN REPO_ROOT

Prints one line per case and 'N passed, M failed'; exits 1 on any failure.
"""
import os
import subprocess
import sys
import tempfile


def main():
    looprun, root = sys.argv[1], sys.argv[2]
    sys.path.insert(0, os.path.join(root, "bench"))
    import grid_models  # noqa: E402  (sets the numpy aliases onnx 1.12 needs)
    import numpy as np
    import onnx
    from onnx import numpy_helper

    cases = {c[0]: c for c in grid_models.CASES}
    passed, failed = 0, []
    with tempfile.TemporaryDirectory() as tmp:
        for name in grid_models.REFERENCE_CASES:
            _, builder, kwargs = cases[name]
            grid_models.write_case(tmp, name, builder, kwargs)
            folder = os.path.join(tmp, name)
            m = onnx.load(os.path.join(folder, "model.onnx"))
            data = os.path.join(folder, "test_data_set_0")
            inputs = {}
            for k, graph_input in enumerate(m.graph.input):
                t = onnx.TensorProto()
                with open(os.path.join(data, "input_%d.pb" % k), "rb") as f:
                    t.ParseFromString(f.read())
                inputs[graph_input.name] = numpy_helper.to_array(t)
            init = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
            ref_fn = next(f for p, f in grid_models.REFERENCES.items() if name.startswith(p))
            expected = ref_fn(inputs, init)
            out_dir = os.path.join(folder, "out")
            os.makedirs(out_dir)
            proc = subprocess.run([looprun, "--model=" + os.path.join(folder, "model.onnx"),
                                   "--data=" + data, "--threads=1", "--output_dir=" + out_dir],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                failed.append(name)
                print("FAIL %s: looprun exited %d: %s" % (name, proc.returncode,
                                                         proc.stderr.strip()[-300:]))
                continue
            problems = []
            atol = next((a for p, a in grid_models.REFERENCE_ATOL.items() if name.startswith(p)),
                        1e-4)
            if name.startswith("qdq_"):
                # The QDQ products must run as integer products (bench/grid_models.py qdq_rnn).
                plan = subprocess.run([looprun, "--model=" + os.path.join(folder, "model.onnx"),
                                       "--data=" + data, "--threads=1", "--dump_plan"],
                                      capture_output=True, text=True)
                folds = (plan.stdout + plan.stderr).count("fold_qdq: ")
                if folds != 2:
                    problems.append("fold_qdq rewrote %d products, want 2" % folds)
            for k, graph_output in enumerate(m.graph.output):
                t = onnx.TensorProto()
                with open(os.path.join(out_dir, "output_%d.pb" % k), "rb") as f:
                    t.ParseFromString(f.read())
                got, want = numpy_helper.to_array(t), expected[graph_output.name]
                if got.shape != want.shape:
                    problems.append("%s: shape %s, want %s" % (graph_output.name, got.shape,
                                                               want.shape))
                elif want.dtype.kind in "iub":
                    if not np.array_equal(got, want):
                        problems.append("%s: differs at %d of %d" % (
                            graph_output.name, int((got != want).sum()), want.size))
                elif not np.allclose(got, want, rtol=1e-3, atol=atol):
                    problems.append("%s: max |diff| %.3g" % (
                        graph_output.name, float(np.abs(got - want).max())))
            if name.startswith("nms_") and len(expected["keep"]) < 10:
                problems.append("reference kept only %d boxes" % len(expected["keep"]))
            if problems:
                failed.append(name)
                print("FAIL %s: %s" % (name, "; ".join(problems)))
            else:
                passed += 1
                print("PASS %s (%s)" % (name, ", ".join(
                    "%s %s" % (o, list(expected[o].shape)) for o in sorted(expected))))
    print("%d passed, %d failed" % (passed, len(failed)))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
