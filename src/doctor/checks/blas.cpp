#include "doctor/checks/blas.hpp"

#include <algorithm>
#include <cctype>
#include <set>

#include "base/shared_library.hpp"

namespace ddp::doctor {
namespace {

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

// OpenBLAS's x86 kernel families (its corename table) that use AVX2 and FMA.
bool uses_avx2(const std::string& core) {
  static const std::set<std::string> kAvx2{"haswell", "zen", "excavator", "skylakex", "cooperlake", "sapphirerapids"};
  return kAvx2.count(lower(core)) > 0;
}

}  // namespace

CpuVectors cpu_vectors() {
  CpuVectors cpu;
#if defined(__x86_64__) || defined(__i386__)
  // libgcc's cpuid reading, which also checks that the kernel saves the vector registers (XGETBV).
  __builtin_cpu_init();
  cpu.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  cpu.avx512 = __builtin_cpu_supports("avx512f");
#endif
  return cpu;
}

BlasIdentity this_blas() {
  BlasIdentity blas;
  SharedLibrary library("libblas.so.3");
  blas.loaded = library.loaded();
  if (!blas.loaded) return blas;
  library.keep();  // OpenBLAS's threads do not always survive dlclose
  using Text = char* (*)();
  Text corename = nullptr;
  Text config = nullptr;
  if (library.bind("openblas_get_corename", corename) && corename() != nullptr) blas.core = corename();
  if (library.bind("openblas_get_config", config) && config() != nullptr) blas.config = config();
  return blas;
}

CheckResult check_blas_kernels(const BlasIdentity& blas, CpuVectors cpu) {
  const CheckInfo& check = checks::kNodeBlas;
  if (!blas.loaded) return skipped(check, "no libblas.so.3 (install libopenblas0 for fast matrix products on the CPU)");
  if (!blas.core) return make_result(check, Status::Ok, "not OpenBLAS", "", "libblas.so.3 picks its own kernels");
  const std::string value = *blas.core + " kernels";
  const std::string threshold = cpu.avx2 ? "AVX2 kernels" : "";
  if (!cpu.avx2 || uses_avx2(*blas.core)) return make_result(check, Status::Ok, value, threshold, blas.config);
  const char* fit = cpu.avx512 ? "SkylakeX" : "Haswell";
  return make_result(check, Status::Warn, value, threshold,
                     std::string("OpenBLAS does not know this CPU (") + (cpu.avx512 ? "AVX-512" : "AVX2") +
                         ") and runs kernels without AVX2, several times slower: export OPENBLAS_CORETYPE=" + fit +
                         " (" + blas.config + ")");
}

}  // namespace ddp::doctor
