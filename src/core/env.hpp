#pragma once
// Reading environment variables through a function, so that every reader (the plugin reads the task's
// environment through SPANK, the programs their own) can be tested with any environment.
#include <functional>
#include <map>
#include <optional>
#include <string>

namespace ddp {

// The value of a variable; nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

// This process's environment (getenv).
EnvLookup process_environment();

// `values` first, then `fallback` (which may be empty: then only `values`).
EnvLookup env_with(std::map<std::string, std::string> values, EnvLookup fallback = {});

}  // namespace ddp
