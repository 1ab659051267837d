#include "base/port_range.hpp"

#include <fstream>
#include <sstream>

#include "base/parse.hpp"
#include "core/error.hpp"

namespace ddp {

PortRange parse_port_range(std::string_view text, std::string_view what) {
  const size_t dash = text.find('-');
  const auto first = parse_uint(text.substr(0, dash), 65535);
  const auto last = dash == std::string_view::npos ? std::nullopt : parse_uint(text.substr(dash + 1), 65535);
  if (!first || !last || *first == 0 || *last < *first) {
    throw Error(std::string(what) + " " + quote(text) +
                " is not a port range FIRST-LAST within 1-65535, e.g. 20000-29999");
  }
  return {static_cast<uint16_t>(*first), static_cast<uint16_t>(*last)};
}

PortRange parse_ephemeral_range(std::string_view proc_text) {
  std::istringstream in{std::string(proc_text)};
  uint32_t first = 0, last = 0;
  if (!(in >> first >> last) || first == 0 || last > 65535 || last < first) {
    throw Error("cannot read the kernel's ephemeral port range from " + quote(proc_text));
  }
  return {static_cast<uint16_t>(first), static_cast<uint16_t>(last)};
}

PortRange read_ephemeral_range(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  if (!file) throw Error("cannot read " + path + ": the kernel's ephemeral port range is needed to check port_range");
  return parse_ephemeral_range(text.str());
}

}  // namespace ddp
