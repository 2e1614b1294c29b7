// The text dataset plugin: any UTF-8 text as byte-level tokens (vocabulary 256) for a
// character-level language model, in windows of block + 1 tokens (Note [Token windows], Note
// [Text as byte tokens]): train.txt and val.txt in --data-dir, or one text file split by
// val_fraction.
#include <memory>
#include <string>

#include "common/plugin.hpp"
#include "text_tokens.hpp"
#include "token_windows.hpp"

namespace {

using dpl::datasets::Dataset;
using dpl::datasets::OpenRequest;

constexpr int64_t kByteVocabulary = 256;

struct TextTraits {
  static constexpr char kName[] = "text";

  struct Options {
    int64_t block = 0;
    double val_fraction = dpl::datasets::tokens::kDefaultValFraction;
    bool val_fraction_given = false;
  };

  static Options ReadOptions(const dpl::support::KeyValueOptions& options) {
    Options read;
    read.block = dpl::datasets::tokens::ReadBlockOption(options);
    read.val_fraction_given = options.Has("val_fraction");
    read.val_fraction = options.GetDouble("val_fraction", read.val_fraction);
    dpl::support::Require(read.val_fraction > 0 && read.val_fraction < 1,
                          "option \"val_fraction\" must be above 0 and below 1, got " +
                              options.GetString("val_fraction", ""));
    return read;
  }

  static std::unique_ptr<Dataset> Open(const OpenRequest& request, const Options& options) {
    dpl::datasets::tokens::TokenArray tokens = dpl::datasets::tokens::OpenTextTokens(
        request, options.val_fraction, options.val_fraction_given);
    const auto grid = dpl::datasets::tokens::GridOf(tokens.count(), options.block, request.train(),
                                                    tokens.name());
    return std::make_unique<dpl::datasets::tokens::TokenWindowDataset>(
        std::move(tokens), options.block, grid, kByteVocabulary, request.seed, request.num_threads);
  }
};

}  // namespace

DPL_PLUGIN_EXPORT extern const dpl_dataset_plugin_v2 text_dataset_plugin
    DPL_PLUGIN_ENTRY_SYMBOL(dpl_dataset_plugin_v2);
const dpl_dataset_plugin_v2 text_dataset_plugin = dpl::datasets::PluginTable<TextTraits>(
    "1.0.0",
    "UTF-8 text as byte tokens (vocabulary 256): train.txt/val.txt or one file split by "
    "val_fraction");
