// One epoch of Fashion-MNIST (the default data) with the convnet on two processes, in bf16 and in
// fp32: the test accuracies must be within 0.5 points. Slow (two epochs of the recipe): labelled
// "slow" for ctest (ctest -L slow).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <regex>
#include <string>

#include "launcher_runs.hpp"

namespace dpl::test {
namespace {

// The test-set accuracy in percent a recipe run in `precision` reaches, or NaN.
double Accuracy(const std::string& precision, std::string* output) {
  RunResult r = RunLauncher(
      "--num-processes 2 --batch-size 128 --epochs 1 --log-interval 100 "
      "--backend tcp --precision " +
      precision);
  *output = r.output;
  std::smatch match;
  if (r.exit_code != 0 ||
      !std::regex_search(r.output, match, std::regex(R"(accuracy: (\d+)/(\d+))"))) {
    return std::nan("");
  }
  return 100.0 * std::stod(match[1]) / std::stod(match[2]);
}

TEST(FashionMnistPrecision, OneEpochInBf16IsWithinHalfAPointOfFp32) {
  for (const char* file :
       {"libdpl_model_convnet.so", "libdpl_backend_tcp.so", "libdpl_dataset_idx.so"}) {
    if (!std::filesystem::exists(std::string(DPL_TEST_PLUGIN_DIR) + "/" + file)) {
      GTEST_SKIP() << file << " is not built";
    }
  }
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist")) {
    GTEST_SKIP() << "the Debian package dataset-fashion-mnist is not installed";
  }
  std::string fp32_output, bf16_output;
  const double fp32 = Accuracy("fp32", &fp32_output);
  ASSERT_FALSE(std::isnan(fp32)) << fp32_output;
  const double bf16 = Accuracy("bf16", &bf16_output);
  ASSERT_FALSE(std::isnan(bf16)) << bf16_output;
  std::cout << "Fashion-MNIST, 1 epoch, 2 processes x 1 thread, tcp: test accuracy fp32 " << fp32
            << " %, bf16 " << bf16 << " %\n";
  EXPECT_GE(fp32, 85.0) << fp32_output;
  EXPECT_LE(std::fabs(bf16 - fp32), 0.5) << bf16_output;
}

}  // namespace
}  // namespace dpl::test
