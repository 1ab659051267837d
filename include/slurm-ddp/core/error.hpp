#pragma once
// The one error type of the core library. Its message is a single line that names the bad value and the fix;
// callers print it as is, behind the "ddp: " prefix.
#include <stdexcept>
#include <string>

namespace ddp {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace ddp
