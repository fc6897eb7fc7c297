#!/usr/bin/python3
"""Triton's ModelConfig RPC on the wire: a Python client generated from our protos, and a raw call
whose bytes are decoded by hand against Triton's field numbers.

Usage: /usr/bin/python3 python_model_config_test.py --loopserve=BIN --models=DIR --repo_root=DIR
       --work=DIR [--protoc=PROTOC]

The field numbers below are copied from Triton's own files (triton-inference-server/common
protobuf/grpc_service.proto: ModelConfigRequest {name = 1; version = 2}, ModelConfigResponse
{config = 1}; protobuf/model_config.proto: ModelConfig, ModelInput, ModelOutput, ...), not from
loopserve's .proto, so a numbering mistake in proto/model_config.proto fails here even though a
client generated from that same file would agree with the server.
"""

import signal
import sys

import grpc

from loopserve_py import parse_test_args, start_server

# Triton's numbering (see the module docstring).
REQUEST_NAME, REQUEST_VERSION = 1, 2
RESPONSE_CONFIG = 1
CONFIG = {"name": 1, "platform": 2, "version_policy": 3, "max_batch_size": 4, "input": 5,
          "output": 6, "instance_group": 7, "default_model_filename": 8, "parameters": 14,
          "model_warmup": 16, "backend": 17}
INPUT = {"name": 1, "data_type": 2, "dims": 4, "reshape": 5, "optional": 8}
OUTPUT = {"name": 1, "data_type": 2, "dims": 3}
RESHAPE_SHAPE = 1
POLICY_LATEST, LATEST_NUM_VERSIONS = 1, 1
GROUP = {"name": 1, "count": 2, "kind": 4}
KIND_CPU = 2
MAP_KEY, MAP_VALUE = 1, 2
PARAMETER_STRING_VALUE = 1
WARMUP = {"name": 1, "inputs": 3}
WARMUP_INPUT = {"data_type": 1, "dims": 2, "random_data": 4, "input_data_file": 5}
TYPE_INT64, TYPE_FP32 = 9, 11


# ---- A protobuf wire-format reader (varint, 64-bit, length-delimited, 32-bit) ----

