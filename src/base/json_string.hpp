#pragma once
// Text as a JSON string literal, for the programs that print JSON lines of their own (ddp-topo --json, ddp-train's
// reports); the core's one JSON escaper. Invalid UTF-8 becomes U+FFFD, so what is printed always parses.
#include <string>

namespace ddp {

// `text` quoted and escaped: "a\"b\n" -> "\"a\\\"b\\n\"".
std::string json_string(const std::string& text);

}  // namespace ddp
