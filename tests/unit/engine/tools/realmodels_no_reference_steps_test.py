#!/usr/bin/python3
"""Every model of the real-model suite (bench/realmodels/suite.py: ONNX files that public npm
packages ship, with the inputs the packages build) runs through looprun without a step on a
reference implementation: looprun's JSON line must report "reference_steps": 0 (issue 27: a model
that reaches a reference kernel has hit a performance cliff users find before we do).

    realmodels_no_reference_steps_test.py LOOPRUN REPO_ROOT NPM_PREFIX

The packages are npm-installed into NPM_PREFIX (kept between runs). When npm is missing or the
install fails (no registry), the test prints why and exits 77, which ctest reports as skipped.
Models listed in bench/realmodels/expected_reference_steps.txt are expected to fail (XFAIL) until
the engine work named there lands; a listed model that passes is reported as XPASS and fails the
test, so the list only shrinks. Prints one line per model and 'N passed, M failed'.
"""
import json
import os
import subprocess
import sys
import tempfile

SKIP = 77


def expected_failures(path):
    names = set()
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                names.add(line)
    return names


def main():
    looprun, root, prefix = sys.argv[1], sys.argv[2], sys.argv[3]
    sys.path.insert(0, os.path.join(root, "bench", "realmodels"))
    import suite  # noqa: E402
    xfail = expected_failures(os.path.join(root, "bench", "realmodels",
                                           "expected_reference_steps.txt"))
    unknown = xfail - {m[0] for m in suite.MODELS}
    try:
        node_modules = suite.install(prefix)
    except RuntimeError as e:
        print("SKIP: the real-model packages could not be installed (%s)" % e)
        sys.exit(SKIP)
    passed, failed = 0, []
    for name in sorted(unknown):
        failed.append(name)
        print("FAIL %s: listed in expected_reference_steps.txt but not in the suite" % name)
    with tempfile.TemporaryDirectory() as tmp:
        for name in suite.write_cases(node_modules, tmp):
            folder = os.path.join(tmp, name)
            proc = subprocess.run(
                [looprun, "--model=" + os.path.join(folder, "model.onnx"),
                 "--data=" + os.path.join(folder, "test_data_set_0"), "--threads=1"],
                capture_output=True, text=True, timeout=120)
            line = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
            if proc.returncode != 0 or not line.startswith("{"):
                failed.append(name)
                print("FAIL %s: looprun exited %d: %s" % (name, proc.returncode,
                                                         proc.stderr.strip()[-300:]))
                continue
            steps = json.loads(line).get("reference_steps")
            if steps != 0 and name in xfail:
                passed += 1
                print("XFAIL %s: reference_steps = %r (expected_reference_steps.txt)" %
                      (name, steps))
            elif steps != 0:
                failed.append(name)
                print("FAIL %s: reference_steps = %r" % (name, steps))
            elif name in xfail:
                failed.append(name)
                print("XPASS %s: no reference step now; remove it from "
                      "bench/realmodels/expected_reference_steps.txt" % name)
            else:
                passed += 1
                print("PASS %s" % name)
    print("%d passed, %d failed" % (passed, len(failed)))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
