#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/README.md) from the project's test models.

Usage: /usr/bin/python3 tests/fuzz/make_seeds.py OUT_DIR --repo_root=DIR [--protoc=PROTOC]
           [--onnx_dir=DIR ...] [--openvino_dir=DIR ...]

OUT_DIR/<target>/ receives, for
  onnx_importer_fuzz      every *.onnx file found under the --onnx_dir folders (the ONNX backend node
                          tests, the Loop cases, the integration-test repository)
  openvino_importer_fuzz  every model.xml (+ model.bin) under the --openvino_dir folders, packed as
                          the target reads them: 4-byte little-endian XML length, XML, .bin bytes
  infer_request_fuzz      serialized ModelInferRequests for the target's two models (raw and typed
                          contents, every datatype, wrong counts, requested outputs, parameters)
  model_config_fuzz       Triton config.pbtxt texts using the fields loopserve reads, and every
                          config.pbtxt under the --onnx_dir folders
  ovms_config_fuzz        OpenVINO Model Server config.json texts, and every .json under them
  rest_request_fuzz       REST requests (path, Inference-Header-Content-Length, body): the request
                          bodies of the HTTP tests for the target's two models, JSON and binary
  http_framing_fuzz       raw bytes on one HTTP connection: smuggling, pipelining, chunked and
                          malformed request shapes
