#include "doctor/checks/blas.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "test_support.hpp"

namespace ddp::doctor {
namespace {

using testing::contains;

BlasIdentity openblas(const std::string& core) {
  return {true, core, "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY " + core + " MAX_THREADS=64"};
}

TEST(Blas, KernelsWithoutAvx2OnACpuWithItAreAWarningNamingTheCoreTypeToExport) {
  const CheckResult avx512 = check_blas_kernels(openblas("Prescott"), {true, true});
  EXPECT_EQ(avx512.check, "node.blas");
  EXPECT_EQ(avx512.status, Status::Warn);
  EXPECT_EQ(avx512.value, "Prescott kernels");
  EXPECT_TRUE(contains(avx512.detail, "export OPENBLAS_CORETYPE=SkylakeX")) << avx512.detail;
  EXPECT_TRUE(contains(avx512.detail, "OpenBLAS 0.3.21 ")) << avx512.detail;
  const CheckResult avx2 = check_blas_kernels(openblas("Nehalem"), {true, false});
  EXPECT_EQ(avx2.status, Status::Warn);
  EXPECT_TRUE(contains(avx2.detail, "export OPENBLAS_CORETYPE=Haswell")) << avx2.detail;
}

TEST(Blas, KernelsThatUseTheCpuAnotherBlasOrNoneAreNoWarning) {
  for (const char* core : {"Haswell", "Zen", "SkylakeX", "COOPERLAKE", "SapphireRapids"}) {
    EXPECT_EQ(check_blas_kernels(openblas(core), {true, true}).status, Status::Ok) << core;
  }
  EXPECT_EQ(check_blas_kernels(openblas("Prescott"), {false, false}).status, Status::Ok) << "an old CPU";
  const CheckResult other = check_blas_kernels({true, std::nullopt, ""}, {true, true});
  EXPECT_EQ(other.status, Status::Ok);
  EXPECT_EQ(other.value, "not OpenBLAS");
  EXPECT_EQ(check_blas_kernels({}, {true, true}).status, Status::Skip);
}

// This machine's libblas.so.3, loaded in a child whose OPENBLAS_CORETYPE is `core` (OpenBLAS reads it once, when
// it is loaded; "": its own choice): the check's status and value, as "STATUS value".
std::string real_check_under(const char* core) {
  int out[2];
  if (pipe(out) != 0) return "pipe failed";
  const pid_t child = fork();
  if (child == 0) {
    close(out[0]);
    if (*core != '\0') setenv("OPENBLAS_CORETYPE", core, 1);
    const CheckResult result = check_blas_kernels(this_blas(), cpu_vectors());
    const std::string text = std::string(to_string(result.status)) + " " + result.value;
    _exit(write(out[1], text.data(), text.size()) == static_cast<ssize_t>(text.size()) ? 0 : 1);
  }
  close(out[1]);
  std::string text;
  char buffer[256];
  for (ssize_t n; (n = read(out[0], buffer, sizeof buffer)) > 0;) text.append(buffer, n);
  close(out[0]);
  int status = 0;
  waitpid(child, &status, 0);
  return text;
}

// The library is loaded in the children only: a parent that had loaded it would hand them its choice.
TEST(Blas, ThisMachinesOpenBlasIsToldApartByTheKernelsItRuns) {
  if (!cpu_vectors().avx2) GTEST_SKIP() << "this CPU has no AVX2: every OpenBLAS kernel suits it";
  const std::string own = real_check_under("");
  if (contains(own, "not OpenBLAS") || contains(own, "SKIP")) {
    GTEST_SKIP() << "libblas.so.3 here is not OpenBLAS (run.sh installs libopenblas0-pthread): " << own;
  }
  EXPECT_EQ(real_check_under("Prescott"), "WARN Prescott kernels");
  EXPECT_EQ(real_check_under("Haswell"), "OK Haswell kernels");
}

}  // namespace
}  // namespace ddp::doctor
