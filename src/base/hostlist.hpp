#pragma once
// Slurm hostlist expressions, e.g. "gpu[01-04,07],login-[1-2]x[3-4],head".
// Parsing is linear in the text; hosts are produced on demand, so asking for the first host of a
// 100k-node list costs nothing, and expansion is bounded by kMaxHosts.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ddp {

class Hostlist {
 public:
  static constexpr size_t kMaxHosts = 1'000'000;

  // Throws ddp::Error with the expression and what is wrong in it.
  static Hostlist parse(std::string_view expression);

  size_t size() const { return total_; }
  std::string at(size_t index) const;
  std::vector<std::string> expand() const;

 private:
  struct Range {
    uint64_t first;
    uint64_t count;
    size_t width;  // zero-padded width, from the written lower bound ("01" pads to 2)
  };
  struct Part {  // literal text, or a bracket set when `ranges` is non-empty
    std::string text;
    std::vector<Range> ranges;
    size_t count = 1;
  };
  struct Pattern {
    std::vector<Part> parts;
    size_t count = 1;
  };

  static Pattern parse_pattern(std::string_view item, std::string_view expression);
  static Part parse_bracket(std::string_view body, std::string_view expression);
  static std::string host_of(const Pattern& pattern, size_t index);

  std::vector<Pattern> patterns_;
  size_t total_ = 0;
};

}  // namespace ddp
