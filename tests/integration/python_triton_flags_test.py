#!/usr/bin/python3
"""Triton's command-line spellings (server/main.cc TranslateTritonFlags) as tritonserver reads
them: a boolean takes its value after '=' or as the next argument (`--allow-http false` disables
HTTP; it used to leave the word behind, ignored, and keep HTTP on), alone it is true; a flag that
needs a value, a value of the wrong kind or a stray argument stops the start with exit status 1
and a line saying which.

Usage: python_triton_flags_test.py --loopserve=BIN --work=DIR
"""

import argparse
import os
import signal
import subprocess
import sys

BASE = ["--grpc_port=0", "--http_port=0", "--metrics_port=0", "--model_control_mode=none"]


def start(loopserve, repo, args):
    """Runs loopserve; returns (exit status or None while serving, stdout lines, stderr)."""
    proc = subprocess.Popen([loopserve, "--model_repository=" + repo] + BASE + args,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stdout:  # ends with the metrics line, or at exit
        lines.append(line.strip())
        if line.startswith("loopserve: metrics"):
            break
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    serving = any(l.startswith("loopserve: grpc listening") for l in lines)
    return (None if serving else proc.returncode), lines, err


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--loopserve", required=True)
    parser.add_argument("--work", required=True)
    flags = parser.parse_args()
    repo = os.path.join(flags.work, "empty_repository")
    os.makedirs(repo, exist_ok=True)
    failures = []

    serving = [
        (["--allow-http", "false"], "loopserve: http disabled", "loopserve: metrics listening"),
        (["--allow-http=0", "--allow-metrics", "no"], "loopserve: http disabled",
         "loopserve: metrics disabled"),
        (["--allow-http", "--strict-model-config", "false"], "loopserve: http listening",
         "loopserve: metrics listening"),
    ]
    for args, http, metrics in serving:
        status, lines, err = start(flags.loopserve, repo, args)
        if status is not None or not any(l.startswith(http) for l in lines) or not any(
                l.startswith(metrics) for l in lines):
            failures.append("%s: expected %r and %r, got %s / %r" % (args, http, metrics, lines,
                                                                     err[-500:]))

    refused = [
        (["--allow-http", "maybe"], "unexpected argument 'maybe'"),
        (["--allow-http=maybe"], "--allow-http=maybe: expected true or false"),
        (["--log-verbose=abc"], "--log-verbose=abc: expected an integer level"),
        (["--grpc_port=0", "--model-repository"], "--model-repository needs a value"),
    ]
    for args, message in refused:
        status, lines, err = start(flags.loopserve, repo, args)
        if status != 1 or message not in err:
            failures.append("%s: expected exit 1 with %r, got %s %s / %r" % (args, message, status,
                                                                             lines, err[-500:]))

    for f in failures:
        print("FAIL:", f)
    print("%d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
