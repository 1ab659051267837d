#include "topology_cache.hpp"

#include <dirent.h>
#include <hwloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include "error.hpp"
#include "parse.hpp"
#include "topology.hpp"

namespace ddp {
namespace {

constexpr const char* kFormat = "v2";  // bump when what is exported changes
constexpr const char* kPrefix = "topology-";

bool owned_by_root_alone(const std::string& path, bool directory) {
  struct stat info = {};
  if (lstat(path.c_str(), &info) != 0 || info.st_uid != 0 || (info.st_mode & (S_IWGRP | S_IWOTH)) != 0) return false;
  return directory ? S_ISDIR(info.st_mode) : S_ISREG(info.st_mode);
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* handle = opendir(dir.c_str())) {
    constexpr size_t kMaxNames = 4096;  // bounds the work on a strange /sys
    while (const dirent* entry = readdir(handle)) {
      if (entry->d_name[0] != '.' && names.size() < kMaxNames) names.emplace_back(entry->d_name);
    }
    closedir(handle);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// FNV-1a over the names of the devices a topology export lists and that can come and go while a node runs.
std::string device_digest() {
  uint32_t hash = 2166136261u;
  for (const char* dir : {"/sys/class/net", "/sys/class/infiniband"}) {
    for (const std::string& name : names_in(dir)) {
      for (const char c : name + '\n') hash = (hash ^ static_cast<unsigned char>(c)) * 16777619u;
    }
  }
  char text[16];
  std::snprintf(text, sizeof text, "%08x", hash);
  return text;
}

// A whole export ends with hwloc's closing tag; one cut short by a full disk or a crash does not.
bool is_whole_export(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const std::string end = "</topology>\n";
  const std::streamoff size = in ? static_cast<std::streamoff>(in.tellg()) : 0;
  if (size < static_cast<std::streamoff>(end.size())) return false;
  std::string tail(end.size(), '\0');
  in.seekg(size - static_cast<std::streamoff>(end.size()));
  return static_cast<bool>(in.read(tail.data(), static_cast<std::streamsize>(tail.size()))) && tail == end;
}

}  // namespace

std::optional<std::string> topology_cache_file(const std::string& dir, const std::string& boot_id_file) {
  std::ifstream in(boot_id_file);
  std::string boot_id;
  if (!(in >> boot_id) || boot_id.size() > 64) return std::nullopt;
  for (char c : boot_id) {
    if (!std::isxdigit(static_cast<unsigned char>(c)) && c != '-') return std::nullopt;
  }
  char version[16];
  std::snprintf(version, sizeof version, "h%x", hwloc_get_api_version());
  return dir + "/" + kPrefix + kFormat + "-" + boot_id + "-" + version + "-" + device_digest() + ".xml";
}

void ensure_topology_cache(const std::string& dir) {
  const auto file = topology_cache_file(dir);
  if (!file) throw Error("no boot id to name the topology cache");
  if (owned_by_root_alone(*file, false) && is_whole_export(*file)) return;
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    throw Error("cannot create " + quote(dir) + ": " + std::strerror(errno));
  }
  if (!owned_by_root_alone(dir, true)) throw Error(quote(dir) + " is not a directory that only root can write");
  // Exports of other boots, hwloc versions or device sets are never read again.
  for (const std::string& name : names_in(dir)) {
    const std::string path = dir + "/" + name;
    if (name.rfind(kPrefix, 0) == 0 && path != *file) unlink(path.c_str());
  }
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
