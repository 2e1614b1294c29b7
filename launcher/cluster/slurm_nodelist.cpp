#include "cluster/slurm_nodelist.hpp"

#include <string_view>

#include "cluster/decimal.hpp"

// Note [Slurm host lists]
// What Slurm's own parser (src/common/hostlist.c; checked against `scontrol show hostnames` of
// Slurm 22.05) accepts, and so what SLURM_*_NODELIST can hold:
// - Entries are separated by ',', ' ' or '\t' outside brackets; empty entries are skipped.
// - An entry is text with bracket groups, each a comma-separated list of N or N-M (decimal digits,
//   N <= M). Every number of a range is padded with zeros to the width of its first number:
//   [08-10] -> 08 09 10, [001-3] -> 001 002 003, [1-010] -> 1 .. 10.
// - Text may stand between groups (rack[1-2]-node[1-2]) but not after the last one: Slurm refuses
//   node[1-2].ib, so no Slurm list holds it.
// - Several groups expand to their cartesian product in Slurm's order: the last group varies
//   fastest; the others are taken from the second-to-last, outermost, back to the first. For two
//   groups that is the plain order (a[1-2]b[3-4] -> a1b3 a1b4 a2b3 a2b4); for three,
//   a[1-2]b[3-4]c[5-6] -> a1b3c5 a1b3c6 a2b3c5 a2b3c6 a1b4c5 a1b4c6 a2b4c5 a2b4c6.
// - Duplicates are kept, as Slurm keeps them (n[1-2],n[2-3] -> n1 n2 n2 n3).
// Refused here although Slurm lets them through, because they are typing mistakes rather than
// anything Slurm writes: a '[' never closed (Slurm appends a ']'), a ']' with no '[' (Slurm keeps
// it in the name), whitespace inside brackets, a range with no end ([1-]). Refused as by Slurm:
// steps ([1-9:2]; Slurm has none), letters, signs, nested brackets, the box ranges of
// multi-dimensional (BlueGene, Cray) systems ([000x133]), and ranges over kMaxSlurmHosts.

namespace dpl::cluster {
namespace {

constexpr int64_t kMaxNumber = 999999999999999999;  // 18 digits: what ParseDecimal reads

struct Group {
  std::vector<std::string> values;  // the numbers, already zero-padded
};

// An entry: texts[0] group[0] texts[1] group[1] ... texts[n]; texts[n] is always empty.
struct Pattern {
  std::vector<std::string> texts{""};
  std::vector<Group> groups;
};

class ListParser {
 public:
  explicit ListParser(const std::string& list) : list_(list) {}

  Status Error(const std::string& what) const {
    return Status::InvalidArgument("Slurm host list '" + list_ + "': " + what);
  }
  static std::string At(size_t offset) { return " at character " + std::to_string(offset + 1); }

  // One N or N-M of a group, `offset` being where it starts in the list.
  Status ParseRange(std::string_view range, size_t offset, Group* group, size_t* hosts) const {
    if (range.empty()) {
      return Error("empty range" + At(offset) + "; write a number or a range such as 1-4");
    }
    const size_t dash = range.find('-');
    std::string_view low_text = range.substr(0, dash);
    std::string_view high_text = dash == std::string_view::npos ? low_text : range.substr(dash + 1);
    const auto low = ParseDecimal(low_text, kMaxNumber);
    const auto high = ParseDecimal(high_text, kMaxNumber);
    if (!low || !high) {
      return Error("'" + std::string(range) + "'" + At(offset) +
                   " is not a number or a range such as 1-4 (decimal digits only; Slurm ranges "
                   "have no step)");
    }
    if (*low > *high) {
      return Error("range '" + std::string(range) + "'" + At(offset) + " goes down; write it as " +
                   std::string(high_text) + "-" + std::string(low_text));
    }
    if (static_cast<uint64_t>(*high - *low) >= kMaxSlurmHosts - *hosts) {
      return Error("range '" + std::string(range) + "'" + At(offset) + " takes the list over " +
                   std::to_string(kMaxSlurmHosts) + " hosts");
    }
    *hosts += static_cast<size_t>(*high - *low + 1);
    for (int64_t value = *low; value <= *high; ++value) {
      std::string digits = std::to_string(value);
      if (digits.size() < low_text.size()) digits.insert(0, low_text.size() - digits.size(), '0');
      group->values.push_back(std::move(digits));
    }
    return Status::Ok();
  }