Deterministic; nothing here is checked in.
"""

import argparse
import glob
import os
import shutil
import struct
import subprocess
import sys
import tempfile


def onnx_seeds(out, dirs):
    n = 0
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(d, "**", "*.onnx"), recursive=True)):
            if os.path.getsize(path) > 1 << 20:
                continue  # large weights add nothing but time
            shutil.copyfile(path, os.path.join(out, "seed_%04d.onnx" % n))
            n += 1
    return n


def openvino_seeds(out, dirs):
    n = 0
    for d in dirs:
        for xml_path in sorted(glob.glob(os.path.join(d, "**", "*.xml"), recursive=True)):
            with open(xml_path, "rb") as f:
                xml = f.read()
            bin_path = xml_path[:-4] + ".bin"
            weights = b""
            if os.path.exists(bin_path):
                with open(bin_path, "rb") as f:
                    weights = f.read()
            with open(os.path.join(out, "seed_%04d.ir" % n), "wb") as f:
                f.write(struct.pack("<I", len(xml)) + xml + weights)
            n += 1
    return n


def infer_request_seeds(out, repo_root, protoc):
    work = tempfile.mkdtemp(prefix="loopserve_seeds_")
    try:
        protos = sorted(glob.glob(os.path.join(repo_root, "proto", "*.proto")))
        subprocess.run([protoc, "-I", repo_root, "--python_out=" + work] + protos, check=True)
        open(os.path.join(work, "proto", "__init__.py"), "w").close()
        sys.path.insert(0, work)
        from proto import grpc_service_pb2 as pb  # noqa: E402

        seeds = []

        def identity(datatype, raw, rows=2, mangle=None):
            r = pb.ModelInferRequest(model_name="identity", id="seed")
            t = r.inputs.add(name="in_" + datatype.lower(), datatype=datatype, shape=[rows, 3])
            size = {"BOOL": 1, "INT8": 1, "UINT8": 1, "INT16": 2, "UINT16": 2, "FP16": 2,
                    "INT32": 4, "UINT32": 4, "FP32": 4, "INT64": 8, "UINT64": 8, "FP64": 8}[datatype]
            if raw:
                r.raw_input_contents.append(bytes(range(rows * 3 * size)) if rows * 3 * size < 256
                                            else b"\x01" * (rows * 3 * size))
            else:
                field = {"BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents",
                         "INT32": "int_contents", "INT64": "int64_contents",
                         "UINT8": "uint_contents", "UINT16": "uint_contents",
                         "UINT32": "uint_contents", "UINT64": "uint64_contents",
                         "FP32": "fp32_contents", "FP64": "fp64_contents"}.get(datatype)
                if field is None:
                    return
                values = [True, False] * (rows * 3) if field == "bool_contents" else \
                    list(range(rows * 3))
                getattr(t.contents, field).extend(values[:rows * 3])
            r.outputs.add(name="out_" + datatype.lower())
            if mangle:
                mangle(r)
            seeds.append(r)

        for dt in ["FP32", "FP64", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32",
                   "UINT64", "BOOL", "FP16"]:
            identity(dt, raw=True)
            identity(dt, raw=False)
        identity("FP32", raw=True, rows=0)
        identity("FP32", raw=True, mangle=lambda r: r.inputs[0].shape.append(1))
        identity("INT64", raw=True, mangle=lambda r: r.raw_input_contents.append(b"x"))
        identity("FP32", raw=False, mangle=lambda r: r.inputs[0].contents.int64_contents.append(1))
        def negative_timeout(r):
            r.parameters["timeout"].int64_param = -5

        identity("FP32", raw=True, mangle=negative_timeout)
        for m in (0, 1, 3, 1000, -1):
            r = pb.ModelInferRequest(model_name="counter", model_version="1")
            r.inputs.add(name="M", datatype="INT64", shape=[]).contents.int64_contents.append(m)
            r.inputs.add(name="x", datatype="FP32", shape=[2]).contents.fp32_contents.extend(
                [0.5, -2.0])
            r.parameters["timeout"].int64_param = 1000
            seeds.append(r)
        r = pb.ModelInferRequest(model_name="counter")
        r.inputs.add(name="M", datatype="INT64", shape=[])
        r.inputs.add(name="x", datatype="FP32", shape=[2])
        r.raw_input_contents.append(struct.pack("<q", 5))
        r.raw_input_contents.append(struct.pack("<2f", 1.0, 2.0))
        seeds.append(r)
        for i, r in enumerate(seeds):
            with open(os.path.join(out, "seed_%04d.pb" % i), "wb") as f:
                f.write(r.SerializeToString())
        return len(seeds)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def rest_request_seeds(out):
    """REST requests as rest_request_fuzz reads them (path, header length or "-", body): the
    request bodies of http_codec_test.cc and the Python HTTP/SSE tests, against the target's
    models, JSON and binary, valid and broken."""
    import json
    import numpy as np
    seeds = []

    def add(path, body, header_length="-"):
        if isinstance(body, str):
            body = body.encode()
        seeds.append(path.encode() + b"\n" + header_length.encode() + b"\n" + body)

    kinds = {"FP32": np.float32, "FP64": np.float64, "INT8": np.int8, "INT16": np.int16,
             "INT32": np.int32, "INT64": np.int64, "UINT8": np.uint8, "UINT16": np.uint16,
             "UINT32": np.uint32, "UINT64": np.uint64, "BOOL": np.bool_, "FP16": np.float16}
    infer = "/v2/models/identity/infer"
    for dt, kind in kinds.items():
        a = (np.arange(6) % 2).astype(kind).reshape(2, 3)
        name = "in_" + dt.lower()
        if dt != "FP16":  # FP16 only as binary data
            add(infer, json.dumps({"id": "j", "inputs": [
                {"name": name, "datatype": dt, "shape": [2, 3], "data": a.tolist()}]}))
            add(infer, json.dumps({"inputs": [
                {"name": name, "datatype": dt, "shape": [2, 3], "data": a.ravel().tolist()}],
                "outputs": [{"name": "out_" + dt.lower(), "parameters": {"binary_data": True}}]}))
        head = json.dumps({"inputs": [{"name": name, "datatype": dt, "shape": [2, 3],
                                       "parameters": {"binary_data_size": a.nbytes}}],
                           "parameters": {"binary_data_output": True}}).encode()
        add(infer, head + a.tobytes(), str(len(head)))
    strings = [b"a", b"", b"\xff\x00z", b"loop", b"serve", b"!"]
    add(infer, json.dumps({"inputs": [{"name": "in_bytes", "datatype": "BYTES", "shape": [2, 3],
                                       "data": [s.decode("latin-1") for s in strings]}]}))
    blob = b"".join(len(s).to_bytes(4, "little") + s for s in strings)
    head = json.dumps({"inputs": [{"name": "in_bytes", "datatype": "BYTES", "shape": [2, 3],
                                   "parameters": {"binary_data_size": len(blob)}}]}).encode()
    add(infer, head + blob, str(len(head)))
    counter = {"inputs": [{"name": "M", "datatype": "INT64", "shape": [], "data": [3]},
                          {"name": "x", "datatype": "FP32", "shape": [2], "data": [0.5, -2.0]}],
               "parameters": {"timeout": 100000}}
    add("/v2/models/counter/infer", json.dumps(counter))
    add("/v2/models/counter/versions/1/infer", json.dumps(counter))
    add("/v2/models/counter/generate_stream", json.dumps(counter))
    add("/v2/models/counter/infer", json.dumps(dict(counter, parameters={"stream_iterations": True})))
    # http_codec_test.cc's bad bodies and the hostile ones of the Python tests.
    for body in ['{', '[1]', '{"inputs": 3}', '{"inputs": [{"datatype": "FP32"}]}',
                 '{"inputs": [], "parameters": {"timeout": -5}}',
                 '{"inputs": [], "outputs": [{"name": "y", "parameters": {"classification": 2}}]}',
                 '{"inputs": [{"name": "in_int64", "datatype": "INT64", "shape": [1, 3], '
                 '"data": [1, 2, 9223372036854775808]}]}',
                 '{"inputs": [{"name": "in_fp32", "datatype": "FP32", "shape": [1, 3], '
                 '"data": [1e999, -0.0, 3]}]}',
                 '{"inputs": [{"name": "in_fp32", "datatype": "FP32", "shape": [1, 3], '
                 '"data": [[[[[[1]]]]], 2, 3]}]}',
                 '{"inputs": [{"name": "in_fp32", "datatype": "FP32", "shape": '
                 '[4294967296, 4294967296], "data": []}]}',
                 '{"inputs": [{"name": "in_fp32", "datatype": "FP32", "shape": [1, 3], '
                 '"data": [1, 2, 3], "parameters": {"binary_data_size": 12}}]}',
                 '{"id": 5, "inputs": []}', '{"inputs": [], "parameters": []}',
                 "[" * 2000 + "]" * 2000]:
        add(infer, body)
    add(infer, '{"inputs": []}', "-1")
    add(infer, '{"inputs": []}', "99999")
    add("/v2/repository/index", '{"ready": true}')
    add("/v2/repository/index", "")
    add("/v2/repository/models/identity/load", '{"parameters": {"config": "{}"}}')
    add("/v2/repository/models/identity/load", '{"parameters": 3}')
    add("/v2/models/identity/versions/2/ready", "")
    add("/v2//models/%2e%2e/infer", "{}")
    for i, seed in enumerate(seeds):
        with open(os.path.join(out, "seed_%04d.req" % i), "wb") as f:
            f.write(seed)
    return len(seeds)


# Triton ModelConfig texts (besides every config.pbtxt under the --onnx_dir folders).
CONFIGS = [
    "",
    'name: "m"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 0\n'
    'version_policy { latest { num_versions: 2 } }\n'
    'parameters { key: "max_loop_iterations" value { string_value: "100000" } }\n',
    'input [ { name: "x" data_type: TYPE_FP32 dims: [ -1, 2 ] } ]\n'
    'output [ { name: "x" data_type: TYPE_FP32 dims: [ -1, 2 ] } ]\n'
    'instance_group [ { count: 2 kind: KIND_CPU } ]\n',
    'input [ { name: "M" data_type: TYPE_INT64 dims: [ 1 ] reshape { shape: [ ] } } ]\n'
    'parameters { key: "max_request_memory_bytes" value { string_value: "1073741824" } }\n'
    'parameters { key: "max_output_bytes" value { string_value: "-3" } }\n',
    "max_batch_size: 8\ndynamic_batching { preferred_batch_size: [ 2, 4 ] }\n",
    'version_policy { specific { versions: [1, 3] } }\nbackend: "openvino"\n',
    'model_warmup [ { name: "w" batch_size: 1 inputs { key: "x" value { data_type: TYPE_FP32 '
    'dims: [ 1, 2 ] zero_data: true } } } ]\n',
    "max_loop_iterations: 5\n",
    'name: "other"\n',
    "sequence_batching { }\n",
    "version_policy { latest { num_versions: 4294967295 } } # comment\n",
    # Nesting at and past the limit (server/repository/repo_file.h kMaxConfigNesting = 32); brackets inside
    # strings and comments do not count.
    "model_warmup { " * 32 + "}" * 32,
    "model_warmup < " * 33,
    'name: "{{{[[[<<<\\"" # }}}]]]\nplatform: \'[[[\'\n',
]

OVMS_CONFIGS = [
    '{"model_config_list": [{"config": {"name": "m", "base_path": "m"}}]}',
    '{"model_config_list": [{"config": {"name": "a", "base_path": "/models/a", "nireq": 2, '
    '"model_version_policy": {"latest": {"num_versions": 2}}}}, {"config": {"name": "b", '
    '"base_path": "gs://bucket/b", "shape": "auto"}}], "pipeline_config_list": []}',
    '{"model_config_list": [{"config": {"name": "../x", "base_path": "x", '
    '"model_version_policy": {"specific": {"versions": [1, 0]}}}}]}',
    "[]",
    "{",
    '{"model_config_list": ' + "[" * 31 + "]" * 31 + "}",
    '{"model_config_list": ' + "[" * 40,
    '{"model_config_list": [], "x": "[[[[\\"{{{{"}',
]


def config_seeds(out, dirs):
    texts = list(CONFIGS)
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(d, "**", "config.pbtxt"), recursive=True)):
            with open(path) as f:
                texts.append(f.read())
    for i, text in enumerate(texts):
        with open(os.path.join(out, "seed_%04d.pbtxt" % i), "w") as f:
            f.write(text)
    return len(texts)


def ovms_seeds(out, dirs):
    texts = list(OVMS_CONFIGS)
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(d, "**", "*.json"), recursive=True)):
            with open(path) as f:
                texts.append(f.read())
    for i, text in enumerate(texts):
        with open(os.path.join(out, "seed_%04d.json" % i), "w") as f:
            f.write(text)
    return len(texts)


# Raw bytes on one HTTP connection (http_framing_fuzz): smuggling, pipelining, chunked and
# malformed shapes (issue 26). Each seed starts with 8 bytes that seed the target's split points.
def http_stream_seeds(out):
    get = b"GET /v2/health/ready HTTP/1.1\r\nHost: localhost\r\n\r\n"
    infer_body = (b'{"inputs": [{"name": "M", "datatype": "INT64", "shape": [], "data": [3]}, '
                  b'{"name": "start", "datatype": "INT64", "shape": [1], "data": [5]}]}')
    infer = (b"POST /v2/models/counter/infer HTTP/1.1\r\nHost: localhost\r\n"
             b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(infer_body)
             + infer_body)
    post = b"POST /v2/models/counter/infer HTTP/1.1\r\nHost: localhost\r\n"
    streams = [
        get,
        get + get,
        infer * 10 + get,
        post + b"Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nG" + get,
        post + b"Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n5c\r\nGPOST / HTTP/1.1\r\n"
        b"\r\n0\r\n\r\n",
        post + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!" + get,
        post + b"Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n" + get,
        post + b"Transfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nx\r\n0\r\n\r\n",
        post + b"Transfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\nT: v\r\n\r\n" + get,
        b"GET /v2/he\x00alth HTTP/1.1\r\n\r\n",
        b"GET /v2/models/counter/versions/%31/ready HTTP/1.1\r\n\r\n" + get,
        b"GET /v2/models/%zz/ready HTTP/1.1\r\n\r\n",
        b"FOO /v2 HTTP/1.1\r\n\r\n",
        b"GET /v2 HTTP/1.1\r\nX-Big: " + b"v" * 2000 + b"\r\n\r\n",
        b"GET /v2 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" + get,
        b"\r\n\r\n" + get + b"GET / HTTP/1.1\nHost: x\n\n",
        post + b"Content-Length: 0\r\n\r\n" + post + b"Content-Length: 3\r\n\r\nabc",
    ]
    for i, stream in enumerate(streams):
        with open(os.path.join(out, "seed_%04d.http" % i), "wb") as f:
            f.write(struct.pack("<Q", 0x9E3779B97F4A7C15 * (i + 1) % (1 << 64)) + stream)
    return len(streams)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--repo_root", required=True)
    parser.add_argument("--protoc", default="protoc")
    parser.add_argument("--onnx_dir", action="append", default=[])
    parser.add_argument("--openvino_dir", action="append", default=[])
    args = parser.parse_args()
    counts = {}
    for target, make in [
        ("onnx_importer_fuzz", lambda d: onnx_seeds(d, args.onnx_dir)),
        ("openvino_importer_fuzz", lambda d: openvino_seeds(d, args.openvino_dir)),
        ("infer_request_fuzz", lambda d: infer_request_seeds(d, args.repo_root, args.protoc)),
        ("model_config_fuzz", lambda d: config_seeds(d, args.onnx_dir)),
        ("ovms_config_fuzz", lambda d: ovms_seeds(d, args.onnx_dir)),
        ("rest_request_fuzz", rest_request_seeds),
        ("http_framing_fuzz", http_stream_seeds),
    ]:
        d = os.path.join(args.out_dir, target)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        counts[target] = make(d)
    print("seeds: " + ", ".join("%s %d" % kv for kv in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
