#pragma once
// Probing a node's topology through sysfs costs tens of milliseconds, on every step. The plugin therefore keeps
// one export per boot in a root-owned directory (topology_cache=, default /run/slurm-ddp), written as root
// before privileges are dropped and read by the steps that follow. The file name carries the boot id, hwloc's
// version and a digest of the network and RDMA device names, so a reboot, an hwloc upgrade or a device that
// appears later (a driver loaded after the first step) never reads an old export; an export that is cut short
// or not root's alone is written again by the next step.
#include <optional>
#include <string>

namespace ddp {

// The cache file of this boot in `dir`; nullopt when the boot id cannot be read.
std::optional<std::string> topology_cache_file(const std::string& dir,
                                               const std::string& boot_id_file = "/proc/sys/kernel/random/boot_id");

// As root: creates `dir` (0755) and the cache file of this boot (0644, written atomically) unless a whole one is
// there, and removes the exports of other boots and versions. Throws ddp::Error; callers treat failures as
// "no cache".
void ensure_topology_cache(const std::string& dir);

// The cache file when it exists and can be trusted (a regular file owned by root and writable by root alone, in
// a directory likewise), else nullopt: the caller probes the system instead.
std::optional<std::string> trusted_topology_cache(const std::string& dir);

}  // namespace ddp
