#pragma once
// The texts that recovery in place (recovery.hpp) keeps in stores and in the group file: a member's report, a
// generation's list, and the group file. Each travels sealed with the job's key (store_auth.hpp); these are the texts
// inside the seal, written by one member and read by the others. Internal to the runtime (recovery.cpp).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/launch.hpp"
#include "ddp_runtime/distributed/rank_identity.hpp"
#include "ddp_runtime/distributed/recovery.hpp"

namespace ddp::runtime {

// "<steps>:<1|0>", what a member reports. parse_report throws std::exception (std::stoll's) on another text.
std::string report_text(const MemberReport& report);
MemberReport parse_report(const std::string& text);

// A generation's list, as the leader writes it, one field per line or tab:
//   formed|fallback
//   the verdict (empty when formed)
//   the member id the next replacement gets
//   the number of members, then per member, in their new rank order (the source first):
//     id, steps, holds a state (1/0), host, device, standby endpoint
//   the number of members lost, then per member lost: id, dead (1/0)
struct Recovery::GenerationList {
  bool formed = false;
  std::string verdict;
  int next_id = 0;
  struct Entry {
    int id = 0;
    int64_t step = 0;
    bool has_state = false;
    RankIdentity identity;
  };
  std::vector<Entry> members;
  std::vector<std::pair<int, bool>> lost;

  std::string encode() const;
  // Throws std::exception (std::stoi's) on a text that encode() did not write.
  static GenerationList decode(const std::string& text);
};

// The name the group file's text is sealed under.
inline constexpr char kGroupFileRecord[] = "group file";

// The group file as rank 0 wrote it: the run ended, or its generation and members (id and standby endpoint) in rank
// order. A file that does not exist or does not parse names no generation (-1) and no member.
struct GroupFile {
  bool unsealed = false;  // it has content that does not verify under the job's key: it says nothing
  bool ended = false;
  int64_t generation = -1;
  std::vector<std::pair<int, std::string>> members;

  // The text rank 0 seals: "ddp-train group ended", or the generation's header and a line per member.
  std::string encode() const;
};

// `sealed`: the file's content, a record (store_auth.hpp) that rank 0 sealed; one that does not verify names nothing.
GroupFile parse_group_file(const Launch& launch, const std::string& run_id, const std::string& sealed);
// parse_group_file of the file at `path`; a file that cannot be read names nothing.
GroupFile read_group_file(const Launch& launch, const std::string& run_id, const std::string& path);

}  // namespace ddp::runtime
