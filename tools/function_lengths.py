#!/usr/bin/env python3
"""Lists the C++ functions longer than a limit (issue 29 item 5: none over ~100 lines in engine/ and
server/ outside generated or table code).

    tools/function_lengths.py [--limit=100] [--check] [DIR or FILE ...]   (default: engine server)

--check exits 1 when it lists any (the `function_lengths` ctest runs it over the files already
split, so they stay so).

A function is a definition whose body opens at the end of a line at namespace or class-member
indentation (0, 2 or 4 spaces: free functions, methods of a class, of a class in a class) and
closes with a '}' at the same indentation; its length counts the lines from its signature's first
line to that brace. Lambdas and bodies inside functions are part of their function. Heuristic (no
parser), good enough for code in the repository's clang-format style.
"""
import argparse
import os
import re
import sys

CONTROL = re.compile(r"^\s*(if|for|while|switch|else|do|try|catch|namespace|extern|struct|class|"
                     r"union|enum)\b")
OPENER = re.compile(r"\)\s*(const)?\s*(override|final|noexcept)?\s*(override|final)?\s*(->[^{]*)?\{$")


def functions(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if OPENER.search(line.rstrip()) and not CONTROL.match(line):
            # The signature starts at the first line of this statement.
            start = i
            while start > 0 and lines[start - 1].strip() and not lines[start - 1].rstrip().endswith(
                    (";", "{", "}", ":")) and not lines[start - 1].lstrip().startswith(("//", "#")):
                start -= 1
            head = lines[start]
            indent = len(head) - len(head.lstrip(" "))
            if indent not in (0, 2, 4) or CONTROL.match(head) or "=" in head.split("(")[0]:
                i += 1
                continue
            start_indent = len(lines[start]) - len(lines[start].lstrip(" "))
            closing = " " * start_indent + "}"
            j = i + 1
            while j < len(lines) and not (lines[j].startswith(closing) and
                                          lines[j].strip() in ("}", "};")):
                j += 1
            name = re.sub(r"\s+", " ", " ".join(l.strip() for l in lines[start:i + 1]))
            name = name.split("(")[0].split()[-1] if "(" in name else name
            yield name, start + 1, j - start + 1
            i = j + 1
            continue
        i += 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--check", action="store_true", help="exit 1 when a function is listed")
    parser.add_argument("dirs", nargs="*", default=["engine", "server"])
    args = parser.parse_args()
    found = []
    for top in args.dirs:
        if os.path.isfile(top):
            for fn, line, length in functions(top):
                if length > args.limit:
                    found.append((length, f"{top}:{line}", fn))
            continue
        for root, _, files in os.walk(top):
            for name in files:
                if name.endswith((".cc", ".h", ".inc")) and not name.endswith(".pb.cc"):
                    path = os.path.join(root, name)
                    for fn, line, length in functions(path):
                        if length > args.limit:
                            found.append((length, f"{path}:{line}", fn))
    for length, where, fn in sorted(found, reverse=True):
        print(f"{length:5d}  {where}  {fn}")
    print(f"{len(found)} functions over {args.limit} lines", file=sys.stderr)
    return 1 if args.check and found else 0


if __name__ == "__main__":
    sys.exit(main())
