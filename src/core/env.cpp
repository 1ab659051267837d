#include "core/env.hpp"

#include <cstdlib>

namespace ddp {

EnvLookup process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

EnvLookup env_with(std::map<std::string, std::string> values, EnvLookup fallback) {
  return [values = std::move(values), fallback = std::move(fallback)](const std::string& name) {
    const auto found = values.find(name);
    if (found != values.end()) return std::optional<std::string>(found->second);
    return fallback ? fallback(name) : std::nullopt;
  };
}

}  // namespace ddp
