# CI only (run.sh's NCCL leg, -DCMAKE_PROJECT_INCLUDE=this file): Debian's CUDA LibTorch without the CUDA toolkit.
# Its CMake package (Caffe2/public/cuda.cmake) wants nvcc, enable_language(CUDA) and a run of a CUDA program, that is
# nvidia-cuda-toolkit and g++-13 (gigabytes), to define the two targets its own targets link: torch::cudart and
# torch::nvtoolsext. cuda.cmake returns at once when they exist, so they are defined here from the unpacked
# libraries (tests/stacks/cuda_libtorch.sh); the CUDA headers sit in the prefix's include directory, which
# LibTorch's target already names. Torch_DIR: <prefix>/usr/lib/<arch>/cmake/Torch.
if(NOT Torch_DIR)
  message(FATAL_ERROR "cuda_libtorch.cmake: set -DTorch_DIR=<prefix>/usr/lib/<arch>/cmake/Torch (tests/stacks/cuda_libtorch.sh env)")
endif()
get_filename_component(_cuda_libdir "${Torch_DIR}/../.." ABSOLUTE)
foreach(_lib cudart.so.12 nvToolsExt.so.1)
  if(NOT EXISTS "${_cuda_libdir}/lib${_lib}")
    message(FATAL_ERROR "cuda_libtorch.cmake: no lib${_lib} in ${_cuda_libdir}; run tests/stacks/cuda_libtorch.sh fetch")
  endif()
endforeach()
add_library(torch::cudart INTERFACE IMPORTED GLOBAL)
set_target_properties(torch::cudart PROPERTIES INTERFACE_LINK_LIBRARIES "${_cuda_libdir}/libcudart.so.12")
add_library(torch::nvtoolsext INTERFACE IMPORTED GLOBAL)
set_target_properties(torch::nvtoolsext PROPERTIES INTERFACE_LINK_LIBRARIES "${_cuda_libdir}/libnvToolsExt.so.1")

# The programs find the prefix's libraries themselves, through an RPATH: unlike RUNPATH it serves the libraries'
# own dependencies too (libtorch_cuda.so's libcudnn.so.9, the stub of tests/stacks/cuda_libtorch.sh, and
# libtorch_cpu.so's libgloo_cuda.so.0 in usr/lib), and LD_LIBRARY_PATH stays unset: Debian's python3-torch, which
# the tests run, must load the system's CPU LibTorch (the same sonames) and not these. Cache layout: cuda_libtorch.sh.
get_filename_component(_cuda_cache "${_cuda_libdir}/../../../.." ABSOLUTE)
set(CMAKE_BUILD_RPATH "${_cuda_libdir};${_cuda_cache}/prefix/usr/lib;${_cuda_cache}/cudnn-stub")
add_link_options(-Wl,--disable-new-dtags)
message(STATUS "cuda_libtorch.cmake: CUDA runtime from ${_cuda_libdir}, without the CUDA toolkit")
