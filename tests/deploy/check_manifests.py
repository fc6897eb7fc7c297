#!/usr/bin/python3
"""Checks loopserve's deployment artefacts under deploy/ against each other and the real binary.

Usage:
  check_manifests.py --repo_root=DIR --loopserve=BIN --loopctl=BIN [--prometheus=BIN]
                     [--promtool=BIN] [--only=static|metrics|promql]

  static   every YAML/JSON file under deploy/ parses; the Dockerfile, compose file, Prometheus and
           Grafana provisioning, Kubernetes and KServe manifests have their required fields; every
           loopserve flag they pass is one `loopserve --help` lists; ports agree everywhere; the
           runtime package list of deploy/install_deps.sh covers every shared library `ldd` finds
           for loopserve and loopctl; `promtool check config` accepts the scrape config and
           `promtool check rules` the recording rules; the queue-time autoscaling artefacts (HPA,
           prometheus-adapter values, KEDA ScaledObject, PrometheusRule, the InferenceService's
           autoScaling) use the recorded series and agree on thresholds; `kubectl kustomize
           deploy/k8s` renders.
  metrics  starts loopserve with each command line the artefacts use (ports and repository
           overridden to 127.0.0.1:0 and the example models): each one starts; every metric the
           recording rules read, and every metric name
           (and selector label) the Grafana dashboard queries exists in a real /metrics scrape.
  promql   starts loopserve and Debian's prometheus (1 s scrapes) on loopback, sends Loop requests
           with loopctl (successes, a deadline hit), then runs every dashboard query through
           Prometheus' HTTP API: each must parse and return data.

Without --only all three run. Exit status 0 when every check passed; failures are listed.
Needs Debian's /usr/bin/python3 with python3-yaml (and python3-numpy/-onnx for the models).
"""

import argparse
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import yaml

FAILURES = []

# absl's own flags, accepted by every absl binary (listed by --helpfull, not --help).
ABSL_BUILTIN_FLAGS = {"flagfile", "fromenv", "tryfromenv", "undefok"}
# Prometheus series that exist without loopserve exporting them.
PROMETHEUS_BUILTIN_METRICS = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
# The metrics DESIGN.md promises; the dashboard must show each of them.
REQUIRED_DASHBOARD_METRICS = {
    "loopserve_requests_total", "loopserve_request_duration_seconds",
    "loopserve_queue_duration_seconds", "loopserve_compute_duration_seconds",
    "loopserve_loop_iterations", "loopserve_loop_iteration_duration_seconds",
    "loopserve_loop_limit_hits_total", "loopserve_inflight_requests", "loopserve_queue_depth",
    "loopserve_model_ready",
}


def check(condition, message):
    if not condition:
        FAILURES.append(message)
    return condition


# ---------------------------------------------------------------------------------------------
# Loading the artefacts


def load_yaml_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def deploy_files(root, pattern):
    out = []
    for path in sorted(glob.glob(os.path.join(root, "deploy", "**", pattern), recursive=True)):
        if os.sep + os.path.join("deploy", "models") + os.sep in path:
            continue  # generated example models
        out.append(path)
    return out


def parse_all(root):
    """Parses every YAML and JSON file under deploy/; returns {relative path: [documents]}."""
    docs = {}
    for pattern in ("*.yaml", "*.yml"):
        for path in deploy_files(root, pattern):
            rel = os.path.relpath(path, root)
            try:
                docs[rel] = load_yaml_docs(path)
                check(docs[rel], "%s: no YAML document" % rel)
            except yaml.YAMLError as e:
                check(False, "%s: YAML does not parse: %s" % (rel, e))
    for path in deploy_files(root, "*.json"):
        rel = os.path.relpath(path, root)
        try:
            with open(path) as f:
                docs[rel] = [json.load(f)]
        except ValueError as e:
            check(False, "%s: JSON does not parse: %s" % (rel, e))
    return docs


def find_kind(docs, kind):
    """(path, document) pairs of every document of `kind`."""
    return [(p, d) for p, ds in docs.items() for d in ds if isinstance(d, dict) and d.get("kind") == kind]


def one_kind(docs, kind):
    found = find_kind(docs, kind)
    check(len(found) == 1, "expected exactly one %s under deploy/, found %d" % (kind, len(found)))
    return found[0][1] if found else {}


def flags_of(args):
    """{name: value} of the --name=value arguments in `args` (later ones win)."""
    out = {}
    for a in args:
        m = re.match(r"^--([A-Za-z0-9_]+)(?:=(.*))?$", a.strip())
        if m:
            out[m.group(1)] = m.group(2) if m.group(2) is not None else "true"
    return out


def dockerfile_stages(root):
    """Parses deploy/Dockerfile into stages: [{'from', 'name', 'instructions': [(KEY, text)]}]."""
    with open(os.path.join(root, "deploy", "Dockerfile")) as f:
        text = f.read()
    text = re.sub(r"\\\n", " ", text)  # line continuations
    args = {}
    stages = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, rest = line.partition(" ")
        key = key.upper()
        rest = rest.strip()
        if key == "ARG" and not stages:
            name, _, value = rest.partition("=")
            args[name] = value
            continue
        if key == "FROM":
            m = re.match(r"^(\S+)(?:\s+AS\s+(\S+))?$", rest, re.IGNORECASE)
            image = re.sub(r"\$\{(\w+)\}", lambda g: args.get(g.group(1), ""), m.group(1))
            stages.append({"from": image, "name": m.group(2), "instructions": []})
            continue
        check(stages, "Dockerfile: %s before FROM" % key)
        if stages:
            stages[-1]["instructions"].append((key, rest))
    return stages


def json_array(text):
    try:
        value = json.loads(text)
        return value if isinstance(value, list) else None
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------------
# Static checks


def loopserve_flags(loopserve):
    """The flag names `loopserve --help` lists."""
    r = subprocess.run([loopserve, "--help"], capture_output=True, text=True, timeout=30)
    names = set(re.findall(r"^\s+--([a-z0-9_]+)", r.stdout + r.stderr, re.MULTILINE))
    check("model_repository" in names and "grpc_port" in names,
          "`loopserve --help` lists no --model_repository/--grpc_port: %r" % (r.stdout + r.stderr)[:500])
    return names


