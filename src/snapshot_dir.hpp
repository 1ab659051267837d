#pragma once
// The snapshot directory of a --ddp step: --ddp-snapshot-dir, or the admin's snapshot_dir default, with
// %u (user), %j (job id) and %x (job name) expanded. A requeued job keeps its id, so it finds the same one.
#include <string>

namespace ddp {

struct PathVars {
  std::string user;
  std::string job_id;
  std::string job_name;
};

// Throws ddp::Error for an unknown %-sequence, a relative result, or a value that would leave the admin's
// directory (a job name with '/', or "." / "..").
std::string expand_path_template(const std::string& path_template, const PathVars& vars);

// Creates `path` and its missing parents with mode 0700 as the calling user (run it with the user's
// privileges, never as root) and checks that the user can write there; throws ddp::Error naming the path.
void prepare_snapshot_dir(const std::string& path);

}  // namespace ddp
