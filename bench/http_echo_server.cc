// A bare KServe v2 REST echo server: libevhtp's own floor for bench/request_cost.py (issue 34),
// the REST counterpart of grpc_echo_server.
//
//   build/bin/http_echo_server --metadata=FILE [--address=127.0.0.1] [--http_port=0] [--threads=2]
//
// libevhtp with --threads event threads (loopserve's REST default on this machine), the same
// libevhtp and RapidJSON loopserve's REST port uses, and nothing else: POST .../infer parses the
// request's JSON header (Triton's binary extension: Inference-Header-Content-Length) and answers
// each input as an output of the same name, datatype and shape, with its bytes copied after the
// answer's JSON header (binary inputs) or its "data" copied into the JSON (JSON inputs); GET
// /v2/models/... answers the metadata JSON in FILE, whatever model is asked, so that `loopctl
// perf --protocol=http` drives this server exactly as it drives loopserve; GET /v2/health/*
// answers 200. No engine, no worker, no metric, no framing checks.
//
// Prints "echo: http listening on ADDRESS:PORT" once bound; serves until SIGTERM/SIGINT.

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "event2/buffer.h"
#include "event2/event.h"
#include "event2/listener.h"
#include "evhtp/evhtp.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"

ABSL_FLAG(std::string, address, "127.0.0.1", "IPv4 address to bind");
ABSL_FLAG(int, http_port, 0, "Port; 0 picks a free one");
ABSL_FLAG(int, threads, 2, "libevhtp event threads");
ABSL_FLAG(std::string, metadata, "", "The model metadata JSON to answer (required)");

namespace {

std::string metadata_json;

void Reply(evhtp_request_t* request, int status, const char* type, const std::string& body,
           size_t header_length) {
  evhtp_headers_add_header(request->headers_out, evhtp_header_new("Content-Type", type, 0, 0));
  if (header_length != body.size()) {
    evhtp_headers_add_header(request->headers_out,
                             evhtp_header_new("Inference-Header-Content-Length",
                                              absl::StrCat(header_length).c_str(), 0, 1));
  }
  evbuffer_add(request->buffer_out, body.data(), body.size());
  evhtp_send_reply(request, static_cast<evhtp_res>(status));
}

void Infer(evhtp_request_t* request) {
  const size_t size = evbuffer_get_length(request->buffer_in);
  std::string body(size, '\0');
  evbuffer_copyout(request->buffer_in, body.data(), size);
  size_t header_length = size;
  if (const char* text =
          evhtp_header_find(request->headers_in, "Inference-Header-Content-Length")) {
    if (!absl::SimpleAtoi(text, &header_length) || header_length > size) {
      Reply(request, 400, "application/json", "{\"error\":\"bad header length\"}", 29);
      return;
    }
  }
  rapidjson::Document in;
  in.Parse(body.data(), header_length);
  if (in.HasParseError() || !in.IsObject() || !in.HasMember("inputs") || !in["inputs"].IsArray()) {
    Reply(request, 400, "application/json", "{\"error\":\"bad request\"}", 23);
    return;
  }
  rapidjson::StringBuffer json;
  rapidjson::Writer<rapidjson::StringBuffer> w(json);
  std::string binary;
  size_t at = header_length;
  w.StartObject();
  w.Key("model_name");
  w.String("echo");
  w.Key("outputs");
  w.StartArray();
  for (const rapidjson::Value& input : in["inputs"].GetArray()) {
    w.StartObject();
    for (const char* key : {"name", "datatype", "shape"}) {
      if (input.HasMember(key)) {
        w.Key(key);
        input[key].Accept(w);
      }
    }
    const rapidjson::Value* bytes = nullptr;
    if (input.HasMember("parameters") && input["parameters"].IsObject() &&
        input["parameters"].HasMember("binary_data_size") &&
        input["parameters"]["binary_data_size"].IsUint64()) {
      bytes = &input["parameters"]["binary_data_size"];
    }
    if (bytes != nullptr) {
      const size_t n = bytes->GetUint64();
      if (n > size - at) {
        Reply(request, 400, "application/json", "{\"error\":\"short body\"}", 22);
        return;
      }
      binary.append(body, at, n);
      at += n;
      w.Key("parameters");
      w.StartObject();
      w.Key("binary_data_size");
      w.Uint64(n);
      w.EndObject();
    } else if (input.HasMember("data")) {
      w.Key("data");
      input["data"].Accept(w);
    }
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  std::string answer(json.GetString(), json.GetSize());
  const size_t answer_header = answer.size();
  answer += binary;
  Reply(request, 200, binary.empty() ? "application/json" : "application/octet-stream", answer,
        answer_header);
}

void OnRequest(evhtp_request_t* request, void*) {
  const char* path =
      request->uri != nullptr && request->uri->path != nullptr ? request->uri->path->full : "";
  const htp_method method = evhtp_request_get_method(request);
  if (method == htp_method_POST && absl::EndsWith(path, "/infer")) {
    Infer(request);
  } else if (method == htp_method_GET && absl::StartsWith(path, "/v2/health/")) {
    Reply(request, 200, "application/json", "", 0);
  } else if (method == htp_method_GET && absl::StartsWith(path, "/v2/models/")) {
    Reply(request, 200, "application/json", metadata_json, metadata_json.size());
  } else {
    Reply(request, 404, "application/json", "{\"error\":\"not found\"}", 21);
  }
}

event_base* base = nullptr;

void OnSignal(evutil_socket_t, short, void*) { event_base_loopbreak(base); }

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::ifstream file(absl::GetFlag(FLAGS_metadata));
  std::stringstream text;
  text << file.rdbuf();
  metadata_json = text.str();
  if (!file || metadata_json.empty()) {
    std::fprintf(stderr, "http_echo_server: --metadata=FILE with the metadata JSON is required\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  base = event_base_new();
  evhtp_t* htp = evhtp_new(base, nullptr);
  evhtp_set_gencb(htp, &OnRequest, nullptr);
  evhtp_use_threads_wexit(htp, nullptr, nullptr, absl::GetFlag(FLAGS_threads), nullptr);
  const std::string address = absl::GetFlag(FLAGS_address);
  if (evhtp_bind_socket(htp, ("ipv4:" + address).c_str(),
                        static_cast<uint16_t>(absl::GetFlag(FLAGS_http_port)), 1024) != 0) {
    std::fprintf(stderr, "http_echo_server: cannot bind %s\n", address.c_str());
    return 1;
  }
  sockaddr_in bound{};
  socklen_t length = sizeof(bound);
  getsockname(evconnlistener_get_fd(htp->server), reinterpret_cast<sockaddr*>(&bound), &length);
  std::printf("echo: http listening on %s:%d\n", address.c_str(), ntohs(bound.sin_port));
  std::fflush(stdout);
  event* term = evsignal_new(base, SIGTERM, &OnSignal, nullptr);
  event* interrupt = evsignal_new(base, SIGINT, &OnSignal, nullptr);
  event_add(term, nullptr);
  event_add(interrupt, nullptr);
  event_base_loop(base, EVLOOP_NO_EXIT_ON_EMPTY);
  event_free(term);
  event_free(interrupt);
  evhtp_unbind_socket(htp);
  evhtp_free(htp);
  event_base_free(base);
  return 0;
}
