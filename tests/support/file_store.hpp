// A real, file-backed dpl_store_v1 for backend tests and the allreduce bench: one file per key in
// a directory shared by the rank processes. Writes are atomic (write a temp file, then rename),
// so a reader sees either no file or the whole value -- the same scheme as gloo's FileStore.
// Counters (add) serialise through flock on a lock file.
#pragma once

#include <string>

#include "dpl/store.h"

namespace dpl::testing {

class FileStore {
 public:
  // `directory` must exist and be shared by every process of the job.
  explicit FileStore(std::string directory);
  FileStore(const FileStore&) = delete;
  FileStore& operator=(const FileStore&) = delete;

  // The C view handed to a backend; valid while this object lives.
  const dpl_store_v1* view() const { return &view_; }

 private:
  std::string path_of(const char* key) const;
  static dpl_status set(void* context, const char* key, const void* value, uint64_t value_size);
  static dpl_status get(void* context, const char* key, void* buffer, uint64_t capacity,
                        uint64_t* value_size, int64_t timeout_ms);
  static dpl_status wait(void* context, const char* const* keys, uint32_t key_count,
                         int64_t timeout_ms);
  static dpl_status add(void* context, const char* key, int64_t delta, int64_t* result);
  static const char* last_error(void* context);

  std::string directory_;
  dpl_store_v1 view_;
};

}  // namespace dpl::testing
