#pragma once
// A TorchScript module saved from Python, torch.jit.script(model).save(path) or torch.jit.trace(model, x).save(path),
// as a Model: its own parameter and buffer names (model.state_dict()'s), its forward, and the trained module
// written back as TorchScript.
#include <memory>
#include <string>

#include "ddp_runtime/job.hpp"

namespace ddp::runtime {

// Throws ddp::Error naming the file when it is not a TorchScript module, or when its forward does not take one
// tensor (further arguments need defaults) and return one tensor.
std::unique_ptr<Model> load_script_model(const std::string& path);

}  // namespace ddp::runtime
