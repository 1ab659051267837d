#pragma once
// One verdict of ddp-doctor: what was measured, against which threshold, on which rank and node.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "doctor/checks/catalogue.hpp"

namespace ddp::doctor {

enum class Status { Ok, Warn, Fail, Skip };
const char* to_string(Status status);

struct CheckResult {
  std::string check;  // a catalogue entry's name (catalogue.hpp), e.g. "net.interface"; a peer's may be any text
  Status status = Status::Ok;
  std::string value;      // what was measured, with its unit
  std::string threshold;  // what passes; empty where the check is pass/fail by nature
  std::string detail;     // WARN/FAIL: what is wrong and what to do; SKIP: why; OK: context
  std::string host;       // stamped by the runner
  int rank = kWholeRun;   // stamped by the runner; kWholeRun for results about all ranks together

  static constexpr int kWholeRun = -1;
};

CheckResult make_result(const CheckInfo& check, Status status, std::string value, std::string threshold = "",
                        std::string detail = "");
CheckResult skipped(const CheckInfo& check, std::string why);

// Every runner passes what it made through this, naming the places (catalogue.hpp's `where`) it stands for: a result
// whose entry is declared for another place is a bug of the code that made it (a check called from the wrong runner,
// or its row's `where` not moved with it), and throws std::logic_error naming the check and both places, which fails
// the tests that reach it (inside slurmstepd, run_node_checks turns it into node.checks' FAIL). Returns `results`.
std::vector<CheckResult>& ran_at(std::initializer_list<Where> places, std::vector<CheckResult>& results);

// The worst status of a list, where FAIL > WARN > OK and SKIP counts as OK.
Status worst(const std::vector<CheckResult>& results);

// Grades a measurement where more is better: below fail_below FAIL, below warn_below WARN.
Status grade_at_least(double measured, double warn_below, double fail_below);
// Grades a measurement where less is better: above fail_above FAIL, above warn_above WARN.
Status grade_at_most(double measured, double warn_above, double fail_above);

// Human units, fixed formats so that tests and scripts can rely on them.
std::string format_bytes(uint64_t bytes);            // "512 B", "1.5 KiB", "4.0 GiB"
std::string format_gbits(double bytes_per_second);   // "9.41 Gbit/s"
std::string format_mbytes(double bytes_per_second);  // "354.2 MB/s"
std::string format_gbytes(double bytes_per_second);  // "1.23 GB/s"
std::string format_seconds(double seconds);          // "12 us", "3.40 ms", "1.25 s"
std::string format_fixed(double value, int decimals);

}  // namespace ddp::doctor
