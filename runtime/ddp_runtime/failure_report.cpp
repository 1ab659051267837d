#include "ddp_runtime/failure_report.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "env_names.hpp"
#include "json_string.hpp"
#include "netif.hpp"

namespace ddp::runtime {

namespace {

// RANK as a number when it is one, else 0 (a single process has none).
std::string rank_number(const EnvLookup& env) {
  const std::string rank = env(vars::kRank).value_or("0");
  const bool digits = !rank.empty() && rank.size() < 10 && rank.find_first_not_of("0123456789") == std::string::npos;
  return digits ? std::to_string(std::stoul(rank)) : "0";
}

}  // namespace

std::string error_report_json(const std::string& message, int exit_status, const EnvLookup& env, double time) {
  return "{\"message\": {\"message\": " + json_string(message) + ", \"errorCode\": " + std::to_string(exit_status) +
         ", \"extraInfo\": {\"timestamp\": \"" + std::to_string(static_cast<long long>(time)) +
         "\", \"run_id\": " + json_string(env(vars::kRunId).value_or("")) + ", \"rank\": " + rank_number(env) +
         ", \"hostname\": " + json_string(host_name()) + ", \"program\": \"ddp-train\"}}}\n";
}

bool write_error_report(const std::string& message, int exit_status, const EnvLookup& env, std::string* why) {
  const auto path = env(vars::kErrorFile);
  if (!path || path->empty()) return true;
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string text = error_report_json(message, exit_status, env, now);
  const std::string temporary = *path + ".tmp." + std::to_string(getpid());
  const int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  bool ok = fd >= 0;
  if (ok) ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  if (fd >= 0) ok = close(fd) == 0 && ok;
  if (ok) ok = rename(temporary.c_str(), path->c_str()) == 0;
  if (!ok) {
    *why = "cannot write the error report " + *path + ": " + std::strerror(errno);
    unlink(temporary.c_str());
  }
  return ok;
}

}  // namespace ddp::runtime
