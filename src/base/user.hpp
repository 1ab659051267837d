#pragma once
// Who a uid is on this node: its passwd entry (getpwuid_r), read in one place for the plugin (the job's user),
// srun and ddp-why (the calling user).
#include <sys/types.h>

#include <optional>
#include <string>

namespace ddp {

struct UserAccount {
  std::string name;
  std::string home;  // empty when the entry has none
};

// nullopt when the node's user database has no entry for `uid` (or cannot be read).
std::optional<UserAccount> find_user(uid_t uid);

}  // namespace ddp
