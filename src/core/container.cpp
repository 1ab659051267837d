#include "core/container.hpp"

#include <sched.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "base/parse.hpp"
#include "core/env_names.hpp"
#include "core/error.hpp"

namespace ddp {
namespace {

const std::vector<ContainerKind>& kinds() {
  static const std::vector<ContainerKind> all = {
      {ContainerRuntime::None, "none", ""},
      {ContainerRuntime::Pyxis, "pyxis/enroot", "srun --container-mounts=SRC:DST"},
      {ContainerRuntime::Charliecloud, "Charliecloud (ch-run)", "ch-run -b SRC[:DST]"},
      {ContainerRuntime::SlurmOci, "Slurm's OCI container (srun --container)",
       "a bind mount in the bundle's config.json (\"mounts\")"},
      {ContainerRuntime::Apptainer, "Apptainer/Singularity", "apptainer exec --bind SRC[:DST]"},
      {ContainerRuntime::Unknown, "a container", ""},
  };
  return all;
}

bool needs_escape(unsigned char c) { return c == '%' || c == ' ' || c < 0x20 || c == 0x7f; }

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

[[noreturn]] void malformed(const std::string& text) {
  throw Error(std::string(kContractVariable) + "=" + quote(text) +
              " was not written by srun --ddp; unset it, or start the program with srun --ddp");
}

std::string decode_value(const std::string& text, const std::string& value) {
  std::string out;
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] != '%') {
      out += value[i];
      continue;
    }
    const int high = i + 2 < value.size() ? hex_digit(value[i + 1]) : -1;
    const int low = i + 2 < value.size() ? hex_digit(value[i + 2]) : -1;
    if (high < 0 || low < 0) malformed(text);
    out += static_cast<char>(high * 16 + low);
    i += 2;
  }
  return out;
}

std::string join_names(const ContractValues& values) {
  std::string names;
  for (const auto& [name, value] : values) names += (names.empty() ? "" : ", ") + name;
  return names;
}

std::string join_assignments(const ContractValues& values) {
  std::string text;
  for (const auto& [name, value] : values) text += (text.empty() ? "" : ", ") + name + "=" + printable(value, 200);
  return text;
}

bool in_apptainer(const EnvLookup& env) {
  return container_from_environment(env).runtime == ContainerRuntime::Apptainer;
}

// Every value is gone: the program was started with a clean environment.
std::string cleared_message(const ContractValues& expected, const EnvLookup& env) {
  const std::string cause = in_apptainer(env)
                                ? "apptainer/singularity exec --cleanenv passes only APPTAINERENV_ names into the "
                                  "container"
                                : "something started the program with a clean environment (env -i, apptainer "
                                  "exec --cleanenv)";
  return "srun --ddp set " + join_names(expected) + " for this task, but none reached this program: " + cause +
         "; run the step with srun --ddp-cleanenv=apptainer (singularity for SingularityCE; the admin's default is "
         "plugstack.conf's cleanenv=) so that srun --ddp exports those names too, or leave out --cleanenv";
}

std::string replaced_message(const ContractValues& expected, const ContractValues& seen, const EnvLookup& env) {
  std::string cause = "something that ran after ddp.so replaced them";
  if (env("PYTORCH_VERSION")) {
    cause +=
        ": this image sets PYTORCH_VERSION, for which pyxis sets RANK and LOCAL_RANK and enroot's "
        "50-slurm-pytorch.sh hook sets MASTER_ADDR, MASTER_PORT (SLURM_JOB_ID % 4536 + 61000) and WORLD_SIZE, and "
        "pyxis imports them over ddp.so's values when plugstack.conf lists ddp.so before pyxis";
  }
  return join_assignments(seen) + " in this program, but srun --ddp set " + join_assignments(expected) + " (" + cause +
         "); list ddp.so after pyxis in plugstack.conf (install-head-node.sh writes plugstack.conf.d/" +
         "zz-ddp.conf, which sorts after pyxis.conf), then run the step again";
}

std::set<unsigned> cpus_of(const std::string& text) {
  std::set<unsigned> cpus;
  for_each_range(text, [&](std::string_view item, std::string_view first, std::string_view last) {
    const auto low = parse_uint(first, CPU_SETSIZE - 1);
    const auto high = parse_uint(last, CPU_SETSIZE - 1);
    if (!low || !high || *low > *high) {
      throw Error(std::string(kCpuBindVariable) + "=" + quote(text) + ": " + quote(item) +
                  " is not a CPU or a FIRST-LAST range; unset it, or start the program with srun --ddp");
    }
    for (uint64_t cpu = *low; cpu <= *high; ++cpu) cpus.insert(static_cast<unsigned>(cpu));
  });
  return cpus;
}

std::string cpu_list(const std::set<unsigned>& cpus) {
  std::string text;
  for (auto it = cpus.begin(); it != cpus.end();) {
    unsigned first = *it, last = *it;
    while (++it != cpus.end() && *it == last + 1) last = *it;
    text += (text.empty() ? "" : ",") + std::to_string(first) + (last == first ? "" : "-" + std::to_string(last));
  }
  return text;
}

std::set<unsigned> own_affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) {
    throw Error(std::string("cannot read this process's CPU affinity: ") + std::strerror(errno));
  }
  std::set<unsigned> cpus;
  for (unsigned cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.insert(cpu);
  }
  return cpus;
}

}  // namespace

