#!/usr/bin/python3
"""KServe v2 REST against the real loopserve binary, with Python `requests` and `curl`.

Usage: /usr/bin/python3 python_http_test.py --loopserve=BIN --loopctl=BIN --models=DIR
       --repo_root=DIR --work=DIR [--protoc=PROTOC]

Every endpoint (health, metadata, ready, config, stats, repository index/load/unload, infer), every
datatype the test models carry in JSON and in Triton's binary tensor data extension, outputs
checked against the numpy expected outputs the model generator wrote (never against the server's
own answers); each bad input (malformed JSON, wrong shape or datatype, binary sizes that do not add
up, oversized bodies, unknown models, bad paths and methods) gets its HTTP status and a message
naming the problem, the same text gRPC gives, and the server stays up. Also: the `timeout`
parameter, a disconnecting client cancelling its Loop, keep-alive, the `protocol` metrics label,
`loopctl --protocol=http`, a full queue, draining, HTTPS and mutual TLS, and SIGTERM -> exit 0.
"""

import contextlib
import gzip
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

import grpc  # noqa: E402
import requests  # noqa: E402

from loopserve_py import (DTYPES, OIP, Checks, check, parse_test_args, read_case,  # noqa: E402
                         start_server)

def json_input(name, array, nested):
    data = array.tolist() if nested else array.reshape(-1).tolist()
    return {"name": name, "datatype": OIP[array.dtype.type], "shape": list(array.shape),
            "data": data}


def binary_body(header, blobs):
    """(body, headers) of a request with Triton's binary extension."""
    head = json.dumps(header).encode()
    return head + b"".join(blobs), {"Inference-Header-Content-Length": str(len(head)),
                                    "Content-Type": "application/octet-stream"}


def decode_response(response):
    """{name: array} from a JSON or JSON+binary infer response."""
    check(response.status_code == 200, "infer: %d %s" % (response.status_code, response.text[:300]))
    length = response.headers.get("Inference-Header-Content-Length")
    body = response.content
    header = json.loads(body[:int(length)] if length else body)
    blob = body[int(length):] if length else b""
    out, at = {}, 0
    for o in header["outputs"]:
        dtype, shape = DTYPES[o["datatype"]], tuple(o["shape"])
        if "data" in o:
            out[o["name"]] = np.array(o["data"], dtype=dtype).reshape(shape)
        else:
            size = o["parameters"]["binary_data_size"]
            out[o["name"]] = np.frombuffer(blob[at:at + size], dtype=dtype).reshape(shape)
            at += size
    check(at == len(blob), "binary outputs do not add up: %d of %d bytes" % (at, len(blob)))
    return header, out


def compare(model, got, expected):
    for name, want in expected:
        check(name in got, "%s: output %s missing" % (model, name))
        check(got[name].shape == want.shape, "%s/%s: shape %s != %s" % (model, name,
                                                                       got[name].shape, want.shape))
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(got[name], want)


def expect_error(response, status, *fragments):
    check(response.status_code == status,
          "expected %d, got %d: %s" % (status, response.status_code, response.text[:300]))
    message = response.json()["error"]
    for f in fragments:
        check(f in message, "error %r lacks %r" % (message, f))
    return message


@contextlib.contextmanager
def serving(binary, flags, kinds):
    """A loopserve for the `with` block (yields the process and its ports); SIGTERM at the end,
    and the exit code must be 0 when the block did not fail. The server's stderr goes to a
    temporary file, printed when it exits with another code (a sanitizer's report, say)."""
    with tempfile.TemporaryFile(mode="w+") as log:
        proc, ports = start_server(binary, flags, kinds=kinds, stderr=log)
        try:
            yield proc, ports
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
            if code != 0:
                log.seek(0)
                sys.stdout.write("---- loopserve stderr (exit %d) ----\n%s---- end ----\n" %
                                 (code, log.read()))
                sys.stdout.flush()
    check(code == 0, "loopserve exited with %d" % code)


