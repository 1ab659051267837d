// ddp.so as Slurm loads it: this program stands in for srun and slurmstepd. It exports the symbols ddp.so takes
// from the process that loads it (the spank_* calls, slurm_error, Slurm's slurm_conf), dlopens the built plugin
// and calls its callbacks in Slurm's order. Each case runs in a child process of its own: a fresh plugin, and a
// refusal that ends the process (as it must whatever the plugstack line says) ends only that child.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <slurm/slurm.h>
#include <slurm/spank.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "test_common.hpp"

namespace {

// What the stand-in Slurm shows the plugin, and what the plugin did to it.
struct Host {
  spank_context_t context = S_CTX_LOCAL;
  std::string version_major = std::to_string(SLURM_VERSION_MAJOR(SLURM_VERSION_NUMBER));
  std::string version_minor = std::to_string(SLURM_VERSION_MINOR(SLURM_VERSION_NUMBER));
  std::vector<spank_option> options;
  std::map<std::string, std::string> env;  // slurmstepd: the step's environment, then the task's
  std::map<spank_item_t, uint32_t> items;  // the uint32_t items, and S_TASK_ID
  std::vector<std::string> errors;         // slurm_error's lines
};
Host host;

}  // namespace

extern "C" {
slurm_conf_t slurm_conf;

void slurm_error(const char* format, ...) {
  char line[4096];
  va_list args;
  va_start(args, format);
  std::vsnprintf(line, sizeof line, format, args);
  va_end(args);
  host.errors.push_back(line);
  std::fprintf(stderr, "%s\n", line);  // what the process that ends on a refusal said
}

void slurm_debug(const char*, ...) {}

spank_context_t spank_context(void) { return host.context; }

int spank_remote(spank_t) { return host.context == S_CTX_REMOTE; }

spank_err_t spank_option_register(spank_t, struct spank_option* option) {
  host.options.push_back(*option);
  return static_cast<spank_err_t>(ESPANK_SUCCESS);
}

spank_err_t spank_get_item(spank_t, spank_item_t item, ...) {
  va_list args;
  va_start(args, item);
  int rc = ESPANK_SUCCESS;
  if (item == S_SLURM_VERSION_MAJOR || item == S_SLURM_VERSION_MINOR) {
    *va_arg(args, const char**) = (item == S_SLURM_VERSION_MAJOR ? host.version_major : host.version_minor).c_str();
  } else if (item == S_JOB_UID) {
    *va_arg(args, uid_t*) = getuid();
  } else if (item == S_TASK_ID && host.items.count(item) != 0) {
    *va_arg(args, int*) = static_cast<int>(host.items[item]);
  } else if (host.items.count(item) != 0) {
    *va_arg(args, uint32_t*) = host.items[item];
  } else {
    rc = ESPANK_NOT_AVAIL;
  }
  va_end(args);
  return static_cast<spank_err_t>(rc);
}

spank_err_t spank_getenv(spank_t, const char* name, char* buffer, int size) {
  const auto found = host.env.find(name);
  if (found == host.env.end()) return static_cast<spank_err_t>(ESPANK_ENV_NOEXIST);
  if (static_cast<int>(found->second.size()) >= size) return static_cast<spank_err_t>(ESPANK_NOSPACE);
  std::snprintf(buffer, static_cast<size_t>(size), "%s", found->second.c_str());
  return static_cast<spank_err_t>(ESPANK_SUCCESS);
}

spank_err_t spank_setenv(spank_t, const char* name, const char* value, int) {
  host.env[name] = value;
  return static_cast<spank_err_t>(ESPANK_SUCCESS);
}

// No other plugin's option (pyxis's --container-image) is in use here.
spank_err_t spank_option_getopt(spank_t, struct spank_option*, char**) {
  return static_cast<spank_err_t>(ESPANK_ERROR);
}
}

