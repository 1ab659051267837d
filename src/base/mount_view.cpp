#include "base/mount_view.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "base/parse.hpp"
#include "base/unique_fd.hpp"
#include "core/error.hpp"

namespace ddp {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape(std::string_view field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      const std::string_view digits = field.substr(i + 1, 3);
      if (std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '7'; })) {
        out += static_cast<char>((digits[0] - '0') * 64 + (digits[1] - '0') * 8 + (digits[2] - '0'));
        i += 3;
        continue;
      }
    }
    out += field[i];
  }
  return out;
}

std::optional<MountEntry> parse_line(std::string_view line) {
  // id parent major:minor root mount_point options ...
  std::vector<std::string_view> fields;
  for (size_t start = 0; start < line.size() && fields.size() < 5;) {
    const size_t space = std::min(line.find(' ', start), line.size());
    fields.push_back(line.substr(start, space - start));
    start = space + 1;
  }
  if (fields.size() < 5) return std::nullopt;
  const size_t colon = fields[2].find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  const auto major_number = parse_uint(fields[2].substr(0, colon), UINT32_MAX);
  const auto minor_number = parse_uint(fields[2].substr(colon + 1), UINT32_MAX);
  if (!major_number || !minor_number || fields[4].empty() || fields[4][0] != '/') return std::nullopt;
  return MountEntry{unescape(fields[4]),
                    makedev(static_cast<unsigned>(*major_number), static_cast<unsigned>(*minor_number))};
}

bool holds(const std::string& mount_point, const std::string& path) {
  if (mount_point == "/") return true;
  return path.compare(0, mount_point.size(), mount_point) == 0 &&
         (path.size() == mount_point.size() || path[mount_point.size()] == '/');
}

std::string read_small_file(const char* path) {
  UniqueFd fd(open(path, O_RDONLY | O_CLOEXEC));
  if (!fd) throw Error(std::string("cannot read ") + path + ": " + std::strerror(errno));
  std::string text;
  char buffer[8192];
  // A node with tens of thousands of mounts is possible; 4 MiB bounds the work.
  while (text.size() < (4u << 20)) {
    const ssize_t n = read(fd.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(std::string("cannot read ") + path + ": " + std::strerror(errno));
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  return text;
}

// The nearest directory of `path` that exists, canonical; "/" at worst.
std::string nearest_existing(const std::string& path) {
  std::string candidate = path;
  for (;;) {
    char resolved[PATH_MAX];
    if (realpath(candidate.c_str(), resolved) != nullptr) return resolved;
    if (candidate == "/" || candidate.empty()) return "/";
    const size_t slash = candidate.find_last_of('/');
    candidate = slash == 0 || slash == std::string::npos ? "/" : candidate.substr(0, slash);
  }
}

}  // namespace

std::vector<MountEntry> parse_mountinfo(std::string_view text) {
  std::vector<MountEntry> mounts;
  for (size_t start = 0; start < text.size();) {
    const size_t end = std::min(text.find('\n', start), text.size());
    if (auto entry = parse_line(text.substr(start, end - start))) mounts.push_back(std::move(*entry));
    start = end + 1;
  }
  return mounts;
}

const MountEntry* mount_holding(const std::vector<MountEntry>& mounts, const std::string& path) {
  const MountEntry* best = nullptr;
  for (const MountEntry& entry : mounts) {
    if (holds(entry.mount_point, path) && (best == nullptr || entry.mount_point.size() >= best->mount_point.size())) {
      best = &entry;
    }
  }
  return best;
}

ino_t this_mount_namespace() {
  struct stat info = {};
  return stat("/proc/self/ns/mnt", &info) == 0 ? info.st_ino : 0;
}

MountView this_mount_view() {
  MountView view;
  view.namespace_id = this_mount_namespace();
  view.mounts = parse_mountinfo(read_small_file("/proc/self/mountinfo"));
  for (const MountEntry& entry : view.mounts) view.devices.push_back(entry.device);
  return view;
}

void require_node_file_system(const std::string& path, const std::string& what, const std::vector<dev_t>& node_devices,
                              const std::vector<MountEntry>& here, const std::string& mount_option) {
  const std::string existing = nearest_existing(path);
  const MountEntry* mount = mount_holding(here, existing);
  const bool node_has_it =
      mount != nullptr && std::find(node_devices.begin(), node_devices.end(), mount->device) != node_devices.end();
  if (node_has_it && mount->mount_point != "/") return;
  const std::string where =
      (existing == path ? quote(path) : quote(existing) + " (the nearest part of it that exists)") + " lies";
  const std::string on = mount == nullptr || mount->mount_point == "/"
                             ? "on the container's own root file system"
                             : "on " + quote(mount->mount_point) + ", a file system the container made for itself";
  throw Error(what + " " + quote(path) + " is not mounted into the container: " + where + " " + on +
              ", which goes with the container; mount the node's directory into the container with " + mount_option);
}

}  // namespace ddp
