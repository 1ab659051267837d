#pragma once
// Recovery in place (ddp-train --recover in-place, Gloo): when a rank dies or stops answering, the others form a
// smaller group and keep training, without a restart and without reading a snapshot.
//
// The store. Each rank hosts a standby store from its start (the project's: project_store.hpp), on its own address
// (its task's NIC, GLOO_SOCKET_IFNAME) at a port the kernel picks, which proves the job's key to every client with a
// fresh nonce as rank 0's store does (a program that takes a dead rank's port cannot pass for it), and every rank
// learns every other's endpoint at start. Generation 0 meets at rank 0's store (MASTER_ADDR:MASTER_PORT); each later
// generation meets at the standby store of its leader: the first rank, in the previous generation's order, that
// answers. So any rank, rank 0 included, can fail and the others still meet at a place each of them can compute,
// with nothing outside the ranks to run or to fail. A generation's keys lie under the job's key prefix and then its
// own ("recovery/g<N>/"), so no generation reads another's and no outsider reads any.
// Every record the members decide on (the leader, each report, the generation's list, a replacement's request and its
// admission, and the group file) is sealed with the job's key for its run, attempt and name (store_auth.hpp's
// seal_record): a store that is not the leader's, a program that took a freed port, cannot hand out one of its own,
// nor an old one. One that does not verify is refused and named in Regrouped::refused.
//
// Who is alive. A rank whose collective failed walks the previous generation's members in order: itself, and it
// leads; a member whose standby port refuses connections, dead (its process is gone), skipped; one that does not
// show its proof within a second, again and again through the join window (1.5 s), silent (stopped, hung or cut
// off), skipped; one that answers, awaited until it
// leads (it may still be inside its own collective, for up to --timeout). The leader takes reports until every
// member has reported, been found dead, or stayed silent through the join window (1.5 s), then closes the generation.
//
// The quorum. A generation forms when more than half of the previous generation's members that are not known dead
// report, and at least --min-ranks: members found dead do not vote, since they cannot come back, but silent ones
// do, since a rank cut off may live on with others. So two groups never both go on (a member that was silent and
// comes back finds a newer generation without it and ends, "left out"), and a SIGKILLed rank never blocks
// recovery, while with two ranks a silent one does: the other cannot tell a stopped peer from a cut-off one.
// A member that comes back after the others have gone (they finished the run, or went on and died since) finds
// every member dead; the group file is then the witness: a member whose generation it has passed, or which says the
// run ended, is left out, and writes nothing over the run's model and snapshots.
// Below the quorum or --min-ranks the members fall back to a restart from a snapshot, which the member with the
// newest state writes first.
//
// A replacement. A new process (`ddp-train --join`, or DDP_JOIN=1: a new srun step on a spare node, or started by
// hand) hosts its standby store, reads the group file the current rank 0 keeps in the snapshot directory
// (".ddp-group-<run>": the generation and every rank's standby endpoint), proves rank 0's store, and asks to join
// there. Rank 0 sees the request at its next stop poll (a one-element all-reduce about every half second of
// training, which carries the request to every rank), and at that step boundary the ranks form the next
// generation with the replacement in it: it gets the next free rank number and has no state, so rank 0 sends it
// everything (model, optimizer, generator, sampler position), with a MAC under the job's key over every byte and the
// generation that it checks before it reads any, over the new group, which runs over each task's own
// NIC (GLOO_SOCKET_IFNAME), and the group has grown back. A replacement that dies while it is being healed fails
// that collective, and the others recover without it as from any failure.
//
// The state. Replicas are identical after each completed step; the step in flight is discarded (each rank puts back
// its random number generator and buffers). A member that completed one more step than another (it received the
// last all-reduce before the peer died) is ahead: the member with the most steps, the lowest-ranked among equals,
// becomes the new rank 0, whose state every rank takes. Each member reports its step; the generation's list holds
// every member's, so each rank knows whether anyone must be sent the state.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/hmac.hpp"
#include "core/launch.hpp"
#include "ddp_runtime/common/c10d_compat.hpp"
#include "ddp_runtime/distributed/join_tickets.hpp"
#include "ddp_runtime/distributed/process_group.hpp"
#include "ddp_runtime/distributed/rank_identity.hpp"

