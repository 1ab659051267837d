#include "topology/topology_cache.hpp"

#include <dirent.h>
#include <fcntl.h>
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

#include "base/parse.hpp"
#include "base/unique_fd.hpp"
#include "core/error.hpp"
#include "core/snapshot_dir.hpp"
#include "topology/topology.hpp"

namespace ddp {
namespace {

constexpr const char* kFormat = "v2";  // bump when what is exported changes
constexpr const char* kPrefix = "topology-";

// The cache directory is root's alone, under the snapshot directory's rules (snapshot_dir.hpp): no link, no parent
// anyone but root may write without the sticky bit or owns. Steps read it as their user: mode 0755.
DirRules cache_rules(bool create) {
  DirRules rules;
  rules.noun = "topology cache";
  rules.contents = "topology exports";
  rules.fix = "set topology_cache= in plugstack.conf to a directory only root may write, or to none";
  rules.create = create;
  rules.owner = 0;
  rules.mode = 0755;
  return rules;
}

// A regular file in `dir_fd`, root's and writable by root alone; never through a link.
bool root_file(int dir_fd, const std::string& name) {
  struct stat info = {};
  return fstatat(dir_fd, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(info.st_mode) && info.st_uid == 0 &&
         (info.st_mode & (S_IWGRP | S_IWOTH)) == 0;
}

std::string base_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }

std::vector<std::string> names_in(DIR* handle) {
  std::vector<std::string> names;
  if (handle != nullptr) {
    constexpr size_t kMaxNames = 4096;  // bounds the work on a strange /sys
    while (const dirent* entry = readdir(handle)) {
      if (entry->d_name[0] != '.' && names.size() < kMaxNames) names.emplace_back(entry->d_name);
    }
    closedir(handle);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> names_in(const std::string& dir) { return names_in(opendir(dir.c_str())); }

std::vector<std::string> names_in(int dir_fd) {
  const int listing = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  DIR* handle = listing >= 0 ? fdopendir(listing) : nullptr;
  if (handle == nullptr && listing >= 0) close(listing);
  return names_in(handle);
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
bool is_whole_export(int dir_fd, const std::string& name) {
  const UniqueFd fd(openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  struct stat info = {};
  const std::string end = "</topology>\n";
  if (!fd || fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode) || info.st_size < static_cast<off_t>(end.size())) {
    return false;
  }
  std::string tail(end.size(), '\0');
  return pread(fd.get(), tail.data(), tail.size(), info.st_size - static_cast<off_t>(end.size())) ==
             static_cast<ssize_t>(tail.size()) &&
         tail == end;
}

void write_all(int fd, const std::string& text, const std::string& what) {
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error("cannot write " + quote(what) + ": " + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
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
  const std::string name = base_name(*file);
  const UniqueFd dir_fd = open_private_dir(dir, cache_rules(true));
  if (root_file(dir_fd.get(), name) && is_whole_export(dir_fd.get(), name)) return;
  // Exports of other boots, hwloc versions or device sets are never read again.
  for (const std::string& other : names_in(dir_fd.get())) {
    if (other.rfind(kPrefix, 0) == 0 && other != name) unlinkat(dir_fd.get(), other.c_str(), 0);
  }
  // Concurrent steps each write their own temporary file; the rename makes one of them the cache, whole. Everything
  // goes through the checked directory's descriptor: no path is resolved again.
  const std::string temporary = name + ".tmp." + std::to_string(getpid());
  const std::string xml = system_topology_xml();
  unlinkat(dir_fd.get(), temporary.c_str(), 0);
  const UniqueFd out(
      openat(dir_fd.get(), temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!out) throw Error("cannot create " + quote(dir + "/" + temporary) + ": " + std::strerror(errno));
  try {
    write_all(out.get(), xml, dir + "/" + temporary);
    if (fchmod(out.get(), 0644) != 0) throw Error("cannot make " + quote(*file) + " readable: " + std::strerror(errno));
  } catch (...) {
    unlinkat(dir_fd.get(), temporary.c_str(), 0);
    throw;
  }
  if (renameat(dir_fd.get(), temporary.c_str(), dir_fd.get(), name.c_str()) != 0) {
    const int error = errno;
    unlinkat(dir_fd.get(), temporary.c_str(), 0);
    throw Error("cannot create " + quote(*file) + ": " + std::strerror(error));
  }
}

std::optional<std::string> trusted_topology_cache(const std::string& dir) {
  const auto file = topology_cache_file(dir);
  if (!file) return std::nullopt;
  try {
    const UniqueFd dir_fd = open_private_dir(dir, cache_rules(false));
    if (!dir_fd || !root_file(dir_fd.get(), base_name(*file))) return std::nullopt;
  } catch (const Error&) {
    return std::nullopt;
  }
  return file;
}

}  // namespace ddp
