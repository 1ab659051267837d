#pragma once
// The command-line kit of the project's programs (ddp-train, ddp-doctor, ddp-topo, ddp-why), as the plugin's
// option table is the plugin's: each option is declared once, in a table, with the name of its value, its help and
// how it sets the program's typed config. The parser and the usage text both come from that table, and a default
// shown in the usage is read from the config's own default, so it cannot drift from the code.
//   - `--name value` and `--name=value` alike; a flag takes no value; `-h` and `--help` ask for the usage; `--`
//     ends the options; every other argument is a positional, kept in order.
//   - Values parse with the kit's parsers: whole numbers and reals with their bounds, and enumerations from one
//     table of names that also names each value back (name_of) and lists them for the usage (alternatives).
//   - Errors are ddp::Error, one line naming the option, the value and a fix, e.g. "--batch-size 'abc' is not a
//     whole number of at least 1; e.g. --batch-size 32": the example is the option's, else its shown default.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace ddp::cli {

// Thrown by a value parser: what is wrong with the value ("is not a whole number of at least 1"). parse() puts the
// option and the value before it, and an example after it unless the reason names its own fix.
class BadValue : public Error {
 public:
  explicit BadValue(const std::string& reason, bool names_fix = false) : Error(reason), names_fix_(names_fix) {}
  bool names_fix() const { return names_fix_; }

 private:
  bool names_fix_;
};

template <class Config>
struct Option {
  using Setter = void (*)(Config& config, const std::string& value);
  using Shown = std::string (*)(const Config& config);

  Option(std::string name, std::string value, std::string help, Setter set, Shown shown = nullptr,
         std::string example = "")
      : name(std::move(name)),
        value(std::move(value)),
        help(std::move(help)),
        set(set),
        shown(shown),
        example(std::move(example)) {}

  std::string name;     // "--batch-size"
  std::string value;    // the value's name in the usage ("N", "DIR", "sgd|adamw"); empty: a flag, which takes none
  std::string help;     // '\n' starts another line of it
  Setter set;           // a flag's is called with ""
  Shown shown;          // its value as the usage shows the default; nullptr: none shown
  std::string example;  // a value for error messages where the default is not shown or is no example
};

template <class Config>
using Table = std::vector<Option<Config>>;

// What parse() found besides the options it set.
struct Arguments {
  std::vector<std::string> positionals;
  std::vector<std::string> given;  // the names of the options given, in order
  bool help = false;               // -h or --help: the arguments after it were not parsed

  bool was_given(std::string_view name) const;
};

// For a program that takes options only: throws ddp::Error naming the first positional, if any.
void refuse_positionals(const Arguments& found, const std::string& program);

// ---- value parsers: each throws BadValue ----

namespace detail {
// `open_ended`: `max` is only the type's limit, and the error says "of at least min".
uint64_t whole(const std::string& text, uint64_t min, uint64_t max, bool open_ended);
}  // namespace detail

// A decimal whole number, digits only (no sign or spaces), from `min` to `max`.
template <class Int>
Int whole(const std::string& text, Int min, Int max) {
  static_assert(std::is_integral_v<Int>);
  return static_cast<Int>(detail::whole(text, static_cast<uint64_t>(min), static_cast<uint64_t>(max), false));
}

// The same, of at least `min` (and at most what Int holds).
template <class Int>
Int whole(const std::string& text, Int min) {
  static_assert(std::is_integral_v<Int>);
  return static_cast<Int>(
      detail::whole(text, static_cast<uint64_t>(min), static_cast<uint64_t>(std::numeric_limits<Int>::max()), true));
}

enum class Bound { Positive, NonNegative };
// A finite decimal number ("0.5", "1e-3"), above 0 or at least 0.
double real(const std::string& text, Bound bound);

// A number as the usage shows it: the shortest of %g ("0.001", "1e-08", "25").
std::string number_text(double value);

// One name of an enumeration: a table of them is the only place its values are spelled.
template <class Enum>
struct Choice {
  const char* name;
  Enum value;
};

// "mse|cross-entropy|nll"
template <class Enum, size_t N>
std::string alternatives(const Choice<Enum> (&choices)[N]) {
  std::string text;
  for (const auto& choice : choices) text += (text.empty() ? "" : "|") + std::string(choice.name);
  return text;
}

template <class Enum, size_t N>
const char* name_of(const Choice<Enum> (&choices)[N], Enum value) {
  for (const auto& choice : choices) {
    if (choice.value == value) return choice.name;
  }
  return "?";
}

std::string listed(const std::vector<std::string>& names);  // "a, b or c"

// Throws BadValue "is not <noun>; use a, b or c".
template <class Enum, size_t N>
Enum choose(const Choice<Enum> (&choices)[N], const std::string& text, const std::string& noun) {
  std::vector<std::string> names;
  for (const auto& choice : choices) {
    if (text == choice.name) return choice.value;
    names.emplace_back(choice.name);
  }
  throw BadValue("is not " + noun + "; use " + listed(names), true);
}

// The one-line refusal of `text` given as `what` (an option, a positional, an environment variable): "<what>
// '<text>' <reason>", then `fix` ("; e.g. ...") unless the reason names its own.
std::string refusal(const std::string& what, const std::string& text, const BadValue& bad, const std::string& fix);

// `parse(text)`, with a BadValue turned into ddp::Error by refusal(): for values outside an option table, such as
// positionals and environment variables.
template <class Parse>
auto value_of(const std::string& what, const std::string& text, Parse parse, const std::string& fix = "") {
  try {
    return parse(text);
  } catch (const BadValue& bad) {
    throw Error(refusal(what, text, bad, fix));
  }
}

// ---- the table's engine, without the config's type ----
namespace detail {
struct OptionSpec {
  std::string_view name;
  bool flag;
  std::string example;  // empty: none
};
using Setter = std::function<void(size_t option, const std::string& value)>;
Arguments parse(const std::vector<OptionSpec>& options, const std::vector<std::string>& args,
                const std::string& program, const Setter& set);

struct OptionLine {
  std::string_view name;
  std::string_view value;
  std::string_view help;
  std::string shown;  // empty: no default shown
};
std::string options_text(const std::vector<OptionLine>& lines);
}  // namespace detail

// Sets `config` from `args` by `table`. The config's values before the call are the defaults the usage shows.
// Throws ddp::Error: an unknown option, a missing value or a flag given one, a bad value (see BadValue); the fix
// names `program --help`.
template <class Config>
Arguments parse(const Table<Config>& table, Config& config, const std::vector<std::string>& args,
                const std::string& program) {
  std::vector<detail::OptionSpec> specs;
  for (const Option<Config>& option : table) {
    const std::string example = !option.example.empty() ? option.example
                                : option.shown          ? option.shown(config)
                                                        : std::string();
    specs.push_back({option.name, option.value.empty(), example});
  }
  return detail::parse(specs, args, program,
                       [&](size_t option, const std::string& value) { table[option].set(config, value); });
}

// The "options:" lines of a usage text: "  --name VALUE   help (default: X)", the help in a column, and -h, --help.
template <class Config>
std::string options_text(const Table<Config>& table, const Config& defaults) {
  std::vector<detail::OptionLine> lines;
  for (const Option<Config>& option : table) {
    lines.push_back({option.name, option.value, option.help, option.shown ? option.shown(defaults) : std::string()});
  }
  return detail::options_text(lines);
}

}  // namespace ddp::cli
