// dpl SDK, libtorch model helper (internal part of dpl/torch_model.hpp): libtorch's CPU
// allocator for blocks too large for glibc's heap.
//
// Note [Large blocks kept for reuse]
// glibc serves a block above its mmap threshold with a fresh mapping and unmaps it on free, so a
// model whose gradients exceed it (189 MB for a 6872x6872 layer) pays the kernel's zeroing of
// every page of those blocks on every step: 7 % of the CPU time of a 100M-parameter MLP. This
// allocator keeps the blocks of at least kMinBytes that are freed during a step mapped, and
// serves the next request of the same size from them. A step asks for the same sizes in the same
// order, so the cache holds about what one backward pass frees before it asks again. A block
// freed outside a step (the loading of a model, the move of its parameters into shared memory)
// is unmapped at once, and a cached one that no request took through a whole step is unmapped
// at that step's end, so peak memory stays where it was; kMaxCachedBytes bounds the cache within
// a step. Smaller requests go to libtorch's default allocator (Note [Keep freed activations in
// the heap] keeps those in the heap). Turning glibc's mmap off, or raising its threshold past
// the largest block, gains as much but lets the heap fragment: peak RSS +7 % to +70 %
// (docs/performance.md, "Tried and not kept").
//
// libtorch holds the allocator, and every block it served keeps a pointer to its code, beyond
// the plugin's life: the plugin pins itself in memory (RTLD_NODELETE) before installing it, and
// installs nothing when it cannot.
#ifndef DPL_TORCH_MODEL_LARGE_BLOCKS_HPP
#define DPL_TORCH_MODEL_LARGE_BLOCKS_HPP

#include <c10/core/CPUAllocator.h>
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dpl {
namespace torch_model {
namespace {

class LargeBlockCache final : public c10::Allocator {
 public:
  // glibc's default ceiling for its mmap threshold on 64-bit, where KeepLargeBuffersInHeap sets
  // it: smaller blocks are reused from the heap already.
  static constexpr size_t kMinBytes = size_t{32} << 20;
  static constexpr size_t kMaxCachedBytes = size_t{1} << 30;

  struct Counts {
    uint64_t reused = 0;  // requests served from the cache
    uint64_t mapped = 0;  // requests that mapped a new block
    size_t cached_bytes = 0;
  };

  LargeBlockCache(c10::Allocator* small_blocks, size_t max_cached_bytes)
      : small_blocks_(small_blocks), max_cached_bytes_(max_cached_bytes) {}
  LargeBlockCache(const LargeBlockCache&) = delete;
  LargeBlockCache& operator=(const LargeBlockCache&) = delete;
  ~LargeBlockCache() { Unmap(TakeCachedOlderThan(UINT64_MAX)); }

  // The deleter stored in every DataPtr is a plain function: it reaches its cache through this,
  // the one installed in the process (or a test's own).
  static LargeBlockCache*& Current() {
    static LargeBlockCache* current = nullptr;
    return current;
  }

  // c10::Allocator's interface as libtorch 1.13 and 2.x spell it, with no `override` (which would
  // name the one spelling): allocate is const in 1.13 and not in 2.3 and later, and 2.x added a
  // pure copy_data. What one libtorch does not declare is an ordinary member in the other.
  c10::DataPtr allocate(size_t bytes) const {
    return const_cast<LargeBlockCache*>(this)->Allocate(bytes);
  }
  c10::DataPtr allocate(size_t bytes) { return Allocate(bytes); }
  c10::DeleterFnPtr raw_deleter() const { return &Release; }
  void copy_data(void* destination, const void* source, size_t bytes) const {
    std::memcpy(destination, source, bytes);
  }

  Counts counts() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return counts_;
  }

  void BeginStep() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++open_steps_;
  }

  // Unmaps the blocks that were cached when the previous step ended and that no request took
  // since.
  void EndStep() {
    std::vector<Block> stale;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (open_steps_ > 0) --open_steps_;
      stale = TakeCachedOlderThanLocked(generation_);
      ++generation_;
    }
    Unmap(stale);
  }

 private:
  struct Block {
    void* address;
    size_t bytes;
    uint64_t generation;  // the step it was freed in
  };

  static void Release(void* block) { Current()->Give(block); }

  c10::DataPtr Allocate(size_t bytes) {
    if (bytes < kMinBytes) return small_blocks_->allocate(bytes);
    void* block = Take(RoundToPages(bytes));
    return {block, block, &Release, c10::Device(c10::DeviceType::CPU)};
  }

  static size_t RoundToPages(size_t bytes) {
    const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return (bytes + page - 1) / page * page;
  }

  static void* Map(size_t bytes) {
    return mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  }

  static void Unmap(const std::vector<Block>& blocks) {
    for (const Block& block : blocks) munmap(block.address, block.bytes);
  }

  void* Take(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // The most recently freed block of this size: its pages are the likeliest to be in cache.
      for (auto it = cached_.rbegin(); it != cached_.rend(); ++it) {
        if (it->bytes != bytes) continue;
        void* block = it->address;
        cached_.erase(std::next(it).base());
        counts_.cached_bytes -= bytes;
        ++counts_.reused;
        live_.emplace(block, bytes);
        return block;
      }
    }
    void* block = Map(bytes);
    if (block == MAP_FAILED) {
      // Short of memory (an address-space limit, strict overcommit): what the cache holds must
      // not be why a request fails.
      Unmap(TakeCachedOlderThan(UINT64_MAX));
      block = Map(bytes);
    }
    TORCH_CHECK(block != MAP_FAILED, "dpl: out of memory: could not map a block of ", bytes,
                " bytes for a tensor");
    // As the worker's heap (Note [Worker heap] of the launcher): transparent huge pages where the
    // kernel allows them on request; fewer faults and TLB misses for a block this large.
    (void)madvise(block, bytes, MADV_HUGEPAGE);
    std::lock_guard<std::mutex> lock(mutex_);
    ++counts_.mapped;
    live_.emplace(block, bytes);
    return block;
  }

  void Give(void* address) {
    std::vector<Block> unmap;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto live = live_.find(address);
      if (live == live_.end()) {
        // A small block handed to raw_deleter(): it came from the default allocator.
        small_blocks_->raw_deleter()(address);
        return;
      }
      const Block block{address, live->second, generation_};
      live_.erase(live);
      if (open_steps_ == 0) {
        unmap.push_back(block);
      } else {
        cached_.push_back(block);
        counts_.cached_bytes += block.bytes;
        while (counts_.cached_bytes > max_cached_bytes_) {
          counts_.cached_bytes -= cached_.front().bytes;
          unmap.push_back(cached_.front());
          cached_.erase(cached_.begin());
        }
      }
    }
    Unmap(unmap);
  }

  std::vector<Block> TakeCachedOlderThan(uint64_t generation) {
    std::lock_guard<std::mutex> lock(mutex_);
    return TakeCachedOlderThanLocked(generation);
  }

  std::vector<Block> TakeCachedOlderThanLocked(uint64_t generation) {
    std::vector<Block> taken;
    std::vector<Block> kept;
    for (const Block& block : cached_) {
      (block.generation < generation ? taken : kept).push_back(block);
    }
    for (const Block& block : taken) counts_.cached_bytes -= block.bytes;
    cached_ = std::move(kept);
    return taken;
  }

  c10::Allocator* small_blocks_;
  size_t max_cached_bytes_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, size_t> live_;
  std::vector<Block> cached_;  // oldest first
  uint64_t generation_ = 0;
  int open_steps_ = 0;
  Counts counts_;
};

