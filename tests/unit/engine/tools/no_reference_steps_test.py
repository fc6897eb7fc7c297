#!/usr/bin/python3
"""Every benchmark model (bench/make_bench_models.py and the grid of bench/grid_models.py, with
iteration counts capped so the test takes seconds) runs through looprun with its inputs, and no
step may run float work on a reference kernel: looprun's JSON line must report
"reference_steps": 0. The reference kernels are test oracles; a model that reaches one has hit a
performance cliff (issue 12).

    no_reference_steps_test.py LOOPRUN REPO_ROOT

Prints one line per model and 'N passed, M failed'; exits 1 on any failure.
"""
import json
import os
import subprocess
import sys
import tempfile


def main():
    looprun, root = sys.argv[1], sys.argv[2]
    bench = os.path.join(root, "bench")
    sys.path.insert(0, bench)
    import grid_models  # noqa: E402  (sets the numpy aliases onnx 1.12 needs)

    passed, failed = 0, []
    with tempfile.TemporaryDirectory() as tmp:
        grid_dir = os.path.join(tmp, "grid")
        bench_dir = os.path.join(tmp, "bench")
        names = [("grid", n) for n in grid_models.write_cases(grid_dir, max_trips=4)]
        subprocess.run(["/usr/bin/python3", os.path.join(bench, "make_bench_models.py"),
                        bench_dir], check=True)
        names += [("bench", n) for n in sorted(os.listdir(bench_dir))]
        for kind, name in names:
            folder = os.path.join(grid_dir if kind == "grid" else bench_dir, name)
            proc = subprocess.run(
                [looprun, "--model=" + os.path.join(folder, "model.onnx"),
                 "--data=" + os.path.join(folder, "test_data_set_0"), "--threads=1"],
                capture_output=True, text=True)
            line = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
            if proc.returncode != 0 or not line.startswith("{"):
                failed.append(name)
                print("FAIL %s/%s: looprun exited %d: %s" % (kind, name, proc.returncode,
                                                            proc.stderr.strip()[-300:]))
                continue
            steps = json.loads(line).get("reference_steps")
            if steps != 0:
                failed.append(name)
                print("FAIL %s/%s: reference_steps = %r" % (kind, name, steps))
            else:
                passed += 1
                print("PASS %s/%s" % (kind, name))
    print("%d passed, %d failed" % (passed, len(failed)))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
