"""What the Python integration tests share: stubs generated from our protos, and a loopserve
process on kernel-picked ports."""

import os
import subprocess
import sys
import threading


def make_stubs(protoc, repo_root, work, protos):
    """Generates Python messages and gRPC stubs for `protos` (paths under repo_root, e.g.
    "proto/grpc_service.proto") into `work` with protoc and Debian's grpc_python_plugin, and puts
    `work` on sys.path (import them as `from proto import grpc_service_pb2`)."""
    os.makedirs(work, exist_ok=True)
    subprocess.run([protoc, "-I", repo_root, "--python_out=" + work, "--grpc_python_out=" + work,
                    "--plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin"] +
                   [os.path.join(repo_root, p) for p in protos], check=True)
    sys.path.insert(0, work)


def start_server(binary, flags, kinds=("grpc", "metrics"), timeout=60):
    """Starts `binary --address=127.0.0.1 --grpc_port=0 ...flags` and reads the ports it prints
    ("loopserve: <kind> listening on <address>:<port>") for every kind in `kinds`. Returns
    (process, {kind: port}); kills the process and raises if they do not come within `timeout`."""
    proc = subprocess.Popen([binary, "--address=127.0.0.1", "--grpc_port=0", "--http_port=0"] + list(flags),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    ports = {}
    timer = threading.Timer(timeout, proc.kill)  # bounded wait for the port lines
    timer.start()
    for line in proc.stdout:
        for kind in kinds:
            prefix = "loopserve: %s listening on " % kind
            if line.startswith(prefix):
                ports[kind] = int(line.strip().rsplit(":", 1)[1])
        if len(ports) == len(kinds):
            break
    timer.cancel()
    if len(ports) != len(kinds):
        proc.kill()
        raise RuntimeError("loopserve did not report its ports")
    return proc, ports
