#!/usr/bin/python3
"""SIGTERM/SIGINT at any moment of loopserve's life ends it gracefully: exit status 0, promptly,
nothing half-started (what Kubernetes expects of a pod's process).

  1. During start-up, while a model's warm-up runs a Loop that never ends by itself (10 warm-up
     runs of the `endless` model, each bounded only by the 60 s warm-up deadline: before, the
     signal was answered only once start-up had ended, 10 minutes later): the warm-up stops, no
     port is reported, exit 0 within 30 s. Once with SIGTERM, once with SIGINT.
  2. Right after the one-time OpenMP re-exec (engine::UsePassiveOpenMpWait: started without
     OMP_WAIT_POLICY, loopserve sets it and execs itself), before the handlers exist: the signal
     waits blocked and is then handled (before, it killed the process: status -15). The test sees
     the second image start by polling /proc/<pid>/environ for OMP_WAIT_POLICY=PASSIVE and signals
     at once; 5 rounds.
  3. Serving: the process is named loopserve after its re-exec, runs a bounded number of threads (/proc/<pid>/task; the metrics
     endpoint used to hold 128 civetweb threads), scraping with 100 idle metrics connections open
     adds none and still answers, and SIGTERM then exits 0.

Times are bounded generously (a loaded 2-core machine): the assertions are on behaviour (exit
status, what was printed), with bounds far below what the old behaviour took.

Usage: python_signal_test.py --loopserve=BIN --models=DIR --work=DIR
"""

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loopserve_py import check, Checks  # noqa: E402

WARMUP_CONFIG = """
platform: "onnxruntime_onnx"
model_warmup [
  {
    name: "endless"
    count: 10
    inputs { key: "x" value: { data_type: TYPE_INT64 dims: [ 1 ] zero_data: true } }
  }
]
"""

# Exit within this after the signal (the old behaviour: 10 x 60 s for case 1, killed for case 2).
EXIT_BOUND_S = 30


