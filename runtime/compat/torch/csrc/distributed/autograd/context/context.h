#pragma once
// Stand-in for a header that Debian's libtorch-dev does not ship (pytorch#88006) but reducer.hpp includes.
// reducer.hpp needs two names from it: the gradient callback type, which it checks against its own, and the
// context pointer it holds. Only a pointer is held, so the class needs no members here; CMake adds this
// directory to the include path only where the real header is missing.
#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>

namespace torch {
namespace distributed {
namespace autograd {

class DistAutogradContext {
 public:
  using GradCallback = std::function<bool(at::Tensor&)>;
};

using ContextPtr = std::shared_ptr<DistAutogradContext>;

}  // namespace autograd
}  // namespace distributed
}  // namespace torch
