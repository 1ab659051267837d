#pragma once
// LibTorch appends a C++ stack trace to its exceptions' what(); users need the message.
#include <exception>
#include <string>

namespace ddp::runtime {

std::string error_message(const std::exception& error);
// The first line of error_message, for errors quoted inside a sentence of our own.
std::string error_summary(const std::exception& error);
// A message's first line (an error quoted again, without the detail that follows it).
std::string first_line(const std::string& text);

}  // namespace ddp::runtime
