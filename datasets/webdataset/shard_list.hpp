// Which shards a split reads: the .tar files of a folder of --data-dir (train/ for training, val/
// or else test/ for validation and the test set), or a pattern of the options (shards=,
// val_shards=) as webdataset writes them: brace ranges `train-{000000..000146}.tar` (several may
// appear; numbers keep the width of the range's ends when they share it or start with a 0),
// then shell wildcards (* ? [..]). A relative pattern is taken from --data-dir. The order is the
// pattern's (a range's, then each wildcard's sorted matches), or the folder's sorted by name; it
// fixes the samples' indices.
#pragma once

#include <string>
#include <vector>

namespace dpl::datasets::webdataset {

// The names `pattern` stands for after its brace ranges are expanded, in order. Throws
// PluginError(DPL_ERR_INVALID_ARGUMENT) for a malformed range (not digits, descending, over a
// million names).
std::vector<std::string> ExpandBraceRanges(const std::string& pattern);

// The shard files of `pattern` (relative to `data_dir` unless absolute). Throws
// PluginError(DPL_ERR_NOT_FOUND) naming the pattern and the first name that matches no file.
std::vector<std::string> ShardsOfPattern(const std::string& data_dir, const std::string& pattern,
                                         const std::string& option);

// The shard files of the first of `folders` (under data_dir) that exists: its files named .tar
// (and compressed tars, which are refused when opened), sorted by name. Throws
// PluginError(DPL_ERR_NOT_FOUND) when none exists or it holds no shard.
std::vector<std::string> ShardsOfFolder(const std::string& data_dir,
                                        const std::vector<std::string>& folders,
                                        const std::string& option);

}  // namespace dpl::datasets::webdataset