def loopctl_flags(loopctl):
    r = subprocess.run([loopctl, "--help"], capture_output=True, text=True, timeout=30)
    return set(re.findall(r"--([a-z_]+)=", r.stdout))


def check_flags_known(where, args, known):
    for name in flags_of(args):
        check(name in known or name in ABSL_BUILTIN_FLAGS,
              "%s: --%s is not a loopserve flag (`loopserve --help`)" % (where, name))


def configmap_flags(configmap):
    text = configmap.get("data", {}).get("loopserve.flags", "")
    return [l.strip() for l in text.splitlines() if l.strip() and not l.strip().startswith("#")]


def install_deps_lists(root):
    with open(os.path.join(root, "deploy", "install_deps.sh")) as f:
        text = f.read()
    lists = {}
    for name in ("BUILD_PACKAGES", "TEST_PACKAGES", "RUNTIME_PACKAGES"):
        m = re.search(name + r"=\((.*?)\)", text, re.DOTALL)
        check(m, "install_deps.sh: no %s=(...) list" % name)
        lists[name] = set(re.sub(r"#.*", "", m.group(1)).split()) if m else set()
    return lists


def installed_packages():
    """({package: [dependency names]}, {Essential or Priority required packages}) of every
    installed package, from one dpkg-query call."""
    r = subprocess.run(["dpkg-query", "-W", "-f=${Package}\t${Essential} ${Priority}\t"
                        "${Depends}, ${Pre-Depends}\n"], capture_output=True, text=True)
    deps, essential = {}, set()
    for line in r.stdout.splitlines():
        name, flags, depends = (line.split("\t") + ["", ""])[:3]
        if "yes" in flags.split() or "required" in flags.split():
            essential.add(name)
        # The first choice of each alternative ("a | b"), without version or architecture.
        deps[name] = [alt.split("|")[0].strip().split(" ")[0].split(":")[0]
                      for alt in depends.split(",") if alt.strip()]
    return deps, essential


def dependency_closure(packages, deps):
    """Installed packages reachable from `packages` through Depends/Pre-Depends."""
    seen = set()
    todo = list(packages)
    while todo:
        p = todo.pop()
        if p and p not in seen:
            seen.add(p)
            todo.extend(deps.get(p, []))
    return seen


def check_runtime_packages(binaries, runtime_list):
    """Every shared library of `binaries` belongs to a package RUNTIME_PACKAGES names, or to one
    every Debian image has (an Essential package or one it depends on). Packages apt would only
    pull in as a dependency of another must be named too: the binaries link them directly."""
    deps, essential = installed_packages()
    for p in runtime_list:
        check(p in deps, "install_deps.sh: runtime package %s is not installed here" % p)
    covered = set(runtime_list) | dependency_closure(essential, deps)
    libs = {}
    for b in binaries:
        r = subprocess.run(["ldd", b], capture_output=True, text=True, timeout=30)
        check(r.returncode == 0, "ldd %s failed: %s" % (b, r.stderr))
        for line in r.stdout.splitlines():
            check("not found" not in line, "ldd %s: %s" % (b, line.strip()))
            m = re.match(r"^\s*(\S+) => (/\S+)", line)
            if m:
                libs.setdefault(m.group(2), set()).add(os.path.basename(b))
    # dpkg knows a file by the path its package installed; /lib is a symlink to /usr/lib here.
    candidates = {}
    for path in libs:
        real = os.path.realpath(path)
        for c in (path, real, re.sub(r"^/usr/lib/", "/lib/", path),
                  re.sub(r"^/lib/", "/usr/lib/", path), re.sub(r"^/usr/lib/", "/lib/", real)):
            candidates[c] = path
    r = subprocess.run(["dpkg", "-S"] + sorted(candidates), capture_output=True, text=True)
    owner = {}
    for line in r.stdout.splitlines():
        pkgs, _, f = line.partition(": ")
        if f in candidates:
            owner[candidates[f]] = pkgs.split(",")[0].split(":")[0].strip()
    missing = {}
    for path, users in sorted(libs.items()):
        if not check(path in owner, "%s need %s, which no Debian package owns" % (sorted(users), path)):
            continue
        if owner[path] not in covered:
            missing.setdefault(owner[path], []).append(os.path.basename(path))
    for package, files in sorted(missing.items()):
        check(False, "package %s (%s) is linked but `install_deps.sh --runtime` does not install it "
              "(add it to RUNTIME_PACKAGES)" % (package, ", ".join(files[:3]) + (", ..." if len(files) > 3 else "")))
    return owner


