#!/usr/bin/python3
"""Builds deploy/Dockerfile for real with podman and runs the image's loopserve from the image.

Usage:
  container_image_test.py build --repo_root=DIR --work=DIR [--image=NAME]
  container_image_test.py run   --repo_root=DIR --work=DIR [--image=NAME] [--protoc=PROTOC]

build  Makes the base image once per machine: Debian bookworm from Debian's package repositories
       (`mmdebstrap --variant=minbase`, slimmed and apt-configured as the official
       debian:bookworm-slim image is), imported as localhost/loopserve-ci/debian:bookworm-slim; no
       container registry is needed. Later runs reuse it, so podman's layer cache (keyed on the
       base image and deploy/install_deps.sh) holds the package-installing layers between runs.
       Then builds deploy/Dockerfile exactly as it is in the repository, from the repository root
       as `docker build -f deploy/Dockerfile .` does (podman also reads
       deploy/Dockerfile.dockerignore), in Docker's image format so HEALTHCHECK is kept. Prints the
       time of each step, the whole build's time and the image size; removes the images earlier
       builds with this name left behind.

run    `podman run` cannot start containers on this kind of machine (crun cannot set rlimits or
       cgroups), so this does what a container runtime does, without one: the image's root file
       system (`podman image mount`, read-only, as under the Kubernetes manifest's
       readOnlyRootFilesystem) becomes the root directory of the image's ENTRYPOINT + CMD,
       unchanged, started with the image's Env as the image's User, in private network, mount and
       PID namespaces (`unshare`) with the /dev, /proc and /sys a runtime gives a container. The
       CMD's own ports (8001, 8002 on 0.0.0.0) are therefore the container's loopback ports and
       collide with nothing on the host. Checks:
         - the server listens on exactly the ports the image EXPOSEs, and runs as the image's
           non-root user (uid/gid from /proc);
         - grpc.health.v1 reports SERVING;
         - ModelInfer of the image's `counter` and `rnn` models returns what the ONNX Loop
           semantics give, computed here with numpy (rnn's weights read from the image's
           model.onnx), not by loopserve;
         - /metrics has the Loop series for those requests (loopserve_loop_iterations count 1 and
           sum M for `counter`);
         - the image's HEALTHCHECK command (loopctl ready), run inside the image as its user,
           exits 0 while the server serves and non-zero once it has stopped;
         - the image's STOPSIGNAL (SIGTERM) makes loopserve exit 0.
       Each further port the server reports ("loopserve: <kind> listening on ...") is checked by
       the function PORT_CHECKS names for its kind; an unknown kind fails the test.

Needs root, podman, buildah's chroot isolation, mmdebstrap and unshare (deploy/install_deps.sh
installs them), Debian's /usr/bin/python3 with numpy, onnx and grpcio, and network access to
Debian's package repositories for a cold build. Exit status 0 when every check passed.
"""

import argparse
import ctypes
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request

BASE_IMAGE = "localhost/loopserve-ci/debian:bookworm-slim"

