// libFuzzer target: snapshot directory templates (--ddp-snapshot-dir, snapshot_dir=) with the user, job id and job
// name they are expanded with; the input is the four strings separated by NUL bytes. A result is an absolute path
// in which no expanded value added a component of its own (no '/', "." or ".." from a value).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/snapshot_dir.hpp"

namespace {

size_t count(const std::string& text, char c) {
  size_t n = 0;
  for (char x : text) n += x == c;
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> parts(4);
  size_t part = 0;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\0' && part < 3) {
      ++part;
    } else {
      parts[part] += static_cast<char>(data[i]);
    }
  }
  try {
    const std::string path = ddp::expand_path_template(parts[0], {parts[1], parts[2], parts[3]});
    if (path.empty() || path[0] != '/') std::abort();
    // Every '/' of the result comes from the template itself.
    if (count(path, '/') > count(parts[0], '/')) std::abort();
  } catch (const ddp::Error&) {
  }
  return 0;
}
