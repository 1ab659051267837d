#include "topology_cache.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "error.hpp"
#include "parse.hpp"
#include "topology.hpp"

namespace ddp {
namespace {

constexpr const char* kFormat = "v1";  // bump when what is exported changes

bool owned_by_root_alone(const std::string& path, bool directory) {
  struct stat info = {};
  if (lstat(path.c_str(), &info) != 0 || info.st_uid != 0 || (info.st_mode & (S_IWGRP | S_IWOTH)) != 0) return false;
  return directory ? S_ISDIR(info.st_mode) : S_ISREG(info.st_mode);
}

}  // namespace

std::optional<std::string> topology_cache_file(const std::string& dir, const std::string& boot_id_file) {
  std::ifstream in(boot_id_file);
  std::string boot_id;
  if (!(in >> boot_id) || boot_id.size() > 64) return std::nullopt;
  for (char c : boot_id) {
    if (!std::isxdigit(static_cast<unsigned char>(c)) && c != '-') return std::nullopt;
  }
  return dir + "/topology-" + kFormat + "-" + boot_id + ".xml";
}

void ensure_topology_cache(const std::string& dir) {
  const auto file = topology_cache_file(dir);
  if (!file) throw Error("no boot id to name the topology cache");
  if (access(file->c_str(), R_OK) == 0) return;
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    throw Error("cannot create " + quote(dir) + ": " + std::strerror(errno));
  }
  if (!owned_by_root_alone(dir, true)) throw Error(quote(dir) + " is not a directory that only root can write");
  // Concurrent steps each write their own temporary file; the rename makes one of them the cache, whole.
  const std::string temporary = *file + ".tmp." + std::to_string(getpid());
  try {
    export_system_topology(temporary);
  } catch (...) {
    unlink(temporary.c_str());
    throw;
  }
  chmod(temporary.c_str(), 0644);
  if (rename(temporary.c_str(), file->c_str()) != 0) {
    const int error = errno;
    unlink(temporary.c_str());
    throw Error("cannot create " + quote(*file) + ": " + std::strerror(error));
  }
}

std::optional<std::string> trusted_topology_cache(const std::string& dir) {
  const auto file = topology_cache_file(dir);
  if (!file || !owned_by_root_alone(dir, true) || !owned_by_root_alone(*file, false)) return std::nullopt;
  return file;
}

}  // namespace ddp