namespace {

using Callback = int (*)(spank_t, int, char**);
spank_t const kHandle = reinterpret_cast<spank_t>(&host);
constexpr const char* kKey = "0123456789abcdef0123456789abcdef";

// The exit status of `body` run in a child process (128 + the signal when it died of one); its standard error in
// `said` when given.
int in_child(const std::function<int()>& body, std::string* said = nullptr) {
  std::fflush(nullptr);
  FILE* capture = std::tmpfile();
  const pid_t child = fork();
  if (child == 0) {
    if (said != nullptr) dup2(fileno(capture), 2);
    _exit(body());
  }
  int status = 0;
  waitpid(child, &status, 0);
  if (said != nullptr) {
    said->clear();
    std::rewind(capture);
    for (int c; (c = std::fgetc(capture)) != EOF;) *said += static_cast<char>(c);
  }
  std::fclose(capture);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The built ddp.so, loaded into this (child) process.
struct Plugin {
  void* handle = dlopen(DDP_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);

  int call(const char* callback, std::vector<std::string> args = {}) const {
    if (handle == nullptr) throw std::runtime_error(std::string("cannot load ddp.so: ") + dlerror());
    const auto function = reinterpret_cast<Callback>(dlsym(handle, callback));
    if (function == nullptr) throw std::runtime_error(std::string("no ") + callback + ": " + dlerror());
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    return function(kHandle, static_cast<int>(argv.size()), argv.data());
  }

  // The option as srun's command line (remote 0) or slurmstepd's launch message (remote 1) gives it.
  int option(const std::string& name, const char* value, int remote) const {
    for (const spank_option& option : host.options) {
      if (name == option.name) return option.cb(option.val, value, remote);
    }
    throw std::runtime_error("ddp.so registered no --" + name);
  }
};

bool logged(const std::string& text) {
  for (const std::string& line : host.errors) {
    if (line.find(text) != std::string::npos) return true;
  }
  std::fprintf(stderr, "not logged: [%s]; logged:\n", text.c_str());
  for (const std::string& line : host.errors) std::fprintf(stderr, "  %s\n", line.c_str());
  return false;
}

// srun with --ddp, up to the moment its options are final; the environment is this process's, as srun's is.
Plugin srun_with_ddp(std::vector<std::string> plugstack_args = {}) {
  host.context = S_CTX_LOCAL;
  Plugin plugin;
  plugin.call("slurm_spank_init", std::move(plugstack_args));
  plugin.option("ddp", "auto", 0);
  return plugin;
}

void without_job_environment() {
  for (const char* name :
       {"SLURM_JOB_ID", "DDP_JOB_KEY", "SLURM_SPANK_DDP_JOB_KEY", "DDP_JOB_INSTANCE", "SLURM_SPANK_DDP_JOB_INSTANCE"}) {
    unsetenv(name);
  }
}

// ddp.so wrote srun's own kill-on-bad-exit default into slurm_conf, whose layout is that of the Slurm it was built
// against, whatever Slurm loaded it. It must check the running Slurm's series first, and otherwise say what to do.
TEST(Plugin, SrunWritesKillOnBadExitOnlyIntoTheConfigurationOfItsOwnSeries) {
  const auto run = [](const std::string& minor) {
    return in_child([&] {
      without_job_environment();
      host.version_minor = minor;
      slurm_conf.kill_on_bad_exit = 0;
      const Plugin plugin = srun_with_ddp();
      if (plugin.call("slurm_spank_init_post_opt") != 0) return 2;
      if (slurm_conf.kill_on_bad_exit == 1) return 1;
      return logged("a failed task will not end this step (this is Slurm ") && logged("add --kill-on-bad-exit=1") ? 0
                                                                                                                  : 3;
    });
  };
  EXPECT_EQ(run(host.version_minor), 1) << "the series ddp.so was built for: written";
  EXPECT_EQ(run(std::to_string(SLURM_VERSION_MINOR(SLURM_VERSION_NUMBER) + 1)), 0) << "another series: untouched";
}

// srun --export=NONE and sbatch --export=NONE keep only the variables whose names start with SLURM: the job's key
// travels as SLURM_SPANK_DDP_JOB_KEY too, an srun inside such a job finds it there, and slurmstepd gives each task
// DDP_JOB_KEY from it.
TEST(Plugin, TheJobsKeyTravelsUnderANameThatExportNoneKeeps) {
  EXPECT_EQ(in_child([] {
              without_job_environment();
              srun_with_ddp().call("slurm_spank_init_post_opt");
              const char* key = getenv("DDP_JOB_KEY");
              const char* carried = getenv("SLURM_SPANK_DDP_JOB_KEY");
              return key != nullptr && carried != nullptr && std::string(key) == carried && strlen(key) == 32 ? 0 : 1;
            }),
            0);
  // Inside a batch job of sbatch --export=NONE: the carrier only.
  EXPECT_EQ(in_child([] {
              without_job_environment();
              setenv("SLURM_JOB_ID", "812", 1);
              setenv("SLURM_SPANK_DDP_JOB_KEY", kKey, 1);
              srun_with_ddp().call("slurm_spank_init_post_opt");
              return std::string(getenv("DDP_JOB_KEY")) == kKey ? 0 : 1;
            }),
            0);
}

// The job's instance (ddp-train's run is the job id and it) is made with a new job and carried like the key; an srun
// inside an allocation keeps the allocation's, and makes none where the allocation has none (it would be the step's).
TEST(Plugin, TheJobsInstanceIsMadeWithANewJobAndKeptInsideIt) {
  EXPECT_EQ(in_child([] {
              without_job_environment();
              srun_with_ddp().call("slurm_spank_init_post_opt");
              const char* instance = getenv("DDP_JOB_INSTANCE");
              const char* carried = getenv("SLURM_SPANK_DDP_JOB_INSTANCE");
              return instance != nullptr && carried != nullptr && std::string(instance) == carried &&
                             strlen(instance) == 12 && strspn(instance, "0123456789abcdef") == 12
                         ? 0
                         : 1;
            }),
            0);
  EXPECT_EQ(in_child([] {
              without_job_environment();
              setenv("SLURM_JOB_ID", "812", 1);
              setenv("SLURM_SPANK_DDP_JOB_KEY", kKey, 1);
              setenv("SLURM_SPANK_DDP_JOB_INSTANCE", "0a1b2c3d4e5f", 1);
              srun_with_ddp().call("slurm_spank_init_post_opt");
              return std::string(getenv("DDP_JOB_INSTANCE")) == "0a1b2c3d4e5f" ? 0 : 1;
            }),
            0);
  EXPECT_EQ(in_child([] {
              without_job_environment();
              setenv("SLURM_JOB_ID", "812", 1);
              srun_with_ddp().call("slurm_spank_init_post_opt");
              return getenv("DDP_JOB_INSTANCE") == nullptr && getenv("SLURM_SPANK_DDP_JOB_INSTANCE") == nullptr ? 0 : 1;
            }),
            0);
}

// slurmstepd of a one-task step on this machine, its environment as srun --export=NONE leaves it: SLURM_* only.
// Returns task_init's return value (a refusal does not return).
int slurmstepd_task(const std::string& log_dir, std::map<std::string, std::string> env, const char* port = nullptr) {
  host.context = S_CTX_REMOTE;
  host.items = {{S_JOB_ID, 812},           {S_JOB_STEPID, 0},           {S_JOB_NNODES, 1},
                {S_JOB_NODEID, 0},         {S_JOB_TOTAL_TASK_COUNT, 1}, {S_JOB_LOCAL_TASK_COUNT, 1},
                {S_STEP_CPUS_PER_TASK, 1}, {S_SLURM_RESTART_COUNT, 0},  {S_TASK_ID, 0}};
  host.env = {{"SLURM_STEP_NODELIST", "localhost"},
              {"SLURM_PROCID", "0"},
              {"SLURM_NODEID", "0"},
              {"SLURM_JOB_NAME", "t"},
              {"DDP_LOG_DIR", log_dir}};
  for (auto& [name, value] : env) host.env[name] = value;
  const Plugin plugin;
  plugin.call("slurm_spank_init");
  plugin.option("ddp", "auto", 1);
  plugin.option("ddp-bind", "none", 1);
  if (port != nullptr) plugin.option("ddp-port", port, 1);
  plugin.call("slurm_spank_init_post_opt");
  plugin.call("slurm_spank_user_init");
  return plugin.call("slurm_spank_task_init");
}

TEST(Plugin, ATaskGetsTheJobsKeyFromTheCarrierAndNoKeyFailsTheStep) {
  const ddp::testing::TempDir logs;
  EXPECT_EQ(in_child([&] {
              if (slurmstepd_task(logs.path(), {{"SLURM_SPANK_DDP_JOB_KEY", kKey}}) != 0) return 2;
              return host.env["DDP_JOB_KEY"] == kKey && host.env.count("DDP_JOB_INSTANCE") == 0 ? 0 : 1;
            }),
            0);
  // The instance travels the same way, where the job has one.
  EXPECT_EQ(in_child([&] {
              if (slurmstepd_task(logs.path(), {{"SLURM_SPANK_DDP_JOB_KEY", kKey},
                                                {"SLURM_SPANK_DDP_JOB_INSTANCE", "0a1b2c3d4e5f"}}) != 0) {
                return 2;
              }
              return host.env["DDP_JOB_INSTANCE"] == "0a1b2c3d4e5f" ? 0 : 1;
            }),
            0);
  // No key at all (an srun without ddp.so, or one that filtered the carrier): the port would come from public ids.
  EXPECT_EQ(in_child([&] {
              slurmstepd_task(logs.path(), {});
              return 0;  // reached only when the step went on
            }),
            1);
}

// With "optional" in plugstack.conf, Slurm ignores a failing callback: a refused step ran its tasks without any
// --ddp variable, and srun ran a refused request. Every refusal must end the process itself, with status 1.
TEST(Plugin, ARefusalEndsTheTaskAndSrunWhateverThePlugstackLineSays) {
  const ddp::testing::TempDir logs;
  std::string said;
  EXPECT_EQ(in_child(
                [&] {
                  slurmstepd_task(logs.path(), {{"SLURM_SPANK_DDP_JOB_KEY", kKey}}, "99999999");
                  return 0;  // reached only when task_init returned: Slurm would exec the task (optional)
                },
                &said),
            1);
  EXPECT_NE(said.find("ddp: --ddp-port"), std::string::npos) << said;
  EXPECT_EQ(in_child(
                [] {
                  without_job_environment();
                  srun_with_ddp({"port_range=bogus"}).call("slurm_spank_init_post_opt");
                  return 0;  // reached only when srun went on
                },
                &said),
            1);
  EXPECT_NE(said.find("ddp: plugstack argument 'port_range=bogus'"), std::string::npos) << said;
}

}  // namespace
