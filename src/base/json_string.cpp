#include "base/json_string.hpp"

#include <nlohmann/json.hpp>

namespace ddp {

std::string json_string(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace ddp
