#pragma once
// Helpers every test binary shares: a temporary directory removed with its contents, TCP ports handed out without a
// race, and what tests of refusals ask of an exception. Plain C++; no GoogleTest, so that helper programs can use
// them too.
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

namespace ddp::testing {

// A fresh directory under $TMPDIR (else /tmp), removed with everything in it when the object goes away.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& relative) const { return path_ + "/" + relative; }

 private:
  std::string path_;
};

// A TCP port that nothing listens on, for a process that a test starts to listen on later. A port from bind(0)
// is in the kernel's ephemeral range, where any connect() or bind(0) of any process may take it before the test
// uses it; this one comes from the ports just below that range, which the kernel never hands out by itself, and
// is locked (a lock file under /tmp/ddp-test-ports) for as long as `holder` lives, so that tests running at once
// never share one. `holder` 0: this process, which keeps the lock until it exits. Throws std::runtime_error when
// no port is free.
uint16_t reserve_port(int holder = 0);

// Generated text kept in a checked-in file (a docs table, a config comment) against the table it comes from. The
// block is the lines right after the first line equal to `header` that start with `prefix`, up to a line equal to
// `end` where one is given (with an empty prefix, the lines up to `end`). Returns "" when they
// are `expected`, else a message naming `path`, the first line that differs and the whole expected block. With
// DDP_UPDATE_TABLES=1 in the environment, writes `expected` in the block's place instead and returns "", so that adding
// a row to a table is followed by one test run rather than hand edits of each page.
std::string compare_block(const std::string& path, const std::string& header, const std::string& prefix,
                          const std::vector<std::string>& expected, const std::string& end = "");

// The message of the `Expected` that `body` throws (by default any std::exception, ddp::Error among them); empty when
// it throws nothing. Anything else it throws goes on to the test, which fails on it.
template <class Expected = std::exception>
std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Expected& error) {
    return error.what();
  }
  return "";
}

// Writes `text` to `path`, with `mtime` (seconds since 1970) as its modification time when it is not 0.
void write_file(const std::string& path, const std::string& text, double mtime = 0);

// Whether `part` occurs in `text`.
bool contains(const std::string& text, const std::string& part);

}  // namespace ddp::testing
