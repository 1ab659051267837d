// Launcher detection: the variables of srun --ddp, torchrun and mpirun, their precedence, and bad values.
#include "core/launch.hpp"

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "test_common.hpp"

namespace ddp {
namespace {

std::string error_of(const std::map<std::string, std::string>& vars) {
  return ddp::testing::error_of<Error>([&] { launch_from_environment(env_with(vars)); });
}

TEST(Launch, ReadsTheTorchrunVariablesThatSrunDdpExports) {
  const Launch launch = launch_from_environment(env_with({{"RANK", "3"},
                                                          {"WORLD_SIZE", "4"},
                                                          {"LOCAL_RANK", "1"},
                                                          {"LOCAL_WORLD_SIZE", "2"},
                                                          {"MASTER_ADDR", "node1"},
                                                          {"MASTER_PORT", "29500"},
                                                          {"GLOO_SOCKET_IFNAME", "eth0,ib0"},
                                                          {"DDP_BACKEND", "gloo"},
                                                          {"TORCHELASTIC_RESTART_COUNT", "2"},
                                                          {"TORCHELASTIC_RUN_ID", "42.0"},
                                                          {"DDP_JOB_KEY", "0123456789abcdef0123456789abcdef"},
                                                          {"OMP_NUM_THREADS", "4,2"}}));
  EXPECT_EQ(launch.source, LaunchSource::Torchrun);
  EXPECT_EQ(launch.rank, 3);
  EXPECT_EQ(launch.world_size, 4);
  EXPECT_EQ(launch.local_rank, 1);
  EXPECT_EQ(launch.local_world_size, 2);
  EXPECT_EQ(launch.master_addr, "node1");
  EXPECT_EQ(launch.master_port, 29500);
  EXPECT_EQ(launch.run_id, "42.0");
  EXPECT_EQ(launch.job_key, "0123456789abcdef0123456789abcdef");
  // Anything else under that name is no key: the store proof then falls back to the keyless one.
  EXPECT_EQ(launch_from_environment(env_with({{"DDP_JOB_KEY", "guessable"}})).job_key, "");
  EXPECT_EQ(launch.socket_ifnames, (std::vector<std::string>{"eth0", "ib0"}));
  EXPECT_EQ(launch.backend, Backend::Gloo);
  EXPECT_EQ(launch.restart_count, 2);
  EXPECT_EQ(launch.omp_num_threads, 4);
}

TEST(Launch, ReadsOpenMpiVariablesUnderMpirun) {
  const Launch launch = launch_from_environment(env_with({{"OMPI_COMM_WORLD_RANK", "1"},
                                                          {"OMPI_COMM_WORLD_SIZE", "2"},
                                                          {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                                          {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
  EXPECT_EQ(launch.source, LaunchSource::OpenMpi);
  EXPECT_EQ(launch.rank, 1);
  EXPECT_EQ(launch.world_size, 2);
  EXPECT_EQ(launch.local_rank, 1);
  EXPECT_EQ(launch.local_world_size, 2);
  EXPECT_TRUE(launch.master_addr.empty());  // shared over MPI by rank 0
  EXPECT_EQ(launch.master_port, 0);
}

// A torchrun started by mpirun: its workers inherit mpirun's variables, but RANK is theirs.
TEST(Launch, TorchrunVariablesWinOverOpenMpis) {
  const Launch launch = launch_from_environment(env_with({{"OMPI_COMM_WORLD_RANK", "1"},
                                                          {"OMPI_COMM_WORLD_SIZE", "2"},
                                                          {"RANK", "7"},
                                                          {"WORLD_SIZE", "8"},
                                                          {"MASTER_ADDR", "node1"},
                                                          {"MASTER_PORT", "29500"}}));
  EXPECT_EQ(launch.source, LaunchSource::Torchrun);
  EXPECT_EQ(launch.rank, 7);
  EXPECT_EQ(launch.world_size, 8);
}

TEST(Launch, IsOneProcessWhenNothingIsSet) {
  const Launch launch = launch_from_environment(env_with({}));
  EXPECT_EQ(launch.source, LaunchSource::SingleProcess);
  EXPECT_EQ(launch.world_size, 1);
  EXPECT_EQ(launch.backend, Backend::Auto);
  EXPECT_FALSE(launch.omp_num_threads);
  // One task of srun -n1 is a single process too.
  EXPECT_EQ(launch_from_environment(env_with({{"SLURM_STEP_NUM_TASKS", "1"}, {"SLURM_PROCID", "0"}})).source,
            LaunchSource::SingleProcess);
}

// MPI_Init in a task of srun finds its peers only through Slurm's PMIx plugin (or mpirun inside the step).
TEST(Launch, KnowsASrunTaskThatPmixDidNotStart) {
  const std::map<std::string, std::string> srun_ddp{
      {"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "node1"}, {"MASTER_PORT", "29500"}, {"SLURM_STEP_ID", "0"}};
  EXPECT_TRUE(launch_from_environment(env_with(srun_ddp)).srun_without_pmix);
  EXPECT_FALSE(launch_from_environment(env_with({{"PMIX_RANK", "0"}}, env_with(srun_ddp))).srun_without_pmix);
  EXPECT_FALSE(
      launch_from_environment(env_with({{"OMPI_COMM_WORLD_RANK", "0"}}, env_with(srun_ddp))).srun_without_pmix);
  EXPECT_FALSE(launch_from_environment(env_with({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}}))
                   .srun_without_pmix);
}

TEST(Launch, RefusesBadValuesNamingThem) {
  EXPECT_EQ(error_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}}),
            "RANK 'x' is not a whole number; the launcher (srun --ddp, torchrun) sets it; unset RANK to run a single "
            "process");
  EXPECT_EQ(error_of({{"RANK", "0"}}),
            "WORLD_SIZE is not set; the launcher (srun --ddp, torchrun) sets it; unset RANK to run a single process");
  EXPECT_EQ(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}),
            "RANK '2' is not below WORLD_SIZE 2; ranks count from 0 to WORLD_SIZE-1");
  EXPECT_EQ(error_of({{"RANK", "0"},
                      {"WORLD_SIZE", "2"},
                      {"LOCAL_RANK", "3"},
                      {"LOCAL_WORLD_SIZE", "2"},
                      {"MASTER_ADDR", "h"},
                      {"MASTER_PORT", "1"}}),
            "local rank 3 is not below the local world size 2; check the launcher's LOCAL_RANK and LOCAL_WORLD_SIZE");
  EXPECT_EQ(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}),
            "RANK and WORLD_SIZE are set but MASTER_ADDR or MASTER_PORT is not; export both (srun --ddp and torchrun "
            "do), or unset RANK to run a single process");
  EXPECT_EQ(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}),
            "MASTER_PORT '70000' is not a whole number from 1 to 65535");
  EXPECT_EQ(error_of({{"DDP_BACKEND", "tcp"}}), "DDP_BACKEND 'tcp' is not a backend; use auto, gloo, nccl or mpi");
  EXPECT_EQ(error_of({{"OMPI_COMM_WORLD_SIZE", "2"}}),
            "OMPI_COMM_WORLD_RANK is not set; mpirun sets it; do not export OMPI_COMM_WORLD_* by hand");
  EXPECT_EQ(error_of({{"SLURM_STEP_NUM_TASKS", "4"}, {"SLURM_PROCID", "1"}}),
            "SLURM_STEP_NUM_TASKS='4' but RANK is not set: launch with srun --ddp (or export RANK, WORLD_SIZE, "
            "MASTER_ADDR and MASTER_PORT)");
}

TEST(Backend, NamesRoundTrip) {
  for (const Backend backend : {Backend::Auto, Backend::Gloo, Backend::Nccl, Backend::Mpi}) {
    EXPECT_EQ(backend_named(to_string(backend)), backend);
  }
  EXPECT_FALSE(backend_named("tcp"));
  EXPECT_THROW(parse_backend("", "--backend"), Error);
}

}  // namespace
}  // namespace ddp
