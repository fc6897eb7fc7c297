#!/usr/bin/python3
"""Guards a conformance suite against regressions.

Compares the list `looprun --conformance=DIR --list_file=ACTUAL` wrote (one line per case:
name<TAB>pass|fail<TAB>reason) with the committed EXPECTED list. Exits 1 if any case EXPECTED
lists as passing now fails or is missing; reports new passes (cases that now pass but are not
listed as passing). With --update, rewrites EXPECTED from ACTUAL and exits 0.

Run with /usr/bin/python3 (standard library only).
"""

import argparse
import shutil
import sys


def read_list(path):
    """Returns {name: (status, reason)} from a looprun list file."""
    cases = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line:
                continue
            fields = line.split("\t", 2)
            if len(fields) < 2 or fields[1] not in ("pass", "fail"):
                sys.exit(f"{path}:{number}: expected 'name<TAB>pass|fail<TAB>reason', got {line!r}")
            cases[fields[0]] = (fields[1], fields[2] if len(fields) > 2 else "")
    return cases


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--expected", required=True, help="committed status file")
    parser.add_argument("--actual", required=True, help="list file looprun just wrote")
    parser.add_argument("--update", action="store_true", help="rewrite --expected from --actual")
    args = parser.parse_args()

    actual = read_list(args.actual)
    try:
        expected = read_list(args.expected)
    except FileNotFoundError:
        expected = {}
        if not args.update:
            print(f"note: {args.expected} does not exist; nothing to guard")

    regressions = []
    for name, (status, _) in sorted(expected.items()):
        if status != "pass":
            continue
        if name not in actual:
            regressions.append((name, "missing from the new run"))
        elif actual[name][0] != "pass":
            regressions.append((name, actual[name][1]))
    new_passes = sorted(name for name, (status, _) in actual.items()
                        if status == "pass" and expected.get(name, ("fail", ""))[0] != "pass")

    passed = sum(1 for status, _ in actual.values() if status == "pass")
    print(f"{args.actual}: {passed} passed, {len(actual) - passed} failed "
          f"({len(regressions)} regressions, {len(new_passes)} new passes)")
    for name in new_passes:
        print(f"new pass: {name}")

    if args.update:
        shutil.copyfile(args.actual, args.expected)
        print(f"updated {args.expected}")
        return 0
    if regressions:
        print(f"REGRESSIONS: {len(regressions)} cases listed as passing in {args.expected} "
              "no longer pass:")
        for name, reason in regressions:
            print(f"  {name}: {reason}")
        return 1
    if new_passes:
        print(f"to record the new passes: /usr/bin/python3 {sys.argv[0]} --expected={args.expected} "
              f"--actual={args.actual} --update")
    return 0


if __name__ == "__main__":
    sys.exit(main())