  // The inside of one "[...]", starting at `offset` in the list.
  Result<Group> ParseGroup(std::string_view inside, size_t offset) const {
    Group group;
    size_t hosts = 0;
    size_t start = 0;
    while (true) {
      const size_t comma = inside.find(',', start);
      const std::string_view range = inside.substr(start, comma - start);
      DPL_RETURN_IF_ERROR(ParseRange(range, offset + start, &group, &hosts));
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    return group;
  }

  // One entry (no separator outside brackets), starting at `offset` in the list.
  Result<Pattern> ParseEntry(std::string_view entry, size_t offset) const {
    Pattern pattern;
    size_t open = std::string_view::npos;  // where the group being read starts
    for (size_t i = 0; i < entry.size(); ++i) {
      const char c = entry[i];
      if (c == '[') {
        if (open != std::string_view::npos) {
          return Error("'['" + At(offset + i) +
                       " is inside another '[...]'; Slurm ranges do not "
                       "nest");
        }
        open = i;
      } else if (c == ']') {
        if (open == std::string_view::npos) return Error("']'" + At(offset + i) + " has no '['");
        DPL_ASSIGN_OR_RETURN(auto group,
                             ParseGroup(entry.substr(open + 1, i - open - 1), offset + open + 1));
        pattern.groups.push_back(std::move(group));
        pattern.texts.emplace_back();
        open = std::string_view::npos;
      } else if (open == std::string_view::npos) {
        pattern.texts.back() += c;
      }
    }
    if (open != std::string_view::npos) {
      return Error("'['" + At(offset + open) + " is not closed by ']'");
    }
    if (!pattern.groups.empty() && !pattern.texts.back().empty()) {
      const size_t tail = offset + entry.size() - pattern.texts.back().size();
      return Error("'" + pattern.texts.back() + "'" + At(tail) +
                   " follows the last ']'; a Slurm host name ends with its last range (node[1-2], "
                   "not node[1-2]" +
                   pattern.texts.back() + ")");
    }
    return pattern;
  }

 private:
  const std::string& list_;
};

bool IsSeparator(char c) {
  return c == ',' || c == ' ' || c == '\t';
}

// The loops of Note [Slurm host lists], outermost first: groups n-2, n-3, .., 0, then n-1.
std::vector<size_t> SlurmLoopOrder(size_t groups) {
  std::vector<size_t> order;
  for (size_t g = groups - 1; g-- > 0;) order.push_back(g);
  order.push_back(groups - 1);
  return order;
}

void Expand(const Pattern& pattern, const std::vector<size_t>& order, size_t depth,
            std::vector<size_t>* chosen, std::vector<std::string>* hosts) {
  if (depth == order.size()) {
    std::string host = pattern.texts[0];
    for (size_t g = 0; g < pattern.groups.size(); ++g) {
      host += pattern.groups[g].values[(*chosen)[g]] + pattern.texts[g + 1];
    }
    hosts->push_back(std::move(host));
    return;
  }
  const size_t group = order[depth];
  for (size_t v = 0; v < pattern.groups[group].values.size(); ++v) {
    (*chosen)[group] = v;
    Expand(pattern, order, depth + 1, chosen, hosts);
  }
}

// Hosts an entry expands to, or 0 when that would be more than `limit`.
size_t CountHosts(const Pattern& pattern, size_t limit) {
  size_t count = 1;
  for (const Group& group : pattern.groups) {
    if (count > limit / group.values.size()) return 0;
    count *= group.values.size();
  }
  return count <= limit ? count : 0;
}

}  // namespace

Result<std::vector<std::string>> ExpandSlurmNodeList(const std::string& list) {
  const ListParser parser(list);
  std::vector<std::string> hosts;
  size_t i = 0;
  while (i < list.size()) {
    if (IsSeparator(list[i])) {
      ++i;
      continue;
    }
    // An entry runs to the next separator outside brackets.
    size_t end = i;
    for (int depth = 0; end < list.size() && (depth > 0 || !IsSeparator(list[end])); ++end) {
      if (list[end] == '[') ++depth;
      if (list[end] == ']' && depth > 0) --depth;
    }
    DPL_ASSIGN_OR_RETURN(auto pattern,
                         parser.ParseEntry(std::string_view(list).substr(i, end - i), i));
    if (CountHosts(pattern, kMaxSlurmHosts - hosts.size()) == 0) {
      return parser.Error("the entry" + ListParser::At(i) + " takes the list over " +
                          std::to_string(kMaxSlurmHosts) + " hosts");
    }
    std::vector<size_t> chosen(pattern.groups.size());
    if (pattern.groups.empty()) {
      hosts.push_back(pattern.texts[0]);
    } else {
      Expand(pattern, SlurmLoopOrder(pattern.groups.size()), 0, &chosen, &hosts);
    }
    i = end;
  }
  if (hosts.empty()) {
    return Status::InvalidArgument("Slurm host list '" + list +
                                   "' names no host; expected names such as node1,node[2-4]");
  }
  return hosts;
}

}  // namespace dpl::cluster