namespace ddp::runtime {

struct RecoverySettings {
  std::string run_id;  // the run (the Slurm job), which a replacement in another step of the job shares
  int min_ranks = 1;
  std::chrono::milliseconds timeout{1800000};  // the process group's (--timeout)
  std::chrono::milliseconds probe{1000};       // how long a member has to show its proof before it counts as silent
  // How long the leader probes a silent member again before it counts as silent for good (a loaded node may be
  // slow to answer); members that answer are awaited until --timeout beyond it.
  std::chrono::milliseconds join_window{1500};
  // The run's group file (group_file_name, in the snapshot directory), which the current rank 0 keeps: the witness
  // of generations that went on, and of the run's end, after their members are gone. Empty: none.
  std::string group_file;
};

// What a member says of itself when it reports.
struct MemberReport {
  int64_t step = 0;        // optimizer steps completed
  bool has_state = false;  // it holds a trained state (a replacement being healed does not)
};

// The members of a generation that did not report, as the leader found them.
struct Lost {
  int id = 0;  // its rank in generation 0, the one Slurm's messages name
  RankIdentity identity;
  bool dead = false;  // its standby port refused connections: the process is gone
};

// A generation that formed, or the verdict that none could.
struct Regrouped {
  int64_t generation = 0;
  bool formed = false;
  std::string verdict;          // why no generation formed: "2 of 4 ranks answer, fewer than --min-ranks 3"
  bool source_is_me = false;    // this member holds the state every rank takes (written first on fallback)
  bool someone_behind = false;  // a member must be sent the source's state
  int64_t source_step = 0;
  std::vector<Lost> lost;
  std::vector<RankIdentity> joined;          // replacements taken in (they hold no state yet)
  std::chrono::duration<double> seconds{0};  // from the start of regroup() to the generation's group
  // Records that did not verify on the way (a store that is not the leader's, a forged report or request), one line
  // each: they were left out of the decision.
  std::vector<std::string> refused;
};

inline constexpr std::size_t kStateMacLength = kHmacHexDigits;

// The group file a replacement reads: under the snapshot directory, one per run.
std::string group_file_name(const std::string& run_id);

// A generation formed but its group did not (a member, often a replacement, died while the group was being made):
// the members meet again, as the next generation.
class GroupNotFormed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// This rank was left out of a generation that formed without it (it was silent when the others met): it ends.
class LeftOut : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Recovery {
 public:
  // Collective on the generation-0 group: hosts this rank's standby store (its endpoint goes into each rank's
  // identity) and learns every rank's. Throws std::runtime_error when the store cannot be hosted.
  Recovery(const Launch& launch, Distributed& dist, RecoverySettings settings);
  // A replacement: hosts its standby store only; join() then finds the group.
  static std::unique_ptr<Recovery> replacement(const Launch& launch, Distributed& dist, RecoverySettings settings);
  ~Recovery();
  Recovery(const Recovery&) = delete;
  Recovery& operator=(const Recovery&) = delete;

  // Every rank of the current generation, for messages; its standby endpoint included.
  const std::vector<RankIdentity>& ranks() const { return identities_; }
  int64_t generation() const { return generation_; }

  // Hands the failed group to a thread of its own that lets it go: a Gloo group cannot be aborted, and its
  // destructor waits for the work it holds, which a stopped peer holds up until --timeout. Closing its connections
  // makes the other ranks' collectives fail at once.
  static void release_group(Distributed& dist);
  // Groups being let go that have not yet gone: a process must not run its exit handlers under their threads.
  static int groups_being_released();

  // After a collective of the current generation failed: meets the other members and, when a generation forms,
  // puts its Gloo group into `dist` (rank, world size). Throws LeftOut, and std::runtime_error when this member
  // failed to meet the others at all.
  Regrouped regroup(const MemberReport& mine);

  // A replacement: reads the group file at `group_file`, asks the current rank 0 to join and waits, within
  // --timeout, to be admitted; then, like regroup(), puts the new generation's group into `dist`. Throws
  // std::runtime_error naming what failed (no group file, no rank 0 that answers, not admitted in time, the run
  // ended).
  // `asked` is told once the request is made.
  Regrouped join(const std::string& group_file, const std::function<void(const std::string&)>& asked);

  // Rank 0: whether a replacement asked to join since the last generation formed, or one that was still writing its
  // request then has written it (calls to its own store; join_tickets.hpp).
  bool joins_pending();
  // The group file's text for the current generation, which rank 0 writes.
  std::string group_file() const;
  // The MAC of the state the current generation's rank 0 sends (store_auth.hpp's state_mac), kStateMacLength
  // characters.
  std::string state_mac(const char* bytes, std::size_t size) const;
  // The group file's text once the training has ended: a replacement that reads it gives up at once.
  std::string ended_group_file() const;

 private:
  struct Member {
    int id = 0;
    RankIdentity identity;
  };
  struct Probe;

  // Throws LeftOut when the group file says the run ended or names `generation` or a later one.
  void check_not_passed_by(int64_t generation) const;
  Regrouped lead(int64_t generation, const MemberReport& mine);
  Regrouped follow(int64_t generation, const compat::StorePtr& store, const MemberReport& mine);
  Regrouped take_list(int64_t generation, const std::string& list, const compat::StorePtr& store);
  struct ReplacementTag {};
  Recovery(const Launch& launch, Distributed& dist, RecoverySettings settings, ReplacementTag);
  void host_standby();
  struct GenerationList;
  void admit_replacements(int64_t generation, GenerationList& list);
  JoinTickets::Written join_request_written() const;
  Probe probe(const Member& member, std::chrono::milliseconds wait) const;
  std::string key(int64_t generation, const std::string& name) const;
  // Records in a store are sealed with the job's key (store_auth.hpp); one that does not verify is refused and its
  // line kept for the next Regrouped.
  std::string seal(const std::string& name, const std::string& text) const;
  std::optional<std::string> open_sealed(const std::string& name, const std::vector<uint8_t>& value,
                                         const std::string& from);

  Launch launch_;
  Distributed& dist_;
  RecoverySettings settings_;
  int self_ = 0;  // this member's id
  compat::StorePtr standby_;
  std::string endpoint_;                         // this member's standby endpoint, "address port"
  JoinTickets join_tickets_{settings_.timeout};  // rank 0: the replacements' requests to join
  int next_id_ = 0;                              // the member id the next replacement gets
  std::vector<Member> members_;                  // of the current generation, in rank order
  std::vector<RankIdentity> identities_;
  int64_t generation_ = 0;
  std::vector<std::string> refused_;  // records refused since the last Regrouped
};

// "rank 3 on node2 (cpu)", "rank 1 on node2 (cpu) and rank 3 on node3 (cpu)".
std::string describe_lost(const std::vector<Lost>& lost);

}  // namespace ddp::runtime
