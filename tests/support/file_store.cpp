#include "file_store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>

namespace dpl::testing {
namespace {
thread_local std::string store_last_error;
using Clock = std::chrono::steady_clock;

bool read_file(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

bool write_atomically(const std::string& path, const void* data, size_t size) {
  const std::string temp = path + ".tmp." + std::to_string(::getpid()) + "." +
                           std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id()));
  FILE* file = std::fopen(temp.c_str(), "wb");
  if (file == nullptr) return false;
  const bool written = size == 0 || std::fwrite(data, 1, size, file) == size;
  std::fclose(file);
  return written && std::rename(temp.c_str(), path.c_str()) == 0;
}
}  // namespace

FileStore::FileStore(std::string directory) : directory_(std::move(directory)) {
  view_ = dpl_store_v1{sizeof(dpl_store_v1), DPL_STORE_VERSION,     this,
                       &FileStore::set,      &FileStore::get,       &FileStore::wait,
                       &FileStore::add,      &FileStore::last_error};
}

std::string FileStore::path_of(const char* key) const {
  // Keys may hold '/' and other characters: hex-encode them into one file name.
  static const char* hex = "0123456789abcdef";
  std::string name;
  for (const char* c = key; *c != '\0'; ++c) {
    name += hex[(static_cast<unsigned char>(*c) >> 4) & 0xF];
    name += hex[static_cast<unsigned char>(*c) & 0xF];
  }
  return directory_ + "/k" + name;
}

dpl_status FileStore::set(void* context, const char* key, const void* value, uint64_t value_size) {
  auto* self = static_cast<FileStore*>(context);
  if (!write_atomically(self->path_of(key), value, static_cast<size_t>(value_size))) {
    store_last_error = std::string("cannot write key '") + key + "' under " + self->directory_;
    return DPL_ERR_IO;
  }
  return DPL_OK;
}

dpl_status FileStore::get(void* context, const char* key, void* buffer, uint64_t capacity,
                          uint64_t* value_size, int64_t timeout_ms) {
  auto* self = static_cast<FileStore*>(context);
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string value;
  while (!read_file(self->path_of(key), &value)) {
    if (Clock::now() >= deadline) {
      store_last_error = std::string("key '") + key + "' did not appear within " +
                         std::to_string(timeout_ms) + " ms";
      return DPL_ERR_TIMEOUT;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  *value_size = value.size();
  if (value.size() > capacity) {
    store_last_error = std::string("key '") + key + "' holds " + std::to_string(value.size()) +
                       " bytes, buffer has " + std::to_string(capacity);
    return DPL_ERR_BUFFER_TOO_SMALL;
  }
  if (!value.empty()) std::copy(value.begin(), value.end(), static_cast<char*>(buffer));
  return DPL_OK;
}

dpl_status FileStore::wait(void* context, const char* const* keys, uint32_t key_count,
                           int64_t timeout_ms) {
  auto* self = static_cast<FileStore*>(context);
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (uint32_t i = 0; i < key_count; ++i) {
    while (::access(self->path_of(keys[i]).c_str(), F_OK) != 0) {
      if (Clock::now() >= deadline) {
        store_last_error = std::string("key '") + keys[i] + "' did not appear within " +
                           std::to_string(timeout_ms) + " ms";
        return DPL_ERR_TIMEOUT;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  return DPL_OK;
}

dpl_status FileStore::add(void* context, const char* key, int64_t delta, int64_t* result) {
  auto* self = static_cast<FileStore*>(context);
  const std::string lock_path = self->directory_ + "/.lock";
  const int lock = ::open(lock_path.c_str(), O_CREAT | O_RDWR, 0644);
  if (lock < 0 || ::flock(lock, LOCK_EX) != 0) {
    if (lock >= 0) ::close(lock);
    store_last_error = "cannot lock " + lock_path;
    return DPL_ERR_IO;
  }
  std::string value;
  int64_t counter = 0;
  if (read_file(self->path_of(key), &value) && value.size() == sizeof(counter)) {
    std::copy(value.begin(), value.end(), reinterpret_cast<char*>(&counter));
  }
  counter += delta;
  const bool written = write_atomically(self->path_of(key), &counter, sizeof(counter));
  ::flock(lock, LOCK_UN);
  ::close(lock);
  if (!written) {
    store_last_error = std::string("cannot write counter '") + key + "'";
    return DPL_ERR_IO;
  }
  *result = counter;
  return DPL_OK;
}

const char* FileStore::last_error(void*) {
  return store_last_error.c_str();
}

}  // namespace dpl::testing