def check_dockerfile(root, known_flags, ports):
    stages = dockerfile_stages(root)
    if not check(len(stages) >= 2, "Dockerfile: expected a build and a runtime stage"):
        return
    for s in stages:
        check(s["from"] == "debian:bookworm-slim", "Dockerfile: stage FROM %s, expected "
              "debian:bookworm-slim" % s["from"])
    build, runtime = stages[0], stages[-1]
    runs = lambda s: " && ".join(t for k, t in s["instructions"] if k == "RUN")
    check(re.search(r"install_deps\.sh(?!\s+--runtime)", runs(build)),
          "Dockerfile: the build stage must run deploy/install_deps.sh (no --runtime)")
    check("cmake --build" in runs(build), "Dockerfile: the build stage does not build")
    check("make_example_models.py" in runs(build), "Dockerfile: example models are not generated")
    check(re.search(r"install_deps\.sh\s+--runtime", runs(runtime)),
          "Dockerfile: the runtime stage must run install_deps.sh --runtime")
    check(not re.search(r"-dev\b|build-essential", runs(runtime)),
          "Dockerfile: the runtime stage installs build packages")
    keys = [k for k, _ in runtime["instructions"]]
    users = [t for k, t in runtime["instructions"] if k == "USER"]
    check(users and users[-1].split(":")[0] not in ("0", "root"),
          "Dockerfile: the runtime stage must run as a non-root USER")
    check("HEALTHCHECK" in keys, "Dockerfile: no HEALTHCHECK")
    copies = " ".join(t for k, t in runtime["instructions"] if k == "COPY")
    check(re.search(r"\s/models\s*$|\s/models\s", copies + " ") or "VOLUME" in keys,
          "Dockerfile: neither bakes models into /models nor declares a VOLUME")
    exposed = set()
    for k, t in runtime["instructions"]:
        if k == "EXPOSE":
            exposed |= {int(p.split("/")[0]) for p in t.split()}
    entry = [json_array(t) for k, t in runtime["instructions"] if k == "ENTRYPOINT"]
    cmd = [json_array(t) for k, t in runtime["instructions"] if k == "CMD"]
    check(entry and entry[-1] and entry[-1][0].endswith("loopserve"),
          "Dockerfile: ENTRYPOINT must be the loopserve binary (exec form)")
    if not check(cmd and cmd[-1], "Dockerfile: CMD must be a JSON array of loopserve flags"):
        return
    check_flags_known("Dockerfile CMD", cmd[-1], known_flags)
    f = flags_of(cmd[-1])
    grpc, metrics = int(f.get("grpc_port", 8001)), int(f.get("metrics_port", 8002))
    http = int(f.get("http_port", 8000))
    check(exposed == {http, grpc, metrics},
          "Dockerfile: EXPOSE %s, but CMD serves HTTP on %d, gRPC on %d and metrics on %d" %
          (sorted(exposed), http, grpc, metrics))
    health = [t for k, t in runtime["instructions"] if k == "HEALTHCHECK"]
    check(health and ":%d" % grpc in health[-1],
          "Dockerfile: HEALTHCHECK does not probe the gRPC port %d" % grpc)
    ports["docker"] = (http, grpc, metrics)
    ports["docker_cmd"] = cmd[-1]


def check_compose(docs, known_flags, known_loopctl, ports):
    compose = docs.get("deploy/compose.yaml", [{}])[0]
    services = compose.get("services", {})
    for name in ("loopserve", "prometheus", "grafana"):
        check(name in services, "compose.yaml: no service '%s'" % name)
    ls = services.get("loopserve", {})
    check(ls.get("build", {}).get("dockerfile") == "deploy/Dockerfile",
          "compose.yaml: loopserve is not built from deploy/Dockerfile")
    command = ls.get("command", [])
    check(isinstance(command, list) and command, "compose.yaml: loopserve command must be a list")
    check_flags_known("compose.yaml loopserve.command", command, known_flags)
    f = flags_of(command)
    grpc, metrics = int(f.get("grpc_port", 8001)), int(f.get("metrics_port", 8002))
    http = int(f.get("http_port", 8000))
    container_ports = {int(str(p).split(":")[-1].split("/")[0]) for p in ls.get("ports", [])}
    check(container_ports == {http, grpc, metrics},
          "compose.yaml: loopserve publishes %s, serves %d/%d/%d" %
          (sorted(container_ports), http, grpc, metrics))
    test = " ".join(ls.get("healthcheck", {}).get("test", []))
    check("--addr=127.0.0.1:%d" % grpc in test, "compose.yaml: healthcheck does not probe gRPC %d" % grpc)
    for flag in re.findall(r"--([a-z_]+)=", test):
        check(flag in known_loopctl, "compose.yaml healthcheck: --%s is not a loopctl flag" % flag)
    exit_timeout = int(f.get("exit_timeout_seconds", 30))
    grace = ls.get("stop_grace_period", "10s")
    check(int(re.sub(r"s$", "", str(grace))) > exit_timeout,
          "compose.yaml: stop_grace_period %s <= --exit_timeout_seconds %d" % (grace, exit_timeout))
    ports["compose"] = (http, grpc, metrics)
    ports["compose_command"] = command

    # Prometheus scrapes loopserve's metrics port by service name, with the mounted config.
    prom = services.get("prometheus", {})
    mounts = {v.split(":")[1]: v.split(":")[0] for v in prom.get("volumes", []) if ":" in v}
    check(mounts.get("/etc/prometheus/prometheus.yml") == "./prometheus/prometheus.yml",
          "compose.yaml: prometheus does not mount deploy/prometheus/prometheus.yml")
    scrape = docs.get("deploy/prometheus/prometheus.yml", [{}])[0]
    targets = [t for job in scrape.get("scrape_configs", []) for sc in job.get("static_configs", [])
               for t in sc.get("targets", [])]
    check("loopserve:%d" % metrics in targets,
          "prometheus.yml: targets %s do not include loopserve:%d" % (targets, metrics))

    # Grafana: provisioning and dashboards mounted where the provisioning files point.
    graf = services.get("grafana", {})
    gm = {v.split(":")[1]: v.split(":")[0] for v in graf.get("volumes", []) if ":" in v}
    check(gm.get("/etc/grafana/provisioning") == "./grafana/provisioning",
          "compose.yaml: grafana does not mount deploy/grafana/provisioning")
    providers = docs.get("deploy/grafana/provisioning/dashboards/loopserve.yaml", [{}])[0]
    paths = [p.get("options", {}).get("path") for p in providers.get("providers", [])]
    check(paths and gm.get(paths[0]) == "./grafana/dashboards",
          "grafana dashboard provider path %s is not where compose mounts deploy/grafana/dashboards" % paths)
    datasources = docs.get("deploy/grafana/provisioning/datasources/prometheus.yaml", [{}])[0]
    ds = datasources.get("datasources", [{}])[0]
    check(ds.get("type") == "prometheus" and ds.get("url") == "http://prometheus:9090",
          "grafana datasource is not the compose prometheus service")
    ports["grafana_datasource_uid"] = ds.get("uid")


def container_port(container, name):
    for p in container.get("ports", []):
        if p.get("name") == name:
            return p.get("containerPort")
    return None


