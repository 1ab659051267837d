// libFuzzer target: what the plugin reads as a topology: hwloc XML (the admin's topology_xml, the per-boot cache,
// ddp-topo --xml) through hwloc's own parser without plugins, as slurmstepd uses it, and the inventory built from
// it; and the boot id that names the per-boot cache. The first byte picks which.
//
// hwloc 2.9's XML import is not safe on hostile input: within a few hundred inputs this target found a NULL
// dereference (SEGV in hwloc_insert_object_by_parent) and a leak on every file that fails to load. Neither is ours
// to fix, and they are why slurmstepd parses no XML a user controls. So each input is first loaded by hwloc alone in
// a child process; one that crashes hwloc is counted and skipped, and the rest go through our code here, where
// crashes and leaks are findings.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.hpp"
#include "fuzz_file.hpp"
#include "topology/topology.hpp"
#include "topology/topology_cache.hpp"

namespace {

int hwloc_crashes = 0;

// Returns false, and keeps the input as hwloc-crash-<n> in the working directory, when hwloc crashes on it.
bool hwloc_survives(const std::string& path, const uint8_t* data, size_t size) {
  const pid_t child = fork();
  if (child == 0) {
    // A crash here must end this child by its signal, not through the sanitizer's report and exit.
    for (const int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) signal(sig, SIG_DFL);
    try {
      ddp::load_node_hardware(path);
    } catch (...) {
    }
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return true;
  if (++hwloc_crashes == 1) {
    std::atexit([] { std::fprintf(stderr, "hwloc crashed on %d inputs (kept as hwloc-crash-*)\n", hwloc_crashes); });
  }
  if (std::FILE* out = std::fopen(("hwloc-crash-" + std::to_string(hwloc_crashes)).c_str(), "wb")) {
    std::fwrite(data, 1, size, out);
    std::fclose(out);
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string path = ddp::fuzz::as_file(data + 1, size - 1);
  if (data[0] % 2 == 0) {
    if (!hwloc_survives(path, data, size)) return 0;
    try {
      const ddp::NodeHardware hw = ddp::load_node_hardware(path);
      for (const auto& gpu : hw.gpus) {
        if (gpu.to_gpu.size() != hw.gpus.size() || gpu.locality >= hw.localities.size()) std::abort();
      }
    } catch (const ddp::Error&) {
    }
    return 0;
  }
  if (const auto file = ddp::topology_cache_file("/run/slurm-ddp", path)) {
    const std::string name = file->substr(file->rfind('/') + 1);
    for (char c : name) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') std::abort();
    }
  }
  return 0;
}
