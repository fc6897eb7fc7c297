#!/usr/bin/python3
"""Python smoke test: a stock grpcio client (what tritonclient/KServe users run) talks to loopserve.

Usage: /usr/bin/python3 python_smoke_test.py --loopserve=BIN --models=DIR --repo_root=DIR --work=DIR
       [--protoc=PROTOC]

Generates Python stubs for proto/grpc_service.proto (and the model_config.proto it imports) and
proto/health.proto with protoc and
/usr/bin/grpc_python_plugin into --work, starts loopserve on 127.0.0.1 with kernel-picked ports,
checks ServerLive, grpc.health.v1 Check, ModelInfer of `counter` and `rnn` against the numpy
expected outputs (raw contents), an endless-loop deadline, then SIGTERM -> exit code 0.
"""

import os
import signal
import sys
import time

import numpy as np

import grpc  # noqa: E402

from loopserve_py import DTYPES, OIP, parse_test_args, read_case, start_server  # noqa: E402



def main():
    args = parse_test_args(protos=("proto/grpc_service.proto", "proto/model_config.proto",
                                   "proto/health.proto"))
    from proto import grpc_service_pb2 as pb, grpc_service_pb2_grpc as pb_grpc  # noqa: E402
    from proto import health_pb2, health_pb2_grpc  # noqa: E402

    proc, ports = start_server(args.loopserve,
                               ["--model_repository=" + args.models, "--metrics_port=0"])
    port = ports["grpc"]
    try:
        channel = grpc.insecure_channel("127.0.0.1:%d" % port)
        grpc.channel_ready_future(channel).result(timeout=30)
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        assert stub.ServerLive(pb.ServerLiveRequest(), timeout=10).live
        health = health_pb2_grpc.HealthStub(channel)
        status = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10).status
        assert status == health_pb2.HealthCheckResponse.SERVING, status

        for model in ("counter", "rnn", "greedy_decoder", "nested"):
            inputs, expected = read_case(os.path.join(args.models, model, "expected"))
            request = pb.ModelInferRequest(model_name=model)
            for name, array in inputs:
                request.inputs.add(name=name, datatype=OIP[array.dtype.type], shape=array.shape)
                request.raw_input_contents.append(np.ascontiguousarray(array).tobytes())
            response = stub.ModelInfer(request, timeout=30)
            got = {o.name: np.frombuffer(raw, DTYPES[o.datatype]).reshape(tuple(o.shape))
                   for o, raw in zip(response.outputs, response.raw_output_contents)}
            for name, want in expected:
                assert got[name].shape == want.shape, (model, name, got[name].shape, want.shape)
                if want.dtype.kind == "f":
                    np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6)
                else:
                    np.testing.assert_array_equal(got[name], want)
            print("ok: %s" % model)

        request = pb.ModelInferRequest(model_name="endless")
        request.inputs.add(name="x", datatype="INT64", shape=[1])
        request.raw_input_contents.append(np.zeros(1, np.int64).tobytes())
        start = time.monotonic()
        try:
            stub.ModelInfer(request, timeout=1.0)
            raise AssertionError("endless returned")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.DEADLINE_EXCEEDED, e
        assert time.monotonic() - start < 1.5
        print("ok: endless deadline")
        channel.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    assert code == 0, "loopserve exited with %d" % code
    print("ok: SIGTERM -> exit 0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