const ContainerKind& container_kind(ContainerRuntime runtime) {
  for (const ContainerKind& kind : kinds()) {
    if (kind.runtime == runtime) return kind;
  }
  return kinds().front();
}

ContainerKind container_from_environment(const EnvLookup& env) {
  if (env("CH_RUNNING")) return container_kind(ContainerRuntime::Charliecloud);
  if (env("APPTAINER_CONTAINER") || env("SINGULARITY_CONTAINER")) return container_kind(ContainerRuntime::Apptainer);
  if (env("SLURM_CONTAINER")) return container_kind(ContainerRuntime::SlurmOci);
  return container_kind(ContainerRuntime::None);
}

std::string every_mount_option() {
  std::string text;
  for (const ContainerKind& kind : kinds()) {
    if (*kind.mount == '\0') continue;
    text += (text.empty() ? "" : "; ") + std::string(kind.name) + ": " + kind.mount;
  }
  return text;
}

const std::vector<std::string>& contract_names() {
  static const std::vector<std::string> names = {vars::kRank,           vars::kLocalRank,  vars::kWorldSize,
                                                 vars::kLocalWorldSize, vars::kNodeRank,   vars::kMasterAddr,
                                                 vars::kMasterPort,     vars::kSnapshotDir};
  return names;
}

std::string encode_contract(const ContractValues& values) {
  std::string text;
  for (const auto& [name, value] : values) {
    if (!text.empty()) text += ' ';
    text += name + '=';
    for (const char c : value) {
      if (!needs_escape(static_cast<unsigned char>(c))) {
        text += c;
        continue;
      }
      char escaped[4];
      std::snprintf(escaped, sizeof escaped, "%%%02X", static_cast<unsigned>(static_cast<unsigned char>(c)));
      text += escaped;
    }
  }
  return text;
}

ContractValues decode_contract(const std::string& text) {
  ContractValues values;
  for (const std::string& item : split(text, ' ')) {
    const size_t equals = item.find('=');
    if (equals == 0 || equals == std::string::npos) malformed(text);
    values.emplace_back(item.substr(0, equals), decode_value(text, item.substr(equals + 1)));
  }
  if (values.empty()) malformed(text);
  return values;
}

void check_contract(const EnvLookup& env) {
  const auto text = env(kContractVariable);
  if (!text) return;
  const ContractValues expected = decode_contract(*text);
  ContractValues differing;
  ContractValues seen;
  size_t missing = 0;
  for (const auto& [name, value] : expected) {
    const auto actual = env(name);
    if (actual && *actual == value) continue;
    differing.emplace_back(name, value);
    seen.emplace_back(name, actual.value_or("(unset)"));
    missing += actual ? 0 : 1;
  }
  if (differing.empty()) return;
  if (missing == expected.size()) throw Error(cleared_message(expected, env));
  throw Error(replaced_message(differing, seen, env));
}

std::optional<CpuRebinding> restore_cpu_binding(const EnvLookup& env) {
  const auto text = env(kCpuBindVariable);
  if (!text) return std::nullopt;
  const std::set<unsigned> wanted = cpus_of(*text);
  const std::set<unsigned> now = own_affinity();
  if (now == wanted) return std::nullopt;
  cpu_set_t set;
  CPU_ZERO(&set);
  std::set<unsigned> bound;
  for (unsigned cpu : wanted) {
    if (now.count(cpu) == 0) continue;
    CPU_SET(cpu, &set);
    bound.insert(cpu);
  }
  if (bound.empty()) {
    throw Error(std::string(kCpuBindVariable) + "=" + *text + " names none of the CPUs this process may use (" +
                cpu_list(now) + "); unset it, or run the step again");
  }
  if (bound == now) return std::nullopt;
  if (sched_setaffinity(0, sizeof set, &set) != 0) {
    throw Error("cannot bind to " + cpu_list(bound) + " again (" + kCpuBindVariable + "): " + std::strerror(errno));
  }
  return CpuRebinding{cpu_list(now), cpu_list(bound)};
}

void require_prepared_dir(const std::string& dir, const EnvLookup& env) {
  const auto text = env(kContractVariable);
  if (!text) return;
  for (const auto& [name, value] : decode_contract(*text)) {
    if (name != vars::kSnapshotDir || value != dir) continue;
    struct stat info = {};
    if (stat(dir.c_str(), &info) == 0 || (errno != ENOENT && errno != ENOTDIR)) return;
    const ContainerKind kind = container_from_environment(env);
    const std::string node = env("SLURMD_NODENAME").value_or("the node");
    const std::string where =
        kind.runtime == ContainerRuntime::None
            ? "in this program's view of the file system, though srun --ddp created it on " + node +
                  " before the program started: the program runs in a container that "
                  "does not mount it; mount it into the container (" +
                  every_mount_option() + ")"
            : "inside this container (" + std::string(kind.name) + "), though srun --ddp " + "created it on " + node +
                  ": mount it into the container with " + kind.mount + " (the directory or one above it)";
    throw Error("snapshot directory " + quote(dir) + " does not exist " + where +
                "; nothing was written, so nothing is lost");
  }
}

}  // namespace ddp
