// Expected values were read off `lstopo-no-graphics -i data/FILE` (and `--cpuset`) by hand; each comment says
// what in that output makes the value right.
#include "topology/topology.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <fstream>

#include "core/error.hpp"
#include "fixtures.hpp"
#include "test_common.hpp"

namespace ddp {
namespace {

using test::ids;

std::vector<std::string> bus_ids(const NodeHardware& hw) {
  std::vector<std::string> out;
  for (const Gpu& gpu : hw.gpus) out.push_back(gpu.pci_bus_id);
  return out;
}

std::vector<std::string> net_names(const NodeHardware& hw) {
  std::vector<std::string> out;
  for (const NetInterface& net : hw.nets) out.push_back(net.name);
  return out;
}

const std::vector<unsigned>& gpu_cpus(const NodeHardware& hw, size_t gpu) {
  return hw.localities[hw.gpus[gpu].locality].cpus;
}

TEST(Topology, P4dEightA100InBusOrderEachBesideOneEnaAndOneEfa) {
  const NodeHardware& hw = test::p4d();
  // Four host bridges (10, 20 on package 0; 90, a0 on package 1), each with 2 GPUs (3D, 10de), 1 ENA, 1 EFA.
  EXPECT_EQ(bus_ids(hw), (std::vector<std::string>{"0000:10:1c.0", "0000:10:1d.0", "0000:20:1c.0", "0000:20:1d.0",
                                                   "0000:90:1c.0", "0000:90:1d.0", "0000:a0:1c.0", "0000:a0:1d.0"}));
  EXPECT_EQ(hw.gpus[0].model, "GA100 [A100 SXM4 40GB]");
  EXPECT_EQ(net_names(hw), (std::vector<std::string>{"ens32", "ens65", "ens129", "ens161"}));
  ASSERT_EQ(hw.rdma.size(), 4u);
  EXPECT_EQ(hw.rdma[2].name, "rdmap144s27");
  EXPECT_EQ(hw.rdma[2].kind, RdmaKind::Efa);  // vendor 1d0f, class 0200
  EXPECT_FALSE(hw.nets[0].rdma);              // the ENA is its own PCI function (10:00.0), not the EFA's (10:1b.0)
  const char* expected_nic[] = {"ens32", "ens32", "ens65", "ens65", "ens129", "ens129", "ens161", "ens161"};
  const char* expected_efa[] = {"rdmap16s27",  "rdmap16s27",  "rdmap32s27",  "rdmap32s27",
                                "rdmap144s27", "rdmap144s27", "rdmap160s27", "rdmap160s27"};
  for (size_t g = 0; g < 8; ++g) {
    // GPUs on the host bridge of each EFA device get that EFA device and the ENA interface beside it.
    EXPECT_EQ(hw.nets[*hw.gpus[g].nic].name, expected_nic[g]) << g;
    EXPECT_EQ(hw.rdma[*hw.gpus[g].hca].name, expected_efa[g]) << g;
    EXPECT_EQ(hw.gpus[g].to_net[*hw.gpus[g].nic], Closeness::Phb) << g;
    EXPECT_EQ(hw.gpus[g].device_number, g);  // an XML file has no driver: bus order
  }
  // GPU0 to ens65: other host bridge, same package (one NUMA node); to ens129: the other package.
  EXPECT_EQ(hw.gpus[0].to_net[1], Closeness::Node);
  EXPECT_EQ(hw.gpus[0].to_net[2], Closeness::System);
  EXPECT_EQ(gpu_cpus(hw, 0), ids("0-23,48-71"));  // Package L#0 cpuset=0x000000ff,0xffff0000,0x00ffffff
  EXPECT_EQ(gpu_cpus(hw, 7), ids("24-47,72-95"));
  ASSERT_EQ(hw.cores.size(), 48u);
  EXPECT_EQ(hw.cores[0], ids("0,48"));  // Core L#0: PU P#0 and P#48
  EXPECT_EQ(hw.cores[47], ids("47,95"));
}

TEST(Topology, G4dnGpusOfSocketZeroHaveNoNicOnTheirSocket) {
  const NodeHardware& hw = test::g4dn();
  ASSERT_EQ(hw.gpus.size(), 8u);
  EXPECT_EQ(net_names(hw), std::vector<std::string>{"eth0"});  // the ENA, c6:00.0 on package 1
  ASSERT_EQ(hw.rdma.size(), 1u);
  EXPECT_EQ(hw.rdma[0].name, "rdmap197s0");
  EXPECT_EQ(hw.rdma[0].kind, RdmaKind::Efa);
  for (size_t g = 0; g < 4; ++g) {
    EXPECT_EQ(hw.gpus[g].to_net[0], Closeness::System) << g;  // GPUs 18,19,35,36 hang off package 0
    EXPECT_EQ(hw.gpus[g].to_rdma[0], Closeness::System) << g;
  }
  for (size_t g = 4; g < 8; ++g) {
    EXPECT_EQ(hw.gpus[g].to_net[0], Closeness::Node) << g;  // package 1, but another host bridge than the ENA
  }
  // GPU 18:00.0 and 19:00.0 sit on two root ports of one host bridge; 35:00.0 is under the next host bridge.
  EXPECT_EQ(hw.gpus[0].to_gpu[1], Closeness::Phb);
  EXPECT_EQ(hw.gpus[0].to_gpu[2], Closeness::Node);
  EXPECT_EQ(hw.gpus[0].to_gpu[4], Closeness::System);
}

TEST(Topology, Dgx2hSixteenV100BehindSwitchTreesWithoutNics) {
  const NodeHardware& hw = test::dgx2h();
  ASSERT_EQ(hw.gpus.size(), 16u);
  EXPECT_EQ(hw.gpus[15].pci_bus_id, "0000:e7:00.0");
  EXPECT_TRUE(hw.nets.empty());
  EXPECT_TRUE(hw.rdma.empty());
  EXPECT_FALSE(hw.gpus[0].nic);
  // 34:00.0 and 36:00.0 share the last PLX switch; 39:00.0 is under a sibling switch of the same upstream one.
  EXPECT_EQ(hw.gpus[0].to_gpu[1], Closeness::Pix);
  EXPECT_EQ(hw.gpus[0].to_gpu[2], Closeness::Pxb);
  EXPECT_EQ(hw.gpus[0].to_gpu[4], Closeness::Node);    // 57:00.0: the other host bridge of package 0
  EXPECT_EQ(hw.gpus[0].to_gpu[8], Closeness::System);  // b7:00.0: package 1
  // The export was restricted to 4 PUs: P#0-1 on package 0 and P#24-25 on package 1.
  EXPECT_EQ(hw.pus, 4u);
  EXPECT_EQ(gpu_cpus(hw, 0), ids("0-1"));
  EXPECT_EQ(gpu_cpus(hw, 15), ids("24-25"));
}

TEST(Topology, P100NodeGpusShareAPcieSwitchWithTheHca) {
  const NodeHardware& hw = test::p100_node();
  EXPECT_EQ(bus_ids(hw), (std::vector<std::string>{"0000:04:00.0", "0000:07:00.0"}));
  EXPECT_EQ(net_names(hw), (std::vector<std::string>{"hsi0", "enp12s0f0", "enp12s0f1"}));
  ASSERT_EQ(hw.rdma.size(), 1u);
  EXPECT_EQ(hw.rdma[0].kind, RdmaKind::InfiniBand);           // class 0207
  EXPECT_EQ(hw.nets[0].rdma, std::optional<DeviceIndex>(0));  // hsi0 and mlx5_0 on PCI 08:00.0: IPoIB
  // 04:00.0, 07:00.0 and 08:00.0 are each one bridge below the switch's upstream bridge.
  EXPECT_EQ(hw.gpus[0].to_rdma[0], Closeness::Pix);
  EXPECT_EQ(hw.gpus[1].to_gpu[0], Closeness::Pix);
  EXPECT_EQ(hw.gpus[0].to_net[1], Closeness::Phb);  // the i350 (0c:00.0) is on its own root port
  EXPECT_EQ(hw.nets[*hw.gpus[1].nic].name, "hsi0");
  EXPECT_EQ(gpu_cpus(hw, 0), ids("0-17,36-53"));
  // Socket 1 has no device: its tasks would reach the HCA across the socket link.
  ASSERT_EQ(hw.numa_nodes.size(), 2u);
  EXPECT_EQ(hw.numa_nodes[1].hca_closeness, Closeness::System);
  EXPECT_EQ(hw.numa_nodes[0].hca_closeness, Closeness::Node);
}

TEST(Topology, Hwloc1WorkstationPlansTheNvidiaGpuAndListsTheAmdOne) {
  const NodeHardware& hw = test::threadripper();
  EXPECT_EQ(bus_ids(hw), std::vector<std::string>{"0000:08:00.0"});
  // 44:00.0 is the AMD Vega (1002, VGA): one GPU each, and the tie goes to NVIDIA.
  EXPECT_EQ(hw.gpu_vendor, GpuVendor::Nvidia);
  EXPECT_EQ(hw.unplanned_gpus, std::vector<std::string>{"0000:44:00.0"});
  EXPECT_EQ(net_names(hw), (std::vector<std::string>{"enp4s0", "wlp5s0", "enp6s0"}));
  EXPECT_TRUE(hw.rdma.empty());
  EXPECT_EQ(hw.gpus[0].to_net, (std::vector<Closeness>(3, Closeness::Phb)));  // one host bridge holds them all
  EXPECT_EQ(hw.nets[*hw.gpus[0].nic].name, "enp4s0");                         // equally close: the lowest bus id
  EXPECT_EQ(gpu_cpus(hw, 0), ids("0-7,32-39"));                               // Group0 L#0 with NUMANode P#0
  // NUMA node P#2 is the other die of the one package.
  ASSERT_EQ(hw.numa_nodes.size(), 2u);
  EXPECT_EQ(hw.numa_nodes[1].os_index, 2u);
  EXPECT_EQ(hw.numa_nodes[1].nic_closeness, Closeness::Package);
  EXPECT_EQ(hw.packages, 1u);
}

TEST(Topology, AmdGpuNodeHasEightMi50InRocmSmiOrder) {
  const NodeHardware& hw = test::mi50_node();
  // Eight MI50 (1002:66a1, class 0380: display) and an ASPEED VGA (1a03), which is no GPU. hwloc's ROCm SMI
  // plugin named them rsmi0-7 in driver probe order: 63:00.0 is rsmi0, 03:00.0 rsmi2.
  EXPECT_EQ(hw.gpu_vendor, GpuVendor::Amd);
  EXPECT_EQ(bus_ids(hw), (std::vector<std::string>{"0000:63:00.0", "0000:43:00.0", "0000:03:00.0", "0000:27:00.0",
                                                   "0000:e3:00.0", "0000:c3:00.0", "0000:83:00.0", "0000:a3:00.0"}));
  for (size_t g = 0; g < 8; ++g) {
    EXPECT_EQ(hw.gpus[g].vendor, GpuVendor::Amd);
    EXPECT_EQ(hw.gpus[g].device_number, g);  // what Slurm's AutoDetect=rsmi lists in SLURM_STEP_GPUS
  }
  EXPECT_EQ(hw.gpus[2].model, "Vega 20 WKS GL-XE [Radeon Pro VII]");
  EXPECT_EQ(gpu_cpus(hw, 0), ids("0-23,48-71"));
  EXPECT_EQ(gpu_cpus(hw, 4), ids("24-47,72-95"));
  EXPECT_EQ(hw.gpus[4].to_gpu[5], Closeness::Node);  // e3:00.0 and c3:00.0: two host bridges of package 1
  EXPECT_EQ(net_names(hw), (std::vector<std::string>{"hsi0", "eno1", "eno2"}));
  ASSERT_EQ(hw.rdma.size(), 1u);
  EXPECT_EQ(hw.rdma[0].name, "mlx5_0");
  EXPECT_EQ(hw.cores.size(), 48u);
  EXPECT_TRUE(hw.unplanned_gpus.empty());
}

TEST(Topology, HonoursHwlocXmlFileWhenNoFileIsGiven) {
  const std::string path = test::fixture_path("aws-g4dn.metal.xml");
  ASSERT_EQ(setenv("HWLOC_XMLFILE", path.c_str(), 1), 0);
  const NodeHardware hw = load_node_hardware();
  unsetenv("HWLOC_XMLFILE");
  EXPECT_EQ(hw.source, path);
  EXPECT_FALSE(hw.this_system);
  EXPECT_EQ(hw.gpus.size(), 8u);
}

TEST(Topology, AnExplicitFileWinsOverHwlocXmlFile) {
  ASSERT_EQ(setenv("HWLOC_XMLFILE", test::fixture_path("aws-g4dn.metal.xml").c_str(), 1), 0);
  const NodeHardware hw = load_node_hardware(test::fixture_path("intel-e5v4-2xP100-1xmlx5.xml"));
  unsetenv("HWLOC_XMLFILE");
  EXPECT_EQ(hw.gpus.size(), 2u);
}

TEST(Topology, ReadsTheRunningSystem) {
  const NodeHardware hw = load_node_hardware();
  EXPECT_TRUE(hw.this_system);
  EXPECT_EQ(hw.source, "this system");
  EXPECT_FALSE(hw.cores.empty());
  EXPECT_FALSE(hw.numa_nodes.empty());
}

TEST(Topology, MissingOrBrokenFilesFailWithTheirName) {
  try {
    load_node_hardware(std::string("/nonexistent/node.xml"));
    ADD_FAILURE();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("'/nonexistent/node.xml'"), std::string::npos) << error.what();
  }
  const testing::TempDir temp;
  const std::string broken = temp / "broken-topology.xml";
  std::ofstream(broken) << "<topology><object type=\"Machine\"";
  try {
    load_node_hardware(broken);
    ADD_FAILURE();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("lstopo --of xml"), std::string::npos) << error.what();
  }
}

