#pragma once
// Helpers for runtime tests that start real processes (ddp-train ranks, this binary as a worker, Python), and a
// sample snapshot.
#include <ATen/core/Dict.h>
#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "ddp_runtime/snapshots/snapshot.hpp"

namespace ddp::runtime::testing {

// A value easy to find among a snapshot file's bytes: sample_snapshot's weights by default.
inline constexpr float kSnapshotMarker = 1234.5f;

// A snapshot's content with every field set: a 4x5 weight filled with `fill` and a bias, SGD's momentum buffer,
// the CPU generator's state, progress at `global_step`, and `run_id`.
SnapshotContent sample_snapshot(int64_t global_step, float fill = kSnapshotMarker, const std::string& run_id = "7");

// A snapshot store's warnings, dropped.
Warn ignore_warnings();

using Env = std::map<std::string, std::string>;

struct Process {
  pid_t pid = -1;
  std::string output_path;  // stdout and stderr together
};

// Starts argv[0] in a process group of its own with this process's environment minus every launcher variable
// (RANK, SLURM_*, OMPI_*, ...), plus OMP_NUM_THREADS=1 and `env`.
Process spawn(const std::vector<std::string>& argv, const Env& env, const std::string& output_path);
// Exit status, or 128 + signal number.
int wait_for(const Process& process);
// The same, or -1 after killing the process and its process group when it has not ended within `limit` (a hang).
int wait_at_most(const Process& process, std::chrono::seconds limit);
// Called as each test starts (test_main.cpp): run() and run_ranks() count their 110 s from it.
void test_started();
// Pids of the live processes whose parent is `parent` (the ranks mpirun started).
std::vector<pid_t> children_of(pid_t parent);

struct Result {
  int status = -1;
  std::string output;
};
// Runs argv to its end: its exit status and output. One that has not ended 110 s into the test (CTest's limit is
// 120 s) is killed with its process group, and its Result says so (status -1 and a line in its output).
Result run(const std::vector<std::string>& argv, const Env& env = {});

// How many lines of `output` the program wrote: Gloo's own log lines ("[.../gloo/...] INFO ...", which Gloo of 2025
// prints to stderr on every connect, with no switch to silence it) are not counted.
size_t own_lines(const std::string& output);

// Starts `ranks` copies of argv with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and MASTER_* of a free
// port on 127.0.0.1; output of rank r goes to <dir>/rank<r>.log.
std::vector<Process> spawn_ranks(int ranks, const std::vector<std::string>& argv, const std::string& dir, Env env = {});
// spawn_ranks, each run to its end as run() does.
std::vector<Result> run_ranks(int ranks, const std::vector<std::string>& argv, const std::string& dir, Env env = {});

// Waits until the file contains `text` or the process has ended; true when the text was seen.
bool wait_for_text(const std::string& path, const std::string& text, const Process& process);

int free_port();              // ddp::testing::reserve_port()
std::string make_temp_dir();  // removed with everything in it when this process ends
std::string read_text(const std::string& path);
void write_bytes(const std::string& path, const std::string& bytes);

// OpenMPI's mpirun starting `ranks` copies of argv on this machine (as root too); its ranks inherit the environment
// that spawn or run gives mpirun.
std::vector<std::string> mpirun_command(int ranks, const std::vector<std::string>& argv);
// Why tests of MPI cannot run here (no mpirun, or a runtime built without MPI), or empty.
std::string mpi_missing();

// `args` followed by `more`: a command line with options added.
std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more);

// The names in `dir`, sorted.
std::vector<std::string> listing(const std::string& dir);

// A dict in torch.save's format (ddp-train's files, Python's), read with the runtime's reader.
c10::impl::GenericDict load_dict(const std::string& path);

std::string ddp_train();
// ddp-train with its snapshots in `dir`/snapshots and its final model at `dir`/final.pt, then `args`.
std::vector<std::string> train_command(const std::string& dir, const std::vector<std::string>& args);
// ddp-train training the MLP workload `width` wide, with its snapshots and final model (final.pt) in `dir`, then
// `more`: the command line the multi-rank tests of recovery, resilience and the store's proof start from.
std::vector<std::string> mlp_command(const std::string& dir, const std::string& width,
                                     const std::vector<std::string>& more);
// Debian's python3 with torch; empty when it is missing (tests that need it skip).
std::string torch_python();
std::string python_script(const std::string& name);

// This test binary, re-entered as a worker (see test_main.cpp): RUNTIME_TEST_WORKER=name.
std::string self_path();
int run_test_worker(const std::string& name);
// The workers of mpi_test.cpp, whose names start with "mpi-".
int mpi_worker(const std::string& name);
// The workers of snapshot_test.cpp, whose names start with "snapshot-".
int snapshot_worker(const std::string& name);

}  // namespace ddp::runtime::testing
