// Every context: register the option table and read the admin's plugstack.conf arguments.
#include <slurm/slurm.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/error.hpp"
#include "dispatch.h"
#include "plugin_state.hpp"
#include "slurm_versions.h"

// Slurm's own configuration, exported by libslurmfull (loaded by srun, sbatch and slurmstepd) but not declared
// in its public headers. Weak, so that a missing symbol only costs what it gives: the file name in error messages,
// srun's kill-on-bad-exit default.
extern "C" slurm_conf_t slurm_conf __attribute__((weak));

namespace ddp::spank {
namespace {

std::string plugstack_file(spank_t sp) {
  const slurm_conf_t* conf = this_slurm_conf(sp);
  if (conf != nullptr && conf->plugstack != nullptr) return conf->plugstack;
  return "plugstack.conf";
}

int option_callback(int val, const char* optarg, int remote) {
  try {
    apply_option(state().options, static_cast<size_t>(val), optarg);
    return 0;
  } catch (const std::exception& e) {
    // On srun or sbatch the user sees this at once and nothing starts; in slurmstepd the step fails in
    // task_init, where Slurm reports the failure to srun.
    if (!remote) {
      log_error(e.what());
      return -1;
    }
    record_failure(e.what(), false);
    return 0;
  }
}

int register_options(spank_t sp) {
  // spank_option_register copies nothing: the table must outlive the process's use of it.
  static std::vector<spank_option> registered = [] {
    std::vector<spank_option> table;
    const auto& specs = option_table();
    for (size_t i = 0; i < specs.size(); ++i) {
      const int has_arg = specs[i].arg == ArgKind::None ? 0 : specs[i].arg == ArgKind::Required ? 1 : 2;
      table.push_back({const_cast<char*>(specs[i].name), const_cast<char*>(specs[i].arg_info),
                       const_cast<char*>(specs[i].usage), has_arg, static_cast<int>(i), option_callback});
    }
    return table;
  }();
  for (spank_option& option : registered) {
    if (spank_option_register(sp, &option) != ESPANK_SUCCESS) {
      log_error(std::string("cannot register option --") + option.name);
      return -1;
    }
  }
  return 0;
}

}  // namespace

// A version item: "24", "11" (char **, S_SLURM_VERSION_MAJOR and _MINOR); empty when Slurm gives none.
std::string version_item(spank_t sp, spank_item_t item) {
  char* text = nullptr;
  return spank_get_item(sp, item, &text) == ESPANK_SUCCESS && text != nullptr ? text : "";
}

slurm_conf_t* this_slurm_conf(spank_t sp, std::string* why_not) {
  if (&slurm_conf == nullptr) {
    if (why_not) *why_not = "this Slurm does not export its configuration";
    return nullptr;
  }
  const std::string major = version_item(sp, S_SLURM_VERSION_MAJOR), minor = version_item(sp, S_SLURM_VERSION_MINOR);
  const auto number = [](const std::string& text) { return text.empty() ? -1 : std::atoi(text.c_str()); };
  if (number(major) != SLURM_VERSION_MAJOR(SLURM_VERSION_NUMBER) ||
      number(minor) != SLURM_VERSION_MINOR(SLURM_VERSION_NUMBER)) {
    char built[16];
    std::snprintf(built, sizeof built, "%d.%02d", SLURM_VERSION_MAJOR(SLURM_VERSION_NUMBER),
                  SLURM_VERSION_MINOR(SLURM_VERSION_NUMBER));
    if (why_not) *why_not = "this is Slurm " + major + "." + minor + ", ddp.so was built for " + built;
    return nullptr;
  }
  return &slurm_conf;
}

PluginState& state() {
  static PluginState plugin_state;
  return plugin_state;
}

void record_failure(std::string message, bool node_specific) {
  if (!state().failure) state().failure = Failure{std::move(message), node_specific};
}

void log_error(const std::string& message) { slurm_error("ddp: %s", message.c_str()); }

std::optional<std::string> get_env(spank_t sp, const char* name) {
  // Node lists of large steps can be long: grow the buffer, within a bound.
  for (size_t size = 1024; size <= (1u << 20); size *= 4) {
    std::string buffer(size, '\0');
    const spank_err_t rc = spank_getenv(sp, name, buffer.data(), static_cast<int>(size));
    if (rc == ESPANK_SUCCESS) {
      buffer.resize(buffer.find('\0'));
      return buffer;
    }
    if (rc != ESPANK_NOSPACE) return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace ddp::spank

using namespace ddp::spank;

extern "C" int ddp_spank_init(spank_t sp, int ac, char** av) {
  return guarded([&] {
    // Options exist only where users give them or steps receive them; slurmd and prolog/epilog contexts
    // have none, and a failed init there would drain the node.
    const spank_context_t context = spank_context();
    if (context != S_CTX_LOCAL && context != S_CTX_REMOTE && context != S_CTX_ALLOCATOR) return 0;
    if (register_options(sp) != 0) return -1;
    try {
      state().config = ddp::parse_config(std::vector<std::string>(av, av + ac), plugstack_file(sp));
    } catch (const ddp::Error& e) {
      // A bad admin argument must not break srun for everyone: only --ddp steps fail, with this message.
      record_failure(e.what(), false);
    }
    return 0;
  });
}
