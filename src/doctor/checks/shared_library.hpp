#pragma once
// A library the doctor loads at run time (dlopen): NVML, ROCm SMI, the CUDA runtime, NCCL and BLAS. The doctor
// needs none of them to build or to start; a node without one gets a check that says so.
#include <dlfcn.h>

#include <string>

namespace ddp::doctor {

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

}  // namespace ddp::doctor
