#pragma once
// Work that may hang or crash the process doing it, done by a child process with a deadline: a file system that
// hangs (NFS, Lustre: the caller would sit in uninterruptible sleep with it) or a library that crashes on bad input
// (hwloc on some XML). The caller gets the child's answer, or knows it timed out or died, and goes on either way; a
// child stuck in the kernel is killed and left to go when the kernel lets it.
//
// The child keeps no descriptor of the caller's but the answer's pipe (stdin, stdout and stderr are /dev/null):
// a task's output pipes held by a stuck child would keep its step waiting for their end. It runs one function
// and leaves with _exit, so nothing of the caller's (atexit handlers, buffered streams) runs twice.
#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

namespace ddp {

struct ChildOutcome {
  enum class End { Answered, TimedOut, Died };
  End end = End::Died;
  std::string answer;  // what the function returned (at most max_answer bytes), when Answered
  std::string death;   // "signal 11" or "exit status 3", when Died
};

// Runs `body` in a child process and waits at most `deadline` for its answer. Throws ddp::Error when no child can
// be started (no pipe, no fork), naming `what` ("cannot check the snapshot directory").
ChildOutcome run_in_child(const std::function<std::string()>& body, std::chrono::milliseconds deadline,
                          std::size_t max_answer, const std::string& what);

// A check that throws what it finds wrong, run as run_in_child runs `body`: the answer is the message of what it
// threw (4096 bytes at most), or "" when it returned.
ChildOutcome check_in_child(const std::function<void()>& check, std::chrono::milliseconds deadline,
                            const std::string& what);

// "1.5 s", "30 s": a deadline as messages name it.
std::string seconds_text(std::chrono::milliseconds duration);

}  // namespace ddp
