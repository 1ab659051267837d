#include "test_common.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "base/socket.hpp"
#include "spank_plugin/step/ports.hpp"

namespace ddp::testing {
namespace {

constexpr const char* kLockDir = "/tmp/ddp-test-ports";
constexpr uint16_t kCandidates = 2000;  // the ports just below the ephemeral range

bool bindable(uint16_t port) {
  try {
    // Every address, as the doctor's store and c10d's TCPStore listen; SO_REUSEADDR as they set it.
    const Socket probe = Socket::listen_on("", port);
    return true;
  } catch (const NetError&) {
    return false;
  }
}

// The lock directory, shared by every test process on the machine: root's (or this user's) with the sticky bit, as
// /tmp is; one another user made first, or a link, is refused rather than used (tests often run as root).
void check_lock_dir() {
  mkdir(kLockDir, 01777);
  chmod(kLockDir, 01777);  // whatever the umask took; fails harmlessly when the directory is not ours
  struct stat info = {};
  if (lstat(kLockDir, &info) != 0 || !S_ISDIR(info.st_mode) || (info.st_uid != 0 && info.st_uid != geteuid()) ||
      (info.st_mode & S_ISVTX) == 0) {
    throw std::runtime_error(std::string(kLockDir) +
                             " is not a sticky directory of root's or this user's: remove it (another user made it)");
  }
}

// The lock of `port` for this process (its descriptor stays open until exit), or -1 when another holds it.
int lock_port(uint16_t port) {
  check_lock_dir();
  const std::string path = std::string(kLockDir) + "/" + std::to_string(port);
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0) return -1;
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Keeps `fd` locked in a child of its own until `holder` has ended.
void hold_for(int fd, int holder) {
  const pid_t child = fork();
  if (child != 0) {
    close(fd);
    return;
  }
  // Nothing of the caller's stays open here: a shell reading the port must see its output end.
  for (int i = 0; i < 1024; ++i) {
    if (i != fd) close(i);
  }
  while (kill(holder, 0) == 0 || errno == EPERM) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  _exit(0);
}

}  // namespace

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/ddp-test.XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp " + pattern + ": " + std::strerror(errno));
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

uint16_t reserve_port(int holder) {
  const PortRange ephemeral = read_ephemeral_range();
  const uint16_t last = static_cast<uint16_t>(ephemeral.first - 1);
  const uint16_t first = static_cast<uint16_t>(last > 1024 + kCandidates ? last - kCandidates + 1 : 1025);
  std::mt19937 random(std::random_device{}());
  for (int attempt = 0; attempt < 4 * kCandidates; ++attempt) {
    const auto port = static_cast<uint16_t>(first + random() % (last - first + 1));
    const int fd = lock_port(port);
    if (fd < 0) continue;
    if (!bindable(port)) {
      close(fd);  // a service of this machine has it
      continue;
    }
    if (holder != 0) hold_for(fd, holder);
    return port;
  }
  throw std::runtime_error("no free TCP port in " + std::to_string(first) + "-" + std::to_string(last));
}

void write_file(const std::string& path, const std::string& text, double mtime) {
  std::ofstream(path, std::ios::binary) << text;
  if (mtime > 0) {
    const timespec times[2] = {{static_cast<time_t>(mtime), 0}, {static_cast<time_t>(mtime), 0}};
    utimensat(AT_FDCWD, path.c_str(), times, 0);
  }
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string compare_block(const std::string& path, const std::string& header, const std::string& prefix,
                          const std::vector<std::string>& expected, const std::string& end) {
  std::ifstream in(path);
  if (!in) return "cannot read " + path;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  size_t begin = 0;
  while (begin < lines.size() && lines[begin] != header) ++begin;
  if (begin == lines.size()) return path + " has no line " + header + "; put it back above the generated block";
  ++begin;
  size_t last = begin;
  while (last < lines.size() && lines[last].rfind(prefix, 0) == 0 && (end.empty() || lines[last] != end)) ++last;
  const std::vector<std::string> found(lines.begin() + static_cast<std::ptrdiff_t>(begin),
                                       lines.begin() + static_cast<std::ptrdiff_t>(last));
  if (found == expected) return "";
  const char* update = std::getenv("DDP_UPDATE_TABLES");
  if (update != nullptr && std::string(update) == "1") {
    lines.erase(lines.begin() + static_cast<std::ptrdiff_t>(begin), lines.begin() + static_cast<std::ptrdiff_t>(last));
    lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(begin), expected.begin(), expected.end());
    std::ofstream out(path, std::ios::trunc);
    for (const std::string& line : lines) out << line << '\n';
    return out ? "" : "cannot write " + path;
  }
  size_t first = 0;
  while (first < found.size() && first < expected.size() && found[first] == expected[first]) ++first;
  std::ostringstream message;
  message << path << " differs from its table at line " << begin + first + 1 << ": has "
          << (first < found.size() ? "'" + found[first] + "'" : "nothing") << ", expected "
          << (first < expected.size() ? "'" + expected[first] + "'" : "nothing")
          << "; rerun the test with DDP_UPDATE_TABLES=1 to write the block, which is:\n";
  for (const std::string& line : expected) message << line << '\n';
  return message.str();
}

}  // namespace ddp::testing