def read_varint(data, pos):
    result, shift = 0, 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def fields(data):
    """{field number: [(wire type, value)]}; value is int for varints, bytes otherwise."""
    out, pos = {}, 0
    while pos < len(data):
        key, pos = read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = read_varint(data, pos)
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 2:
            length, pos = read_varint(data, pos)
            value, pos = data[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise AssertionError("unexpected wire type %d" % wire)
        out.setdefault(number, []).append((wire, value))
    return out


def one(msg, number, wire):
    values = msg.get(number, [])
    assert len(values) == 1, (number, values)
    assert values[0][0] == wire, (number, values[0][0], wire)
    return values[0][1]


def string(msg, number):
    return one(msg, number, 2).decode()


def submessages(msg, number):
    return [fields(v) for w, v in msg.get(number, []) if w == 2]


def signed64(value):
    return value - (1 << 64) if value >= 1 << 63 else value


def int64s(msg, number):
    """A repeated int64, packed (proto3's default) or not."""
    values = []
    for wire, value in msg.get(number, []):
        if wire == 0:
            values.append(signed64(value))
        else:
            pos = 0
            while pos < len(value):
                v, pos = read_varint(value, pos)
                values.append(signed64(v))
    return values


def string_map(msg, number):
    """A map<string, message> as {key: the value's fields}."""
    return {string(fields_, MAP_KEY): fields(one(fields_, MAP_VALUE, 2))
            for fields_ in submessages(msg, number)}


def encode_request(name, version=""):
    def field(number, text):
        raw = text.encode()
        return bytes([number << 3 | 2, len(raw)]) + raw
    return field(REQUEST_NAME, name) + (field(REQUEST_VERSION, version) if version else b"")


def check_raw(channel):
    call = channel.unary_unary("/inference.GRPCInferenceService/ModelConfig",
                               request_serializer=lambda b: b, response_deserializer=lambda b: b)

    # rnn: the full config of the example repository.
    config = fields(one(fields(call(encode_request("rnn", "1"), timeout=30)), RESPONSE_CONFIG, 2))
    assert string(config, CONFIG["name"]) == "rnn"
    assert string(config, CONFIG["platform"]) == "onnxruntime_onnx"
    assert string(config, CONFIG["backend"]) == "onnxruntime"
    assert string(config, CONFIG["default_model_filename"]) == "model.onnx"
    assert CONFIG["max_batch_size"] not in config  # 0: not on the wire
    latest = fields(one(fields(one(config, CONFIG["version_policy"], 2)), POLICY_LATEST, 2))
    assert one(latest, LATEST_NUM_VERSIONS, 0) == 1
    inputs = submessages(config, CONFIG["input"])
    assert [string(i, INPUT["name"]) for i in inputs] == ["M", "h0"], inputs
    assert one(inputs[0], INPUT["data_type"], 0) == TYPE_INT64
    assert int64s(inputs[0], INPUT["dims"]) == []
    assert one(inputs[1], INPUT["data_type"], 0) == TYPE_FP32
    assert int64s(inputs[1], INPUT["dims"]) == [-1, 4]
    outputs = submessages(config, CONFIG["output"])
    assert [string(o, OUTPUT["name"]) for o in outputs] == ["h_final", "h_seq"]
    assert int64s(outputs[1], OUTPUT["dims"]) == [-1, -1, 4]
    groups = submessages(config, CONFIG["instance_group"])
    assert len(groups) == 1
    assert one(groups[0], GROUP["count"], 0) == 2
    assert one(groups[0], GROUP["kind"], 0) == KIND_CPU
    parameters = string_map(config, CONFIG["parameters"])
    assert string(parameters["max_loop_iterations"], PARAMETER_STRING_VALUE) == "1000000"
    warmups = submessages(config, CONFIG["model_warmup"])
    assert string(warmups[0], WARMUP["name"]) == "16 steps, batch 8"
    warm_inputs = string_map(warmups[0], WARMUP["inputs"])
    assert string(warm_inputs["M"], WARMUP_INPUT["input_data_file"]) == "M_16"
    assert one(warm_inputs["h0"], WARMUP_INPUT["random_data"], 0) == 1
    assert int64s(warm_inputs["h0"], WARMUP_INPUT["dims"]) == [8, 4]
    print("ok: rnn's config on the wire has Triton's field numbers")

    # rnn_batched: max_batch_size 8. ov_counter: an input with an (empty) reshape.
    config = fields(one(fields(call(encode_request("rnn_batched"), timeout=30)),
                        RESPONSE_CONFIG, 2))
    assert one(config, CONFIG["max_batch_size"], 0) == 8
    config = fields(one(fields(call(encode_request("ov_counter"), timeout=30)),
                        RESPONSE_CONFIG, 2))
    assert string(config, CONFIG["platform"]) == "openvino"
    trip = submessages(config, CONFIG["input"])[0]
    assert int64s(trip, INPUT["dims"]) == [1]
    reshape = fields(one(trip, INPUT["reshape"], 2))
    assert int64s(reshape, RESHAPE_SHAPE) == []
    print("ok: max_batch_size and reshape on the wire")

    try:
        call(encode_request("no_such_model"), timeout=30)
        raise AssertionError("no error for an unknown model")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.NOT_FOUND, e
    print("ok: unknown model -> NOT_FOUND")


def check_generated(channel):
    from proto import grpc_service_pb2 as pb, grpc_service_pb2_grpc as pb_grpc  # noqa: E402
    from proto import model_config_pb2 as mc  # noqa: E402
    stub = pb_grpc.GRPCInferenceServiceStub(channel)
    config = stub.ModelConfig(pb.ModelConfigRequest(name="counter"), timeout=30).config
    assert config.name == "counter"
    assert config.platform == "onnxruntime_onnx"
    assert [i.name for i in config.input] == ["M", "start"]
    assert config.input[0].data_type == mc.TYPE_INT64
    assert list(config.input[1].dims) == [1]
    assert list(config.output[1].dims) == [-1, 1]
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU
    metadata = stub.ServerMetadata(pb.ServerMetadataRequest(), timeout=30)
    assert "model_configuration" in metadata.extensions, metadata.extensions
    print("ok: the generated client reads counter's auto-completed config")


def main():
    args = parse_test_args()
    proc, ports = start_server(args.loopserve,
                               ["--model_repository=" + args.models, "--metrics_port=-1"],
                               kinds=("grpc",))
    port = ports["grpc"]
    try:
        channel = grpc.insecure_channel("127.0.0.1:%d" % port)
        grpc.channel_ready_future(channel).result(timeout=30)
        check_raw(channel)
        check_generated(channel)
        channel.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    assert code == 0, "loopserve exited with %d" % code
    return 0


if __name__ == "__main__":
    sys.exit(main())
