// Token samples for language models: each sample's input member holds token ids, a 1-D .npy of
// integers (numpy.save) or raw little-endian integers of dtype= (nanoGPT's .bin layout). A sample
// is its first block + 1 ids: the input the first block, the target the next block (the token
// after each input position), both int64 of shape (block). Every id is read when the shard is
// indexed: negative ids are refused there, and the largest is kept, so ids at or above vocab=
// are refused when the split is opened and the vocabulary defaults to the largest id + 1.
#pragma once

#include <memory>
#include <string>

#include "common/plugin.hpp"
#include "shard_index.hpp"
#include "shard_set.hpp"
#include "webdataset_options.hpp"

namespace dpl::datasets::webdataset {

// Reads a token member when its shard is indexed: its layout and its largest id. `bin_dtype` is
// the dtype of members that are not .npy.
InputInspector TokenInspector(const std::string& bin_dtype);

// The dataset of token samples over indexed `shards`; refuses (naming the sample) one shorter
// than block + 1 ids and ids at or above vocab=.
std::unique_ptr<Dataset> OpenTokenSamples(const WebDatasetOptions& options,
                                          std::unique_ptr<ShardSet> shards, int threads);

}  // namespace dpl::datasets::webdataset
