#include "doctor/node_speed.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "doctor/cpu.hpp"
#include "doctor/shared_library.hpp"
#include "socket.hpp"

namespace ddp::doctor {
namespace {

using Clock = std::chrono::steady_clock;
using Seconds = std::chrono::duration<double>;

constexpr int kRepeats = 3;
constexpr const char* kCompute = "node.compute";
constexpr const char* kMemory = "node.memory_bw";

// cblas_sgemm(order, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), row-major = 101, no-trans = 111.
using Sgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);

struct Blas {
  Sgemm sgemm = nullptr;
  std::string name;
};

// Debian's libblas.so.3 is whichever BLAS the system chose (OpenBLAS, BLIS, the reference), with CBLAS inside.
Blas open_blas() {
  Blas blas;
  SharedLibrary library("libblas.so.3");
  library.keep();
  blas.name = library.bind("cblas_sgemm", blas.sgemm) ? "libblas.so.3" : "a blocked loop (no libblas.so.3)";
  return blas;
}

// C += A * B for n x n row-major matrices, in blocks that stay in the cache.
void blocked_sgemm(int n, const float* a, const float* b, float* c) {
  constexpr int kBlock = 64;
  for (int ii = 0; ii < n; ii += kBlock) {
    for (int kk = 0; kk < n; kk += kBlock) {
      for (int i = ii; i < std::min(ii + kBlock, n); ++i) {
        for (int k = kk; k < std::min(kk + kBlock, n); ++k) {
          const float scale = a[i * n + k];
          for (int j = 0; j < n; ++j) c[i * n + j] += scale * b[k * n + j];
        }
      }
    }
  }
}

// How many times a measurement runs: up to kRepeats, the first always, the others until `deadline`.
bool another_round(int done, Deadline deadline) { return done == 0 || (done < kRepeats && !deadline.expired()); }

CheckResult measure_gemm(bool quick, Deadline deadline) {
  const int n = quick ? 384 : 1024;
  const Blas blas = open_blas();
  std::vector<float> a(static_cast<size_t>(n) * n, 1.0f), b(a.size(), 0.5f), c(a.size(), 0.0f);
  double best = 0;
  int repeat = 0;
  for (; another_round(repeat, deadline); ++repeat) {
    const auto start = Clock::now();
    if (blas.sgemm != nullptr) {
      blas.sgemm(101, 111, 111, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    } else {
      blocked_sgemm(n, a.data(), b.data(), c.data());
    }
    best = std::max(best, 2.0 * n * n * n / Seconds(Clock::now() - start).count());
  }
  return make_result(kCompute, Status::Ok, format_fixed(best / 1e9, 1) + " GFLOP/s", "",
                     "single-precision GEMM " + std::to_string(n) + "x" + std::to_string(n) + " through " + blas.name +
                         ", best of " + std::to_string(repeat));
}

CheckResult measure_memory(bool quick, Deadline deadline) {
  const size_t elements = (quick ? 4u : 16u) << 20;  // 32 or 128 MiB per array of doubles, three arrays
  const unsigned threads = usable_cores();
  std::unique_ptr<double[]> a(new double[elements]), b(new double[elements]), c(new double[elements]);
  const auto each = [&](auto&& body) {
    std::vector<std::thread> workers;
    for (unsigned t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] { body(elements * t / threads, elements * (t + 1) / threads); });
    }
    for (auto& worker : workers) worker.join();
  };
  // Every page is touched by the thread that later reads it, first.
  each([&](size_t begin, size_t end) {
    std::fill(&a[0] + begin, &a[0] + end, 0.0);
    std::fill(&b[0] + begin, &b[0] + end, 1.0);
    std::fill(&c[0] + begin, &c[0] + end, 2.0);
  });
  double best = 0;
  int repeat = 0;
  for (; another_round(repeat, deadline); ++repeat) {
    const auto start = Clock::now();
    each([&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) a[i] = b[i] + 3.0 * c[i];
    });
    best = std::max(best, 3.0 * sizeof(double) * elements / Seconds(Clock::now() - start).count());
  }
  return make_result(kMemory, Status::Ok, format_fixed(best / 1e9, 2) + " GB/s", "",
                     "STREAM triad over 3 x " + format_bytes(elements * sizeof(double)) + ", " +
                         std::to_string(threads) + " threads, best of " + std::to_string(repeat));
}

double value_of(const CheckResult& result) { return std::strtod(result.value.c_str(), nullptr); }

void grade_kind(std::vector<CheckResult>& all, const std::string& check, double threshold_pct) {
  std::vector<CheckResult*> rows;
  std::vector<double> values;
  for (CheckResult& result : all) {
    if (result.check == check && result.status == Status::Ok && value_of(result) > 0) {
      rows.push_back(&result);
      values.push_back(value_of(result));
    }
  }
  if (rows.size() < 2) return;
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  const double median = values.size() % 2 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
  const std::string unit = rows.front()->value.substr(rows.front()->value.find(' ') + 1);
  const std::string median_text =
      "the median of " + std::to_string(rows.size()) + " nodes is " + format_fixed(median, 2) + " " + unit;
  for (CheckResult* row : rows) {
    row->threshold = "within " + format_fixed(threshold_pct, 0) + "% of the nodes' median";
    const double below_pct = (1 - value_of(*row) / median) * 100;
    if (below_pct > threshold_pct) {
      row->status = Status::Warn;
      row->detail = format_fixed(below_pct, 0) + "% below " + median_text +
                    ": a slow node slows every step of the run; look for throttling, other jobs or BIOS settings";
    } else {
      row->detail += "; " + median_text;
    }
  }
}

}  // namespace

std::vector<CheckResult> measure_node_speed(bool quick, std::chrono::milliseconds budget) {
  const Deadline end = Deadline::after(budget);
  CheckResult compute = measure_gemm(quick, Deadline::after(budget / 2));
  return {std::move(compute), measure_memory(quick, end)};
}

void grade_node_speeds(std::vector<CheckResult>& all, double threshold_pct) {
  grade_kind(all, kCompute, threshold_pct);
  grade_kind(all, kMemory, threshold_pct);
}

}  // namespace ddp::doctor
