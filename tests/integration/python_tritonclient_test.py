#!/usr/bin/python3
"""Triton's own Python client (../shared/tritonclient) against loopserve, as Triton users run it.

Usage: /usr/bin/python3 python_tritonclient_test.py --loopserve=BIN --repo_root=DIR --work=DIR
       --tritonclient=DIR --part=examples|checks

Writes Triton's QA models (deploy/make_example_models.py --triton_qa: simple, simple_string,
simple_identity, simple_int8) into --work, starts loopserve with Triton's dashed flags, and
  - (--part=examples) runs Triton's example scripts unmodified (gRPC and HTTP; those needing CUDA, a decoupled or
    a sequence model, or a server named "triton" are listed in README's compatibility section);
  - (--part=checks) checks Triton's answers where clients depend on them: ModelReady false for an unknown model,
    the texts and codes for an unknown model, a bad version string and mixed raw/typed contents,
    the extension list, the statistics fields;
  - system shared memory: inference through regions over gRPC and HTTP (expected outputs are the
    model's definition, a + b and a - b, computed by numpy), and every bad use: an unknown key, a
    malformed key, a region past its segment, a tensor larger than its region, an offset past the
    end, an unregistered region, a segment truncated after registration, an output region too
    small, another user's segment; CUDA shared memory answers UNIMPLEMENTED naming CPU-only. The
    server stays up throughout.
"""

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loopserve_py import check, Checks, start_server  # noqa: E402

# gRPC and HTTP examples that need nothing but simple, simple_string, simple_identity and
# simple_int8 (run with -u <address>).
GRPC_EXAMPLES = [
    "simple_grpc_infer_client.py", "simple_grpc_async_infer_client.py",
    "simple_grpc_aio_infer_client.py", "simple_grpc_custom_args_client.py",
    "simple_grpc_keepalive_client.py", "simple_grpc_string_infer_client.py",
    "simple_grpc_shm_client.py", "simple_grpc_shm_string_client.py",
    "grpc_explicit_int_content_client.py", "grpc_explicit_byte_content_client.py",
    "grpc_explicit_int8_content_client.py",
]
HTTP_EXAMPLES = [
    "simple_http_infer_client.py", "simple_http_async_infer_client.py",
    "simple_http_aio_infer_client.py", "simple_http_string_infer_client.py",
    "simple_http_shm_client.py", "simple_http_shm_string_client.py",
]


def run_example(examples_dir, script, args, env):
    proc = subprocess.run([sys.executable, os.path.join(examples_dir, script)] + args, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    return proc.returncode, proc.stdout


def expect_error(call, status, text):
    """Runs `call`; it must raise InferenceServerException with `status` and `text` in it."""
    from tritonclient.utils import InferenceServerException
    try:
        call()
    except InferenceServerException as e:
        check(status in str(e.status()) and text in e.message(),
              "want %s / %r, got %s / %r" % (status, text, e.status(), e.message()))
        return e.message()
    raise AssertionError("no error; want %s / %r" % (status, text))


def simple_inputs(client_module, a, b, shm_region=None):
    inputs = [client_module.InferInput("INPUT0", [1, 16], "INT32"),
              client_module.InferInput("INPUT1", [1, 16], "INT32")]
    if shm_region is None:
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
    else:
        inputs[0].set_shared_memory(shm_region, 64)
        inputs[1].set_shared_memory(shm_region, 64, offset=64)
    return inputs


def check_answers(grpc_url, http_url):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from tritonclient.grpc import service_pb2, service_pb2_grpc
    import grpc

    g = grpcclient.InferenceServerClient(url=grpc_url)
    h = httpclient.InferenceServerClient(url=http_url)
    # Readiness polling of a model that is not there: false, no exception.
    check(g.is_model_ready("nope") is False, "gRPC ModelReady of an unknown model")
    check(h.is_model_ready("nope") is False, "HTTP ready of an unknown model")
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    for client, module in ((g, grpcclient), (h, httpclient)):
        expect_error(lambda: client.infer("nope", simple_inputs(module, a, b)), "NOT_FOUND"
                     if module is grpcclient else "404",
                     "Request for unknown model: 'nope' is not found")
        expect_error(lambda: client.get_model_metadata("simple", "abc"),
                     "INVALID_ARGUMENT" if module is grpcclient else "400",
                     "failed to get model version from specified version string 'abc'")
    # Mixed raw and typed contents (a raw request built by hand).
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(grpc_url))
    request = service_pb2.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        t = request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        t.contents.int_contents.extend(range(16))
    request.raw_input_contents.extend([a.tobytes(), a.tobytes()])
    try:
        stub.ModelInfer(request, timeout=30)
        raise AssertionError("mixed contents accepted")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and
              "contents field must not be specified when using raw_input_contents for 'INPUT0' "
              "for model 'simple'" in e.details(), e.details())
    # Extensions and statistics.
    extensions = set(g.get_server_metadata().extensions)
    check({"parameters", "system_shared_memory", "binary_tensor_data", "statistics",
           "model_repository", "model_configuration"} <= extensions, extensions)
    check(set(h.get_server_metadata()["extensions"]) == extensions, "same extensions over HTTP")
    g.infer("simple", simple_inputs(grpcclient, a, b))
    stats = h.get_inference_statistics("simple")["model_stats"][0]
    check("response_stats" in stats and stats["response_stats"] == {}, stats)
    check("memory_usage" in stats and stats["memory_usage"] == [], stats)
    infer_stats = stats["inference_stats"]
    check(infer_stats["cache_hit"] == {"count": 0, "ns": 0} and
          infer_stats["cache_miss"] == {"count": 0, "ns": 0}, infer_stats)
    check(infer_stats["success"]["count"] >= 1, infer_stats)
    grpc_stats = g.get_inference_statistics("simple").model_stats[0]
    check(grpc_stats.inference_stats.HasField("cache_hit") and
          grpc_stats.inference_stats.cache_hit.count == 0, grpc_stats)
    print("ok: Triton's answers (ready, error texts and codes, extensions, statistics)")


