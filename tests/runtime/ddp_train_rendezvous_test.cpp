// ddp-train's ranks meeting: a rendezvous store that cannot be reached, another program or another job's store on
// its port, and an interface Gloo cannot use, each refused with one line that names it.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdexcept>
#include <string>

#include "test_common.hpp"
#include "test_support.hpp"

namespace ddp::runtime {
namespace {

using ddp::testing::contains;

using testing::ddp_train;
using testing::Result;

TEST(DdpTrain, ReportsAnUnreachableRendezvousNamingAddressPortAndTimeout) {
  const std::string port = std::to_string(testing::free_port());
  const Result result =
      testing::run({ddp_train(), "--timeout", "2", "1", "1"},
                   {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}});
  EXPECT_EQ(result.status, 1) << result.output;
  EXPECT_TRUE(
      contains(result.output, "rank 1 could not reach the rendezvous store at 127.0.0.1:" + port + " within 2 s"))
      << result.output;
}

// A listening socket that accepts connections (the kernel does, from its backlog) and never answers: another
// user's program on the master node that took MASTER_PORT first.
class PortSquatter {
 public:
  PortSquatter() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t length = sizeof address;
    if (bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || listen(fd_, 16) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      throw std::runtime_error("cannot listen");
    }
    port_ = std::to_string(ntohs(address.sin_port));
  }
  ~PortSquatter() { close(fd_); }
  const std::string& port() const { return port_; }

 private:
  int fd_ = -1;
  std::string port_;
};

// Another program on the store's port: when the store cannot bind, every rank fails at once with one line naming
// the port and the fix; the other ranks never take a store that cannot prove it is their rank 0's.
TEST(DdpTrain, EveryRankFailsWithThePortAndTheFixWhenAnotherProgramHoldsIt) {
  const PortSquatter squatter;
  const testing::Env env{{"WORLD_SIZE", "2"},
                         {"MASTER_ADDR", "127.0.0.1"},
                         {"MASTER_PORT", squatter.port()},
                         {"DDP_JOB_KEY", "0123456789abcdef0123456789abcdef"}};
  testing::Env rank0 = env, rank1 = env;
  rank0["RANK"] = "0";
  rank1["RANK"] = "1";
  const Result host = testing::run({ddp_train(), "--timeout", "3", "1", "0"}, rank0);
  EXPECT_EQ(host.status, 1) << host.output;
  EXPECT_TRUE(contains(host.output,
                       "ddp-train: rank 0 could not host the rendezvous store at 127.0.0.1:" + squatter.port() + ": "))
      << host.output;
  EXPECT_TRUE(contains(host.output,
                       "; choose another port (srun --ddp-port=N, or MASTER_PORT), or ask your admin to "
                       "reserve ports for steps (MpiParams=ports in slurm.conf); port " +
                           squatter.port() + " on 127.0.0.1 is held by another program\n"))
      << host.output;
  const Result peer = testing::run({ddp_train(), "--timeout", "3", "1", "0"}, rank1);
  EXPECT_EQ(peer.status, 1) << peer.output;
  EXPECT_TRUE(contains(peer.output, "ddp-train: rank 1: the rendezvous store at 127.0.0.1:" + squatter.port() +
                                        " is not this job's rank 0's: rank 0 at 127.0.0.1:" + squatter.port() +
                                        " did not answer"))
      << peer.output;
  EXPECT_TRUE(contains(peer.output, "; choose another port")) << peer.output;
}

// The store of another job (another key) on the port is refused the same way: it cannot prove this job's key.
TEST(DdpTrain, ARankRefusesTheStoreOfAnotherJob) {
  const std::string dir = testing::make_temp_dir();
  const std::string port = std::to_string(testing::free_port());
  const testing::Env env{{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}};
  testing::Env other_job = env, this_job = env;
  other_job["RANK"] = "0";
  other_job["DDP_JOB_KEY"] = "ffffffffffffffffffffffffffffffff";
  this_job["RANK"] = "1";
  this_job["DDP_JOB_KEY"] = "0123456789abcdef0123456789abcdef";
  const testing::Process store =
      testing::spawn({ddp_train(), "--timeout", "20", "1", "0"}, other_job, dir + "/other.log");
  const Result refused = testing::run({ddp_train(), "--timeout", "3", "1", "0"}, this_job);
  EXPECT_EQ(refused.status, 1) << refused.output;
  EXPECT_TRUE(contains(refused.output, "is not this job's rank 0's: what answers at 127.0.0.1:" + port +
                                           " cannot prove that it knows this job's key (DDP_JOB_KEY)"))
      << refused.output;
  EXPECT_TRUE(contains(refused.output, "; choose another port")) << refused.output;
  kill(store.pid, SIGKILL);
  testing::wait_for(store);
}

TEST(DdpTrain, NamesTheInterfaceWhenGlooCannotUseIt) {
  const Result result = testing::run({ddp_train(), "1", "1"}, {{"GLOO_SOCKET_IFNAME", "nosuch0"}});
  EXPECT_EQ(result.status, 1) << result.output;
  EXPECT_TRUE(contains(result.output, "rank 0 could not connect Gloo to its peers (GLOO_SOCKET_IFNAME=nosuch0"))
      << result.output;
}

}  // namespace
}  // namespace ddp::runtime
