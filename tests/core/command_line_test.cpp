// The command-line kit: one table of options makes the parser and the usage text of every program.
#include "base/command_line.hpp"

#include <gtest/gtest.h>

#include <optional>

#include "test_common.hpp"

namespace ddp::cli {
namespace {

using ddp::testing::error_of;

enum class Color { Red, Light };
constexpr Choice<Color> kColors[] = {{"red", Color::Red}, {"light-blue", Color::Light}};

struct Config {
  int count = 3;
  double ratio = 0.5;
  Color color = Color::Red;
  std::optional<std::string> dir;
  bool quiet = false;
};

const Table<Config>& table() {
  static const Table<Config> options = {
      {"--count", "N", "how many", [](Config& c, const std::string& v) { c.count = whole(v, 1); },
       [](const Config& c) { return std::to_string(c.count); }},
      {"--ratio", "X", "a share", [](Config& c, const std::string& v) { c.ratio = real(v, Bound::Positive); },
       [](const Config& c) { return number_text(c.ratio); }},
      {"--color", alternatives(kColors), "the color\nof the thing",
       [](Config& c, const std::string& v) { c.color = choose(kColors, v, "a color"); },
       [](const Config& c) { return std::string(name_of(kColors, c.color)); }},
      {"--dir", "DIR", "where", [](Config& c, const std::string& v) { c.dir = v; }, nullptr, "/tmp"},
      {"--quiet", "", "say less", [](Config& c, const std::string&) { c.quiet = true; }},
      {"--a-very-long-option-name", "VALUE", "its help starts on the next line", [](Config&, const std::string&) {}},
  };
  return options;
}

Arguments parsed(Config& config, const std::vector<std::string>& args) { return parse(table(), config, args, "prog"); }

std::string refusal(const std::vector<std::string>& args) {
  Config config;
  return error_of([&] { parsed(config, args); });
}

TEST(CommandLine, BothSpellingsFlagsAndPositionalsInOrder) {
  Config config;
  const Arguments found = parsed(
      config, {"in", "--count", "7", "--ratio=0.25", "--quiet", "-3", "--color=light-blue", "--", "--count", "out"});
  EXPECT_EQ(config.count, 7);
  EXPECT_DOUBLE_EQ(config.ratio, 0.25);
  EXPECT_TRUE(config.quiet);
  EXPECT_EQ(config.color, Color::Light);
  EXPECT_FALSE(config.dir.has_value());
  EXPECT_EQ(found.positionals, (std::vector<std::string>{"in", "-3", "--count", "out"}));
  EXPECT_EQ(found.given, (std::vector<std::string>{"--count", "--ratio", "--quiet", "--color"}));
  EXPECT_TRUE(found.was_given("--ratio"));
  EXPECT_FALSE(found.was_given("--dir"));
  EXPECT_FALSE(found.help);
}

TEST(CommandLine, HelpEndsParsingWhereItStands) {
  Config config;
  EXPECT_TRUE(parsed(config, {"--count", "9", "-h", "--bogus"}).help);
  EXPECT_EQ(config.count, 9);
  EXPECT_TRUE(parsed(config, {"--help"}).help);
  EXPECT_EQ(refusal({"--bogus", "--help"}), "unknown option '--bogus'; run prog --help");
}

TEST(CommandLine, RefusalsNameTheOptionTheValueAndAFix) {
  EXPECT_EQ(refusal({"--count", "0"}), "--count '0' is not a whole number of at least 1; e.g. --count 3");
  EXPECT_EQ(refusal({"--count", "+4"}), "--count '+4' is not a whole number of at least 1; e.g. --count 3");
  EXPECT_EQ(refusal({"--count", "99999999999"}),
            "--count '99999999999' is not a whole number of at least 1; e.g. --count 3");
  for (const char* bad : {"", " 1", "1x", "nan", "inf", "-1", "0"}) {
    EXPECT_EQ(refusal({"--ratio", bad}),
              "--ratio '" + std::string(bad) + "' is not a positive number; e.g. --ratio 0.5");
  }
  EXPECT_EQ(refusal({"--dir"}), "--dir needs a value; run prog --help");
  EXPECT_EQ(refusal({"--color", "green"}), "--color 'green' is not a color; use red or light-blue");
  EXPECT_EQ(refusal({"--quiet=yes"}), "--quiet takes no value; run prog --help");
  EXPECT_EQ(refusal({"-x"}), "unknown option '-x'; run prog --help");
  EXPECT_EQ(refusal({"--count=1\n2"}), "--count '1?2' is not a whole number of at least 1; e.g. --count 3");
}

TEST(CommandLine, ValuesOutsideTheTableAndPositionalsAreRefusedInTheSameShape) {
  const auto at_least_one = [](const std::string& text) { return whole(text, 1); };
  const auto a_color = [](const std::string& text) { return choose(kColors, text, "a color"); };
  EXPECT_EQ(error_of([&] { value_of("EPOCHS", "x", at_least_one, "; e.g. 5"); }),
            "EPOCHS 'x' is not a whole number of at least 1; e.g. 5");
  EXPECT_EQ(error_of([&] { value_of("COLOR", "green", a_color, "; unused"); }),
            "COLOR 'green' is not a color; use red or light-blue");
  Config config;
  const Arguments found = parsed(config, {"--quiet", "stray"});
  EXPECT_EQ(error_of([&] { refuse_positionals(found, "prog"); }),
            "unexpected argument 'stray': prog takes options only; run prog --help");
  EXPECT_EQ(error_of([&] { refuse_positionals(parsed(config, {"--quiet"}), "prog"); }), "");
  EXPECT_EQ(error_of([&] { refuse_positionals(parsed(config, {"-h", "stray"}), "prog"); }), "");
}

TEST(CommandLine, NumbersWithinBounds) {
  EXPECT_EQ(whole<unsigned>("4096", 0, 4096), 4096u);
  EXPECT_EQ(error_of([] { whole<unsigned>("4097", 0, 4096); }), "is not a whole number from 0 to 4096");
  EXPECT_EQ(whole<uint16_t>("65535", 1), 65535);
  EXPECT_EQ(error_of([] { whole<uint16_t>("65536", 1); }), "is not a whole number of at least 1");
  EXPECT_DOUBLE_EQ(real("0", Bound::NonNegative), 0);
  EXPECT_DOUBLE_EQ(real("1e-3", Bound::Positive), 1e-3);
  EXPECT_EQ(number_text(1e-3), "0.001");
  EXPECT_EQ(number_text(1800), "1800");
}

TEST(CommandLine, EnumerationsFromOneTableOfNames) {
  EXPECT_EQ(alternatives(kColors), "red|light-blue");
  EXPECT_STREQ(name_of(kColors, Color::Light), "light-blue");
  EXPECT_EQ(choose(kColors, "red", "a color"), Color::Red);
  EXPECT_EQ(listed({"a"}), "a");
  EXPECT_EQ(listed({"a", "b", "c"}), "a, b or c");
}

TEST(CommandLine, TheUsageLinesComeFromTheTableAndTheConfigsDefaults) {
  Config defaults;
  defaults.count = 12;
  EXPECT_EQ(options_text(table(), defaults),
            "  --count N               how many (default: 12)\n"
            "  --ratio X               a share (default: 0.5)\n"
            "  --color red|light-blue  the color\n"
            "                          of the thing (default: red)\n"
            "  --dir DIR               where\n"
            "  --quiet                 say less\n"
            "  --a-very-long-option-name VALUE\n"
            "                          its help starts on the next line\n"
            "  -h, --help              this text\n");
}

}  // namespace
}  // namespace ddp::cli
