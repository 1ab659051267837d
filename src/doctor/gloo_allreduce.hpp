#pragma once
// All-reduce over Gloo's TCP transport on the chosen interface: what PyTorch's gloo backend does on CPU.
#include <memory>

#include "doctor/allreduce.hpp"

namespace ddp::doctor {

std::unique_ptr<AllreduceBackend> make_gloo_backend();

}  // namespace ddp::doctor
