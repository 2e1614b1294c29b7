#include "shard_list.hpp"

#include <dirent.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "common/files.hpp"
#include "dpl/support/error.hpp"

namespace dpl::datasets::webdataset {
namespace {

using support::PluginError;

constexpr size_t kMaxShards = 1000000;
const char* const kShardSuffixes[] = {".tar",     ".tar.gz", ".tgz",    ".tar.zst",
                                      ".tar.bz2", ".tar.xz", ".tar.lz4"};

// Whether a name the listing or a pattern found is a shard: a file, or a link to one. A link whose
// target is gone (a volume not mounted) is refused: skipped, it would drop its shards from every
// epoch without a word. Folders and other entries named like shards are not shards.
bool IsShardFile(const std::string& path) {
  if (IsRegularFile(path)) return true;
  struct stat entry {};
  if (::lstat(path.c_str(), &entry) != 0 || !S_ISLNK(entry.st_mode)) return false;
  char target[4096];
  const ssize_t length = ::readlink(path.c_str(), target, sizeof target - 1);
  const std::string to = length > 0 ? std::string(target, size_t(length)) : std::string("?");
  throw PluginError(DPL_ERR_NOT_FOUND, path + " is a symbolic link to " + to +
                                           ", which is not a file (a volume not mounted?); "
                                           "make it reachable, or remove the link");
}

bool IsDigits(const std::string& text) {
  return !text.empty() && text.size() <= 18 &&
         text.find_first_not_of("0123456789") == std::string::npos;
}

std::string Padded(int64_t value, size_t width) {
  std::string digits = std::to_string(value);
  if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
  return digits;
}

bool HasWildcard(const std::string& name) {
  return name.find_first_of("*?[") != std::string::npos;
}

bool EndsWith(const std::string& text, const std::string& suffix) {
  return text.size() > suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool IsShardName(const std::string& name) {
  return std::any_of(std::begin(kShardSuffixes), std::end(kShardSuffixes),
                     [&](const char* suffix) { return EndsWith(name, suffix); });
}

}  // namespace

std::vector<std::string> ExpandBraceRanges(const std::string& pattern) {
  const size_t open = pattern.find('{');
  if (open == std::string::npos) return {pattern};
  const size_t close = pattern.find('}', open);
  const std::string range =
      close == std::string::npos ? "" : pattern.substr(open + 1, close - open - 1);
  const size_t dots = range.find("..");
  const std::string first = dots == std::string::npos ? "" : range.substr(0, dots);
  const std::string last = dots == std::string::npos ? "" : range.substr(dots + 2);
  if (!IsDigits(first) || !IsDigits(last) || std::stoll(first) > std::stoll(last) ||
      std::stoll(last) - std::stoll(first) >= int64_t(kMaxShards)) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                      "the shard pattern \"" + pattern +
                          "\" has a malformed brace range; write {FIRST..LAST} of two numbers "
                          "with FIRST <= LAST, e.g. train-{000000..000146}.tar");
  }
  const bool padded = first.size() == last.size() || (first.size() > 1 && first[0] == '0');
  const size_t width = padded ? std::max(first.size(), last.size()) : 0;
  std::vector<std::string> names;
  for (int64_t n = std::stoll(first); n <= std::stoll(last); ++n) {
    for (const std::string& rest : ExpandBraceRanges(pattern.substr(close + 1))) {
      names.push_back(pattern.substr(0, open) + Padded(n, width) + rest);
      if (names.size() > kMaxShards) {
        throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                          "the shard pattern \"" + pattern + "\" names over a million shards");
      }
    }
  }
  return names;
}

std::vector<std::string> ShardsOfPattern(const std::string& data_dir, const std::string& pattern,
                                         const std::string& option) {
  const std::string full = pattern.front() == '/' ? pattern : data_dir + "/" + pattern;
  std::vector<std::string> shards;
  for (const std::string& name : ExpandBraceRanges(full)) {
    if (!HasWildcard(name)) {
      if (!IsRegularFile(name)) {
        throw PluginError(DPL_ERR_NOT_FOUND,
                          "the shard pattern " + option + "=" + pattern + " names " + name +
                              ", which is not a file; check the pattern and --data-dir");
      }
      shards.push_back(name);
      continue;
    }
    glob_t matches{};
    const int found = ::glob(name.c_str(), 0, nullptr, &matches);
    for (size_t i = 0; found == 0 && i < matches.gl_pathc; ++i) {
      if (IsShardFile(matches.gl_pathv[i])) shards.push_back(matches.gl_pathv[i]);
    }
    const bool none = found != 0 || matches.gl_pathc == 0;
    ::globfree(&matches);
    if (none) {
      throw PluginError(DPL_ERR_NOT_FOUND, "the shard pattern " + option + "=" + pattern +
                                               " matches no file (" + name +
                                               "); check the pattern and --data-dir");
    }
  }
  return shards;
}

std::vector<std::string> ShardsOfFolder(const std::string& data_dir,
                                        const std::vector<std::string>& folders,
                                        const std::string& option) {
  std::string folder;
  for (const std::string& candidate : folders) {
    if (IsDirectory(data_dir + "/" + candidate)) {
      folder = data_dir + "/" + candidate;
      break;
    }
  }
  if (folder.empty()) {
    throw PluginError(DPL_ERR_NOT_FOUND,
                      "missing shard folder: " + data_dir + "/" + folders.front() +
                          "; pass --data-dir with a folder holding train/ and val/ folders of "
                          ".tar shards, or --data-options " +
                          option + "=PATTERN");
  }
  std::vector<std::string> shards;
  if (DIR* listing = ::opendir(folder.c_str())) {
    while (const dirent* entry = ::readdir(listing)) {
      const std::string path = folder + "/" + entry->d_name;
      if (IsShardName(entry->d_name) && IsShardFile(path)) shards.push_back(path);
    }
    ::closedir(listing);
  }
  std::sort(shards.begin(), shards.end());
  if (shards.empty()) {
    throw PluginError(DPL_ERR_NOT_FOUND, folder +
                                             " holds no .tar shard; write shards there "
                                             "(tools/make_shards.py) or pass " +
                                             option + "=PATTERN");
  }
  return shards;
}

}  // namespace dpl::datasets::webdataset
