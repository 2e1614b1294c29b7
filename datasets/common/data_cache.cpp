#include "common/data_cache.hpp"

#include <sys/stat.h>

#include <cstdio>
#include <sstream>

#include "common/files.hpp"

namespace dpl::datasets {

std::string SourceKey(const std::string& path) {
  struct stat info {};
  ::stat(path.c_str(), &info);  // a missing source keys as size 0; it fails when read anyway
  std::ostringstream key;
  key << RealPath(path) << '|' << info.st_size << '|' << info.st_mtim.tv_sec << '.'
      << info.st_mtim.tv_nsec << '|' << info.st_ctim.tv_sec << '.' << info.st_ctim.tv_nsec;
  return key.str();
}

std::string CacheEntryPath(const std::string& cache_dir, const std::string& key,
                           const std::string& name) {
  char hex[32];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(StableHash(key)));
  return cache_dir + "/" + hex + "-" + name;
}

uint64_t StableHash(const std::string& text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const char c : text) {
    hash ^= uint8_t(c);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

}  // namespace dpl::datasets
