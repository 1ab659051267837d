#pragma once
// How messages name a tensor: its shape, "[2, 3]", and with its type, "[2, 3] Float".
#include <ATen/core/Tensor.h>

#include <sstream>
#include <string>

namespace ddp::runtime {

inline std::string shape_text(at::IntArrayRef sizes) {
  std::ostringstream text;
  text << sizes;
  return text.str();
}

inline std::string tensor_text(const at::Tensor& tensor) {
  return shape_text(tensor.sizes()) + " " + std::string(c10::toString(tensor.scalar_type()));
}

}  // namespace ddp::runtime
