#include "base/command_line.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "base/parse.hpp"

namespace ddp::cli {

bool Arguments::was_given(std::string_view name) const {
  return std::find(given.begin(), given.end(), name) != given.end();
}

uint64_t detail::whole(const std::string& text, uint64_t min, uint64_t max, bool open_ended) {
  const auto value = parse_uint(text, max);
  if (value && *value >= min) return *value;
  if (open_ended) throw BadValue("is not a whole number of at least " + std::to_string(min));
  throw BadValue("is not a whole number from " + std::to_string(min) + " to " + std::to_string(max));
}

double real(const std::string& text, Bound bound) {
  char* end = nullptr;
  // strtod skips leading spaces and reads "nan" and "inf": only a number written out in full is taken.
  const bool starts_well = !text.empty() && !std::isspace(static_cast<unsigned char>(text[0]));
  const double value = starts_well ? std::strtod(text.c_str(), &end) : 0;
  const bool in_range = bound == Bound::Positive ? value > 0 : value >= 0;
  if (!starts_well || *end != '\0' || !std::isfinite(value) || !in_range) {
    throw BadValue(std::string("is not a ") + (bound == Bound::Positive ? "positive" : "non-negative") + " number");
  }
  return value;
}

std::string number_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

void refuse_positionals(const Arguments& found, const std::string& program) {
  if (found.help || found.positionals.empty()) return;
  throw Error("unexpected argument " + quote(found.positionals.front()) + ": " + program + " takes options only; run " +
              program + " --help");
}

std::string refusal(const std::string& what, const std::string& text, const BadValue& bad, const std::string& fix) {
  return what + " " + quote(text) + " " + bad.what() + (bad.names_fix() ? "" : fix);
}

std::string listed(const std::vector<std::string>& names) {
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  }
  return text;
}

namespace detail {
namespace {

// "-5" is a positional (a number), "-x" an option this kit does not know.
bool looks_like_option(const std::string& arg) {
  return arg.size() > 1 && arg[0] == '-' && !std::isdigit(static_cast<unsigned char>(arg[1]));
}

std::string value_error(const OptionSpec& option, const std::string& value, const BadValue& bad,
                        const std::string& program) {
  const std::string name(option.name);
  return refusal(name, value, bad,
                 option.example.empty() ? "; run " + program + " --help" : "; e.g. " + name + " " + option.example);
}

}  // namespace

Arguments parse(const std::vector<OptionSpec>& options, const std::vector<std::string>& args,
                const std::string& program, const Setter& set) {
  Arguments found;
  bool options_ended = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (options_ended || !looks_like_option(arg)) {
      found.positionals.push_back(arg);
      continue;
    }
    if (arg == "--") {
      options_ended = true;
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      found.help = true;
      return found;
    }
    const size_t equals = arg.rfind("--", 0) == 0 ? arg.find('=') : std::string::npos;
    const std::string name = arg.substr(0, equals);
    const auto option =
        std::find_if(options.begin(), options.end(), [&](const OptionSpec& o) { return o.name == name; });
    if (option == options.end()) throw Error("unknown option " + quote(name) + "; run " + program + " --help");
    if (option->flag && equals != std::string::npos) {
      throw Error(name + " takes no value; run " + program + " --help");
    }
    if (!option->flag && equals == std::string::npos && i + 1 == args.size()) {
      throw Error(name + " needs a value; run " + program + " --help");
    }
    const std::string value = option->flag ? "" : equals != std::string::npos ? arg.substr(equals + 1) : args[++i];
    try {
      set(static_cast<size_t>(option - options.begin()), value);
    } catch (const BadValue& bad) {
      throw Error(value_error(*option, value, bad, program));
    }
    found.given.push_back(name);
  }
  return found;
}

std::string options_text(const std::vector<OptionLine>& lines) {
  constexpr size_t kWidest = 28;  // a longer "--name VALUE" puts its help on the next line
  const auto heading = [](const OptionLine& line) {
    return "  " + std::string(line.name) + (line.value.empty() ? "" : " " + std::string(line.value));
  };
  size_t column = 0;
  for (const OptionLine& line : lines) {
    if (heading(line).size() <= kWidest + 2) column = std::max(column, heading(line).size() + 2);
  }
  const std::string indent(column, ' ');
  std::string text;
  const auto add = [&](std::string head, std::string help) {
    text += head.size() + 1 > column ? head + "\n" + indent : head + std::string(column - head.size(), ' ');
    for (size_t newline; (newline = help.find('\n')) != std::string::npos; help.erase(0, newline + 1)) {
      text += help.substr(0, newline) + "\n" + indent;
    }
    text += help + "\n";
  };
  constexpr size_t kLineWidth = 118;
  for (const OptionLine& line : lines) {
    std::string help(line.help);
    if (!line.shown.empty()) {
      const std::string shown = "(default: " + line.shown + ")";
      const size_t last_line = help.size() - std::min(help.size(), help.rfind('\n') + 1);
      help += column + last_line + 1 + shown.size() > kLineWidth ? "\n" + shown : " " + shown;
    }
    add(heading(line), help);
  }
  add("  -h, --help", "this text");
  return text;
}

}  // namespace detail
}  // namespace ddp::cli
