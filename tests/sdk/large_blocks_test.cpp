// The libtorch helper's allocator for large blocks (Note [Large blocks kept for reuse] in
// dpl/torch_model/large_blocks.hpp), on its own: which blocks it keeps, for how long, and that
// what it serves is memory. Its use by a model plugin: tests/models/large_blocks_plugin_test.cpp.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "dpl/torch_model/large_blocks.hpp"

namespace {

using dpl::torch_model::LargeBlockCache;
using dpl::torch_model::LargeBlockStep;

constexpr size_t kMiB = size_t{1} << 20;

// A cache of its own, made the one the deleters reach for the test's duration.
class LargeBlocksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    previous_ = LargeBlockCache::Current();
    LargeBlockCache::Current() = &cache_;
  }
  void TearDown() override { LargeBlockCache::Current() = previous_; }

  LargeBlockCache cache_{c10::GetDefaultCPUAllocator(), 100 * kMiB};
  LargeBlockCache* previous_ = nullptr;
};

TEST_F(LargeBlocksTest, ABlockFreedInAStepServesTheNextRequestOfItsSize) {
  LargeBlockStep step;
  void* first = nullptr;
  {
    c10::DataPtr block = cache_.allocate(40 * kMiB);
    first = block.get();
    std::memset(first, 7, 40 * kMiB);
  }
  EXPECT_EQ(cache_.counts().cached_bytes, 40 * kMiB);
  c10::DataPtr again = cache_.allocate(40 * kMiB);
  EXPECT_EQ(again.get(), first);
  // The same pages, not fresh zeros: the kernel did not map them again.
  EXPECT_EQ(static_cast<const unsigned char*>(again.get())[40 * kMiB - 1], 7);
  EXPECT_EQ(cache_.counts().reused, 1u);
  EXPECT_EQ(cache_.counts().mapped, 1u);
  EXPECT_EQ(cache_.counts().cached_bytes, 0u);
}

TEST_F(LargeBlocksTest, OnlyTheExactSizeIsReused) {
  LargeBlockStep step;
  { c10::DataPtr block = cache_.allocate(40 * kMiB); }
  c10::DataPtr larger = cache_.allocate(48 * kMiB);
  EXPECT_EQ(cache_.counts().mapped, 2u);
  EXPECT_EQ(cache_.counts().reused, 0u);
  EXPECT_EQ(cache_.counts().cached_bytes, 40 * kMiB);
}

TEST_F(LargeBlocksTest, ABlockFreedOutsideAStepIsReturnedAtOnce) {
  { c10::DataPtr block = cache_.allocate(40 * kMiB); }
  EXPECT_EQ(cache_.counts().cached_bytes, 0u);
  c10::DataPtr again = cache_.allocate(40 * kMiB);
  EXPECT_EQ(cache_.counts().mapped, 2u);
}

TEST_F(LargeBlocksTest, ABlockNoStepTookIsReturnedAtTheEndOfTheNextStep) {
  {
    LargeBlockStep step;
    c10::DataPtr block = cache_.allocate(40 * kMiB);
  }
  EXPECT_EQ(cache_.counts().cached_bytes, 40 * kMiB);  // kept for the next step
  {
    LargeBlockStep step;
    c10::DataPtr other = cache_.allocate(64 * kMiB);
  }
  // The 40 MiB block sat through a whole step unused; the 64 MiB one was freed in it.
  EXPECT_EQ(cache_.counts().cached_bytes, 64 * kMiB);
  { LargeBlockStep step; }
  EXPECT_EQ(cache_.counts().cached_bytes, 0u);
}

TEST_F(LargeBlocksTest, TheCacheKeepsTheNewestBlocksUnderItsBound) {
  LargeBlockStep step;
  void* newest = nullptr;
  for (int i = 0; i < 3; ++i) {
    c10::DataPtr a = cache_.allocate(40 * kMiB);
    c10::DataPtr b = cache_.allocate(40 * kMiB);
    c10::DataPtr c = cache_.allocate(40 * kMiB);
    newest = a.get();  // freed last of the three (destroyed in reverse order)
  }
  // 120 MiB freed at a time, 100 MiB allowed: two blocks stay, the last one freed among them.
  EXPECT_EQ(cache_.counts().cached_bytes, 80 * kMiB);
  c10::DataPtr again = cache_.allocate(40 * kMiB);
  EXPECT_EQ(again.get(), newest);
}

TEST_F(LargeBlocksTest, SmallRequestsGoToTheDefaultAllocator) {
  LargeBlockStep step;
  c10::DataPtr small = cache_.allocate(4096);
  ASSERT_NE(small.get(), nullptr);
  EXPECT_NE(small.get_deleter(), cache_.raw_deleter());
  EXPECT_EQ(cache_.counts().mapped, 0u);
  void* raw_small = cache_.raw_allocate(1000);
  void* raw_large = cache_.raw_allocate(33 * kMiB);
  static_cast<char*>(raw_large)[33 * kMiB - 1] = 1;
  cache_.raw_deallocate(raw_small);
  cache_.raw_deallocate(raw_large);
  EXPECT_EQ(cache_.counts().mapped, 1u);
  EXPECT_EQ(cache_.counts().cached_bytes, 33 * kMiB);
}

TEST_F(LargeBlocksTest, ARequestOfAnOddSizeTakesWholePagesAndIsReused) {
  LargeBlockStep step;
  const size_t odd = 40 * kMiB + 3;
  void* first = nullptr;
  {
    c10::DataPtr block = cache_.allocate(odd);
    first = block.get();
    static_cast<char*>(first)[odd - 1] = 1;
  }
  EXPECT_EQ(cache_.counts().cached_bytes % static_cast<size_t>(sysconf(_SC_PAGESIZE)), 0u);
  EXPECT_GE(cache_.counts().cached_bytes, odd);
  c10::DataPtr again = cache_.allocate(odd);
  EXPECT_EQ(again.get(), first);
}

// The bytes of address space the process has mapped (/proc/self/statm's first field).
size_t MappedBytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0;
  statm >> pages;
  return pages * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// Limits the address space to what the process has mapped plus 32 MiB, then asks for 48 MiB with
// 64 MiB cached; exits 0 when the request was served and the cache returned.
[[noreturn]] void AskForMoreThanTheLimitLeaves(LargeBlockCache* cache) {
  LargeBlockStep step;
  { c10::DataPtr cached = cache->allocate(64 * kMiB); }
  rlimit limit{};
  limit.rlim_cur = MappedBytes() + 32 * kMiB;
  limit.rlim_max = RLIM_INFINITY;
  if (setrlimit(RLIMIT_AS, &limit) != 0) std::_Exit(2);
  c10::DataPtr block = cache->allocate(48 * kMiB);
  static_cast<char*>(block.get())[48 * kMiB - 1] = 1;
  std::_Exit(cache->counts().cached_bytes == 0 ? 0 : 3);
}

TEST_F(LargeBlocksTest, WhenMemoryIsShortTheCacheIsReturnedBeforeARequestFails) {
  // In a child process, so that the limit ends with it.
  EXPECT_EXIT(AskForMoreThanTheLimitLeaves(&cache_), ::testing::ExitedWithCode(0), "");
}

}  // namespace