def check_logging(grpc_url, http_url, log_dir):
    """Triton's logging extension: read and change the settings at run time, a log file only by
    name inside --log_dir."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    g = grpcclient.InferenceServerClient(url=grpc_url)
    h = httpclient.InferenceServerClient(url=http_url)
    settings = h.get_log_settings()
    check(settings == {"log_info": True, "log_warning": True, "log_error": True,
                       "log_verbose_level": 0, "log_format": "default", "log_file": ""},
          settings)
    updated = g.update_log_settings({"log_verbose_level": 1, "log_format": "ISO8601"},
                                    as_json=True)["settings"]
    check(updated["log_verbose_level"]["uint32_param"] == 1 and
          updated["log_format"]["string_param"] == "ISO8601", updated)
    check(h.get_log_settings()["log_verbose_level"] == 1, "the change is seen over REST")
    h.update_log_settings({"log_file": "server.log", "log_format": "default"})
    try:
        g.get_model_metadata("logged_nope")  # a failed call: a debug line at verbose level 1
    except Exception:  # noqa: BLE001 (the error itself is checked elsewhere)
        pass
    h.update_log_settings({"log_file": "", "log_verbose_level": 0})
    with open(os.path.join(log_dir, "server.log")) as f:
        text = f.read()
    check(" D ModelMetadata failed: NOT_FOUND: Request for unknown model: 'logged_nope'" in text,
          text[:500])
    code = "400"
    for bad, text in (({"log_file": "../escape.log"}, "plain file name"),
                      ({"log_file": "/etc/passwd"}, "plain file name"),
                      ({"log_format": "xml"}, "log_format must be"),
                      ({"log_colour": True}, "unknown log setting"),
                      ({"log_info": "yes"}, "must be a bool")):
        expect_error(lambda: h.update_log_settings(bad), code, text)
    expect_error(lambda: g.update_log_settings({"log_file": "../x"}), "INVALID_ARGUMENT",
                 "plain file name")
    check(not os.path.exists(os.path.join(os.path.dirname(log_dir), "escape.log")), "escaped")
    check(h.get_log_settings()["log_file"] == "", "unchanged after the refused settings")
    print("ok: logging settings at run time")

    # Trace settings: readable as Triton's defaults; TENSORS is refused.
    trace = h.get_trace_settings()
    check(trace["trace_level"] == ["OFF"] and trace["trace_rate"] == "1000" and
          trace["trace_count"] == "-1", trace)
    check(g.get_trace_settings(as_json=True)["settings"]["trace_level"]["value"] == ["OFF"],
          "gRPC trace settings")
    h.update_trace_settings(settings={"trace_rate": "10"})
    check(g.get_trace_settings(as_json=True)["settings"]["trace_rate"]["value"] == ["10"], "rate")
    h.update_trace_settings(settings={"trace_rate": None})
    check(h.get_trace_settings()["trace_rate"] == "1000", "reset to the default")
    expect_error(lambda: h.update_trace_settings(settings={"trace_level": ["TENSORS"]}),
                 "501", "does not dump tensors")
    expect_error(lambda: g.update_trace_settings(settings={"trace_level": ["TENSORS"]}),
                 "UNIMPLEMENTED", "does not dump tensors")
    expect_error(lambda: h.update_trace_settings(settings={"trace_rate": "-3"}), "400",
                 "positive integer")
    check(h.get_trace_settings(model_name="simple")["trace_level"] == ["OFF"], "per model")
    print("ok: trace settings (the files: python_trace_test.py)")


def check_shared_memory(grpc_url, http_url, work):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    import tritonclient.utils.shared_memory as shm

    g = grpcclient.InferenceServerClient(url=grpc_url)
    h = httpclient.InferenceServerClient(url=http_url)
    g.unregister_system_shared_memory()
    tag = str(os.getpid())
    a = np.arange(16, dtype=np.int32).reshape(1, 16) - 5
    b = np.arange(16, dtype=np.int32).reshape(1, 16) * 7
    in_key, out_key = "/ls_in_" + tag, "/ls_out_" + tag
    ip = shm.create_shared_memory_region("in", in_key, 128)
    op = shm.create_shared_memory_region("out", out_key, 128)
    handles = [ip, op]
    try:
        shm.set_shared_memory_region(ip, [a])
        shm.set_shared_memory_region(ip, [b], offset=64)
        for client, module in ((g, grpcclient), (h, httpclient)):
            client.register_system_shared_memory("in", in_key, 128)
            client.register_system_shared_memory("out", out_key, 128)
            outputs = [module.InferRequestedOutput("OUTPUT0"),
                       module.InferRequestedOutput("OUTPUT1")]
            outputs[0].set_shared_memory("out", 64)
            outputs[1].set_shared_memory("out", 64, offset=64)
            result = client.infer("simple", simple_inputs(module, a, b, "in"), outputs=outputs)
            check(result.get_output("OUTPUT0") is not None, "OUTPUT0 in the response")
            s = shm.get_contents_as_numpy(op, np.int32, [1, 16])
            d = shm.get_contents_as_numpy(op, np.int32, [1, 16], offset=64)
            check(np.array_equal(s, a + b) and np.array_equal(d, a - b), (s, d))
            status = client.get_system_shared_memory_status()
            names = ([r.name for r in status.regions.values()] if module is grpcclient
                     else [r["name"] for r in status])
            check(sorted(names) == ["in", "out"], names)
            # Inputs in shared memory, outputs in the response.
            result = client.infer("simple", simple_inputs(module, a, b, "in"))
            check(np.array_equal(result.as_numpy("OUTPUT0"), a + b), "mixed shm / response")
            shm.set_shared_memory_region(op, [np.zeros((1, 32), np.int32)])

            code = "INVALID_ARGUMENT" if module is grpcclient else "400"
            # A tensor larger than its region, an offset past the end.
            bad = simple_inputs(module, a, b, "in")
            bad[1].set_shared_memory("in", 64, offset=100)
            expect_error(lambda: client.infer("simple", bad), code, "runs past the end of "
                         "shared memory region 'in'")
            bad[1].set_shared_memory("in", 64, offset=1 << 40)
            expect_error(lambda: client.infer("simple", bad), code, "runs past the end")
            bad[1].set_shared_memory("in", 256)
            expect_error(lambda: client.infer("simple", bad), code, "runs past the end")
            # The region holds fewer bytes than the shape needs.
            bad[1].set_shared_memory("in", 32)
            expect_error(lambda: client.infer("simple", bad), code, "INPUT1")
            # An output region too small for the result.
            small = [module.InferRequestedOutput("OUTPUT0")]
            small[0].set_shared_memory("out", 16)
            expect_error(lambda: client.infer("simple", simple_inputs(module, a, b, "in"),
                                              outputs=small), code,
                         "should be at least 64 bytes to hold the results")
            # Registration errors.
            expect_error(lambda: client.register_system_shared_memory("in", in_key, 128),
                         "ALREADY_EXISTS" if module is grpcclient else "409", "already in manager")
            expect_error(lambda: client.register_system_shared_memory("x", "/ls_missing_" + tag,
                                                                      16),
                         "NOT_FOUND" if module is grpcclient else "404",
                         "Unable to open shared memory region")
            expect_error(lambda: client.register_system_shared_memory("x", "/../etc/passwd", 16),
                         code, "is not a POSIX shared memory name")
            expect_error(lambda: client.register_system_shared_memory("x", in_key, 64, offset=100),
                         code, "runs past the end of segment")
            # Unregistered: the next request that names it fails; unregistering is idempotent.
            client.unregister_system_shared_memory("in")
            client.unregister_system_shared_memory("in")
            expect_error(lambda: client.infer("simple", simple_inputs(module, a, b, "in")),
                         "NOT_FOUND" if module is grpcclient else "404",
                         "Unable to find shared memory region: 'in'")
            client.unregister_system_shared_memory()
            # CUDA shared memory: a CPU-only server says so.
            expect_error(lambda: client.register_cuda_shared_memory("c", b"\0" * 64, 0, 64),
                         "UNIMPLEMENTED" if module is grpcclient else "501", "CPU only")

        # A segment truncated after registration: an error, not a fault.
        trunc_key = "/ls_trunc_" + tag
        tp = shm.create_shared_memory_region("t", trunc_key, 128)
        handles.append(tp)
        g.register_system_shared_memory("t", trunc_key, 128)
        os.truncate("/dev/shm" + trunc_key, 16)
        expect_error(lambda: g.infer("simple", simple_inputs(grpcclient, a, b, "t")),
                     "INVALID_ARGUMENT", "truncated after registration")
        g.unregister_system_shared_memory()
        # Another user's segment is refused (needs root to make one).
        if os.geteuid() == 0:
            other_key = "/ls_other_" + tag
            xp = shm.create_shared_memory_region("o", other_key, 64)
            handles.append(xp)
            os.chown("/dev/shm" + other_key, 65534, 65534)
            expect_error(lambda: g.register_system_shared_memory("o", other_key, 64),
                         "PERMISSION_DENIED", "belongs to user 65534")
        check(g.is_server_live() and h.is_server_live(), "server alive after the bad uses")
    finally:
        for handle in handles:
            shm.destroy_shared_memory_region(handle)
    print("ok: system shared memory, and every bad use answered")


def check_rest_details(http_url):
    """gzip and deflate request bodies (Triton's client compresses them itself), a zip bomb, and
    the generate endpoints with Triton's flat body."""
    import gzip
    import json
    import urllib.error
    import urllib.request
    import zlib

    import tritonclient.http as httpclient

    h = httpclient.InferenceServerClient(url=http_url)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), -4, dtype=np.int32)
    for algorithm in ("gzip", "deflate"):
        for binary in (True, False):
            inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"),
                      httpclient.InferInput("INPUT1", [1, 16], "INT32")]
            inputs[0].set_data_from_numpy(a, binary_data=binary)
            inputs[1].set_data_from_numpy(b, binary_data=binary)
            result = h.infer("simple", inputs, request_compression_algorithm=algorithm)
            check(np.array_equal(result.as_numpy("OUTPUT0"), a + b) and
                  np.array_equal(result.as_numpy("OUTPUT1"), a - b), (algorithm, binary))

    def post(path, body, headers):
        request = urllib.request.Request("http://%s%s" % (http_url, path), data=body,
                                         headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    # 64 MiB of zeros (64 KiB compressed) against a 16 MiB body limit: 413 before allocating it.
    bomb = gzip.compress(b"{\"inputs\": [" + b" " * (64 << 20) + b"]}", compresslevel=9)
    code, body = post("/v2/models/simple/infer", bomb, {"Content-Encoding": "gzip"})
    check(code == 413 and b"inflates to more than" in body, (code, body[:200]))
    code, body = post("/v2/models/simple/infer", b"not deflate", {"Content-Encoding": "deflate"})
    check(code == 400, (code, body))
    code, body = post("/v2/models/simple/infer", b"{}", {"Content-Encoding": "br"})
    check(code == 415, (code, body))
    check(h.is_server_live(), "alive after the bad bodies")

    # Triton's generate extension, flat body: inputs by name, outputs by name.
    flat = {"INPUT0": list(range(16)), "INPUT1": [2] * 16, "parameters": {"timeout": 10000000}}
    for endpoint in ("generate", "generate_stream"):
        for encoding in (None, "deflate"):
            if endpoint == "generate_stream":
                # generate_stream streams Loop iterations by default; simple has no Loop.
                flat["parameters"]["stream_iterations"] = False
            raw = json.dumps(flat).encode()
            headers = {"Content-Type": "application/json"}
            if encoding:
                raw = zlib.compress(raw)
                headers["Content-Encoding"] = encoding
            code, body = post("/v2/models/simple/" + endpoint, raw, headers)
            check(code == 200, (endpoint, code, body))
            text = body.decode()
            if endpoint == "generate_stream":
                events = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
                check(len(events) == 1, text)
                text = events[0]
            answer = json.loads(text)
            check(answer["model_name"] == "simple" and
                  answer["OUTPUT0"] == [i + 2 for i in range(16)] and
                  answer["OUTPUT1"] == [i - 2 for i in range(16)], answer)
    code, body = post("/v2/models/simple_identity/generate", json.dumps({"INPUT0": "hi"}).encode(),
                      {})
    check(code == 200 and json.loads(body)["OUTPUT0"] == "hi", (code, body))
    code, body = post("/v2/models/simple/generate", json.dumps({"nope": 1}).encode(), {})
    check(code == 400 and b"'nope' is not an input of model 'simple'" in body, (code, body))
    # The KServe body still works on generate.
    kserve = {"inputs": [{"name": n, "datatype": "INT32", "shape": [1, 16], "data": [1] * 16}
                         for n in ("INPUT0", "INPUT1")]}
    code, body = post("/v2/models/simple/generate", json.dumps(kserve).encode(), {})
    check(code == 200 and json.loads(body)["outputs"][0]["data"] == [2] * 16, (code, body))
    print("ok: gzip/deflate bodies, zip bomb 413, generate with Triton's flat body")


def check_model_control(grpc_url, http_url, models):
    """Explicit model control as Triton does it: the index lists every model of the repository,
    load takes a config override and model files sent in the request (written privately, never
    outside), unload takes unload_dependents."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    g = grpcclient.InferenceServerClient(url=grpc_url)
    h = httpclient.InferenceServerClient(url=http_url)
    index = {m.name: m for m in g.get_model_repository_index().models}
    check(len(index) == 7 and index["simple_int8"].state == "UNAVAILABLE" and
          index["simple_int8"].reason == "not loaded" and index["simple"].reason == "unloaded",
          index)
    with open(os.path.join(models, "simple", "1", "model.onnx"), "rb") as f:
        onnx_bytes = f.read()
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 5, dtype=np.int32)
    for client, module in ((g, grpcclient), (h, httpclient)):
        name = "uploaded_" + ("grpc" if module is grpcclient else "http")
        client.load_model(name, config=json.dumps({"max_batch_size": 4}),
                          files={"file:1/model.onnx": onnx_bytes})
        check(client.is_model_ready(name), name)
        result = client.infer(name, simple_inputs(module, a, b))
        check(np.array_equal(result.as_numpy("OUTPUT1"), a - b), name)
        config = client.get_model_config(name)
        max_batch = (config.config.max_batch_size if module is grpcclient
                     else config["max_batch_size"])
        check(max_batch == 4, config)
        code = "INVALID_ARGUMENT" if module is grpcclient else "400"
        for path in ("file:../escape.onnx", "file:/etc/passwd", "file:1/../../x"):
            expect_error(lambda: client.load_model(name, config="{}", files={path: b"x"}), code,
                         "a file path")
        expect_error(lambda: client.load_model(name, files={"file:1/model.onnx": b"x"}), code,
                     "need a 'config' parameter")
        client.unload_model(name, unload_dependents=True)
        check(not client.is_model_ready(name), name)
    for escaped in ("escape.onnx", "x"):
        check(not os.path.exists(os.path.join(os.path.dirname(models), escaped)), escaped)
    print("ok: repository index, load with config and files, unload_dependents")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--loopserve", required=True)
    parser.add_argument("--repo_root", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--tritonclient", required=True)
    parser.add_argument("--part", choices=("examples", "checks", "control"), required=True)
    args = parser.parse_args()
    lib = os.path.join(args.tritonclient, "lib")
    examples = os.path.join(args.tritonclient, "examples")
    sys.path.insert(0, lib)
    try:
        import tritonclient.grpc  # noqa: F401
        import tritonclient.http  # noqa: F401
    except (ImportError, RuntimeError) as e:
        # Debian packages deploy/install_deps.sh installs (python3-rapidjson, -gevent, ...).
        print("FAIL: tritonclient does not import: %s" % e)
        return 1

    args.work = os.path.join(args.work, args.part)
    models = os.path.join(args.work, "models")
    subprocess.run(["rm", "-rf", models], check=True)
    subprocess.run([sys.executable, os.path.join(args.repo_root, "deploy/make_example_models.py"),
                    "--triton_qa", models], check=True)
    log_dir = os.path.join(args.work, "logs")
    os.makedirs(log_dir, exist_ok=True)
    flags = ["--model-repository", models, "--metrics-port=0", "--grpc-port=0", "--http-port=0",
             "--log-verbose=0", "--max_message_bytes=%d" % (16 << 20), "--log_dir=" + log_dir]
    if args.part == "control":
        # Triton's example repository has 8 models; the 4 not built here (an image classifier
        # each, two sequence models) are folders that are never loaded.
        for name in ("densenet_onnx", "inception_graphdef", "simple_dyna_sequence",
                     "simple_sequence"):
            os.makedirs(os.path.join(models, name))
        flags += ["--model-control-mode", "explicit"]
    # Triton's spellings, both `--flag=value` and `--flag value`.
    proc, ports = start_server(args.loopserve, flags, kinds=("grpc", "http", "metrics"))
    grpc_url = "127.0.0.1:%d" % ports["grpc"]
    http_url = "127.0.0.1:%d" % ports["http"]
    env = dict(os.environ, PYTHONPATH=lib)
    try:
        if args.part == "examples":
            runs = ([(s, ["-u", grpc_url]) for s in GRPC_EXAMPLES] +
                    [(s, ["-u", http_url]) for s in HTTP_EXAMPLES] +
                    [("reuse_infer_objects_client.py", ["-i", p, "-u", u])
                     for p, u in (("grpc", grpc_url), ("http", http_url))])
            # A few at a time (most of each is the interpreter importing the client), except the
            # ones using system shared memory: Triton's examples name their segments alike
            # ("/output0_simple" in three of them), so two at once unlink each other's.
            def uses_shm(run):
                return "shm" in run[0] or run[0] == "reuse_infer_objects_client.py"

            with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
                parallel = pool.map(lambda r: run_example(examples, r[0], r[1], env),
                                    [r for r in runs if not uses_shm(r)])
                by_run = dict(zip([tuple([r[0]] + r[1]) for r in runs if not uses_shm(r)],
                                  parallel))
            for r in runs:
                if uses_shm(r):
                    by_run[tuple([r[0]] + r[1])] = run_example(examples, r[0], r[1], env)
            results = [by_run[tuple([r[0]] + r[1])] for r in runs]
            failed = []
            for (script, script_args), (code, out) in zip(runs, results):
                print("%s %s %s" % ("pass" if code == 0 else "FAIL", script, " ".join(script_args)))
                if code != 0:
                    failed.append(script)
                    print("---- %s\n%s" % (script, out[-2000:]))
            check(not failed, "examples failed: %s" % failed)
        elif args.part == "control":
            for script, url in (("simple_grpc_model_control.py", grpc_url),
                                ("simple_http_model_control.py", http_url)):
                if script == "simple_http_model_control.py":
                    # This one expects Triton's repository with 7 models (the gRPC one 8): the
                    # index follows the folder.
                    os.rmdir(os.path.join(models, "inception_graphdef"))
                code, out = run_example(examples, script, ["-u", url], env)
                print("%s %s" % ("pass" if code == 0 else "FAIL", script))
                check(code == 0, out[-2000:])
            check_model_control(grpc_url, http_url, models)
        else:
            check_answers(grpc_url, http_url)
            check_shared_memory(grpc_url, http_url, args.work)
            check_rest_details(http_url)
            check_logging(grpc_url, http_url, log_dir)
    finally:
        proc.terminate()
        code = proc.wait(timeout=60)
    check(code == 0, "loopserve exit code %d" % code)
    print("PASS: %d checks" % Checks.count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
