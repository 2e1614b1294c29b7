// What the webdataset plugin's tests share: shards written by shard_writer.py into the test's
// scratch folder, settings with a data cache there, and the plugin's refusals.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "dataset_loader.hpp"

namespace dpl::datasets::testing {

class WebDatasetFixture : public ScratchTest {
 protected:
  // Runs shard_writer.py with `arguments` (split at spaces).
  void Writer(const std::string& arguments) {
    RunScript(dir_, DPL_TEST_SOURCE_DIR "/tests/datasets/shard_writer.py", arguments);
  }
  // `split` of the test's folder, with the data cache in its cache/ folder.
  Settings Split(int32_t split, const std::string& options = "", uint64_t seed = 0) const {
    Settings settings = AtSplit(split, options, seed);
    settings.cache_dir = Path("cache");
    return settings;
  }
  // The message of a create with `settings` (or the train split with `options`) that fails with
  // `expected`.
  std::string Refusal(const Settings& settings, dpl_status expected = DPL_ERR_INVALID_ARGUMENT) {
    return CreateError("webdataset", settings, expected);
  }
  std::string Refusal(const std::string& options, dpl_status expected = DPL_ERR_INVALID_ARGUMENT) {
    return Refusal(At(options), expected);
  }
};

// A refusal's full message.
inline std::string WebDatasetError(const std::string& message) {
  return "dataset \"webdataset\": " + message;
}

}  // namespace dpl::datasets::testing