def check_kubernetes(docs, known_flags, ports):
    configmap = one_kind(docs, "ConfigMap")
    deployment = one_kind(docs, "Deployment")
    service = one_kind(docs, "Service")
    hpa = one_kind(docs, "HorizontalPodAutoscaler")
    for kind, d in (("ConfigMap", configmap), ("Deployment", deployment), ("Service", service),
                    ("HorizontalPodAutoscaler", hpa)):
        check(d.get("apiVersion") and d.get("metadata", {}).get("name"),
              "%s: apiVersion and metadata.name are required" % kind)
    cm_flags_list = configmap_flags(configmap)
    check(cm_flags_list, "ConfigMap: no data.loopserve.flags")
    check_flags_known("ConfigMap loopserve.flags", cm_flags_list, known_flags)
    ports["configmap_flags"] = cm_flags_list
    cm_flags = flags_of(cm_flags_list)
    grpc, metrics = int(cm_flags.get("grpc_port", 8001)), int(cm_flags.get("metrics_port", 8002))
    http = int(cm_flags.get("http_port", 8000))

    spec = deployment.get("spec", {})
    template = spec.get("template", {})
    pod = template.get("spec", {})
    labels = template.get("metadata", {}).get("labels", {})
    match = spec.get("selector", {}).get("matchLabels", {})
    check(match and all(labels.get(k) == v for k, v in match.items()),
          "Deployment: selector.matchLabels do not match the pod labels")
    containers = pod.get("containers", [])
    if not check(len(containers) == 1, "Deployment: expected one container"):
        return
    c = containers[0]
    args = c.get("args", [])
    check_flags_known("Deployment args", args, known_flags)
    flagfile = flags_of(args).get("flagfile")
    mounts = {m.get("name"): m.get("mountPath") for m in c.get("volumeMounts", [])}
    cm_volumes = [v for v in pod.get("volumes", [])
                  if v.get("configMap", {}).get("name") == configmap.get("metadata", {}).get("name")]
    check(cm_volumes and flagfile and mounts.get(cm_volumes[0]["name"]) and
          flagfile == os.path.join(mounts[cm_volumes[0]["name"]], "loopserve.flags"),
          "Deployment: --flagfile does not point at the mounted ConfigMap's loopserve.flags")
    check(container_port(c, "grpc") == grpc, "Deployment: containerPort grpc != ConfigMap --grpc_port %d" % grpc)
    check(container_port(c, "http") == http, "Deployment: containerPort http != ConfigMap --http_port %d" % http)
    check(container_port(c, "metrics") == metrics,
          "Deployment: containerPort metrics != ConfigMap --metrics_port %d" % metrics)
    for probe in ("startupProbe", "livenessProbe"):
        p = c.get(probe, {})
        check(p.get("grpc", {}).get("port") == grpc,
              "Deployment: %s must be a gRPC health probe on port %d" % (probe, grpc))
    # Readiness: /v2/health/ready on the HTTP port (it also reflects --unready_queue_depth), or
    # grpc.health.v1.
    ready = c.get("readinessProbe", {})
    get = ready.get("httpGet", {})
    check(ready.get("grpc", {}).get("port") == grpc or
          (get.get("path") == "/v2/health/ready" and get.get("port") in ("http", http)),
          "Deployment: readinessProbe must be GET /v2/health/ready on the http port or a gRPC "
          "health probe on port %d" % grpc)
    res = c.get("resources", {})
    for section in ("requests", "limits"):
        for r in ("cpu", "memory"):
            check(res.get(section, {}).get(r), "Deployment: resources.%s.%s missing" % (section, r))
    sec = pod.get("securityContext", {})
    check(sec.get("runAsNonRoot") is True and sec.get("runAsUser", 0) != 0,
          "Deployment: must run as non-root (runAsNonRoot, runAsUser != 0)")
    annotations = template.get("metadata", {}).get("annotations", {})
    check(annotations.get("prometheus.io/scrape") == "true", "Deployment: no prometheus.io/scrape")
    check(str(annotations.get("prometheus.io/port")) == str(metrics),
          "Deployment: prometheus.io/port != --metrics_port %d" % metrics)
    check(annotations.get("prometheus.io/path") == "/metrics", "Deployment: prometheus.io/path")
    exit_timeout = int(cm_flags.get("exit_timeout_seconds", 30))
    drain_delay = int(cm_flags.get("drain_delay_seconds", 0))
    check(pod.get("terminationGracePeriodSeconds", 30) > exit_timeout + drain_delay,
          "Deployment: terminationGracePeriodSeconds <= --drain_delay_seconds + "
          "--exit_timeout_seconds (%d + %d)" % (drain_delay, exit_timeout))
    ports["deployment_name"] = deployment.get("metadata", {}).get("name")
    workers = int(cm_flags.get("workers", 2))
    threads = int(cm_flags.get("intra_op_threads", 0))
    limit = str(res.get("limits", {}).get("cpu", "0"))
    cpus = float(limit[:-1]) / 1000 if limit.endswith("m") else float(limit)
    check(threads > 0 and workers * threads <= cpus,
          "ConfigMap: workers x intra_op_threads (%d x %d) must be set and fit the CPU limit %s"
          % (workers, threads, limit))

    sspec = service.get("spec", {})
    check(sspec.get("selector") and all(labels.get(k) == v for k, v in sspec["selector"].items()),
          "Service: selector does not match the Deployment's pods")
    for p in sspec.get("ports", []):
        target = p.get("targetPort")
        check(container_port(c, target) is not None if isinstance(target, str) else
              target in (http, grpc, metrics), "Service: targetPort %s is not a container port" % target)
        check(p.get("port") == {"http": http, "grpc": grpc, "metrics": metrics}.get(p.get("name"), p.get("port")),
              "Service: port %s does not match the server's %s port" % (p.get("port"), p.get("name")))

    hspec = hpa.get("spec", {})
    ref = hspec.get("scaleTargetRef", {})
    check(ref.get("kind") == "Deployment" and
          ref.get("name") == deployment.get("metadata", {}).get("name"),
          "HPA: scaleTargetRef is not the loopserve Deployment")
    check(1 <= hspec.get("minReplicas", 1) <= hspec.get("maxReplicas", 0),
          "HPA: needs 1 <= minReplicas <= maxReplicas")
    check(hspec.get("metrics"), "HPA: no metrics")

    kustomization = docs.get("deploy/k8s/kustomization.yaml", [{}])[0]
    listed = set(kustomization.get("resources", []))
    # deploy/k8s/autoscaling/ holds add-ons that need CRDs or Helm charts (PrometheusRule, KEDA,
    # prometheus-adapter values): applied on their own, not part of the base.
    on_disk = {os.path.basename(p) for p in docs
               if os.path.dirname(p) == "deploy/k8s"} - {"kustomization.yaml"}
    check(listed == on_disk, "kustomization.yaml lists %s, deploy/k8s has %s" % (sorted(listed), sorted(on_disk)))