TEST(Topology, ReadsDeviceNumbersFromTheNvidiaDriver) {
  const testing::TempDir temp;
  const std::string dir = temp / "nvidia-gpus";
  mkdir(dir.c_str(), 0700);
  // The driver names directories in upper case and numbers minors by probe order, not always bus order.
  for (const auto& [bus, minor] :
       {std::pair<std::string, int>{"0000:3B:00.0", 1}, {"0000:18:00.0", 0}, {"0000:AF:00.0", 3}}) {
    mkdir((dir + "/" + bus).c_str(), 0700);
    std::ofstream(dir + "/" + bus + "/information")
        << "Model: \t\t Tesla V100-SXM2-32GB\nIRQ:   \t\t 72\nDevice Minor: \t " << minor << "\nBus Location: \t "
        << bus << "\n";
  }
  mkdir((dir + "/0000:d8:00.0").c_str(), 0700);  // no information file: skipped
  const auto numbers = read_nvidia_device_numbers(dir);
  EXPECT_EQ(numbers, (std::vector<std::pair<std::string, unsigned>>{
                         {"0000:18:00.0", 0}, {"0000:3b:00.0", 1}, {"0000:af:00.0", 3}}));
  EXPECT_TRUE(read_nvidia_device_numbers("/nonexistent/driver").empty());
}

}  // namespace
}  // namespace ddp
