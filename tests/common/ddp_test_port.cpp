// ddp-test-port PID: prints a TCP port for a shell test (reserve_port), locked until process PID ends:
//   PORT=$(ddp-test-port $$)
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "test_common.hpp"

int main(int argc, char** argv) {
  const int holder = argc == 2 ? std::atoi(argv[1]) : 0;
  if (holder <= 0) {
    std::fprintf(stderr, "usage: ddp-test-port PID (the process that uses the port)\n");
    return 2;
  }
  try {
    std::printf("%u\n", ddp::testing::reserve_port(holder));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp-test-port: %s\n", e.what());
    return 1;
  }
  return 0;
}
