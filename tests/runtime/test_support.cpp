#include "test_support.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Functions.h>
#include "ddp_runtime/common/mapped_file.hpp"
#include "ddp_runtime/snapshots/pickle_reader.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "test_common.hpp"

extern char** environ;

namespace ddp::runtime::testing {

SnapshotContent sample_snapshot(int64_t global_step, float fill, const std::string& run_id) {
  SnapshotContent c;
  c.model_state = {{"weight", at::full({4, 5}, fill)}, {"bias", at::arange(4, at::kFloat)}};
  OptimizerState o;
  o.lr = 0.01;
  o.initial_lr = 0.02;
  o.momentum = 0.9;
  o.per_param = {{{"momentum_buffer", at::full({4, 5}, 0.25f)}}, {}};
  c.optimizer = o;
  c.rng_state = at::detail::getDefaultCPUGenerator().get_state();
  c.progress = {3, 7, global_step, 11, 2, 32};
  c.run_id = run_id;
  return c;
}

Warn ignore_warnings() {
  return [](const std::string&) {};
}

namespace {

bool is_launcher_variable(const std::string& name) {
  for (const char* prefix : {"SLURM_", "OMPI_", "PMIX_", "TORCHELASTIC_", "DDP_"}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  for (const char* exact : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                            "GLOO_SOCKET_IFNAME", "OMP_NUM_THREADS", "RUNTIME_TEST_WORKER"}) {
    if (name == exact) return true;
  }
  return false;
}

std::vector<std::string> child_environment(const Env& extra) {
  Env merged;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text = *entry;
    const std::size_t equals = text.find('=');
    const std::string name = text.substr(0, equals);
    if (!is_launcher_variable(name)) merged[name] = text.substr(equals + 1);
  }
  merged["OMP_NUM_THREADS"] = "1";
  merged["PYTHONFAULTHANDLER"] = "1";  // a hung Python sent SIGABRT (wait_until) prints every thread's traceback
  for (const auto& [name, value] : extra) merged[name] = value;
  std::vector<std::string> lines;
  for (const auto& [name, value] : merged) lines.push_back(name + "=" + value);
  return lines;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> result;
  for (std::string& s : strings) result.push_back(s.data());
  result.push_back(nullptr);
  return result;
}

}  // namespace

Process spawn(const std::vector<std::string>& argv, const Env& env, const std::string& output_path) {
  std::vector<std::string> args = argv;
  std::vector<std::string> environment = child_environment(env);
  std::vector<char*> arg_pointers = pointers(args);
  std::vector<char*> env_pointers = pointers(environment);
  // O_APPEND: what wait_until adds to a hung process's output is not overwritten by the process's next write.
  const int out = open(output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (out < 0) throw std::runtime_error("cannot create " + output_path);
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);  // wait_at_most ends a hung launcher together with what it started
    const rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);  // the SIGABRT that asks a hung process for its stacks leaves no core file
    dup2(out, 1);
    dup2(out, 2);
    execve(arg_pointers[0], arg_pointers.data(), env_pointers.data());
    std::perror(arg_pointers[0]);
    _exit(127);
  }
  close(out);
  return {pid, output_path};
}

