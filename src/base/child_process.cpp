#include "base/child_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>

#include "base/unique_fd.hpp"
#include "core/error.hpp"

namespace ddp {
namespace {

constexpr char kAnswered = 'A';  // first byte of a child's answer: an empty answer is still one

bool write_all(int fd, const std::string& text) {
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

[[noreturn]] void child_main(const std::function<std::string()>& body, int answer_fd) {
  const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  for (int fd = 0; fd < 3 && null >= 0; ++fd) dup2(null, fd);
  if (dup2(answer_fd, 3) != 3) _exit(1);
  closefrom(4);
  std::string answer(1, kAnswered);
  try {
    answer += body();
  } catch (...) {
    _exit(2);  // the function's own errors are part of its answer; anything else is a death
  }
  _exit(write_all(3, answer) ? 0 : 1);
}

std::string death_of(int status) {
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "exit status " + std::to_string(WEXITSTATUS(status));
}

}  // namespace

ChildOutcome run_in_child(const std::function<std::string()>& body, std::chrono::milliseconds deadline,
                          std::size_t max_answer, const std::string& what) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) throw Error(what + ": " + std::strerror(errno));
  UniqueFd read_end(pipe_fds[0]);
  UniqueFd write_end(pipe_fds[1]);
  const pid_t child = fork();
  if (child < 0) throw Error(what + ": fork: " + std::strerror(errno));
  if (child == 0) child_main(body, write_end.get());
  write_end.reset();
  ChildOutcome outcome;
  std::string reply;
  bool too_long = false;
  const auto end = std::chrono::steady_clock::now() + deadline;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    pollfd waiting{read_end.get(), POLLIN, 0};
    const int ready = left.count() > 0 ? poll(&waiting, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      // A child stuck in the file system cannot always be reaped now; it goes when the file system answers.
      kill(child, SIGKILL);
      waitpid(child, nullptr, WNOHANG);
      outcome.end = ChildOutcome::End::TimedOut;
      return outcome;
    }
    char buffer[1 << 16];
    const ssize_t n = ::read(read_end.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (reply.size() + static_cast<size_t>(n) > max_answer + 1) too_long = true;
    if (!too_long) reply.append(buffer, static_cast<size_t>(n));
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (too_long) {
    outcome.death = "an answer of more than " + std::to_string(max_answer) + " bytes";
  } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && !reply.empty() && reply[0] == kAnswered) {
    outcome.end = ChildOutcome::End::Answered;
    outcome.answer = reply.substr(1);
  } else {
    outcome.death = death_of(status);
  }
  return outcome;
}

ChildOutcome check_in_child(const std::function<void()>& check, std::chrono::milliseconds deadline,
                            const std::string& what) {
  return run_in_child(
      [&]() -> std::string {
        try {
          check();
        } catch (const std::exception& e) {
          return e.what();
        }
        return "";
      },
      deadline, 4096, what);
}

std::string seconds_text(std::chrono::milliseconds duration) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(duration.count()) / 1000.0);
  return text;
}

}  // namespace ddp
