#include "core/backend.hpp"

#include <string>

#include "base/parse.hpp"
#include "core/error.hpp"

namespace ddp {

const char* to_string(Backend backend) {
  switch (backend) {
    case Backend::Auto: return "auto";
    case Backend::Gloo: return "gloo";
    case Backend::Nccl: return "nccl";
    case Backend::Mpi: return "mpi";
  }
  return "?";
}

std::optional<Backend> backend_named(std::string_view name) {
  for (const Backend backend : {Backend::Auto, Backend::Gloo, Backend::Nccl, Backend::Mpi}) {
    if (name == to_string(backend)) return backend;
  }
  return std::nullopt;
}

Backend parse_backend(std::string_view text, std::string_view where) {
  if (const auto backend = backend_named(text)) return *backend;
  throw Error(std::string(where) + " " + quote(text) + " is not a backend; use auto, gloo, nccl or mpi");
}

}  // namespace ddp