def check_kserve(docs, known_flags, ports):
    runtime = one_kind(docs, "ServingRuntime")
    isvc = one_kind(docs, "InferenceService")
    spec = runtime.get("spec", {})
    check(runtime.get("apiVersion") == "serving.kserve.io/v1alpha1", "ServingRuntime: apiVersion")
    check("grpc-v2" in spec.get("protocolVersions", []), "ServingRuntime: protocolVersions lacks grpc-v2")
    check("v2" in spec.get("protocolVersions", []), "ServingRuntime: protocolVersions lacks v2 (REST)")
    formats = {f.get("name") for f in spec.get("supportedModelFormats", [])}
    check("onnx" in formats, "ServingRuntime: supportedModelFormats lacks onnx")
    containers = spec.get("containers", [])
    if not check(len(containers) == 1 and containers[0].get("name") == "kserve-container",
                 "ServingRuntime: expected one container named kserve-container"):
        return
    c = containers[0]
    args = c.get("args", [])
    check_flags_known("ServingRuntime args", args, known_flags)
    f = flags_of(args)
    check(f.get("model_repository") == "/mnt/models",
          "ServingRuntime: --model_repository must be /mnt/models (KServe's storage initializer)")
    grpc, metrics = int(f.get("grpc_port", 8001)), int(f.get("metrics_port", 8002))
    http = int(f.get("http_port", 8000))
    check(container_port(c, "http1") == http,
          "ServingRuntime: the http1 containerPort != --http_port %d" % http)
    annotations = spec.get("annotations", {})
    check(str(annotations.get("prometheus.kserve.io/port")) == str(metrics),
          "ServingRuntime: prometheus.kserve.io/port != --metrics_port %d" % metrics)
    check(annotations.get("prometheus.kserve.io/path") == "/metrics", "ServingRuntime: metrics path")
    ports["kserve_args"] = args

    check(isvc.get("apiVersion") == "serving.kserve.io/v1beta1", "InferenceService: apiVersion")
    model = isvc.get("spec", {}).get("predictor", {}).get("model", {})
    check(model.get("runtime") == runtime.get("metadata", {}).get("name"),
          "InferenceService: runtime is not the loopserve ServingRuntime")
    check(model.get("modelFormat", {}).get("name") in formats, "InferenceService: modelFormat")
    check(model.get("protocolVersion") == "grpc-v2", "InferenceService: protocolVersion")
    check(model.get("storageUri"), "InferenceService: storageUri")
    isvc_ports = {p.get("name"): p.get("containerPort") for p in model.get("ports", [])}
    check(isvc_ports.get("h2c") == grpc, "InferenceService: the h2c port != --grpc_port %d" % grpc)


def quantity(text):
    """A Kubernetes quantity ("1500m", "2", "0.1") as a float."""
    text = str(text)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def recorded_names(rules):
    return {r.get("record") for g in rules.get("groups", []) for r in g.get("rules", [])
            if r.get("record")}