def server_env(re_exec):
    """The environment: without the OpenMP settings (so loopserve re-executes itself) or with
    OMP_WAIT_POLICY=PASSIVE (no re-exec)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    if not re_exec:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    return env


def spawn(binary, repo, log_path, re_exec=False, extra=()):
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [binary, "--model_repository=" + repo, "--address=127.0.0.1", "--grpc_port=0",
         "--http_port=0", "--metrics_port=0", "--model_control_mode=none"] + list(extra),
        stdout=subprocess.PIPE, stderr=log, text=True, env=server_env(re_exec))
    log.close()
    # Collect stdout in the background (the port lines; none expected when stopped in start-up).
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    return proc, lines, reader


def read_log(path):
    with open(path) as f:
        return f.read()


def wait_for_log(path, text, proc, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if text in read_log(path):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.02)
    return False


def stop_and_wait(proc, signal_number, what):
    """Sends `signal_number`; returns (exit status, seconds to exit). Kills (by pid) and fails
    when the process has not exited within EXIT_BOUND_S."""
    start = time.monotonic()
    proc.send_signal(signal_number)
    try:
        status = proc.wait(EXIT_BOUND_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        check(False, "%s: no exit within %d s of the signal" % (what, EXIT_BOUND_S))
    return status, time.monotonic() - start


def signal_during_warmup(args):
    repo = os.path.join(args.work, "slow_warmup_repo")
    shutil.rmtree(repo, ignore_errors=True)
    os.makedirs(os.path.join(repo, "slow_warmup", "1"))
    shutil.copy(os.path.join(args.models, "endless", "1", "model.onnx"),
                os.path.join(repo, "slow_warmup", "1", "model.onnx"))
    with open(os.path.join(repo, "slow_warmup", "config.pbtxt"), "w") as f:
        f.write('name: "slow_warmup"' + WARMUP_CONFIG)
    for signal_number, name in ((signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT")):
        log_path = os.path.join(args.work, "warmup_%s.log" % name)
        proc, lines, reader = spawn(args.loopserve, repo, log_path)
        started = wait_for_log(log_path, "starting:", proc, 60)
        if not started:
            proc.kill()
            proc.wait()
        check(started, "loopserve never started:\n" + read_log(log_path)[-2000:])
        time.sleep(1)  # loading the model takes < 1 ms: the first warm-up run's Loop is running
        status, took = stop_and_wait(proc, signal_number, "%s during the warm-up" % name)
        reader.join(10)
        log = read_log(log_path)
        print("%s during a warm-up of 10 endless runs: exit %d after %.2f s" % (name, status, took))
        check(status == 0, "%s during the warm-up: exit status %d\n%s" % (name, status, log[-2000:]))
        check(not any("listening" in line for line in lines),
              "%s during the warm-up: the server still reported ports: %s" % (name, lines))
        check("received %s during start-up: stopped" % name in log,
              "%s during the warm-up: no stop logged\n%s" % (name, log[-2000:]))
        check("warm-up runs" not in log,
              "%s during the warm-up: the warm-up ran to its end\n%s" % (name, log[-2000:]))


def signal_after_re_exec(args):
    killed = 0
    for round_ in range(5):
        log_path = os.path.join(args.work, "re_exec_%d.log" % round_)
        proc, lines, reader = spawn(args.loopserve, args.models, log_path, re_exec=True)
        # The second image has OMP_WAIT_POLICY=PASSIVE in its initial environment.
        seen = False
        deadline = time.monotonic() + 60
        while not seen and time.monotonic() < deadline and proc.poll() is None:
            try:
                with open("/proc/%d/environ" % proc.pid, "rb") as f:
                    seen = b"OMP_WAIT_POLICY=PASSIVE\0" in f.read()
            except OSError:
                pass
        if not seen:
            proc.kill()
            proc.wait()
        check(seen, "round %d: loopserve never re-executed itself with OMP_WAIT_POLICY" % round_)
        status, took = stop_and_wait(proc, signal.SIGTERM, "SIGTERM right after the re-exec")
        reader.join(10)
        log = read_log(log_path)
        killed += status != 0
        print("round %d: SIGTERM right after the re-exec: exit %d after %.2f s (%s)" % (
            round_, status, took, "stopped in start-up" if "during start-up" in log
            else "after start-up" if "shutting down" in log else "no log"))
        check(status == 0, "round %d: SIGTERM right after the re-exec: exit status %d (negative: "
              "killed by that signal)\n%s" % (round_, status, log[-2000:]))
        check("received SIGTERM" in log, "round %d: the SIGTERM was not handled\n%s" % (
            round_, log[-2000:]))


def thread_count(pid):
    return len(os.listdir("/proc/%d/task" % pid))


def threads_while_serving(args):
    log_path = os.path.join(args.work, "serving.log")
    proc, lines, reader = spawn(args.loopserve, args.models, log_path, re_exec=True,
                                extra=["--workers=2", "--http_threads=2"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any("metrics listening" in l for l in lines):
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    metrics = [l for l in lines if "metrics listening" in l]
    if not metrics:
        proc.kill()
        proc.wait()
    check(metrics, "no metrics port reported\n" + read_log(log_path)[-2000:])
    port = int(metrics[0].strip().rsplit(":", 1)[1])
    with open("/proc/%d/comm" % proc.pid) as f:
        name = f.read().strip()
    # The re-exec keeps the name (an exec of /proc/self/exe made it "exe": ps, top, pgrep).
    check(name == "loopserve", "the process is named %r" % name)
    time.sleep(0.5)
    at_start = thread_count(proc.pid)
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(100)]
    time.sleep(0.3)
    body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=30).read()
    with_idle = thread_count(proc.pid)
    for s in idle:
        s.close()
    print("threads: %d at start (2 workers, 2 HTTP threads), %d with 100 idle metrics "
          "connections open" % (at_start, with_idle))
    # main, watchdog, 2 workers, 2 watchers, heap trimmer, HTTP 1+2, metrics 1+1, ~10 of gRPC's,
    # OpenMP's team: about 22 on 2 cores; civetweb's 128 made it about 148.
    check(at_start <= 64, "%d threads at start" % at_start)
    check(with_idle <= at_start + 2, "100 idle metrics connections took threads: %d -> %d" % (
        at_start, with_idle))
    check(b"loopserve_inflight_requests" in body, "the scrape did not answer the metrics")
    status, took = stop_and_wait(proc, signal.SIGTERM, "SIGTERM while serving")
    print("SIGTERM while serving: exit %d after %.2f s" % (status, took))
    check(status == 0, "SIGTERM while serving: exit status %d" % status)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--loopserve", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    signal_during_warmup(args)
    signal_after_re_exec(args)
    threads_while_serving(args)
    print("ok: %d checks" % Checks.count)


if __name__ == "__main__":
    main()