def metric(metrics_url, name, **labels):
    text = requests.get(metrics_url, timeout=10).text
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        if all('%s="%s"' % (k, v) in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def main():
    args = parse_test_args(loopctl=True)
    from proto import grpc_service_pb2 as pb, grpc_service_pb2_grpc as pb_grpc  # noqa: E402

    limit = 1 << 20
    with serving(args.loopserve, ["--model_repository=" + args.models, "--metrics_port=0",
                                  "--max_message_bytes=%d" % limit],
                 ("grpc", "http", "metrics")) as (proc, ports):
        base = "http://127.0.0.1:%d" % ports["http"]
        metrics_url = "http://127.0.0.1:%d/metrics" % ports["metrics"]
        s = requests.Session()
        # ---- health, metadata, config, stats, repository ----
        r = s.get(base + "/v2/health/live")
        check(r.status_code == 200 and r.json() == {"live": True}, r.text)
        check(s.get(base + "/v2/health/ready").status_code == 200, "ready")
        meta = s.get(base + "/v2").json()
        check(meta["name"] == "loopserve" and "binary_tensor_data" in meta["extensions"], meta)
        for path in ("/v2/models/rnn", "/v2/models/rnn/versions/1"):
            m = s.get(base + path).json()
            check(m["name"] == "rnn" and m["versions"] == ["1"], m)
            inputs = {t["name"]: t for t in m["inputs"]}
            check(inputs["M"] == {"name": "M", "datatype": "INT64", "shape": []}, inputs)
            check(inputs["h0"]["datatype"] == "FP32" and inputs["h0"]["shape"] == [-1, 4], inputs)
        expect_error(s.get(base + "/v2/models/nope"), 404, "'nope'")
        expect_error(s.get(base + "/v2/models/rnn/versions/9"), 404, "9")
        check(s.get(base + "/v2/models/rnn/ready").status_code == 200, "rnn ready")
        check(s.get(base + "/v2/models/rnn/versions/1/ready").status_code == 200, "rnn v1 ready")
        expect_error(s.get(base + "/v2/models/nope/ready"), 404, "'nope'")
        config = s.get(base + "/v2/models/counter/config").json()
        check(config["name"] == "counter" and config["max_batch_size"] == 0, config)
        check([i["name"] for i in config["input"]] == ["M", "start"], config)
        check(config["input"][0]["data_type"] == "TYPE_INT64", config)
        index = s.post(base + "/v2/repository/index").json()
        states = {m["name"]: m["state"] for m in index}
        check(states.get("rnn") == "READY" and states.get("counter") == "READY", index)
        check(all(m["state"] == "READY" for m in s.post(base + "/v2/repository/index",
                                                         json={"ready": True}).json()), "ready")
        expect_error(s.post(base + "/v2/repository/index", data="[1]"), 400, "JSON object")
        expect_error(s.post(base + "/v2/repository/index", json={"ready": 3}), 400, "'ready'")
        # Poll mode: repository changes need explicit model control (as gRPC).
        expect_error(s.post(base + "/v2/repository/models/rnn/unload"), 400, "explicit")
        print("ok: health, metadata, ready, config, repository index")

        # ---- inference: JSON flat and nested, binary in and out, mixed ----
        for model, case in (("counter", "expected"), ("counter", "expected_zero"),
                            ("rnn", "expected"), ("greedy_decoder", "expected"),
                            ("nested", "expected"), ("identity_dtypes", "expected"),
                            ("identity_dtypes", "expected_empty")):
            inputs, expected = read_case(os.path.join(args.models, model, case))
            url = base + "/v2/models/%s/infer" % model
            for nested in (False, True):
                body = {"id": "r-%s" % case,
                        "inputs": [json_input(n, a, nested) for n, a in inputs]}
                header, got = decode_response(s.post(url, json=body))
                check(header["model_name"] == model and header["model_version"] == "1" and
                      header["id"] == "r-%s" % case, header)
                compare(model, got, expected)
            header = {"inputs": [{"name": n, "datatype": OIP[a.dtype.type], "shape": list(a.shape),
                                  "parameters": {"binary_data_size": a.nbytes}}
                                 for n, a in inputs],
                      "parameters": {"binary_data_output": True}}
            body, headers = binary_body(header, [np.ascontiguousarray(a).tobytes()
                                                 for _, a in inputs])
            r = s.post(url, data=body, headers=headers)
            check("Inference-Header-Content-Length" in r.headers, r.headers)
            compare(model, decode_response(r)[1], expected)
            # Mixed: first input binary, the rest JSON; first output JSON, the others binary.
            header = {"inputs": [json_input(n, a, True) for n, a in inputs],
                      "outputs": [{"name": n, "parameters": {"binary_data": k > 0}}
                                  for k, (n, _) in enumerate(expected)]}
            n0, a0 = inputs[0]
            del header["inputs"][0]["data"]
            header["inputs"][0]["parameters"] = {"binary_data_size": a0.nbytes}
            body, headers = binary_body(header, [np.ascontiguousarray(a0).tobytes()])
            compare(model, decode_response(s.post(url, data=body, headers=headers))[1], expected)
            print("ok: %s/%s in JSON (flat, nested), binary, mixed" % (model, case))

        # ONNX Runtime's leniency: counter's scalar M sent as [1] and its [1] start as a scalar
        # give the numpy-computed answer; another one-element shape is still refused.
        inputs, expected = read_case(os.path.join(args.models, "counter", "expected"))
        url = base + "/v2/models/counter/infer"
        swapped = [(n, a.reshape([1] if a.ndim == 0 else [])) for n, a in inputs]
        check([a.shape for _, a in swapped] == [(1,), ()], swapped)
        body = {"inputs": [json_input(n, a, False) for n, a in swapped]}
        compare("counter", decode_response(s.post(url, json=body))[1], expected)
        body["inputs"][0]["shape"] = [1, 1]
        expect_error(s.post(url, json=body), 400, "input 'M'", "shape [1,1]")
        print("ok: a scalar sent as [1] and a [1] sent as a scalar")

        # BYTES: JSON strings, and binary data with each element's 4-byte little-endian length
        # (as over gRPC). Expected values: the case's numpy-computed outputs.
        inputs, expected = read_case(os.path.join(args.models, "strings", "expected"))
        want = dict(expected)
        url = base + "/v2/models/strings/infer"

        def texts(a):
            return [v.decode() if isinstance(v, bytes) else v for v in a.reshape(-1)]

        def prefixed(a):
            return b"".join(len(t.encode()).to_bytes(4, "little") + t.encode() for t in texts(a))

        body = {"inputs": [{"name": n, "datatype": "BYTES", "shape": list(a.shape),
                            "data": texts(a)} for n, a in inputs]}
        r = s.post(url, json=body)
        check(r.status_code == 200, "strings: %d %s" % (r.status_code, r.text[:300]))
        outs = {o["name"]: o for o in r.json()["outputs"]}
        check(outs["kept"]["datatype"] == "BYTES" and
              outs["kept"]["shape"] == list(want["kept"].shape) and
              outs["kept"]["data"] == texts(want["kept"]), outs["kept"])
        np.testing.assert_array_equal(np.array(outs["values"]["data"], np.float32),
                                      want["values"])
        header = {"inputs": [{"name": n, "datatype": "BYTES", "shape": list(a.shape),
                              "parameters": {"binary_data_size": len(prefixed(a))}}
                             for n, a in inputs],
                  "outputs": [{"name": "kept", "parameters": {"binary_data": True}}]}
        body, headers = binary_body(header, [prefixed(a) for _, a in inputs])
        r = s.post(url, data=body, headers=headers)
        check(r.status_code == 200, "strings binary: %d %s" % (r.status_code, r.text[:300]))
        length = int(r.headers["Inference-Header-Content-Length"])
        kept = json.loads(r.content[:length])["outputs"][0]
        check(kept["parameters"]["binary_data_size"] == len(prefixed(want["kept"])) and
              r.content[length:] == prefixed(want["kept"]), (kept, r.content[length:]))
        # 22 bytes for 5 elements, the first claiming 99 of them.
        bad = dict(header, inputs=[dict(header["inputs"][0],
                                        parameters={"binary_data_size": 22})] + header["inputs"][1:])
        blobs = [(99).to_bytes(4, "little") + b"a" * 18] + [prefixed(a) for _, a in inputs[1:]]
        bad_body, bad_headers = binary_body(bad, blobs)
        expect_error(s.post(url, data=bad_body, headers=bad_headers), 400, "input 'text'",
                     "BYTES element 0 has length 99")
        print("ok: BYTES as JSON strings and as binary data")

        # Requested outputs only, in the order asked.
        inputs, expected = read_case(os.path.join(args.models, "rnn", "expected"))
        body = {"inputs": [json_input(n, a, False) for n, a in inputs],
                "outputs": [{"name": "h_final"}]}
        header, got = decode_response(s.post(base + "/v2/models/rnn/infer", json=body))
        check([o["name"] for o in header["outputs"]] == ["h_final"], header)
        compare("rnn", got, [e for e in expected if e[0] == "h_final"])
        rnn_body = body
        print("ok: requested outputs")

        # ---- bad inputs: status, message, and the same text as gRPC ----
        url = base + "/v2/models/rnn/infer"
        m_in = {"name": "M", "datatype": "INT64", "shape": [], "data": [3]}
        h0 = {"name": "h0", "datatype": "FP32", "shape": [1, 4], "data": [0.5] * 4}
        expect_error(s.post(url, data='{"inputs": [{"name"'), 400, "not valid JSON")
        expect_error(s.post(url, data="[1, 2]"), 400, "must be a JSON object")
        expect_error(s.post(url, json={"outputs": []}), 400, "no 'inputs'")
        expect_error(s.post(url, json={"inputs": {}}), 400, "'inputs' must be an array")
        expect_error(s.post(url, json={"inputs": [m_in, dict(h0, data=[0.5] * 3)]}), 400,
                     "input 'h0'", "needs 4 elements, got 3")
        expect_error(s.post(url, json={"inputs": [m_in, dict(h0, data=["a", "b", "c", "d"])]}),
                     400, "input 'h0'", "not a number")
        expect_error(s.post(url, json={"inputs": [m_in, dict(h0, shape=[1, -4])]}), 400,
                     "input 'h0'")
        expect_error(s.post(url, json={"inputs": [m_in, dict(h0, name="hx")]}), 400, "'hx'")
        expect_error(s.post(url, json={"inputs": [m_in, h0], "outputs": [{"name": "zz"}]}), 400,
                     "'zz'")
        expect_error(s.post(url, json={"inputs": [dict(m_in, data=[2 ** 63]), h0]}), 400,
                     "input 'M'", "out of range")
        expect_error(s.post(url, json={"inputs": [dict(m_in, data=[2 ** 70]), h0]}), 400,
                     "not valid JSON", "number")
        expect_error(s.post(url, json={"inputs": [m_in, dict(h0, datatype="FP16")]}), 400,
                     "input 'h0'")
        expect_error(s.post(url, json={"inputs": [m_in, h0], "parameters": {"timeout": "x"}}), 400,
                     "timeout")
        expect_error(s.post(base + "/v2/models/nope/infer", json={"inputs": [m_in]}), 404,
                     "'nope'")
        # Same message as gRPC for the same mistake (FP64 declared where the model takes FP32).
        wrong = dict(h0, datatype="FP64")
        http_message = expect_error(s.post(url, json={"inputs": [m_in, wrong]}), 400, "'h0'")
        channel = grpc.insecure_channel("127.0.0.1:%d" % ports["grpc"])
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        request = pb.ModelInferRequest(model_name="rnn")
        request.inputs.add(name="M", datatype="INT64", shape=[]).contents.int64_contents.append(3)
        request.inputs.add(name="h0", datatype="FP64", shape=[1, 4]).contents.fp64_contents.extend(
            [0.5] * 4)
        try:
            stub.ModelInfer(request, timeout=10)
            raise AssertionError("gRPC accepted FP64 for h0")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.INVALID_ARGUMENT, e)
            check(e.details() == http_message, "gRPC %r != HTTP %r" % (e.details(), http_message))
        channel.close()
        expect_error(s.post(url, json={"inputs": [m_in, dict(h0, datatype="BYTES",
                                                              data=["a", "b", "c", "d"])]}),
                     400, "input 'h0'", "datatype BYTES does not match the model's FP32")
        print("ok: JSON errors (same text as gRPC)")

        # Binary extension mistakes.
        blob = np.full((1, 4), 0.5, np.float32).tobytes()
        bin_h0 = {"name": "h0", "datatype": "FP32", "shape": [1, 4],
                  "parameters": {"binary_data_size": 16}}
        body, headers = binary_body({"inputs": [m_in, bin_h0]}, [blob + b"xx"])
        expect_error(s.post(url, data=body, headers=headers), 400, "add up")
        body, headers = binary_body({"inputs": [m_in, bin_h0]}, [blob[:8]])
        expect_error(s.post(url, data=body, headers=headers), 400, "runs past the end")
        body, headers = binary_body({"inputs": [m_in, dict(bin_h0, shape=[1, 3])]}, [blob])
        expect_error(s.post(url, data=body, headers=headers), 400, "input 'h0'")
        body, headers = binary_body({"inputs": [m_in, dict(bin_h0, data=[1, 2, 3, 4])]}, [blob])
        expect_error(s.post(url, data=body, headers=headers), 400, "both 'data'")
        headers["Inference-Header-Content-Length"] = str(len(body) + 1)
        expect_error(s.post(url, data=body, headers=headers), 400,
                     "Inference-Header-Content-Length")
        headers["Inference-Header-Content-Length"] = "-3"
        expect_error(s.post(url, data=body, headers=headers), 400,
                     "Inference-Header-Content-Length")
        print("ok: binary extension errors")

        # Oversized bodies: 413 before the body is read (declared) or after dropping it.
        expect_error(s.post(url, data=b" " * (limit + 1)), 413, "--max_message_bytes")
        with socket.create_connection(("127.0.0.1", ports["http"]), timeout=10) as sock:
            start = time.monotonic()
            sock.sendall(b"POST /v2/models/rnn/infer HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Length: 1000000000000\r\n\r\n{")
            answer = sock.recv(4096)
            check(answer.startswith(b"HTTP/1.1 413") and b"1000000000000" in answer, answer)
            check(time.monotonic() - start < 5, "413 came late")
        # Paths, methods, encodings.
        expect_error(s.get(base + "/v3/models"), 404, "no KServe v2 endpoint")
        expect_error(s.get(base + "/v2/models/rnn/bogus"), 404, "no KServe v2 endpoint")
        r = s.get(url)
        expect_error(r, 405, "use POST")
        check(r.headers.get("Allow") == "POST", r.headers)
        expect_error(s.delete(base + "/v2/health/ready"), 405, "use GET")
        # gzip and deflate bodies are inflated (Triton does); other encodings are 415.
        r = s.post(url, data=gzip.compress(json.dumps(rnn_body).encode()),
                   headers={"Content-Encoding": "gzip"})
        check(r.status_code == 200, r.text)
        r = s.post(url, data=json.dumps(rnn_body).encode(), headers={"Content-Encoding": "br"})
        expect_error(r, 415, "Content-Encoding")
        # Mangled bodies (seeded): every answer is 200 or a 4xx with an error, never a crash.
        rng = np.random.RandomState(15)
        valid = json.dumps(rnn_body).encode()
        blob_header = json.dumps({"inputs": [m_in, bin_h0]}).encode()
        statuses = set()
        mangled_ok = 0  # mangled numbers can still be a valid request
        for k in range(300):
            body = bytearray(valid if k % 2 else blob_header + blob)
            for _ in range(rng.randint(1, 4)):
                at = rng.randint(len(body))
                choice = rng.randint(3)
                if choice == 0:
                    body[at] = rng.randint(256)
                elif choice == 1:
                    del body[at:at + rng.randint(1, 8)]
                else:
                    body[at:at] = bytes([rng.choice(list(b'{}[],:"0-9eE.'))])
            headers = {} if k % 2 else {
                "Inference-Header-Content-Length": str(len(blob_header) + rng.randint(-3, 4))}
            r = s.post(url, data=bytes(body), headers=headers)
            statuses.add(r.status_code)
            mangled_ok += r.status_code == 200
            check(r.status_code == 200 or (400 <= r.status_code < 500 and r.json()["error"]),
                  "mangled body %d: %d %s" % (k, r.status_code, r.text[:200]))
        check(400 in statuses, statuses)
        # Broken HTTP itself: the connection is dropped or answered 4xx; the server carries on.
        for garbage in (b"GARBAGE\r\n\r\n", b"GET /v2 HTTP/9.9\r\n\r\n",
                        b"POST /v2/models/rnn/infer HTTP/1.1\r\nContent-Length: x\r\n\r\n",
                        b"GET /" + b"a" * 100000 + b" HTTP/1.1\r\n\r\n",
                        b"GET /v2 HTTP/1.1\r\n" + b"X: y\r\n" * 5000 + b"\r\n"):
            with socket.create_connection(("127.0.0.1", ports["http"]), timeout=10) as sock:
                try:
                    sock.sendall(garbage)
                    answer = sock.recv(4096)
                except OSError:
                    answer = b""
                check(answer == b"" or re.match(rb"HTTP/\d\.\d [2-5]\d\d", answer), answer[:100])
        check(s.get(base + "/v2/health/live").status_code == 200, "server died")
        # Hostile JSON: deep nesting, numbers past every type, sizes past the body, a chunked
        # body over the limit. Each a 4xx naming the problem; the server carries on.
        x_of = lambda data, dt="FP32": {"inputs": [m_in, dict(h0, datatype=dt, data=data)]}
        deep = '{"inputs": [' + "[" * 5000 + "]" * 5000 + "]}"
        expect_error(s.post(url, data=deep), 400, "not valid JSON", "too deep")
        expect_error(s.post(url, data=json.dumps(x_of([1, 2, 3, 4])).replace("4]", "1e999]")),
                     400, "not valid JSON", "number")
        expect_error(s.post(url, data=json.dumps(x_of([1, 2, 3, 2 ** 64]))), 400,
                     "not valid JSON", "64-bit integer or a double")
        expect_error(s.post(url, json={"inputs": [m_in, dict(h0, shape=[2 ** 62, 2 ** 62])]}),
                     400, "input 'h0'", "shape")
        expect_error(s.post(url, json={"inputs": [m_in, h0], "parameters": {"timeout": -5}}),
                     400, "'timeout'", "-5")
        body, headers = binary_body(
            {"inputs": [m_in, dict(bin_h0, parameters={"binary_data_size": 2 ** 63 - 1})]},
            [blob])
        expect_error(s.post(url, data=body, headers=headers), 400, "runs past the end")
        body, headers = binary_body(
            {"inputs": [m_in, dict(bin_h0, parameters={"binary_data_size": 2 ** 64})]}, [blob])
        expect_error(s.post(url, data=body, headers=headers), 400, "64-bit integer or a double")
        big_chunks = iter([b"[" * (limit // 2), b"[" * (limit // 2), b"]" * 16])
        expect_error(s.post(url, data=big_chunks), 413, "--max_message_bytes")
        check(s.get(base + "/v2/health/live").status_code == 200, "server died")

        # Headers: more than 100 (or 64 KiB of them) are answered 431, also when they stream on
        # (the hostile suite checks that this costs the server no memory: under AddressSanitizer
        # its quarantine keeps the freed headers, so RSS says nothing here).
        def header_answer(headers, flood_mib=0):
            with socket.create_connection(("127.0.0.1", ports["http"]), timeout=30) as sock:
                sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n" + headers)
                pad = b"X-Pad: " + b"v" * 1000 + b"\r\n"
                for _ in range(flood_mib * 1024):
                    sock.sendall(pad)
                sock.sendall(b"\r\n")
                return sock.recv(4096)

        answer = header_answer(b"".join(b"X-%d: y\r\n" % i for i in range(99)))
        check(answer.startswith(b"HTTP/1.1 200"), "100 headers: %r" % answer[:100])
        answer = header_answer(b"".join(b"X-%d: y\r\n" % i for i in range(100)))
        check(answer.startswith(b"HTTP/1.1 431") and b"more than 100 headers" in answer,
              "101 headers: %r" % answer[:200])
        answer = header_answer(b"", flood_mib=64)
        check(answer.startswith(b"HTTP/1.1 431"), "64 MiB of headers: %r" % answer[:100])
        check(s.get(base + "/v2/health/live").status_code == 200, "server died")
        # A chunked body (no Content-Length) is read whole like any other.
        chunks = iter([json.dumps(rnn_body)[:20].encode(), json.dumps(rnn_body)[20:].encode()])
        compare("rnn", decode_response(s.post(url, data=chunks))[1],
                [e for e in expected if e[0] == "h_final"])
        # Idle connections hold no thread: 64 silent sockets, and a request still answers at once.
        idle = [socket.create_connection(("127.0.0.1", ports["http"])) for _ in range(64)]
        start = time.monotonic()
        check(requests.get(base + "/v2/health/ready", timeout=10).status_code == 200, "ready")
        check(time.monotonic() - start < 1, "a request behind idle connections took %.2fs" %
              (time.monotonic() - start))
        for sock in idle:
            sock.close()
        check(s.get(base + "/v2/health/live").status_code == 200, "server died")
        print("ok: oversized bodies, paths, methods, encodings, chunked body, idle connections")

        # ---- timeout parameter, client disconnect, keep-alive ----
        endless = base + "/v2/models/endless/infer"
        x = {"name": "x", "datatype": "INT64", "shape": [1], "data": [0]}
        start = time.monotonic()
        expect_error(s.post(endless, json={"inputs": [x], "parameters": {"timeout": 200000}}), 504)
        check(time.monotonic() - start < 3, "timeout took %.1fs" % (time.monotonic() - start))
        cancelled = metric(metrics_url, "loopserve_requests_total", protocol="http",
                           outcome="cancelled")
        body = json.dumps({"inputs": [x]}).encode()
        with socket.create_connection(("127.0.0.1", ports["http"]), timeout=10) as sock:
            sock.sendall(b"POST /v2/models/endless/infer HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(body) + body)
            time.sleep(0.3)
        deadline = time.monotonic() + 5
        while (metric(metrics_url, "loopserve_requests_total", protocol="http",
                      outcome="cancelled") <= cancelled and time.monotonic() < deadline):
            time.sleep(0.05)
        check(metric(metrics_url, "loopserve_requests_total", protocol="http",
                     outcome="cancelled") == cancelled + 1, "disconnect did not cancel")
        conn = http.client.HTTPConnection("127.0.0.1", ports["http"], timeout=10)
        local = None
        for _ in range(3):
            conn.request("POST", "/v2/models/rnn/infer", body=json.dumps(rnn_body),
                         headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            check(response.status == 200, response.status)
            response.read()
            check(local in (None, conn.sock.getsockname()), "connection not kept alive")
            local = conn.sock.getsockname()
        conn.close()
        print("ok: timeout parameter, disconnect cancels, keep-alive")

        # ---- statistics and the protocol label ----
        stats = s.get(base + "/v2/models/rnn/stats").json()["model_stats"]
        check(len(stats) == 1 and stats[0]["name"] == "rnn", stats)
        check(stats[0]["inference_stats"]["success"]["count"] >= 9, stats[0]["inference_stats"])
        every = s.get(base + "/v2/models/stats").json()["model_stats"]
        check({"rnn", "counter", "endless"} <= {m["name"] for m in every}, every)
        check(metric(metrics_url, "loopserve_requests_total", protocol="http",
                     outcome="success") == 7 * 4 + 1 + 2 + 1 + 3 + 1 + 1 + mangled_ok,
              "http successes")  # 7 cases x 4 encodings, 1 scalar/[1] swap, ..., 1 gzip body
        check(metric(metrics_url, "loopserve_requests_total", protocol="grpc",
                     outcome="invalid_argument") == 1, "grpc invalid_argument")
        print("ok: statistics, protocol label")

        # ---- curl: what the README shows ----
        def curl(*argv):
            return subprocess.run(["curl", "-s", "-w", "\n%{http_code}"] + list(argv),
                                  capture_output=True, text=True, timeout=30).stdout.rsplit("\n", 1)

        body, code = curl(base + "/v2/health/ready")
        check(code == "200", code)
        body, code = curl("-X", "POST", url, "-H", "Content-Type: application/json", "-d",
                          json.dumps(rnn_body))
        check(code == "200", body)
        compare("rnn", {o["name"]: np.array(o["data"], np.float32).reshape(o["shape"])
                        for o in json.loads(body)["outputs"]},
                [e for e in expected if e[0] == "h_final"])
        body, code = curl("-X", "POST", url, "-d", "{oops")
        check(code == "400" and "not valid JSON" in json.loads(body)["error"], body)
        body, code = curl(base + "/v2/models/nope")
        check(code == "404" and "'nope'" in json.loads(body)["error"], body)
        print("ok: curl")

        # ---- loopctl --protocol=http: every command ----
        def loopctl(*argv):
            r = subprocess.run([args.loopctl, "--protocol=http",
                                "--addr=127.0.0.1:%d" % ports["http"]] + list(argv),
                               capture_output=True, text=True, timeout=60)
            return r.returncode, r.stdout, r.stderr

        check(loopctl("live")[:2] == (0, "live\n"), loopctl("live"))
        check(loopctl("ready")[:2] == (0, "ready\n"), loopctl("ready"))
        code, out, err = loopctl("metadata", "rnn")
        check(code == 0 and "M INT64 []" in out and "h0 FP32 [-1,4]" in out, out + err)
        code, out, err = loopctl("config", "counter")
        check(code == 0 and 'name: "counter"' in out and "TYPE_INT64" in out, out + err)
        start, trips = 10, 5  # counter counts start+1 .. start+M
        want = "counts INT64 [%d,1] = [%s]" % (trips, ", ".join(
            str(v) for v in range(start + 1, start + trips + 1)))
        for typed in ("false", "true"):
            code, out, err = loopctl("infer", "counter", "--input=M:INT64::%d" % trips,
                                     "--input=start:INT64:1:%d" % start, "--typed=" + typed)
            check(code == 0 and "final INT64 [1] = [%d]" % (start + trips) in out and want in out,
                  out + err)
        code, out, err = loopctl("infer", "nope", "--input=M:INT64::1")
        check(code == 1 and "NOT_FOUND: Request for unknown model: 'nope' is not found" in err, err)
        code, out, err = loopctl("infer", "counter", "--input=M:FP32::1",
                                 "--input=start:INT64:1:0")
        check(code == 1 and "INVALID_ARGUMENT" in err and "'M'" in err, err)
        code, out, err = loopctl("perf", "counter", "--input=M:INT64::3", "--requests=50",
                                 "--concurrency=2", "--progress=false")
        check(code == 0 and '"requests":50' in out, out + err)
        print("ok: loopctl --protocol=http")

    # ---- explicit model control: unload and load over HTTP ----
    with serving(args.loopserve, ["--model_repository=" + args.models, "--metrics_port=-1",
                                  "--model_control_mode=explicit", "--load_model=counter"],
                 ("grpc", "http")) as (proc, ports):
        base = "http://127.0.0.1:%d" % ports["http"]
        expect_error(requests.get(base + "/v2/models/rnn/ready"), 404, "'rnn'")
        r = requests.post(base + "/v2/repository/models/rnn/load")
        check(r.status_code == 200, r.text)
        check(requests.get(base + "/v2/models/rnn/ready").status_code == 200, "rnn loaded")
        r = requests.post(base + "/v2/repository/models/rnn/unload")
        check(r.status_code == 200, r.text)
        r = requests.get(base + "/v2/models/rnn/ready")
        check(r.status_code in (404, 503), r.text)
        expect_error(requests.post(base + "/v2/repository/models/rnn/load",
                                   json={"parameters": 7}), 400, "'parameters'")
        expect_error(requests.post(base + "/v2/repository/models/nope/load"), 404, "nope")
        print("ok: explicit load/unload")

    # ---- a full queue (429) and shutting down (503) ----
    endless = json.dumps({"inputs": [{"name": "x", "datatype": "INT64", "shape": [1],
                                      "data": [0]}]}).encode()
    held = []
    with serving(args.loopserve, ["--model_repository=" + args.models, "--metrics_port=-1",
                                  "--workers=1", "--max_queue_size=1", "--exit_timeout_seconds=2"],
                 ("grpc", "http")) as (proc, ports):
        base = "http://127.0.0.1:%d" % ports["http"]
        for _ in range(2):  # one runs on the worker, one waits in the queue
            sock = socket.create_connection(("127.0.0.1", ports["http"]), timeout=10)
            sock.sendall(b"POST /v2/models/endless/infer HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(endless) + endless)
            held.append(sock)
            time.sleep(0.3)
        expect_error(requests.post(base + "/v2/models/endless/infer", data=endless, timeout=10),
                     429, "queue")
        proc.send_signal(signal.SIGTERM)  # the two requests keep it draining for 2 s
        time.sleep(0.3)
        expect_error(requests.get(base + "/v2/health/ready", timeout=10), 503, "not ready")
        expect_error(requests.post(base + "/v2/models/endless/infer", data=endless, timeout=10),
                     503, "shutting down")
        answers = [sock.recv(4096) for sock in held]  # cancelled at the exit timeout
        check(all(a.startswith(b"HTTP/1.1 499") for a in answers), answers)
        print("ok: full queue 429, draining 503, cancelled at exit 499")
        for sock in held:
            sock.close()

    # ---- TLS and mutual TLS with the gRPC flags ----
    cert, key = os.path.join(args.work, "cert.pem"), os.path.join(args.work, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                    "-out", cert, "-days", "1", "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=DNS:localhost,IP:127.0.0.1"], check=True, capture_output=True)
    for mutual in (False, True):
        flags = ["--model_repository=" + args.models, "--metrics_port=-1", "--tls_cert=" + cert,
                 "--tls_key=" + key] + (["--tls_client_ca=" + cert] if mutual else [])
        with serving(args.loopserve, flags, ("grpc", "http")) as (proc, ports):
            url = "https://127.0.0.1:%d/v2/health/ready" % ports["http"]
            client = (cert, key) if mutual else None
            check(requests.get(url, verify=cert, cert=client, timeout=10).status_code == 200,
                  "HTTPS ready")
            for bad in (lambda: requests.get(url.replace("https", "http"), timeout=10),
                        lambda: requests.get(url, verify=cert, timeout=10) if mutual else
                        requests.get(url, timeout=10)):  # no client cert / unknown server cert
                try:
                    bad()
                    check(False, "a request without TLS (or its client certificate) got through")
                except requests.exceptions.RequestException:
                    check(True, "")
    print("ok: HTTPS, mutual TLS")
    print("ok: %d checks, SIGTERM -> exit 0" % Checks.count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
