#pragma once
// What a process of the job writes where others may read it (a line of output, an error file, a warning) never
// carries the job's key (DDP_JOB_KEY: 32 hex digits) or a value derived from it (HMACs as 40 or 64 hex digits: a
// store's proof, the prefix under which a run's keys lie, and so the names of keys that c10d and Gloo quote in their
// errors, such as "<prefix>/recovery//g3/gloo/rank_1"). slurm-JOB.out is often readable by every user of the
// cluster (umask 022), and a prefix read there would let anyone who reaches a rank's store read and write the run's
// keys.
//
// Every run of kKeyMaterialDigits or more hex digits is replaced by kRedacted, whatever produced it: no message of
// ours needs one (ids, ports, steps and checksums are shorter), and an innocent run (a directory named after a UUID
// without its dashes) loses nothing a user needs to act on the message.
#include <cstddef>
#include <string>
#include <string_view>

namespace ddp {

inline constexpr std::size_t kKeyMaterialDigits = 32;
inline constexpr char kRedacted[] = "<job-key-derived>";

// `text` with each run of kKeyMaterialDigits or more hex digits replaced by kRedacted.
std::string redact_key_material(std::string_view text);

}  // namespace ddp