# What debuerreotype does to the official debian:bookworm-slim image (its slimify excludes and the
# docker-* apt configuration), so builds from our base install, clean up and weigh as builds from
# the real one do: documentation, manuals and translations are not installed, downloaded .deb
# files are deleted after each install.
SLIM_DPKG_OPTIONS = [
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/groff/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/linda/*",
    "path-exclude=/usr/share/lintian/overrides/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/man/*",
]
_CLEAN = '"rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb ' \
    '/var/cache/apt/*.bin || true";'
SLIM_APT_OPTIONS = [
    "DPkg::Post-Invoke { %s };" % _CLEAN,
    "APT::Update::Post-Invoke { %s };" % _CLEAN,
    'Dir::Cache::pkgcache "";',
    'Dir::Cache::srcpkgcache "";',
    'Acquire::Languages "none";',
    'Acquire::GzipIndexes "true";',
    'APT::AutoRemove::SuggestsImportant "false";',
]

FAILURES = []


def check(condition, message):
    if not condition:
        FAILURES.append(message)
        print("FAIL: " + message, flush=True)
    return condition


def log(message):
    print(message, flush=True)


def default_image(work):
    """One image name per build tree, so concurrent builds in other trees keep their own."""
    return "localhost/loopserve-test:" + hashlib.sha1(os.path.abspath(work).encode()).hexdigest()[:12]


def podman(*args, **kwargs):
    return subprocess.run(["podman"] + list(args), capture_output=True, text=True, **kwargs)


def require_tools(*tools):
    missing = [t for t in tools if not shutil.which(t)]
    if missing:
        raise SystemExit("FAIL: %s not found: deploy/install_deps.sh installs them" % ", ".join(missing))
    if os.geteuid() != 0:
        raise SystemExit("FAIL: needs root (podman's storage in /var/lib/containers, chroot, mounts)")


# ---------------------------------------------------------------------------------------------
# build


def ensure_base_image(work):
    if podman("image", "exists", BASE_IMAGE).returncode == 0:
        created = podman("image", "inspect", "--format", "{{.Created}}", BASE_IMAGE).stdout.strip()
        log("base image %s: reused (made %s)" % (BASE_IMAGE, created))
        return
    tar = os.path.join(work, "debian-bookworm-slim.tar")
    start = time.monotonic()
    cmd = ["mmdebstrap", "--variant=minbase", "--quiet"]
    cmd += ["--dpkgopt=" + o for o in SLIM_DPKG_OPTIONS]
    cmd += ["--aptopt=" + o for o in SLIM_APT_OPTIONS]
    subprocess.run(cmd + ["bookworm", tar], check=True, timeout=1800)
    subprocess.run(["podman", "import", "--quiet", tar, BASE_IMAGE], check=True, timeout=600,
                   stdout=subprocess.DEVNULL)
    os.remove(tar)
    log("base image %s: made with mmdebstrap in %.0f s" % (BASE_IMAGE, time.monotonic() - start))


def image_id(name):
    r = podman("image", "inspect", "--format", "{{.Id}}", name)
    return r.stdout.strip() if r.returncode == 0 else None


def podman_build(repo_root, work, image, target=None):
    """`podman build` of deploy/Dockerfile as it is, from the repository root; prints each step's
    time. Returns (success, seconds, steps, steps from the layer cache)."""
    log_path = os.path.join(work, "podman-build%s.log" % ("-" + target if target else ""))
    # nice: the build compiles loopserve with all cores while the rest of the test suite runs.
    cmd = ["nice", "-n", "10", "podman", "build", "--format=docker", "--isolation=chroot",
           "--layers", "--build-arg", "DEBIAN_IMAGE=" + BASE_IMAGE, "-f", "deploy/Dockerfile"]
    cmd += ["--target=" + target] if target else []
    cmd += ["-t", image, "."]
    log("$ " + " ".join(cmd))
    start = time.monotonic()
    steps = []  # [step line, start time, from the cache]
    with open(log_path, "w") as out:
        proc = subprocess.Popen(cmd, cwd=repo_root, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            out.write(line)
            if re.match(r"^(\[\d+/\d+\] )?STEP \d+/\d+: ", line):
                steps.append([line.strip(), time.monotonic(), False])
            elif line.startswith("--> Using cache") and steps:
                steps[-1][2] = True
        code = proc.wait()
    seconds = time.monotonic() - start
    ends = [s[1] for s in steps[1:]] + [start + seconds]
    for (text, begun, cached), end in zip(steps, ends):
        if end - begun >= 1 or not cached:
            log("  %6.0f s %s %s" % (end - begun, "cached" if cached else "ran   ", text[:110]))
    cached = sum(1 for s in steps if s[2])
    ok = check(code == 0, "podman build failed (exit %d); the last lines of %s:\n%s" %
               (code, log_path, "".join(open(log_path).readlines()[-40:])))
    return ok, seconds, len(steps), cached


def build(args):
    require_tools("podman", "buildah", "mmdebstrap")
    os.makedirs(args.work, exist_ok=True)
    start = time.monotonic()
    ensure_base_image(args.work)
    # The build stage gets a name of its own: that keeps its layers (the installed packages, the
    # compiled tree) as the cache of the next build; removing the images this name had before
    # removes only what no current image shares.
    build_stage = args.image + "-build"
    previous = {name: image_id(name) for name in (build_stage, args.image)}
    ok, stage_seconds, stage_steps, stage_cached = podman_build(args.repo_root, args.work,
                                                                build_stage, target="build")
    if not ok:
        return
    ok, image_seconds, image_steps, image_cached = podman_build(args.repo_root, args.work,
                                                                args.image)
    if not ok:
        return
    for name, old in previous.items():
        if old and old != image_id(name):
            podman("rmi", old)
    size = int(podman("image", "inspect", "--format", "{{.Size}}", args.image).stdout.strip() or 0)
    log("image %s: %.0f MB; built in %.0f s (build stage %.0f s, %d of %d steps cached; image "
        "%.0f s, %d of %d steps cached; base image and build: %.0f s)" %
        (args.image, size / 1e6, stage_seconds + image_seconds, stage_seconds, stage_cached,
         stage_steps, image_seconds, image_cached, image_steps, time.monotonic() - start))


# ---------------------------------------------------------------------------------------------
# run: outside the namespaces


def run(args):
    require_tools("podman", "unshare", "mount", "ip")
    os.makedirs(args.work, exist_ok=True)
    r = podman("image", "inspect", args.image)
    if r.returncode != 0:
        raise SystemExit("FAIL: no image %s (the build test makes it): %s" % (args.image, r.stderr))
    inspect = json.loads(r.stdout)[0]
    config = dict(inspect["Config"])
    config["Healthcheck"] = inspect.get("Healthcheck") or config.get("Healthcheck")
    config_path = os.path.join(args.work, "image-config.json")
    with open(config_path, "w") as f:
        json.dump(config, f, indent=1)
    r = podman("image", "mount", args.image)
    if r.returncode != 0:
        raise SystemExit("FAIL: podman image mount %s: %s" % (args.image, r.stderr))
    root = r.stdout.strip()
    try:
        inner = [sys.executable, os.path.abspath(__file__), "inside", "--repo_root=" + args.repo_root,
                 "--work=" + args.work, "--protoc=" + args.protoc, "--root=" + root,
                 "--config=" + config_path]
        code = subprocess.run(["unshare", "--net", "--mount", "--pid", "--fork", "--kill-child"] +
                              inner, timeout=args.timeout).returncode
    finally:
        podman("image", "unmount", "--force", args.image)
    check(code == 0, "the checks inside the namespaces failed (exit %d)" % code)


# ---------------------------------------------------------------------------------------------
# run: inside private network, mount and PID namespaces


def sh(*cmd):
    subprocess.run(list(cmd), check=True)


def prepare_root(root):
    """Makes `root` what a container runtime makes of an image's root file system: read-only here,
    with a tmpfs /dev holding the standard devices, a /proc of this PID namespace and sysfs."""
    sh("ip", "link", "set", "lo", "up")
    sh("mount", "--make-rprivate", "/")
    sh("mount", "--bind", root, root)
    sh("mount", "-o", "remount,bind,ro", root)
    dev = os.path.join(root, "dev")
    sh("mount", "-t", "tmpfs", "-o", "nosuid,mode=755", "tmpfs", dev)
    for name in ("null", "zero", "full", "random", "urandom", "tty"):
        open(os.path.join(dev, name), "w").close()
        sh("mount", "--bind", "/dev/" + name, os.path.join(dev, name))
    for name in ("shm", "pts"):
        os.mkdir(os.path.join(dev, name))
    sh("mount", "-t", "tmpfs", "-o", "nosuid,nodev,noexec", "shm", os.path.join(dev, "shm"))
    for link, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, os.path.join(dev, link))
    sh("mount", "-t", "proc", "-o", "nosuid,nodev,noexec", "proc", os.path.join(root, "proc"))
    sh("mount", "-t", "sysfs", "-o", "ro,nosuid,nodev,noexec", "sysfs", os.path.join(root, "sys"))


def image_user(root, user):
    """(uid, gid, home) of an image's USER ("uid[:gid]" or "name[:group]")."""
    name, _, group = (user or "0").partition(":")
    uid = gid = None
    home = "/"
    with open(os.path.join(root, "etc", "passwd")) as f:
        for line in f:
            p = line.rstrip("\n").split(":")
            if len(p) >= 6 and (p[0] == name or p[2] == name):
                uid, gid, home = int(p[2]), int(p[3]), p[5]
    if uid is None:
        uid = int(name)
        gid = uid
    if group:
        if group.isdigit():
            gid = int(group)
        else:
            with open(os.path.join(root, "etc", "group")) as f:
                gid = next(int(p[2]) for p in (l.split(":") for l in f) if p[0] == group)
    return uid, gid, home


class Image:
    """Starts processes from the image's root file system as its user, with its environment."""

    def __init__(self, root, config):
        self.root = root
        self.config = config
        self.uid, self.gid, home = image_user(root, config.get("User"))
        self.env = dict(e.split("=", 1) for e in config.get("Env") or [])
        self.env.setdefault("HOME", home)
        self.env.setdefault("HOSTNAME", "loopserve-test")
        self.workdir = config.get("WorkingDir") or "/"
        self._libc = ctypes.CDLL(None, use_errno=True)

    def _enter(self):
        os.chroot(self.root)
        os.chdir(self.workdir)
        os.setgroups([])
        os.setgid(self.gid)
        os.setuid(self.uid)
        self._libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG, after setuid (which clears it)

    def popen(self, argv, **kwargs):
        return subprocess.Popen(argv, preexec_fn=self._enter, env=self.env, **kwargs)

    def run(self, argv, timeout):
        return subprocess.run(argv, preexec_fn=self._enter, env=self.env, capture_output=True,
                              text=True, timeout=timeout)


def start_loopserve(image, argv, log_path, timeout=180):
    """Starts `argv` in the image; returns (process, {kind: (address, port)}) from the lines
    "loopserve: <kind> listening on <address>:<port>" it prints once its models are loaded."""
    log_file = open(log_path, "w")
    proc = image.popen(argv, stdout=subprocess.PIPE, stderr=log_file, text=True)
    listening = {}
    timer = threading.Timer(timeout, proc.kill)  # bounded start-up
    timer.start()
    for line in proc.stdout:
        m = re.match(r"^loopserve: (\w+) listening on (.*):(\d+)$", line.strip())
        if m:
            listening[m.group(1)] = (m.group(2), int(m.group(3)))
        if "grpc" in listening and "metrics" in listening:
            break
    timer.cancel()
    # Drains the rest of stdout, so the server never blocks on a full pipe; lines after the
    # "metrics" one (further ports) are still collected.
    def drain():
        for line in proc.stdout:
            m = re.match(r"^loopserve: (\w+) listening on (.*):(\d+)$", line.strip())
            if m:
                listening[m.group(1)] = (m.group(2), int(m.group(3)))
    threading.Thread(target=drain, daemon=True).start()
    return proc, listening


def proc_ids(root, pid):
    """{"Uid": [...], "Gid": [...]} of `pid` in this PID namespace, from the image's /proc."""
    ids = {}
    with open(os.path.join(root, "proc", str(pid), "status")) as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("Uid", "Gid"):
                ids[key] = [int(v) for v in value.split()]
    return ids


# The expected answers: ONNX's Loop semantics written out in numpy (onnx.ai/onnx Operators.md,
# Loop: M iterations, loop-carried values updated by the body, scan outputs stacked on a new
# leading axis), never loopserve's output.


def counter_expected(np, m, start):
    """counter's body: c = c + 1, scan c."""
    finals, scans = start.copy(), []
    for _ in range(max(int(m), 0)):
        finals = finals + 1
        scans.append(finals.copy())
    return {"final": finals, "counts": np.stack(scans)}


def rnn_expected(np, w, b, m, h0):
    """rnn's body: h = tanh(h W + b), scan h; W and b are the outer graph's initializers."""
    h, seq = h0, []
    for _ in range(max(int(m), 0)):
        h = np.tanh(h @ w + b).astype(np.float32)
        seq.append(h)
    return {"h_final": h, "h_seq": np.stack(seq)}


def infer(pb, stub, np, model, inputs):
    """ModelInfer with raw contents; returns {output name: array}."""
    oip = {np.dtype(np.int64): "INT64", np.dtype(np.float32): "FP32"}
    numpy_type = {"INT64": np.int64, "FP32": np.float32}
    request = pb.ModelInferRequest(model_name=model)
    for name, array in inputs.items():
        request.inputs.add(name=name, datatype=oip[array.dtype], shape=array.shape)
        request.raw_input_contents.append(np.ascontiguousarray(array).tobytes())
    response = stub.ModelInfer(request, timeout=60)
    return {o.name: np.frombuffer(raw, numpy_type[o.datatype]).reshape(tuple(o.shape))
            for o, raw in zip(response.outputs, response.raw_output_contents)}


def check_outputs(np, model, got, want, rtol=0.0, atol=0.0):
    for name, expected in want.items():
        if not check(name in got, "%s: no output %s in %s" % (model, name, sorted(got))):
            continue
        if not check(got[name].shape == expected.shape, "%s: %s has shape %s, expected %s" %
                     (model, name, got[name].shape, expected.shape)):
            continue
        check(np.allclose(got[name], expected, rtol=rtol, atol=atol),
              "%s: %s = %s, expected %s" % (model, name, got[name].tolist(), expected.tolist()))


def metric_samples(text, name):
    """[(labels dict, value)] of the samples of `name` in a Prometheus text exposition."""
    out = []
    for line in text.splitlines():
        m = re.match(r"^%s(?:\{(.*)\})? (\S+)" % re.escape(name), line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
            out.append((labels, float(m.group(2))))
    return out


def check_grpc(port, ctx):
    """Health, inference and the model-related checks over the gRPC port."""
    import grpc
    np = ctx["np"]
    pb, pb_grpc, health_pb2, health_pb2_grpc = ctx["protos"]
    channel = grpc.insecure_channel("127.0.0.1:%d" % port)
    try:
        grpc.channel_ready_future(channel).result(timeout=30)
        health = health_pb2_grpc.HealthStub(channel)
        status = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10).status
        if check(status == health_pb2.HealthCheckResponse.SERVING,
                 "grpc.health.v1 Check: %s, expected SERVING" %
                 health_pb2.HealthCheckResponse.ServingStatus.Name(status)):
            log("ok: grpc.health.v1 SERVING")
        stub = pb_grpc.GRPCInferenceServiceStub(channel)

        m, start = 5, np.array([10], np.int64)
        got = infer(pb, stub, np, "counter", {"M": np.array(m, np.int64), "start": start})
        before = len(FAILURES)
        check_outputs(np, "counter", got, counter_expected(np, m, start))
        if len(FAILURES) == before:
            log("ok: counter M=5 start=[10] -> final %s, counts %s" %
                (got["final"].tolist(), got["counts"].ravel().tolist()))
        ctx["counter_iterations"] = m

        import onnx
        from onnx import numpy_helper
        model = onnx.load(os.path.join(ctx["root"], "models", "rnn", "1", "model.onnx"))
        weights = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
        h0 = np.random.RandomState(7).uniform(-1, 1, (3, 4)).astype(np.float32)
        got = infer(pb, stub, np, "rnn", {"M": np.array(6, np.int64), "h0": h0})
        before = len(FAILURES)
        check_outputs(np, "rnn", got, rnn_expected(np, weights["W"], weights["b"], 6, h0),
                      rtol=1e-5, atol=1e-5)
        if len(FAILURES) == before:
            log("ok: rnn M=6 h0[3,4] -> h_seq[6,3,4] as numpy's tanh(hW+b) loop (oneDNN in the image)")
    finally:
        channel.close()


def check_metrics(port, ctx):
    """The Loop series of the requests check_grpc sent, from the metrics port."""
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read().decode()
    counts = metric_samples(text, "loopserve_loop_iterations_count")
    sums = metric_samples(text, "loopserve_loop_iterations_sum")
    count = sum(v for labels, v in counts if labels.get("model") == "counter")
    total = sum(v for labels, v in sums if labels.get("model") == "counter")
    want = ctx.get("counter_iterations")
    if check(count == 1 and total == want,
             "/metrics: loopserve_loop_iterations{model=\"counter\"} count %s sum %s, expected "
             "1 and %s" % (count, total, want)):
        log("ok: /metrics loopserve_loop_iterations{model=\"counter\"} count 1 sum %d" % want)
    durations = metric_samples(text, "loopserve_loop_iteration_duration_seconds_count")
    check(any(labels.get("model") == "rnn" and v >= 1 for labels, v in durations),
          "/metrics: no loopserve_loop_iteration_duration_seconds sample for rnn")


def check_http(port, ctx):
    """KServe v2 REST on the port the server reports as "http": readiness and a JSON inference."""
    np = ctx["np"]
    base = "http://127.0.0.1:%d" % port
    with urllib.request.urlopen(base + "/v2/health/ready", timeout=10) as r:
        if check(r.status == 200, "GET /v2/health/ready: HTTP %d, expected 200" % r.status):
            log("ok: GET /v2/health/ready -> 200")
    m, start = 3, np.array([20], np.int64)
    body = json.dumps({"inputs": [
        {"name": "M", "shape": [], "datatype": "INT64", "data": [m]},
        {"name": "start", "shape": [1], "datatype": "INT64", "data": start.tolist()}]}).encode()
    request = urllib.request.Request(base + "/v2/models/counter/infer", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as r:
        reply = json.loads(r.read())
    got = {o["name"]: np.array(o["data"], np.int64).reshape(o["shape"])
           for o in reply.get("outputs", [])}
    before = len(FAILURES)
    check_outputs(np, "counter (REST)", got, counter_expected(np, m, start))
    if len(FAILURES) == before:
        log("ok: REST counter M=3 start=[20] -> final %s" % got["final"].tolist())


# How each port the server reports is checked, by the kind in its "listening on" line. A port
# that a new protocol adds (REST's "http") gets one function here.
PORT_CHECKS = {
    "grpc": check_grpc,
    "metrics": check_metrics,
    "http": check_http,
}


def healthcheck(image, config):
    """Runs the image's HEALTHCHECK command in the image; returns (exit code, output)."""
    hc = config.get("Healthcheck") or {}
    test = hc.get("Test") or []
    if not check(test and test[0] in ("CMD", "CMD-SHELL"),
                 "the image has no HEALTHCHECK (podman build --format=docker keeps it): %r" % hc):
        return None, ""
    argv = test[1:] if test[0] == "CMD" else ["/bin/sh", "-c", test[1]]
    timeout = (hc.get("Timeout") or 30 * 10 ** 9) / 1e9
    r = image.run(argv, timeout=timeout + 5)
    return r.returncode, (r.stdout + r.stderr).strip()


def inside(args):
    import numpy as np
    np.float, np.int, np.bool, np.object = float, int, bool, object  # onnx 1.12 vs numpy 1.24

    with open(args.config) as f:
        config = json.load(f)
    prepare_root(args.root)
    image = Image(args.root, config)
    sys.path.insert(0, os.path.join(args.repo_root, "tests", "integration"))
    from loopserve_py import make_stubs
    make_stubs(args.protoc, args.repo_root, os.path.join(args.work, "stubs"),
               ["proto/grpc_service.proto", "proto/model_config.proto", "proto/health.proto"])
    from proto import grpc_service_pb2, grpc_service_pb2_grpc, health_pb2, health_pb2_grpc

    check(image.uid != 0, "the image's USER %r is root" % config.get("User"))
    argv = (config.get("Entrypoint") or []) + (config.get("Cmd") or [])
    log("starting %s as uid %d gid %d" % (" ".join(argv), image.uid, image.gid))
    server_log = os.path.join(args.work, "loopserve.log")
    proc, listening = start_loopserve(image, argv, server_log)
    try:
        if not check("grpc" in listening and "metrics" in listening,
                     "loopserve did not report its ports; its log:\n" + open(server_log).read()):
            return
        log("ok: listening on %s" % ", ".join("%s %s:%d" % (k, a, p)
                                            for k, (a, p) in sorted(listening.items())))
        ids = proc_ids(args.root, proc.pid)
        if check(ids.get("Uid") == [image.uid] * 4 and ids.get("Gid") == [image.gid] * 4,
                 "loopserve runs as %s, expected the image's user %d:%d" % (ids, image.uid, image.gid)):
            log("ok: loopserve runs as uid %d gid %d" % (image.uid, image.gid))
        exposed = {int(p.split("/")[0]) for p in config.get("ExposedPorts") or {}}
        served = {port for _, port in listening.values()}
        check(exposed == served, "the image EXPOSEs %s, loopserve serves %s" % (sorted(exposed),
                                                                             sorted(served)))
        ctx = {"np": np, "root": args.root,
               "protos": (grpc_service_pb2, grpc_service_pb2_grpc, health_pb2, health_pb2_grpc)}
        for kind in ["grpc", "metrics"] + sorted(set(listening) - {"grpc", "metrics"}):
            if check(kind in PORT_CHECKS, "no check for the %s port (add one to PORT_CHECKS)" % kind):
                PORT_CHECKS[kind](listening[kind][1], ctx)

        code, output = healthcheck(image, config)
        if code is not None and check(code == 0, "HEALTHCHECK %s exited %s while serving: %s" %
                                      (config["Healthcheck"]["Test"], code, output)):
            log("ok: HEALTHCHECK %s -> exit 0 (%s)" % (" ".join(config["Healthcheck"]["Test"][1:]),
                                                     output))
    finally:
        stop = config.get("StopSignal") or "SIGTERM"
        check(stop == "SIGTERM", "STOPSIGNAL is %s; loopserve drains on SIGTERM" % stop)
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=45)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        if check(code == 0, "loopserve exited %d on %s; its log:\n%s" %
                 (code, stop, open(server_log).read()[-4000:])):
            log("ok: %s -> exit 0" % stop)

    code, output = healthcheck(image, config)
    if code is not None and check(code != 0, "HEALTHCHECK exits 0 with no server running"):
        log("ok: HEALTHCHECK after exit -> exit %d (%s)" % (code, output.splitlines()[-1:]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=["build", "run", "inside"])
    parser.add_argument("--repo_root", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--image", help="image name (default: one per --work)")
    parser.add_argument("--protoc", default=shutil.which("protoc") or "protoc")
    parser.add_argument("--timeout", type=float, default=600, help="run: bound on the checks")
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.repo_root = os.path.abspath(args.repo_root)
    args.work = os.path.abspath(args.work)
    args.image = args.image or default_image(args.work)
    {"build": build, "run": run, "inside": inside}[args.mode](args)
    if args.mode != "inside":
        log("%s: %d failure(s)" % (args.mode, len(FAILURES)))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
