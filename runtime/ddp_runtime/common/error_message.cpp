#include "ddp_runtime/common/error_message.hpp"

#include <c10/util/Exception.h>

namespace ddp::runtime {

std::string error_message(const std::exception& error) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&error);
  return torch_error != nullptr ? torch_error->what_without_backtrace() : error.what();
}

std::string error_summary(const std::exception& error) { return first_line(error_message(error)); }

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

}  // namespace ddp::runtime
