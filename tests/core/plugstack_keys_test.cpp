// The plugstack.conf keys have one list, config_key_table(): spank_plugin/plugstack.conf.in's comment and
// docs/admin.md's table are written from it, and these tests fail, naming the key, when either says otherwise
// (DDP_UPDATE_TABLES=1 ctest -R plugstack rewrites both from the table).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "spank_plugin/step/options.hpp"
#include "test_common.hpp"

namespace ddp {
namespace {

const std::string kConf = std::string(PROJECT_SOURCE_DIR) + "/spank_plugin/plugstack.conf.in";
const std::string kAdmin = std::string(PROJECT_SOURCE_DIR) + "/docs/admin.md";
// The lines above each generated block; the block is what follows, up to the first line without the prefix.
constexpr char kConfHeader[] = "# Admin settings go after the path as key=value; every key, with its default:";
constexpr char kAdminHeader[] = "| Key | Default | Meaning |";

// `first` then the words of `rest`, wrapped at 118 columns with `indent` before each further line.
std::vector<std::string> wrapped(const std::string& first, const std::string& rest, const std::string& indent) {
  std::vector<std::string> lines{first};
  std::istringstream words(rest);
  for (std::string word; words >> word;) {
    if (lines.back().size() + 1 + word.size() > 118) lines.push_back(indent.substr(0, indent.size() - 1));
    lines.back() += " " + word;
  }
  return lines;
}

std::vector<std::string> conf_block() {
  std::vector<std::string> lines;
  for (const ConfigKey& key : config_key_table()) {
    const std::string shown = key.default_value != nullptr ? std::string(key.default_value) + ":"
                                                           : std::string(key.example) + " (default: none):";
    for (const std::string& line : wrapped("#   " + std::string(key.name) + "=" + shown, key.help, "#       ")) {
      lines.push_back(line);
    }
  }
  return lines;
}

std::vector<std::string> admin_block() {
  std::vector<std::string> lines{"|---|---|---|"};
  for (const ConfigKey& key : config_key_table()) {
    const std::string shown = key.default_value != nullptr ? "`" + std::string(key.default_value) + "`" : "none";
    lines.push_back("| `" + std::string(key.name) + "` | " + shown + " | " + key.help + " |");
  }
  return lines;
}

std::string text_of(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(PlugstackKeys, EveryKeyHasHelpAndADefaultOrAnExample) {
  for (const ConfigKey& key : config_key_table()) {
    EXPECT_GT(std::string(key.help).size(), 10u) << key.name;
    // A '|' would end the cell of docs/admin.md's table early.
    EXPECT_EQ(std::string(key.help).find('|'), std::string::npos) << key.name << ": say 'a or b' in its help";
    EXPECT_NE(key.default_value == nullptr, key.example == nullptr) << key.name << ": give a default or an example";
  }
}

// The default column says what Config{} holds: it must at least be a value the parser takes, as must the example.
TEST(PlugstackKeys, DefaultsAndExamplesParse) {
  for (const ConfigKey& key : config_key_table()) {
    const std::string value = key.default_value != nullptr ? key.default_value : key.example;
    EXPECT_NO_THROW(parse_config({std::string(key.name) + "=" + value}, "plugstack.conf")) << key.name;
  }
  EXPECT_EQ(Config{}.port_range.text(), "20000-29999");
  EXPECT_EQ(Config{}.topology_cache, "/run/slurm-ddp");
}

TEST(PlugstackKeys, PlugstackConfShowsEveryKey) {
  const std::string conf = text_of(kConf);
  for (const ConfigKey& key : config_key_table()) {
    if (conf.find("#   " + std::string(key.name) + "=") == std::string::npos) {
      ADD_FAILURE() << kConf << " does not show plugstack key " << key.name << "; rerun with DDP_UPDATE_TABLES=1";
    }
  }
  const std::string differs = testing::compare_block(kConf, kConfHeader, "#   ", conf_block());
  EXPECT_TRUE(differs.empty()) << differs;
}

TEST(PlugstackKeys, AdminDocsTableListsEveryKey) {
  const std::string admin = text_of(kAdmin);
  for (const ConfigKey& key : config_key_table()) {
    if (admin.find("| `" + std::string(key.name) + "` |") == std::string::npos) {
      ADD_FAILURE() << kAdmin << " has no row for plugstack key " << key.name << "; rerun with DDP_UPDATE_TABLES=1";
    }
  }
  const std::string differs = testing::compare_block(kAdmin, kAdminHeader, "|", admin_block());
  EXPECT_TRUE(differs.empty()) << differs;
}

}  // namespace
}  // namespace ddp
