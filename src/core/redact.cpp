#include "core/redact.hpp"

#include <cctype>

namespace ddp {

std::string redact_key_material(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t end = i;
    while (end < text.size() && std::isxdigit(static_cast<unsigned char>(text[end]))) ++end;
    if (end == i) {
      out += text[i++];
      continue;
    }
    if (end - i >= kKeyMaterialDigits) {
      out += kRedacted;
    } else {
      out.append(text.substr(i, end - i));
    }
    i = end;
  }
  return out;
}

}  // namespace ddp
