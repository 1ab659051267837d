#include "spank_plugin/step/node_setup.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>

#include <fstream>

#include "core/error.hpp"
#include "test_common.hpp"
#include "topology/id_list.hpp"
#include "topology/topology_cache.hpp"

namespace ddp {
namespace {

const std::string kP4d = std::string(DDP_TOPOLOGY_DATA) + "/aws-p4d.24xlarge.xml";

Interface up_interface(const std::string& name, const char* address, unsigned prefix) {
  Interface interface;
  interface.name = name;
  interface.up = true;
  IpAddress ip;
  ip.family = AF_INET;
  inet_pton(AF_INET, address, ip.bytes.data());
  ip.prefix_length = prefix;
  interface.addresses = {ip};
  return interface;
}

// A p4d.24xlarge as AWS sets it up: four ENAs in the VPC subnet, the master another node of it.
NodeSetup p4d_node() {
  NodeSetup node;
  node.hardware = load_node_hardware(kP4d);
  node.network.interfaces = {up_interface("ens129", "10.0.3.7", 16), up_interface("ens161", "10.0.4.7", 16),
                             up_interface("ens32", "10.0.1.7", 16), up_interface("ens65", "10.0.2.7", 16)};
  node.network.master_address = "10.0.9.9";
  node.network.route = "ens32";
  return node;
}

StepPlan step_plan(unsigned local_tasks, BindMode bind = BindMode::Closest) {
  StepPlan plan;
  plan.step.num_nodes = 2;
  plan.step.num_tasks = 2 * local_tasks;
  plan.step.local_tasks = local_tasks;
  plan.master_addr = "node1";
  plan.bind = bind;
  return plan;
}

EnvLookup user_env(std::map<std::string, std::string> values) {
  return [values](const std::string& name) -> std::optional<std::string> {
    const auto found = values.find(name);
    return found == values.end() ? std::nullopt : std::optional<std::string>(found->second);
  };
}

const EnvVar& var(const TaskEnv& env, const std::string& name) {
  for (const EnvVar& v : env.vars()) {
    if (v.name == name) return v;
  }
  throw std::runtime_error("no " + name);
}

TEST(NodeSetup, P4dTasksGetTheirGpuAndTheEnaBesideIt) {
  const NodeSetup node = p4d_node();
  const StepPlan plan = step_plan(8);
  // lstopo: each host bridge holds 2 GPUs, one ENA and one EFA, in bus order ens32, ens65, ens129, ens161.
  const std::vector<std::string> enas = {"ens32", "ens32", "ens65", "ens65", "ens129", "ens129", "ens161", "ens161"};
  for (unsigned local = 0; local < 8; ++local) {
    TaskEnv env(user_env({}));
    const TaskBinding binding = bind_task(node, plan, {8 + local, local}, env);
    EXPECT_EQ(env.value("CUDA_VISIBLE_DEVICES"), "0,1,2,3,4,5,6,7");
    EXPECT_EQ(env.value("NCCL_SOCKET_IFNAME"), enas[local]) << local;
    EXPECT_EQ(env.value("GLOO_SOCKET_IFNAME"), enas[local]) << local;
    EXPECT_EQ(env.value("FI_PROVIDER"), "efa");
    EXPECT_EQ(env.value("FI_EFA_USE_DEVICE_RDMA"), "1");
    // A topology from a file describes another machine: nothing is bound here.
    EXPECT_TRUE(binding.cpus.empty());
    EXPECT_NE(binding.summary.find("gpu=cuda:" + std::to_string(local) + "("), std::string::npos) << binding.summary;
    EXPECT_NE(binding.summary.find("socket=" + enas[local] + "(closest NIC)"), std::string::npos) << binding.summary;
    EXPECT_NE(binding.summary.find("not bound: topology from " + kP4d), std::string::npos) << binding.summary;
  }
}

TEST(NodeSetup, SlurmsGpuListIsReplacedButTheUsersInterfaceIsKept) {
  const NodeSetup node = p4d_node();
  const StepPlan plan = step_plan(2);
  TaskEnv env(user_env({{"SLURM_STEP_GPUS", "6,7"}, {"CUDA_VISIBLE_DEVICES", "6,7"}, {"NCCL_SOCKET_IFNAME", "ens32"}}));
  bind_task(node, plan, {1, 1}, env);
  const NodePlan expected = plan_node(*node.hardware, PlanRequest{2, gpu_allocation_from_slurm("6,7", "6,7"), {}});
  EXPECT_EQ(var(env, "CUDA_VISIBLE_DEVICES").value, expected.visible_devices);
  EXPECT_EQ(var(env, "CUDA_VISIBLE_DEVICES").origin, Origin::Plugin);
  EXPECT_EQ(var(env, "NCCL_SOCKET_IFNAME").value, "ens32");
  EXPECT_EQ(var(env, "NCCL_SOCKET_IFNAME").origin, Origin::User);
  // GPUs 6 and 7 share the fourth host bridge with ens161.
  EXPECT_EQ(var(env, "GLOO_SOCKET_IFNAME").value, "ens161");
}

// A step whose GPUs and cores are on different sockets, as --ddp-verbose prints it: the step's GPUs are socket
// 0's, its cores socket 1's. The line names the rules that decided and says why the GPU is remote.
TEST(NodeSetup, TheVerboseLineSaysWhyTheGpuIsRemote) {
  NodeSetup node = p4d_node();
  node.allowed_cpus = cpus_of_cores(*node.hardware, parse_id_list("24-47", "test cores"));
  TaskEnv env(user_env({{"SLURM_STEP_GPUS", "0,1"}, {"CUDA_VISIBLE_DEVICES", "0,1"}}));
  const TaskBinding binding = bind_task(node, step_plan(2), {1, 1}, env);
  const std::string expected =
      " why(gpu: one GPU per task, in device order; cpus: the step's cores (none local to its GPU): whole cores of "
      "NUMA node 1, split 2 ways) note(GPU 0000:10:1d.0 is remote: it is local to CPUs 0-23,48-71, none of which the "
      "step may use (it has 24-47,72-95), so the task runs on the step's CPUs and reaches its GPU across the CPU "
      "interconnect)";
  ASSERT_GE(binding.summary.size(), expected.size()) << binding.summary;
  EXPECT_EQ(binding.summary.substr(binding.summary.size() - expected.size()), expected) << binding.summary;
  EXPECT_EQ(binding.summary.rfind("gpu=cuda:1(0000:10:1d.0)", 0), 0u) << binding.summary;
}

TEST(NodeSetup, AUsersGpuListWithoutGresIsKept) {
  const NodeSetup node = p4d_node();
  TaskEnv env(user_env({{"CUDA_VISIBLE_DEVICES", "3"}}));
  bind_task(node, step_plan(1), {0, 0}, env);
  EXPECT_EQ(var(env, "CUDA_VISIBLE_DEVICES").value, "3");
  EXPECT_EQ(var(env, "CUDA_VISIBLE_DEVICES").origin, Origin::User);
}

TEST(NodeSetup, BindNoneExportsOnlyTheSocketInterface) {
  NodeSetup node = p4d_node();
  node.hardware.reset();
  TaskEnv env(user_env({}));
  const TaskBinding binding = bind_task(node, step_plan(2, BindMode::None), {0, 0}, env);
  std::vector<std::string> names;
  for (const EnvVar& v : env.vars()) names.push_back(v.name + "=" + v.value);
  EXPECT_EQ(names, (std::vector<std::string>{"NCCL_SOCKET_IFNAME=ens32", "GLOO_SOCKET_IFNAME=ens32"}));
  EXPECT_TRUE(binding.cpus.empty());
  EXPECT_EQ(binding.summary, "bind=none socket=ens32(route to master)");
}

TEST(NodeSetup, NicOverrideIsCheckedAndNamed) {
  const NodeSetup node = p4d_node();
  StepPlan plan = step_plan(8);
  plan.nic = "ens65";
  TaskEnv env(user_env({}));
  bind_task(node, plan, {0, 0}, env);
  EXPECT_EQ(env.value("NCCL_SOCKET_IFNAME"), "ens65");
  plan.nic = "ib7";
  TaskEnv bad(user_env({}));
  try {
    bind_task(node, plan, {0, 0}, bad);
    FAIL() << "accepted a missing interface";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'ib7'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ens161"), std::string::npos) << e.what();
  }
}

TEST(NodeSetup, PerNodeSetupReadsTheRouteTheTopologyAndTheStepsCores) {
  StepPlan plan = step_plan(2);
  plan.topology_xml = kP4d;
  const NodeSetup node = setup_node(plan, "127.0.0.1", "0-1,24");
  EXPECT_EQ(node.network.route, "lo");
  ASSERT_TRUE(node.hardware);
  EXPECT_EQ(node.hardware->source, kP4d);
  // p4d numbers PUs n and n+48 as the two threads of core n.
  EXPECT_EQ(node.allowed_cpus, (std::vector<unsigned>{0, 1, 24, 48, 49, 72}));
  EXPECT_TRUE(node.allowed_cpus_note.empty());

  const NodeSetup unknown = setup_node(plan, "127.0.0.1", "0-500");
  EXPECT_FALSE(unknown.allowed_cpus);
  EXPECT_FALSE(unknown.allowed_cpus_note.empty());
  EXPECT_FALSE(setup_node(step_plan(1, BindMode::None), "127.0.0.1", "0").hardware);
}

// Found by tests/fuzz/hwloc_xml_fuzz: hwloc 2.9 to 2.12 crash (SIGSEGV) on this 1.5 KB export with one misspelt
// attribute; 2.15 refuses it. As the admin's topology_xml it must fail the step with one line, not crash slurmstepd
// (this test process), whichever hwloc reads it.
constexpr bool sanitized() {
#ifdef __SANITIZE_ADDRESS__
  return true;
#else
  return false;
#endif
}

TEST(NodeSetup, AnAdminTopologyThatCrashesHwlocFailsWithOneLine) {
  const std::string crasher = std::string(DDP_FUZZ_CORPUS) + "/hwloc_xml/hwloc-2.9-segv";
  std::ifstream in(crasher, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 1u);
  const testing::TempDir dir;
  const std::string xml = dir / "topology.xml";
  std::ofstream(xml, std::ios::binary) << bytes.substr(1);  // the fuzz input's first byte picks the harness's branch
  StepPlan plan = step_plan(1);
  plan.topology_xml = xml;
  try {
    setup_node(plan, "127.0.0.1", "");
    ADD_FAILURE() << "a topology that crashes hwloc was accepted";
  } catch (const Error& e) {
    // Under AddressSanitizer the child reports the fault and exits 1 instead of dying of it.
    const std::string how = sanitized() ? "exit status 1" : "signal 11";
    const std::string message = e.what();
    const bool crashed =
        message.find("topology_xml '" + xml + "' in plugstack.conf crashes hwloc (" + how + ")") != std::string::npos;
    const bool refused = message.find("hwloc cannot read topology file '" + xml + "'") != std::string::npos;
    EXPECT_TRUE(crashed || refused) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

// The admin's topology_xml on a file system that hangs, or a FIFO nobody writes: slurmstepd read it by path (in a
// child that it waited for without end) and hung with it; the step must fail at the deadline with one line.
TEST(NodeSetup, AnAdminTopologyThatHangsFailsAtTheDeadline) {
  const testing::TempDir dir;
  const std::string fifo = dir / "topology.xml";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  StepPlan plan = step_plan(1);
  plan.topology_xml = fifo;
  const auto start = std::chrono::steady_clock::now();
  try {
    setup_node(plan, "127.0.0.1", "", std::chrono::milliseconds(500));
    ADD_FAILURE() << "a topology that cannot be read was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "topology_xml '" + fifo +
                                         "' in plugstack.conf could not be read within 0.5 s: its file system hangs, "
                                         "or it is not a regular file; run the step with --ddp-bind=none to skip "
                                         "topology binding");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(NodeSetup, RunningSystemBindsCpusItMayUse) {
  StepPlan plan = step_plan(1);
  plan.nic = "lo";  // the CPUs are under test, not the choice among this machine's interfaces (maybe lo alone)
  const NodeSetup node = setup_node(plan, "127.0.0.1", "");
  ASSERT_TRUE(node.hardware);
  EXPECT_TRUE(node.hardware->this_system);
  TaskEnv env(user_env({}));
  const TaskBinding binding = bind_task(node, plan, {0, 0}, env);
  EXPECT_FALSE(binding.cpus.empty());
  EXPECT_FALSE(apply_cpu_binding(0, binding.cpus).empty());
}

// The plugin's topology is never a file someone names. hwloc itself reads HWLOC_XMLFILE and
// HWLOC_SYNTHETIC from the environment of the process that loads a topology; here that is this test's, as it
// would be slurmstepd's if slurmd's environment held them. ddp-topo's loader follows them (the first check shows
// each one takes effect); the plugin's does not.
TEST(NodeSetup, TheRunningSystemIgnoresHwlocsVariablesInTheProcessEnvironment) {
  const StepPlan plan = step_plan(1);
  const NodeSetup plain = setup_node(plan, "127.0.0.1", "");
  ASSERT_TRUE(plain.hardware);
  const std::pair<const char*, std::string> overrides[] = {{"HWLOC_XMLFILE", kP4d},
                                                           {"HWLOC_SYNTHETIC", "pack:3 core:5 pu:1"}};
  for (const auto& [name, value] : overrides) {
    ASSERT_EQ(setenv(name, value.c_str(), 1), 0);
    const NodeHardware followed = load_node_hardware();
    const NodeSetup node = setup_node(plan, "127.0.0.1", "");
    unsetenv(name);
    EXPECT_FALSE(followed.this_system) << name;
    EXPECT_NE(followed.cores, plain.hardware->cores) << name;
    ASSERT_TRUE(node.hardware);
    EXPECT_TRUE(node.hardware->this_system) << name;
    EXPECT_EQ(node.hardware->source, "this system") << name;
    EXPECT_EQ(node.hardware->cores, plain.hardware->cores) << name;
    EXPECT_EQ(node.hardware->gpus.size(), plain.hardware->gpus.size()) << name;
  }
}

TEST(NodeSetup, NodeChecksFailOnAnUnwritableSnapshotDirectory) {
  StepPlan plan = step_plan(1);
  plan.master_addr = "localhost";
  const testing::TempDir dir;
  TaskEnv good(user_env({{"DDP_SNAPSHOT_DIR", dir.path()}}));
  const CheckOutcome fine = check_node(plan, good);
  EXPECT_EQ(fine.failures, "");
  EXPECT_GT(fine.passed, 0u);
  TaskEnv bad(user_env({{"DDP_SNAPSHOT_DIR", dir / "missing/deeper"}}));
  const CheckOutcome failed = check_node(plan, bad);
  EXPECT_NE(failed.failures.find("storage.dir"), std::string::npos) << failed.failures;
}

}  // namespace
}  // namespace ddp

namespace ddp {
namespace {

class TopologyCacheTest : public ::testing::Test {
 protected:
  const testing::TempDir temp_;
  const std::string root_ = temp_.path();
  const std::string dir_ = root_ + "/cache";
};

TEST_F(TopologyCacheTest, FileNameCarriesTheBootId) {
  const std::string boot_id = root_ + "/boot_id";
  std::ofstream(boot_id) << "4f9c2d1e-8a7b-4c3d-9e2f-1a2b3c4d5e6f\n";
  const auto name = topology_cache_file("/run/slurm-ddp", boot_id);
  ASSERT_TRUE(name);
  // Boot id, hwloc's version and a digest of the network and RDMA device names.
  EXPECT_TRUE(std::regex_match(*name, std::regex("/run/slurm-ddp/topology-v2-4f9c2d1e-8a7b-4c3d-9e2f-1a2b3c4d5e6f-"
                                                 "h[0-9a-f]+-[0-9a-f]{8}\\.xml")))
      << *name;
  std::ofstream(boot_id) << "../../etc/passwd\n";
  EXPECT_EQ(topology_cache_file("/run/slurm-ddp", boot_id), std::nullopt);
  EXPECT_EQ(topology_cache_file("/run/slurm-ddp", root_ + "/missing"), std::nullopt);
}

TEST_F(TopologyCacheTest, ExportIsReadBackAsThisSystem) {
  if (geteuid() != 0) GTEST_SKIP() << "the cache is root's";
  EXPECT_EQ(trusted_topology_cache(dir_), std::nullopt);
  ensure_topology_cache(dir_);
  const auto file = trusted_topology_cache(dir_);
  ASSERT_TRUE(file);
  EXPECT_EQ(std::filesystem::status(*file).permissions() & std::filesystem::perms::all, std::filesystem::perms(0644));
  const NodeHardware probed = load_node_hardware();
  const NodeHardware cached = load_system_hardware_from(*file);
  EXPECT_TRUE(cached.this_system);
  EXPECT_EQ(cached.cores, probed.cores);
  EXPECT_EQ(cached.gpus.size(), probed.gpus.size());
  EXPECT_EQ(cached.nets.size(), probed.nets.size());

  StepPlan plan = step_plan(1);
  plan.topology_cache = dir_;
  const NodeSetup node = setup_node(plan, "127.0.0.1", "");
  EXPECT_EQ(node.hardware->source, "this system (" + *file + ")");
  EXPECT_TRUE(node.hardware->this_system);
}

// A damaged cache was never replaced, and every later step probed the system (or read the damage).
TEST_F(TopologyCacheTest, ACacheCutShortIsWrittenAgainAndOldOnesGo) {
  if (geteuid() != 0) GTEST_SKIP() << "the cache is root's";
  ensure_topology_cache(dir_);
  const std::string file = *topology_cache_file(dir_);
  const auto whole = std::filesystem::file_size(file);
  std::filesystem::resize_file(file, whole / 2);
  std::ofstream(dir_ + "/topology-v1-0000-old.xml") << "an export of another boot";
  ensure_topology_cache(dir_);
  EXPECT_EQ(std::filesystem::file_size(file), whole);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/topology-v1-0000-old.xml"));
  EXPECT_TRUE(load_system_hardware_from(file).this_system);
}

TEST_F(TopologyCacheTest, UntrustedFilesAreIgnored) {
  if (geteuid() != 0) GTEST_SKIP() << "the cache is root's";
  ensure_topology_cache(dir_);
  const std::string file = *topology_cache_file(dir_);
  ASSERT_EQ(chown(file.c_str(), 65534, 65534), 0);  // a file someone else wrote
  EXPECT_EQ(trusted_topology_cache(dir_), std::nullopt);
  ASSERT_EQ(chown(file.c_str(), 0, 0), 0);
  ASSERT_EQ(chmod(dir_.c_str(), 0777), 0);  // a directory anyone could write into
  EXPECT_EQ(trusted_topology_cache(dir_), std::nullopt);
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  ensure_topology_cache(root_ + "/missing/parent");  // made, as root's alone
  EXPECT_TRUE(trusted_topology_cache(root_ + "/missing/parent"));
}

// The cache is written as root: under a directory another user owns, that user could swap the cache directory for
// one of theirs between the check and the write, or after it, and have root write there, or later steps read their
// XML as this node's topology. Such a directory is refused, written nowhere, and never read.
TEST_F(TopologyCacheTest, ADirectoryAnotherUserControlsIsNeitherWrittenNorRead) {
  if (geteuid() != 0) GTEST_SKIP() << "the cache is root's";
  ASSERT_EQ(chmod(root_.c_str(), 0755), 0);
  const std::string theirs = root_ + "/theirs";
  ASSERT_EQ(mkdir(theirs.c_str(), 0755), 0);
  ASSERT_EQ(chown(theirs.c_str(), 65533, 65533), 0);
  try {
    ensure_topology_cache(theirs + "/cache");
    ADD_FAILURE() << "root wrote its cache below another user's directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("topology cache '" + theirs + "/cache' lies in '" + theirs +
                                         "', which uid 65533 owns"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(theirs + "/cache"));
  // Made by root, then found below their directory: not read either.
  ASSERT_EQ(chown(theirs.c_str(), 0, 0), 0);
  ensure_topology_cache(theirs + "/cache");
  ASSERT_TRUE(trusted_topology_cache(theirs + "/cache"));
  ASSERT_EQ(chown(theirs.c_str(), 65533, 65533), 0);
  EXPECT_EQ(trusted_topology_cache(theirs + "/cache"), std::nullopt);
  // A link in place of the cache directory: refused.
  ASSERT_EQ(symlink(dir_.c_str(), (root_ + "/link").c_str()), 0);
  EXPECT_THROW(ensure_topology_cache(root_ + "/link"), Error);
  EXPECT_EQ(trusted_topology_cache(root_ + "/link"), std::nullopt);
}

TEST(TopologyCacheChoice, OnlyForStepsThatProbeTheSystem) {
  Options options;
  options.enabled = true;
  Config config;
  EXPECT_EQ(topology_cache_to_fill(options, config), "/run/slurm-ddp");
  options.bind = BindMode::None;
  EXPECT_EQ(topology_cache_to_fill(options, config), std::nullopt);
  options.bind.reset();
  config.topology_xml = "/etc/slurm/node.xml";
  EXPECT_EQ(topology_cache_to_fill(options, config), std::nullopt);
  config.topology_xml.clear();
  config.topology_cache.clear();
  EXPECT_EQ(topology_cache_to_fill(options, config), std::nullopt);
  EXPECT_EQ(topology_cache_to_fill(Options{}, Config{}), std::nullopt);
}

}  // namespace
}  // namespace ddp
