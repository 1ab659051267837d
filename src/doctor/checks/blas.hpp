#pragma once
// The CPU's BLAS kernels against the CPU. Debian's libblas.so.3 is OpenBLAS where libopenblas0 is installed (the
// matrix products of Debian's LibTorch and of NumPy on the CPU go through it), and OpenBLAS picks its kernels by the
// CPU models it knows: a release older than the CPU falls back to its oldest family, without AVX2. Debian 12's
// OpenBLAS 0.3.21 runs its Prescott (SSE3) kernels on a Sapphire Rapids CPU, where its SkylakeX kernels multiply
// about 3.5 times as fast, and Cooperlake's (which Debian 13 picks) 4.5 times. OPENBLAS_CORETYPE chooses them.
//   node.blas  WARN: OpenBLAS's kernels lack AVX2 where the CPU has it (the value names them, the detail the
//              OPENBLAS_CORETYPE to export); OK: kernels that use AVX2, a CPU without it, or another BLAS;
//              SKIP: no libblas.so.3.
#include <optional>
#include <string>

#include "doctor/checks/check.hpp"

namespace ddp::doctor {

// The vector instructions of this CPU that BLAS kernels are written for, as the operating system enables them.
struct CpuVectors {
  bool avx2 = false;    // with FMA: OpenBLAS's Haswell kernels
  bool avx512 = false;  // AVX-512 F: its SkylakeX kernels
};
CpuVectors cpu_vectors();  // none on a CPU other than x86-64

// What libblas.so.3 says of itself: OpenBLAS's core (openblas_get_corename) and configuration (openblas_get_config).
struct BlasIdentity {
  bool loaded = false;              // libblas.so.3 was found
  std::optional<std::string> core;  // the kernels' family, e.g. "Prescott"; none: not OpenBLAS
  std::string config;               // e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Prescott MAX_THREADS=64"
};
// This process's libblas.so.3, loaded (and kept) here: OpenBLAS reads OPENBLAS_CORETYPE when it is first loaded.
BlasIdentity this_blas();

CheckResult check_blas_kernels(const BlasIdentity& blas, CpuVectors cpu);

}  // namespace ddp::doctor
