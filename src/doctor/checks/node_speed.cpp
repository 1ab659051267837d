#include "doctor/checks/node_speed.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "base/shared_library.hpp"
#include "base/socket.hpp"
#include "doctor/checks/cpu.hpp"

namespace ddp::doctor {
namespace {

using Clock = std::chrono::steady_clock;
using Seconds = std::chrono::duration<double>;

constexpr int kRepeats = 3;
// A node that time-shares its cores with another job, or runs under a CPU quota, computes at full speed within each
// of its scheduler slices (a few ms; a quota's period is 100 ms): only a rate kept up for longer than that shows the
// share it gets. Each run therefore repeats its kernel for at least this long.
constexpr Seconds kQuickRun{0.2};
constexpr Seconds kFullRun{1.0};

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

Seconds run_time(bool quick) { return quick ? kQuickRun : kFullRun; }
std::string run_length(bool quick) { return format_fixed(run_time(quick).count(), 1) + " s"; }

// The best rate, in units of `work` per second, of up to kRepeats runs of `kernel` (each `work` units) repeated for
// at least `run_time`; the first run always completes.
template <typename Kernel>
double best_sustained_rate(double work, Seconds run_time, Deadline deadline, int* runs, Kernel&& kernel) {
  double best = 0;
  for (*runs = 0; another_round(*runs, deadline); ++*runs) {
    const auto start = Clock::now();
    int64_t repeats = 0;
    Seconds elapsed{0};
    do {
      kernel();
      ++repeats;
      elapsed = Clock::now() - start;
    } while (elapsed < run_time);
    best = std::max(best, work * static_cast<double>(repeats) / elapsed.count());
  }
  return best;
}

CheckResult measure_gemm(bool quick, Deadline deadline) {
  const int n = quick ? 384 : 1024;
  const Blas blas = open_blas();
  std::vector<float> a(static_cast<size_t>(n) * n, 1.0f), b(a.size(), 0.5f), c(a.size(), 0.0f);
  int repeat = 0;
  const double best = best_sustained_rate(2.0 * n * n * n, run_time(quick), deadline, &repeat, [&] {
    if (blas.sgemm != nullptr) {
      blas.sgemm(101, 111, 111, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    } else {
      blocked_sgemm(n, a.data(), b.data(), c.data());
    }
  });
  return make_result(checks::kNodeCompute, Status::Ok, format_fixed(best / 1e9, 1) + " GFLOP/s", "",
                     "single-precision GEMM " + std::to_string(n) + "x" + std::to_string(n) + " through " + blas.name +
                         ", best of " + std::to_string(repeat) + " runs of " + run_length(quick));
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
  int repeat = 0;
  const double best = best_sustained_rate(3.0 * sizeof(double) * elements, run_time(quick), deadline, &repeat, [&] {
    each([&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) a[i] = b[i] + 3.0 * c[i];
    });
  });
  return make_result(checks::kNodeMemoryBw, Status::Ok, format_fixed(best / 1e9, 2) + " GB/s", "",
                     "STREAM triad over 3 x " + format_bytes(elements * sizeof(double)) + ", " +
                         std::to_string(threads) + " threads, best of " + std::to_string(repeat) + " runs of " +
                         run_length(quick));
}

double value_of(const CheckResult& result) { return std::strtod(result.value.c_str(), nullptr); }

void grade_kind(std::vector<CheckResult>& all, const CheckInfo& check, double threshold_pct) {
  std::vector<CheckResult*> rows;
  std::vector<double> values;
  for (CheckResult& result : all) {
    if (result.check == check.name && result.status == Status::Ok && value_of(result) > 0) {
      rows.push_back(&result);
      values.push_back(value_of(result));
    }
  }
  if (rows.size() < 2) return;
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  const double median = values.size() % 2 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
  const std::string unit = rows.front()->value.substr(rows.front()->value.find(' ') + 1);
  const std::string nodes = "the median of " + std::to_string(rows.size()) + " nodes";
  const std::string median_value = format_fixed(median, 2) + " " + unit;
  for (CheckResult* row : rows) {
    row->threshold = "within " + format_fixed(threshold_pct, 0) + "% of the nodes' median";
    const double below_pct = (1 - value_of(*row) / median) * 100;
    if (below_pct > threshold_pct) {
      row->status = Status::Warn;
      row->detail = format_fixed(below_pct, 0) + "% below " + nodes + " (" + median_value +
                    "): a slow node slows every step of the run; look for throttling, other jobs or BIOS settings";
    } else {
      row->detail += "; " + nodes + " is " + median_value;
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
  grade_kind(all, checks::kNodeCompute, threshold_pct);
  grade_kind(all, checks::kNodeMemoryBw, threshold_pct);
}

}  // namespace ddp::doctor
