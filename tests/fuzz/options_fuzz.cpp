// libFuzzer target: option values and plugstack arguments from users and admins. The first byte picks the
// option; the rest is its value, or a list of plugstack arguments split on spaces.
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "spank_plugin/step/options.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string value(reinterpret_cast<const char*>(data + 1), size - 1);
  ddp::Options options;
  try {
    ddp::apply_option(options, data[0] % (ddp::option_table().size() + 1), value.c_str());
  } catch (const ddp::Error&) {
  }
  std::vector<std::string> args;
  size_t start = 0;
  for (size_t space; (space = value.find(' ', start)) != std::string::npos; start = space + 1) {
    args.push_back(value.substr(start, space - start));
  }
  args.push_back(value.substr(start));
  try {
    ddp::parse_config(args, "plugstack.conf");
  } catch (const ddp::Error&) {
  }
  return 0;
}
