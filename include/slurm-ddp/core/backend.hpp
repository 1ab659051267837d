#pragma once
// The communication backend a run asks for: --ddp=BACKEND, the admin's default_backend, DDP_BACKEND in the
// tasks' environment (which srun --ddp exports), ddp-train --backend.
#include <optional>
#include <string_view>

namespace ddp {

enum class Backend { Auto, Gloo, Nccl, Mpi };

inline constexpr std::string_view kBackendNames = "auto|gloo|nccl|mpi";

const char* to_string(Backend backend);
std::optional<Backend> backend_named(std::string_view name);
// Throws ddp::Error: "<where> '<text>' is not a backend; use auto, gloo, nccl or mpi".
Backend parse_backend(std::string_view text, std::string_view where);

}  // namespace ddp
