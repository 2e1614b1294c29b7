// The tokens dataset plugin: a language model's token ids, as nanoGPT's prepare scripts write them
// (train.bin and val.bin: flat arrays of little-endian uint16 ids; dtype=uint32 for larger
// vocabularies) or as 1-D integer .npy arrays (train.npy, val.npy), cut into windows of block + 1
// tokens (Note [Token windows]). The files are memory-mapped, never copied: the worker loader maps
// them once, before it forks the workers, and every worker shares the pages.
#include <algorithm>
#include <memory>
#include <string>

#include "common/files.hpp"
#include "common/plugin.hpp"
#include "token_array.hpp"
#include "token_windows.hpp"

namespace {

using dpl::datasets::Dataset;
using dpl::datasets::OpenRequest;
using dpl::datasets::tokens::TokenArray;
using dpl::datasets::tokens::TokenType;
using dpl::support::PluginError;

// The file of one part of the data ("train" or "val"): <part>.bin or <part>.npy, or "" when
// neither exists.
std::string FindPart(const std::string& folder, const std::string& part) {
  const std::string bin = folder + "/" + part + ".bin", npy = folder + "/" + part + ".npy";
  const bool has_bin = dpl::datasets::IsRegularFile(bin),
             has_npy = dpl::datasets::IsRegularFile(npy);
  if (has_bin && has_npy) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                      "both " + bin + " and " + npy + " exist; keep the one to train on");
  }
  return has_bin ? bin : has_npy ? npy : "";
}

struct TokensTraits {
  static constexpr char kName[] = "tokens";

  struct Options {
    int64_t block = 0;
    int64_t vocab = 0;  // 0: the largest id + 1
    std::string dtype;  // of .bin files; "" = not given (uint16)
  };

  static Options ReadOptions(const dpl::support::KeyValueOptions& options) {
    Options read;
    read.block = dpl::datasets::tokens::ReadBlockOption(options);
    read.vocab = options.GetInt("vocab", 0);
    dpl::support::Require(!options.Has("vocab") || read.vocab >= 1,
                          "option \"vocab\" must be at least 1, got " + std::to_string(read.vocab));
    if (options.Has("dtype"))
      read.dtype = options.GetChoice("dtype", "uint16", {"uint16", "uint32"});
    return read;
  }

  static TokenArray OpenPart(const std::string& path, const Options& options) {
    if (path.size() > 4 && path.compare(path.size() - 4, 4, ".bin") == 0) {
      return dpl::datasets::tokens::OpenRawTokens(
          path, TokenType{options.dtype == "uint32" ? size_t{4} : size_t{2}, false});
    }
    if (!options.dtype.empty()) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                        "option \"dtype\" applies to .bin files; " + path +
                            " names its dtype in its header; drop dtype=");
    }
    return dpl::datasets::tokens::OpenNpyTokens(path);
  }

  // An inferred vocabulary above every tokenizer's (the largest have about 256K entries) means
  // ids read with the wrong dtype: uint16 pairs read as uint32 give ids in the millions, and a
  // model would build an embedding of that many rows (gpt: hundreds of millions of parameters,
  // then the machine's memory runs out). Refused, with the way to keep it (vocab=).
  static void RefuseAnImplausibleVocabulary(int64_t vocab, const std::string& path,
                                            const std::string& type) {
    constexpr int64_t kLargestPlausible = int64_t(1) << 22;
    if (vocab <= kLargestPlausible) return;
    throw PluginError(
        DPL_ERR_INVALID_ARGUMENT,
        path + ": the largest token id read as " + type + " is " + std::to_string(vocab - 1) +
            ", a vocabulary of " + std::to_string(vocab) + ", above the " +
            std::to_string(kLargestPlausible) +
            " that no tokenizer reaches: are the ids read with the wrong dtype? nanoGPT's "
            "train.bin holds uint16 (dtype=uint16, the default for .bin); give vocab=N to train "
            "on this vocabulary anyway");
  }

  static std::unique_ptr<Dataset> Open(const OpenRequest& request, const Options& options) {
    const std::string part = request.train() ? "train" : "val";
    const std::string path = FindPart(request.path, part);
    if (path.empty()) {
      throw PluginError(DPL_ERR_NOT_FOUND,
                        "missing data file: looked for " + request.path + "/" + part + ".bin and " +
                            request.path + "/" + part +
                            ".npy; pass --data-dir with the folder holding train.bin and val.bin "
                            "(or train.npy and val.npy)");
    }
    const TokenArray tokens = OpenPart(path, options);
    const int threads = request.num_threads;
    int64_t vocab = options.vocab;
    const int64_t largest = dpl::datasets::tokens::CheckIds(tokens, vocab, threads);
    if (vocab == 0) {  // both splits infer the same vocabulary: the largest id of both files + 1
      const std::string other = FindPart(request.path, request.train() ? "val" : "train");
      vocab = largest + 1;
      if (!other.empty()) {
        vocab = std::max(vocab,
                         dpl::datasets::tokens::CheckIds(OpenPart(other, options), 0, threads) + 1);
      }
      RefuseAnImplausibleVocabulary(vocab, path, tokens.type().name());
    }
    const auto grid =
        dpl::datasets::tokens::GridOf(tokens.count(), options.block, request.train(), path);
    request.log.Info(path + ": " + std::to_string(tokens.count()) + " " + tokens.type().name() +
                     " tokens, " + std::to_string(grid.count) + " samples of block " +
                     std::to_string(options.block) + ", vocabulary " + std::to_string(vocab));
    return std::make_unique<dpl::datasets::tokens::TokenWindowDataset>(
        tokens, options.block, grid, vocab, request.seed, threads);
  }
};

}  // namespace

DPL_PLUGIN_EXPORT extern const dpl_dataset_plugin_v2 tokens_dataset_plugin
    DPL_PLUGIN_ENTRY_SYMBOL(dpl_dataset_plugin_v2);
const dpl_dataset_plugin_v2 tokens_dataset_plugin = dpl::datasets::PluginTable<TokensTraits>(
    "1.0.0",
    "token ids for language models: train.bin/val.bin (uint16, uint32) or .npy, in "
    "windows of block+1");