def check_autoscaling(root, docs, ports):
    """The queue-time autoscaling artefacts agree: the recording rules (plain Prometheus file and
    PrometheusRule), prometheus-adapter's rules, the HPA, the KEDA ScaledObject and the KServe
    InferenceService's autoscaling query."""
    rules_rel = "deploy/prometheus/loopserve-rules.yml"
    rules = (docs.get(rules_rel) or [{}])[0]
    recorded = recorded_names(rules)
    check({"loopserve:queue_compute_ratio:rate1m",
           "loopserve:queue_seconds_per_request:rate1m"} <= recorded,
          "%s: records %s, expected the queue/compute ratio and queue time per request" % (
              rules_rel, sorted(recorded)))
    ports["rule_metrics"] = sorted({m for g in rules.get("groups", []) for r in g.get("rules", [])
                                    for m in re.findall(r"\bloopserve_[a-z0-9_]+", r.get("expr", ""))})
    scrape = (docs.get("deploy/prometheus/prometheus.yml") or [{}])[0]
    check("loopserve-rules.yml" in scrape.get("rule_files", []),
          "prometheus.yml: rule_files does not load loopserve-rules.yml")
    compose_prom = (docs.get("deploy/compose.yaml") or [{}])[0].get("services", {}).get("prometheus", {})
    check(any(v.startswith("./prometheus/loopserve-rules.yml:/etc/prometheus/loopserve-rules.yml")
              for v in compose_prom.get("volumes", [])),
          "compose.yaml: prometheus does not mount loopserve-rules.yml beside prometheus.yml")
    operator_rules = find_kind(docs, "PrometheusRule")
    check(len(operator_rules) == 1 and operator_rules[0][1].get("spec") == rules,
          "the PrometheusRule under deploy/ must hold exactly the groups of %s" % rules_rel)

    adapter = (docs.get("deploy/k8s/autoscaling/prometheus-adapter-values.yaml") or [{}])[0]
    served = {}
    for rule in adapter.get("rules", {}).get("custom", []):
        series = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)", rule.get("seriesQuery", ""))
        name = series.group(1) if series else None
        check(name in recorded, "prometheus-adapter values: seriesQuery %r is not a recorded series"
              % rule.get("seriesQuery"))
        overrides = rule.get("resources", {}).get("overrides", {})
        check(overrides.get("pod", {}).get("resource") == "pod" and
              overrides.get("namespace", {}).get("resource") == "namespace",
              "prometheus-adapter values: %s is not mapped to pods and namespaces" % name)
        served[rule.get("name", {}).get("as")] = name

    hpa = one_kind(docs, "HorizontalPodAutoscaler")
    spec = hpa.get("spec", {})
    deployment = ports.get("deployment_name")
    check(spec.get("scaleTargetRef", {}).get("name") == deployment,
          "HPA: scaleTargetRef is not the Deployment %s" % deployment)
    targets = {}
    for m in spec.get("metrics", []):
        check(m.get("type") == "Pods", "HPA: scales on %s; it must scale on the queue (Pods "
              "metrics served by prometheus-adapter), not CPU" % m.get("type"))
        name = m.get("pods", {}).get("metric", {}).get("name")
        target = m.get("pods", {}).get("target", {})
        check(name in served, "HPA: metric %s is not one prometheus-adapter serves (%s)" % (
            name, sorted(k for k in served if k)))
        check(target.get("type") == "AverageValue" and target.get("averageValue") is not None,
              "HPA: metric %s needs an AverageValue target" % name)
        if name in served and target.get("averageValue") is not None:
            targets[served[name]] = quantity(target["averageValue"])
    check(targets, "HPA: no queue metric")

    scaled = find_kind(docs, "ScaledObject")
    check(len(scaled) == 1, "expected one KEDA ScaledObject under deploy/, found %d" % len(scaled))
    for _, so in scaled:
        check(so.get("spec", {}).get("scaleTargetRef", {}).get("name") == deployment,
              "ScaledObject: scaleTargetRef is not the Deployment %s" % deployment)
        seen = set()
        for t in so.get("spec", {}).get("triggers", []):
            meta = t.get("metadata", {})
            used = [n for n in recorded if n in meta.get("query", "")]
            check(t.get("type") == "prometheus" and len(used) == 1,
                  "ScaledObject: trigger %r must query one recorded series" % meta.get("query"))
            for n in used:
                seen.add(n)
                check(n not in targets or abs(quantity(meta.get("threshold", "nan")) - targets[n]) < 1e-9,
                      "ScaledObject: threshold %s for %s differs from the HPA's %s" % (
                          meta.get("threshold"), n, targets.get(n)))
        check(seen == set(targets), "ScaledObject scales on %s, the HPA on %s" % (
            sorted(seen), sorted(targets)))

    isvc = one_kind(docs, "InferenceService")
    annotations = isvc.get("metadata", {}).get("annotations", {})
    predictor = isvc.get("spec", {}).get("predictor", {})
    if annotations.get("serving.kserve.io/autoscalerClass") == "keda":
        check(annotations.get("serving.kserve.io/deploymentMode") in ("RawDeployment", "Standard"),
              "InferenceService: KEDA autoscaling needs the raw (Standard) deployment mode")
    metrics = predictor.get("autoScaling", {}).get("metrics", [])
    check(metrics, "InferenceService: no autoScaling metrics (it must scale on queue time)")
    for m in metrics:
        metric = m.get("external", {}).get("metric", {})
        used = [n for n in recorded if n in metric.get("query", "")]
        check(m.get("type") == "External" and metric.get("backend") == "prometheus" and used,
              "InferenceService: autoScaling metric %r must query a recorded series" % metric)
        target = m.get("external", {}).get("target", {})
        for n in used:
            check(n not in targets or abs(quantity(target.get("value", "nan")) - targets[n]) < 1e-9,
                  "InferenceService: target %s for %s differs from the HPA's %s" % (
                      target.get("value"), n, targets.get(n)))


def check_kustomize(root):
    """`kubectl kustomize deploy/k8s` renders every resource the kustomization lists."""
    kubectl = shutil.which("kubectl")
    if not kubectl:
        print("note: no kubectl; `kubectl kustomize deploy/k8s` not checked")
        return
    r = subprocess.run([kubectl, "kustomize", os.path.join(root, "deploy", "k8s")],
                       capture_output=True, text=True, timeout=60)
    if not check(r.returncode == 0, "kubectl kustomize deploy/k8s: %s" % r.stderr.strip()):
        return
    rendered = {d.get("kind") for d in yaml.safe_load_all(r.stdout) if d}
    check({"ConfigMap", "Deployment", "Service", "HorizontalPodAutoscaler"} <= rendered,
          "kubectl kustomize deploy/k8s renders %s" % sorted(rendered))


def dashboard_queries(dashboard):
    """Every PromQL expression in the dashboard: panel targets and templating queries."""
    exprs = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                if t.get("expr"):
                    exprs.append((p.get("title"), t["expr"]))
            walk(p.get("panels", []))

    walk(dashboard.get("panels", []))
    for v in dashboard.get("templating", {}).get("list", []):
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        if v.get("type") == "query" and q:
            m = re.match(r"^label_values\((.*),\s*\w+\)$", q)
            exprs.append(("variable " + v["name"], m.group(1) if m else q))
    return exprs


def check_dashboard(docs, ports):
    dashboards = {p: d[0] for p, d in docs.items() if p.startswith("deploy/grafana/dashboards/")}
    check(dashboards, "no Grafana dashboard in deploy/grafana/dashboards/")
    for path, dash in dashboards.items():
        check(dash.get("uid") and dash.get("title") and dash.get("panels"),
              "%s: uid, title and panels are required" % path)
        exprs = dashboard_queries(dash)
        names = {m for _, e in exprs for m in re.findall(r"\bloopserve_[a-z0-9_]+", e)}
        bases = {re.sub(r"_(bucket|sum|count)$", "", n) for n in names}
        missing = REQUIRED_DASHBOARD_METRICS - bases - names
        check(not missing, "%s: no panel shows %s" % (path, sorted(missing)))
        ds_vars = [v for v in dash.get("templating", {}).get("list", []) if v.get("type") == "datasource"]
        check(ds_vars and ds_vars[0].get("current", {}).get("value") == ports.get("grafana_datasource_uid"),
              "%s: the datasource variable's default is not the provisioned datasource uid" % path)
        ids = [p.get("id") for p in dash.get("panels", [])]
        check(len(ids) == len(set(ids)), "%s: duplicate panel ids" % path)


