// The names of what srun --ddp gives a task (env_names.hpp): every variable a task receives is one of them, and
// docs/plugin.md's table lists exactly them, in their order.
#include "core/env_names.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "core/container.hpp"
#include "report/step_logs.hpp"
#include "spank_plugin/step/step.hpp"
#include "spank_plugin/step/task_env.hpp"
#include "steps.hpp"

namespace ddp {
namespace {

const std::vector<std::string> kListed(std::begin(vars::kTaskVariables), std::end(vars::kTaskVariables));

// The names in the first column of docs/plugin.md's table under "What `srun --ddp` does", in order.
std::vector<std::string> docs_table_names() {
  std::ifstream page(std::string(PROJECT_SOURCE_DIR) + "/docs/plugin.md");
  std::string line;
  while (std::getline(page, line) && line != "| Variable | Value |") {
  }
  std::getline(page, line);  // |---|---|
  std::vector<std::string> names;
  const std::regex name("`([A-Z][A-Z0-9_]*)`");
  while (std::getline(page, line) && line.rfind("| ", 0) == 0) {
    const std::string first = line.substr(2, line.find(" | ") - 2);
    for (auto it = std::sregex_iterator(first.begin(), first.end(), name); it != std::sregex_iterator(); ++it) {
      names.push_back((*it)[1].str());
    }
  }
  return names;
}

TEST(EnvNames, TheDocsTableListsWhatATaskReceivesInOrder) { EXPECT_EQ(docs_table_names(), kListed); }

TEST(EnvNames, EveryVariableATaskReceivesIsListed) {
  StepInfo step = test::two_by_two(0);
  step.job_key = "0123456789abcdef0123456789abcdef";
  step.job_instance = "0a1b2c3d4e5f";
  Options options = test::ddp_on();
  options.recover = true;
  options.snapshot_dir = "/fsx/snapshots";
  const StepPlan plan = plan_step(step, options, Config{}, {32768, 60999});
  TaskEnv env = task_env(plan, {0, 0, 0}, [](const std::string&) { return std::nullopt; });
  add_failure_reporting(env, std::string("/logs/812.3"), 0, "node1");
  std::set<std::string> exported;
  for (const auto& [name, value] : task_exports(env, CleanEnv::Off)) exported.insert(name);
  for (const std::string& name : exported) {
    EXPECT_NE(std::find(kListed.begin(), kListed.end(), name), kListed.end()) << name << " is not in kTaskVariables";
  }
  // And the other way: with a job key and instance, a snapshot directory, --ddp-recover and a log directory, every one
  // is set.
  for (const std::string& name : kListed) EXPECT_EQ(exported.count(name), 1u) << name << " was not exported";
}

TEST(EnvNames, NamesAreUnique) {
  EXPECT_EQ(std::set<std::string>(kListed.begin(), kListed.end()).size(), kListed.size());
}

}  // namespace
}  // namespace ddp
