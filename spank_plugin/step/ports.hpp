#pragma once
// The rendezvous port (MASTER_PORT) of a step. One place decides it, on every node alike, with no
// communication: from the user's --ddp-port, else from ports Slurm reserved for the step (MpiParams=ports: Slurm
// never gives one to two steps at once), else derived inside the admin's range from the job's key and the step id.
//
// Whoever binds the port first hosts the rendezvous store, and PyTorch's c10d store has no authentication. So the
// derived port is unpredictable to other users (it comes from the job's key, which only the job's environment
// holds), and ddp-train's ranks check that the store they reach proves it knows that key.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/port_range.hpp"
#include "core/job_key.hpp"

namespace ddp {

enum class PortSource { User, Reserved, Hashed };
const char* to_string(PortSource source);

// The step's MASTER_PORT and where it came from (--ddp-port, Slurm's reservation, or derived from the key).
struct MasterPort {
  uint16_t number = 0;
  PortSource source = PortSource::Hashed;
};

// With a key, the job's steps get consecutive ports from a place in the range that the key chooses: no other user
// can predict it, and a job's concurrent steps never share a port. Two jobs meet with a probability of about
// (steps of both) / range.size(); the loser fails at once (see ddp-train's store check). Without a key (an srun
// that predates it), from the ids: concurrent steps of one job differ for kStepsPerJob of them, and jobs collide
// only when their ids are congruent modulo range.size() / kStepsPerJob.
constexpr uint32_t kStepsPerJob = 16;
uint16_t hashed_port(uint32_t job_id, uint32_t step_id, PortRange range, std::string_view job_key = {});

// SLURM_STEP_RESV_PORTS as Slurm writes it: comma-separated ports and FIRST-LAST ranges, ascending ("12000-12003",
// "12000,12007-12008"). Throws ddp::Error naming the variable.
std::vector<PortRange> parse_reserved_ports(std::string_view text);

// `reserved` is SLURM_STEP_RESV_PORTS, empty when none; `job_key` DDP_JOB_KEY, empty or malformed: none.
MasterPort choose_master_port(std::optional<uint16_t> user_port, std::string_view reserved, uint32_t job_id,
                              uint32_t step_id, PortRange range, std::string_view job_key = {});

}  // namespace ddp
