// How fast each JSON library Debian bookworm ships turns a KServe v2 REST request carrying a 1 MB
// FP32 tensor into floats: the measurement behind the HTTP adapter's choice of JSON library.
//
//   build/bin/json_bench [--bytes=1048576] [--rounds=15] [--runs=10]
//
// The body is what Python's `requests.post(json=...)` sends for `numpy_array.tolist()`: one input
// {"name", "shape", "datatype": "FP32", "data": [...]} whose values are float32 numbers printed as
// Python prints doubles (17 significant digits at most, e.g. 0.3745401203632355). Each library
// parses the whole body (validating all of it) and copies `data` into a float buffer:
//   rapidjson DOM        Document::Parse, then GetDouble per element
//   rapidjson in situ    Document::ParseInsitu on a copy of the body (strings not copied)
//   simdjson DOM         dom::parser::parse (padded copy made outside the timing), get_double
//   simdjson on-demand   ondemand::parser::iterate, get_double while walking
//   nlohmann             json::parse, get<double>
// Rounds alternate the libraries; each figure is the median over all runs of all rounds, with
// MB/s and the ratio to the fastest. A checksum of the floats proves each parse read every value.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"
#include "rapidjson/document.h"
#include "simdjson.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string MakeBody(size_t target_bytes, size_t* count) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::string data;
  size_t n = 0;
  char buf[40];
  while (data.size() < target_bytes) {
    const double v = dist(rng);  // a float32 value, printed as a double (Python's repr)
    std::snprintf(buf, sizeof(buf), "%.17g", v);
    if (n > 0) data += ", ";
    data += buf;
    ++n;
  }
  *count = n;
  return "{\"inputs\": [{\"name\": \"x\", \"shape\": [1, " + std::to_string(n) +
         "], \"datatype\": \"FP32\", \"data\": [" + data + "]}]}";
}

double Checksum(const std::vector<float>& v) {
  double s = 0;
  for (float f : v) s += f;
  return s;
}

struct Contender {
  Contender(const char* n, std::function<bool(const std::string&, std::vector<float>*)> p)
      : name(n), parse(std::move(p)) {}
  const char* name;
  std::function<bool(const std::string&, std::vector<float>*)> parse;
  std::vector<double> us;
  double checksum = 0;
};

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = 1 << 20;
  int rounds = 15, runs = 10;
  for (int i = 1; i < argc; ++i) {
    if (std::sscanf(argv[i], "--bytes=%zu", &bytes) == 1) continue;
    if (std::sscanf(argv[i], "--rounds=%d", &rounds) == 1) continue;
    if (std::sscanf(argv[i], "--runs=%d", &runs) == 1) continue;
    std::fprintf(stderr, "usage: json_bench [--bytes=N] [--rounds=R] [--runs=K]\n");
    return 2;
  }
  size_t count = 0;
  const std::string body = MakeBody(bytes, &count);
  const simdjson::padded_string padded(body);
  std::vector<float> out;
  out.reserve(count);

  std::vector<Contender> contenders;
  contenders.push_back({"rapidjson DOM", [](const std::string& b, std::vector<float>* v) {
                          rapidjson::Document doc;
                          doc.Parse(b.data(), b.size());
                          if (doc.HasParseError()) return false;
                          const auto& data = doc["inputs"][0]["data"];
                          v->clear();
                          for (const auto& e : data.GetArray()) {
                            v->push_back(static_cast<float>(e.GetDouble()));
                          }
                          return true;
                        }});
  contenders.push_back({"rapidjson in situ", [](const std::string& b, std::vector<float>* v) {
                          std::string copy = b;  // ParseInsitu writes into its input
                          rapidjson::Document doc;
                          doc.ParseInsitu(copy.data());
                          if (doc.HasParseError()) return false;
                          const auto& data = doc["inputs"][0]["data"];
                          v->clear();
                          for (const auto& e : data.GetArray()) {
                            v->push_back(static_cast<float>(e.GetDouble()));
                          }
                          return true;
                        }});
  simdjson::dom::parser dom_parser;
  contenders.push_back({"simdjson DOM", [&](const std::string&, std::vector<float>* v) {
                          simdjson::dom::element doc;
                          if (dom_parser.parse(padded).get(doc) != simdjson::SUCCESS) return false;
                          simdjson::dom::array data;
                          if (doc["inputs"].at(0)["data"].get_array().get(data) !=
                              simdjson::SUCCESS)
                            return false;
                          v->clear();
                          for (simdjson::dom::element e : data) {
                            double d;
                            if (e.get_double().get(d) != simdjson::SUCCESS) return false;
                            v->push_back(static_cast<float>(d));
                          }
                          return true;
                        }});
  simdjson::ondemand::parser od_parser;
  contenders.push_back({"simdjson on-demand", [&](const std::string&, std::vector<float>* v) {
                          simdjson::ondemand::document doc;
                          if (od_parser.iterate(padded).get(doc) != simdjson::SUCCESS) return false;
                          simdjson::ondemand::array inputs;
                          if (doc["inputs"].get_array().get(inputs) != simdjson::SUCCESS)
                            return false;
                          v->clear();
                          for (auto input : inputs) {
                            simdjson::ondemand::array data;
                            if (input["data"].get_array().get(data) != simdjson::SUCCESS)
                              return false;
                            for (auto e : data) {
                              double d;
                              if (e.get_double().get(d) != simdjson::SUCCESS) return false;
                              v->push_back(static_cast<float>(d));
                            }
                          }
                          return true;
                        }});
  contenders.push_back({"nlohmann", [](const std::string& b, std::vector<float>* v) {
                          nlohmann::json doc = nlohmann::json::parse(b, nullptr, false);
                          if (doc.is_discarded()) return false;
                          v->clear();
                          for (const auto& e : doc["inputs"][0]["data"]) {
                            v->push_back(static_cast<float>(e.get<double>()));
                          }
                          return true;
                        }});

  for (int r = 0; r < rounds; ++r) {
    for (Contender& c : contenders) {
      for (int k = 0; k < runs; ++k) {
        const auto t0 = Clock::now();
        if (!c.parse(body, &out) || out.size() != count) {
          std::fprintf(stderr, "%s failed\n", c.name);
          return 1;
        }
        c.us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        c.checksum = Checksum(out);
      }
    }
  }
  std::printf("body: %zu bytes, %zu FP32 values; %d rounds x %d parses\n", body.size(), count,
              rounds, runs);
  double best = 1e300;
  for (Contender& c : contenders) {
    std::sort(c.us.begin(), c.us.end());
    best = std::min(best, c.us[c.us.size() / 2]);
  }
  std::printf("%-20s %10s %10s %8s  %s\n", "library", "median us", "MB/s", "x best", "checksum");
  for (const Contender& c : contenders) {
    const double median = c.us[c.us.size() / 2];
    std::printf("%-20s %10.0f %10.0f %8.2f  %.6f\n", c.name, median, body.size() / median,
                median / best, c.checksum);
  }
  return 0;
}
