#pragma once

#include <string>

// RapidJSON's output-stream concept over a std::string: `rapidjson::Writer<StringSink>` appends
// the JSON it writes to the string (REST bodies on both sides of the protocol).
namespace loopserve::protocol {

struct StringSink {
  using Ch = char;
  std::string* s;
  void Put(char c) { s->push_back(c); }
  void Flush() {}
};

}  // namespace loopserve::protocol
