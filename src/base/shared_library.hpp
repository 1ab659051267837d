#pragma once
// A library loaded at run time (dlopen): the doctor's NVML, ROCm SMI, the CUDA runtime, NCCL and BLAS, which it needs
// neither to build nor to start (a node without one gets a check that says so), and nettle's HMAC (hmac.hpp).
#include <dlfcn.h>

#include <string>

namespace ddp {

class SharedLibrary {
 public:
  explicit SharedLibrary(const std::string& name) : handle_(dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) {}
  ~SharedLibrary() {
    if (handle_ != nullptr && !kept_) dlclose(handle_);
  }
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;

  bool loaded() const { return handle_ != nullptr; }
  // Leaves the library loaded for the rest of the process: one with threads of its own (BLAS, CUDA) does not
  // always survive dlclose.
  void keep() { kept_ = true; }
  // Points `fn` at the entry point `name`; false when the library (or the load) lacks it.
  template <typename Fn>
  bool bind(const char* name, Fn& fn) const {
    fn = handle_ != nullptr ? reinterpret_cast<Fn>(dlsym(handle_, name)) : nullptr;
    return fn != nullptr;
  }

 private:
  void* handle_;
  bool kept_ = false;
};

}  // namespace ddp