def run_static(args):
    root = args.repo_root
    docs = parse_all(root)
    known = loopserve_flags(args.loopserve)
    known_loopctl = loopctl_flags(args.loopctl)
    ports = {}
    check_dockerfile(root, known, ports)
    check_compose(docs, known, known_loopctl, ports)
    check_kubernetes(docs, known, ports)
    check_kserve(docs, known, ports)
    check_autoscaling(root, docs, ports)
    check_kustomize(root)
    check_dashboard(docs, ports)
    check(ports.get("docker") == ports.get("compose"),
          "Dockerfile CMD ports %s differ from compose ports %s" % (ports.get("docker"), ports.get("compose")))
    with open(os.path.join(root, "deploy", "dev.sh")) as f:
        dev = f.read()
    check("8001" in dev and "8002" in dev, "deploy/dev.sh does not default to 8001/8002")
    lists = install_deps_lists(root)
    for needed in ("prometheus", "python3-yaml", "haproxy"):
        check(needed in lists["TEST_PACKAGES"], "install_deps.sh: TEST_PACKAGES lacks %s" % needed)
    owner = check_runtime_packages([args.loopserve, args.loopctl], lists["RUNTIME_PACKAGES"])
    if args.verbose:
        for path, pkg in sorted(owner.items()):
            print("runtime library %s <- %s" % (path, pkg))
    if args.promtool:
        r = subprocess.run([args.promtool, "check", "config",
                            os.path.join(root, "deploy", "prometheus", "prometheus.yml")],
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, "promtool check config: %s%s" % (r.stdout, r.stderr))
        r = subprocess.run([args.promtool, "check", "rules",
                            os.path.join(root, "deploy", "prometheus", "loopserve-rules.yml")],
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, "promtool check rules: %s%s" % (r.stdout, r.stderr))
    return docs, ports


# ---------------------------------------------------------------------------------------------
# Running the real binaries


# How long loopserve may take to start, and to exit after SIGTERM, before the test gives up: a
# hang bound, not a speed claim. Quiet, both take < 0.1 s; on a starved machine (a loaded CI box
# runs the suite under nice, beside normal-priority work) every phase slows alike, ~100-300x
# (measured: start 1.7-17 s, exit 0.2-11 s beside 3 busy loops at nice 19). The exit bound must
# also exceed what the server may take by contract: the artefacts pass --exit_timeout_seconds=30,
# and the server exits at most that + 1 s after SIGTERM (server/OPERATIONS.md).
BOUND_SECONDS = 60


