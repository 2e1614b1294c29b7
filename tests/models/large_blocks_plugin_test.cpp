// A model plugin of the libtorch helper reuses its large gradient blocks from step to step (Note
// [Large blocks kept for reuse] in dpl/torch_model/large_blocks.hpp): the pages of a gradient
// above glibc's 32 MiB mmap threshold are faulted in once, not on every step. Its own program,
// so that its plugin is the first of the process to create a model, the one that installs the
// allocator.
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/resource.h>

#include "plugin_driver.hpp"

namespace dpl_test {
namespace {

long MinorPageFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

TEST(LargeBlocks, AGradientAbove32MiBIsFaultedInOnceNotEveryStep) {
  // Small pages, so that faults count pages whatever the machine's transparent huge pages.
  ASSERT_EQ(prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0), 0);
  // fc1's weight gradient: 784 x 12000 floats, 37.6 MB.
  Model model("mlp", "hidden=12000");
  const Batch batch(8);
  const long pages_per_gradient = 784L * 12000 * 4 / sysconf(_SC_PAGESIZE);
  for (int step = 0; step < 2; ++step) {
    ASSERT_EQ(model.plugin().zero_gradients(model.get()), DPL_OK);
    TrainStep(model, batch);
  }
  const long before = MinorPageFaults();
  const int steps = 4;
  for (int step = 0; step < steps; ++step) {
    ASSERT_EQ(model.plugin().zero_gradients(model.get()), DPL_OK);
    TrainStep(model, batch);
  }
  const long faults = MinorPageFaults() - before;
  // A fresh mapping per step would fault every page of it: steps x pages_per_gradient.
  EXPECT_LT(faults, pages_per_gradient / 2)
      << faults << " minor page faults in " << steps << " steps; one gradient has "
      << pages_per_gradient << " pages";
}

}  // namespace
}  // namespace dpl_test
