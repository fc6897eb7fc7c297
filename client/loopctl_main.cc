// loopctl: command-line client for loopserve. See `loopctl --help` and client/loopctl.h.

#include <iostream>
#include <string>
#include <vector>

#include "client/loopctl.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  return loopserve::client::RunLoopctl(args, std::cout, std::cerr);
}