class Loopserve:
    """loopserve on 127.0.0.1 with kernel-picked ports; `flags` first, our overrides last."""

    def __init__(self, binary, models, flags, work):
        self.log_path = os.path.join(work, "loopserve-%d.log" % id(self))
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [binary] + list(flags) + ["--model_repository=" + models, "--address=127.0.0.1",
                                      "--grpc_port=0", "--http_port=0", "--metrics_port=0"],
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.grpc_port = self.metrics_port = None
        lines = []
        timer = threading.Timer(BOUND_SECONDS, self.proc.kill)  # bounded start-up
        timer.start()
        try:
            for line in self.proc.stdout:
                lines.append(line)
                m = re.match(r"loopserve: (grpc|metrics) listening on .*:(\d+)$", line.strip())
                if m and m.group(1) == "grpc":
                    self.grpc_port = int(m.group(2))
                elif m:
                    self.metrics_port = int(m.group(2))
                if self.grpc_port and self.metrics_port:
                    break
        finally:
            timer.cancel()
        # Keep draining stdout so the server never blocks on a full pipe.
        threading.Thread(target=lambda: [None for _ in self.proc.stdout], daemon=True).start()
        if not (self.grpc_port and self.metrics_port):
            self.stop()
            raise RuntimeError("loopserve %s did not start: %s %s" % (
                " ".join(flags), "".join(lines), open(self.log_path).read()))

    def stop(self):
        """SIGTERM, then the exit status (None when it had to be killed: the log tail says where
        it was; `exit_seconds` how long it took)."""
        self.exit_seconds = 0.0
        if self.proc.poll() is None:
            start = time.monotonic()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=BOUND_SECONDS)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self.log.close()
                self.exit_seconds = time.monotonic() - start
                sys.stderr.write("loopserve still running %d s after SIGTERM; its log ends:\n%s\n" % (
                    BOUND_SECONDS, "".join(open(self.log_path).readlines()[-15:])))
                return None
            self.exit_seconds = time.monotonic() - start
        self.log.close()
        return self.proc.returncode


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def scrape_samples(text):
    """{sample name: set of label names} of a Prometheus text exposition."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s", line)
        if m:
            labels = set(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)=\"", m.group(3) or ""))
            samples.setdefault(m.group(1), set()).update(labels)
    return samples


def without_overridden(flags):
    """Drops the flags Loopserve sets itself (repository, address, ports)."""
    drop = {"model_repository", "address", "grpc_port", "metrics_port"}
    return [f for f in flags if flags_of([f]).keys().isdisjoint(drop)]


def make_models(root, work):
    models = os.path.join(work, "models")
    subprocess.run(["/usr/bin/python3", os.path.join(root, "deploy", "make_example_models.py"), models],
                   check=True, timeout=120)
    return models


def run_metrics(args, docs, ports, work):
    models = make_models(args.repo_root, work)
    # Every command line the artefacts give loopserve must start it (real absl flag parsing).
    flagfile = os.path.join(work, "loopserve.flags")
    with open(flagfile, "w") as f:
        f.write("\n".join(ports.get("configmap_flags", [])) + "\n")
    command_lines = {
        "Dockerfile CMD": without_overridden(ports.get("docker_cmd", [])),
        "compose.yaml": without_overridden(ports.get("compose_command", [])),
        "ServingRuntime": without_overridden(ports.get("kserve_args", [])),
    }
    for where, flags in command_lines.items():
        try:
            server = Loopserve(args.loopserve, models, flags, work)
            code = server.stop()
            check(code == 0, "%s flags: loopserve did not exit 0 on SIGTERM (%s after %.1f s)" % (
                where, "killed" if code is None else "status %d" % code, server.exit_seconds))
        except RuntimeError as e:
            check(False, "%s flags do not start loopserve: %s" % (where, e))
    # The ConfigMap flagfile: the Deployment's way, and the server whose /metrics we check.
    try:
        server = Loopserve(args.loopserve, models, ["--flagfile=" + flagfile], work)
    except RuntimeError as e:
        check(False, "the ConfigMap flagfile does not start loopserve: %s" % e)
        return
    try:
        text = http_get("http://127.0.0.1:%d/metrics" % server.metrics_port)
    finally:
        code = server.stop()
        check(code == 0, "loopserve did not exit 0 on SIGTERM (%s after %.1f s)" % (
            "killed" if code is None else "status %d" % code, server.exit_seconds))
    samples = scrape_samples(text)
    check(any(n.startswith("loopserve_") for n in samples), "/metrics has no loopserve_ samples")
    for name in ports.get("rule_metrics", []):
        check(name in samples, "deploy/prometheus/loopserve-rules.yml: %s is not in /metrics" % name)
    for path, d in docs.items():
        if not path.startswith("deploy/grafana/dashboards/"):
            continue
        for title, expr in dashboard_queries(d[0]):
            for name in re.findall(r"\bloopserve_[a-z0-9_]+", expr):
                if not check(name in samples, "%s, panel '%s': %s is not in /metrics" % (path, title, name)):
                    continue
                for selector in re.findall(r"\b%s\{([^}]*)\}" % name, expr):
                    for label in re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", selector):
                        check(label in samples[name] or label == "le" and name.endswith("_bucket"),
                              "%s, panel '%s': %s has no label '%s' in /metrics" % (path, title, name, label))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prom_query(port, expr):
    url = "http://127.0.0.1:%d/api/v1/query?%s" % (port, urllib.parse.urlencode({"query": expr}))
    try:
        return json.loads(http_get(url))
    except urllib.error.HTTPError as e:  # 400 for a bad query, with a JSON body
        return json.loads(e.read().decode())


def substitute(expr):
    for var, value in (("$model", ".*"), ("$version", ".*"), ("$loop", ".*"), ("$protocol", ".*"),
                       ("$__rate_interval", "1m"), ("$__interval", "5s")):
        expr = expr.replace(var, value)
    return expr


def run_promql(args, docs, work):
    models = make_models(args.repo_root, work)
    server = Loopserve(args.loopserve, models, ["--workers=2", "--max_loop_iterations=100000"], work)
    prom = None
    try:
        port = free_port()
        config = os.path.join(work, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: loopserve\n    static_configs:\n"
                    "      - targets: ['127.0.0.1:%d']\n" % server.metrics_port)
        prom_log = open(os.path.join(work, "prometheus.log"), "w")
        prom = subprocess.Popen([args.prometheus, "--config.file=" + config,
                                 "--storage.tsdb.path=" + os.path.join(work, "tsdb"),
                                 "--web.listen-address=127.0.0.1:%d" % port],
                                stdout=prom_log, stderr=subprocess.STDOUT)
        addr = "--addr=127.0.0.1:%d" % server.grpc_port
        # Prometheus answers 503 (not JSON) until it has started: wait for /-/ready first.
        ready_by = time.monotonic() + 60
        while time.monotonic() < ready_by:
            try:
                http_get("http://127.0.0.1:%d/-/ready" % port)
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.2)

        def loopctl(*a):
            return subprocess.run([args.loopctl, addr] + list(a), capture_output=True, text=True,
                                  timeout=60)

        queries = [(t, substitute(e)) for p, d in docs.items()
                   if p.startswith("deploy/grafana/dashboards/") for t, e in dashboard_queries(d[0])]
        deadline = time.monotonic() + 45
        empty = {}
        while time.monotonic() < deadline:
            # Traffic every round, so rate() windows always hold fresh samples.
            r = loopctl("perf", "rnn", "--input=M:INT64::8", "--shape=h0:2,4", "--requests=30",
                        "--warmup=0", "--concurrency=2")
            check(r.returncode == 0, "loopctl perf failed: %s" % r.stderr)
            loopctl("perf", "nested", "--input=M:INT64::3", "--input=N:INT64::4", "--requests=10",
                    "--warmup=0")
            loopctl("infer", "endless", "--input=x:INT64:1:0", "--timeout_ms=50")  # deadline hit
            empty = {}
            for title, expr in queries:
                answer = prom_query(port, expr)
                if answer.get("status") != "success":
                    check(False, "panel '%s': Prometheus rejects %r: %s" % (title, expr, answer.get("error")))
                    return
                if not answer["data"]["result"]:
                    empty[title + ": " + expr] = True
            if not empty:
                break
            time.sleep(1)
        check(not empty, "dashboard queries still empty after 45 s of traffic: %s" % sorted(empty))
    finally:
        if prom is not None:
            prom.terminate()
            try:
                prom.wait(timeout=20)
            except subprocess.TimeoutExpired:
                prom.kill()
                prom.wait()
        server.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repo_root", required=True)
    parser.add_argument("--loopserve", required=True)
    parser.add_argument("--loopctl", required=True)
    parser.add_argument("--prometheus", default=shutil.which("prometheus"))
    parser.add_argument("--promtool", default=shutil.which("promtool"))
    parser.add_argument("--only", choices=["static", "metrics", "promql"])
    parser.add_argument("--verbose", action="store_true", help="print each library's package")
    args = parser.parse_args()

    docs, ports = run_static(args)
    # The later stages use what the static stage read; with --only, only the chosen stage's
    # failures count, so each CTest reports its own subject.
    if args.only not in (None, "static"):
        del FAILURES[:]
    if args.only != "static":
        work = tempfile.mkdtemp(prefix="loopserve_deploy_")
        try:
            if args.only in (None, "metrics"):
                run_metrics(args, docs, ports, work)
            if args.only in (None, "promql"):
                if check(args.prometheus, "promql: no prometheus binary (apt-get install prometheus)"):
                    run_promql(args, docs, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    for f in FAILURES:
        print("FAIL: " + f)
    print("%s: %d failure(s)" % (args.only or "all", len(FAILURES)))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
