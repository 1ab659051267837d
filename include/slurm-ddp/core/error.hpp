#pragma once
// The one error type of the core library, and of the API: a job factory throws it for bad input, and train_main
// ends every rank with its message (train.hpp). Its message is a single line that names the bad value and the fix;
// callers print it as is, behind the "ddp: " prefix.
#include <stdexcept>
#include <string>

namespace ddp {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace ddp