int wait_for(const Process& process) {
  int status = 0;
  waitpid(process.pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

namespace {

// CTest gives each test 120 s and then kills it blind. A process run to its end by run() or run_ranks() that has not
// ended 110 s into its test hangs: it is killed first, so that the test fails naming it, with its output.
constexpr std::chrono::seconds kTestBudget{110};
std::chrono::steady_clock::time_point test_start = std::chrono::steady_clock::now();

// Each thread of a hung process: its state and the kernel function it sleeps in, appended to its output.
void describe_threads(const Process& process) {
  std::ostringstream text;
  text << "\n[test support: the threads of " << process.pid << " when it was found hung:";
  std::error_code error;
  const std::string tasks = "/proc/" + std::to_string(process.pid) + "/task";
  for (const auto& task : std::filesystem::directory_iterator(tasks, error)) {
    const std::string stat = read_text(task.path() / "stat");
    const std::size_t open = stat.find('(');
    const std::size_t close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close + 2 >= stat.size()) continue;
    text << "\n  " << task.path().filename().string() << " " << stat.substr(open, close - open + 1) << " state "
         << stat[close + 2] << " in " << read_text(task.path() / "wchan");
  }
  text << "]\n";
  std::ofstream(process.output_path, std::ios::app) << text.str();
}

std::chrono::steady_clock::time_point hang_deadline() {
  return std::max(test_start + kTestBudget, std::chrono::steady_clock::now() + std::chrono::seconds(5));
}

int wait_until(const Process& process, std::chrono::steady_clock::time_point deadline) {
  int status = 0;
  while (waitpid(process.pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      // Before it is killed a hung process shows where it hangs: its threads, and (a Python run with
      // PYTHONFAULTHANDLER) every thread's traceback on SIGABRT.
      describe_threads(process);
      kill(process.pid, SIGABRT);
      const auto stacks_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      while (waitpid(process.pid, &status, WNOHANG) == 0 && std::chrono::steady_clock::now() < stacks_deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      kill(-process.pid, SIGKILL);
      waitpid(process.pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

Result result_of(const Process& process, std::chrono::steady_clock::time_point deadline) {
  Result result;
  result.status = wait_until(process, deadline);
  result.output = read_text(process.output_path);
  if (result.status == -1) {
    result.output += "\n[test support: " + process.output_path + "'s process had not ended " +
                     std::to_string(kTestBudget.count()) + " s into the test; it and its process group were killed]\n";
  }
  return result;
}

}  // namespace

void test_started() { test_start = std::chrono::steady_clock::now(); }

int wait_at_most(const Process& process, std::chrono::seconds limit) {
  return wait_until(process, std::chrono::steady_clock::now() + limit);
}

std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> children;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    // /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces, so read after its closing parenthesis.
    const std::string stat = read_text(entry.path() / "stat");
    const std::size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(stat.substr(close + 1));
    std::string state;
    pid_t ppid = 0;
    fields >> state >> ppid;
    if (ppid == parent && state != "Z") children.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return children;
}

size_t own_lines(const std::string& output) {
  size_t count = 0;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    const bool gloo_log =
        line.rfind("[", 0) == 0 && line.find("gloo/") != std::string::npos && line.find("] INFO ") != std::string::npos;
    if (!gloo_log) ++count;
  }
  return count;
}

Result run(const std::vector<std::string>& argv, const Env& env) {
  const std::string path = make_temp_dir() + "/output.log";
  const Process process = spawn(argv, env, path);
  return result_of(process, hang_deadline());
}

std::vector<Process> spawn_ranks(int ranks, const std::vector<std::string>& argv, const std::string& dir, Env env) {
  env["MASTER_ADDR"] = "127.0.0.1";
  env["MASTER_PORT"] = std::to_string(free_port());
  env["WORLD_SIZE"] = env["LOCAL_WORLD_SIZE"] = std::to_string(ranks);
  std::vector<Process> processes;
  for (int rank = 0; rank < ranks; ++rank) {
    env["RANK"] = env["LOCAL_RANK"] = std::to_string(rank);
    processes.push_back(spawn(argv, env, dir + "/rank" + std::to_string(rank) + ".log"));
  }
  return processes;
}

std::vector<Result> run_ranks(int ranks, const std::vector<std::string>& argv, const std::string& dir, Env env) {
  const auto deadline = hang_deadline();
  std::vector<Result> results;
  for (const Process& process : spawn_ranks(ranks, argv, dir, std::move(env))) {
    results.push_back(result_of(process, deadline));
  }
  return results;
}

bool wait_for_text(const std::string& path, const std::string& text, const Process& process) {
  while (read_text(path).find(text) == std::string::npos) {
    siginfo_t info{};
    // WNOWAIT: look without reaping, so that wait_for still gets the exit status.
    if (waitid(P_PID, static_cast<id_t>(process.pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid != 0) {
      return read_text(path).find(text) != std::string::npos;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

int free_port() { return ddp::testing::reserve_port(); }

std::string make_temp_dir() {
  // Every directory a test asks for lies in one that goes with this process.
  static const ddp::testing::TempDir root;
  static int made = 0;
  const std::string dir = root / std::to_string(++made);
  if (mkdir(dir.c_str(), 0700) != 0) throw std::runtime_error("cannot create " + dir);
  return dir;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_bytes(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

std::string mpi_missing() {
#ifndef DDP_WITH_MPI
  return "the runtime was built without MPI";
#endif
  return access("/usr/bin/mpirun", X_OK) == 0 ? "" : "OpenMPI's mpirun is not installed";
}

std::vector<std::string> mpirun_command(int ranks, const std::vector<std::string>& argv) {
  std::vector<std::string> command{"/usr/bin/mpirun", "-np", std::to_string(ranks), "--oversubscribe",
                                   "--allow-run-as-root"};
  command.insert(command.end(), argv.begin(), argv.end());
  return command;
}

c10::impl::GenericDict load_dict(const std::string& path) { return read_torch_save(map_file(path)).toGenericDict(); }

std::string ddp_train() { return DDP_TRAIN_PATH; }

std::vector<std::string> train_command(const std::string& dir, const std::vector<std::string>& args) {
  return with({ddp_train(), "--snapshot-dir", dir + "/snapshots", "--output", dir + "/final.pt"}, args);
}

std::vector<std::string> mlp_command(const std::string& dir, const std::string& width,
                                     const std::vector<std::string>& more) {
  return with(
      {ddp_train(), "--snapshot-dir", dir, "--output", dir + "/final.pt", "--workload", "mlp", "--width", width}, more);
}

std::string torch_python() {
  // Probed once per test process: each start of torch takes seconds on a loaded machine.
  static const std::string found = [] {
    const std::string python = "/usr/bin/python3";
    const Result probe = run({python, "-c", "import torch"});
    // What a probe that failed said (a hung one: its threads and tracebacks) shows in the failing test's output.
    if (probe.status != 0) {
      std::cerr << "[test support: " << python << " -c 'import torch' ended with status " << probe.status << ":\n"
                << probe.output << "]\n";
    }
    return probe.status == 0 ? python : "";
  }();
  return found;
}

std::string python_script(const std::string& name) { return std::string(RUNTIME_TEST_PYTHON_DIR) + "/" + name; }

std::string self_path() {
  char path[4096] = {};
  const ssize_t length = readlink("/proc/self/exe", path, sizeof path - 1);
  return std::string(path, length > 0 ? static_cast<std::size_t>(length) : 0);
}

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace ddp::runtime::testing