// Keeps blocks freed between its construction and its end for reuse (a train or eval step).
class LargeBlockStep {
 public:
  LargeBlockStep() : cache_(LargeBlockCache::Current()) {
    if (cache_ != nullptr) cache_->BeginStep();
  }
  ~LargeBlockStep() {
    if (cache_ != nullptr) cache_->EndStep();
  }
  LargeBlockStep(const LargeBlockStep&) = delete;
  LargeBlockStep& operator=(const LargeBlockStep&) = delete;

 private:
  LargeBlockCache* cache_;
};

// Keeps the shared library holding this code loaded until the process ends; false when it is not
// a shared library (a program that includes the helper) or cannot be pinned.
inline bool PinThisLibrary() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&PinThisLibrary), &info) == 0 || info.dli_fname == nullptr) {
    return false;
  }
  return dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE) != nullptr;
}

// Installs the cache as libtorch's CPU allocator once per process, unless another allocator
// (another plugin's copy of this one, or the application's) is installed already.
inline void KeepLargeBlocksForReuse() {
  static const bool installed = [] {
    c10::Allocator* current = c10::GetCPUAllocator();
    if (current != c10::GetDefaultCPUAllocator() || !PinThisLibrary()) return false;
    auto* cache = new LargeBlockCache(current, LargeBlockCache::kMaxCachedBytes);  // never freed
    LargeBlockCache::Current() = cache;
    c10::SetCPUAllocator(cache);
    return true;
  }();
  (void)installed;
}

}  // namespace
}  // namespace torch_model
}  // namespace dpl

#endif  // DPL_TORCH_MODEL_LARGE_BLOCKS_HPP
