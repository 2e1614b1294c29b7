// The C view (dpl_store_v1) of a store client for plugins.
#include <algorithm>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "rendezvous/store.hpp"

namespace dpl::rendezvous {

// Every entry point catches everything and keeps its message per thread (after TVM's C API).

struct PluginStoreViewAccess {
  static thread_local std::string last_error;

  static PluginStoreView& Self(void* context) { return *static_cast<PluginStoreView*>(context); }

  static dpl_status Fail(dpl_status status, std::string message) {
    last_error = std::move(message);
    return status;
  }
  static dpl_status FromStatus(const Status& status) {
    if (status.ok()) return DPL_OK;
    // A store failure that is not a timeout is a lost or refused connection.
    return Fail(status.IsTimeout() ? DPL_ERR_TIMEOUT : DPL_ERR_COMMUNICATION, status.message());
  }
  template <typename Body>
  static dpl_status Guard(Body body) {
    try {
      return body();
    } catch (const std::exception& e) {
      return Fail(DPL_ERR_INTERNAL, std::string("store: unexpected error: ") + e.what());
    } catch (...) {
      return Fail(DPL_ERR_INTERNAL, "store: unexpected error");
    }
  }
  static std::chrono::milliseconds Timeout(int64_t timeout_ms) {
    return std::chrono::milliseconds(std::max<int64_t>(0, timeout_ms));
  }

  static dpl_status SetFn(void* context, const char* key, const void* value, uint64_t size) {
    return Guard([&] {
      if (key == nullptr || (value == nullptr && size > 0)) {
        return Fail(DPL_ERR_INVALID_ARGUMENT,
                    "store set: key is NULL or value is NULL with size > 0");
      }
      const auto* bytes = static_cast<const uint8_t*>(value);
      std::vector<uint8_t> data(bytes, bytes + size);
      auto& self = Self(context);
      return FromStatus(self.client_.Set(self.key_prefix_ + key, data));
    });
  }
  static dpl_status GetFn(void* context, const char* key, void* buffer, uint64_t capacity,
                          uint64_t* value_size, int64_t timeout_ms) {
    return Guard([&] {
      if (key == nullptr || value_size == nullptr || (buffer == nullptr && capacity > 0)) {
        return Fail(DPL_ERR_INVALID_ARGUMENT, "store get: key or value_size is NULL");
      }
      auto& self = Self(context);
      auto value = self.client_.Get(self.key_prefix_ + key, Timeout(timeout_ms));
      if (!value.ok()) return FromStatus(value.status());
      *value_size = value->size();
      if (value->size() > capacity) {
        return Fail(DPL_ERR_BUFFER_TOO_SMALL, "store get: value of key '" + std::string(key) +
                                                  "' has " + std::to_string(value->size()) +
                                                  " bytes, the buffer " + std::to_string(capacity));
      }
      if (!value->empty()) std::memcpy(buffer, value->data(), value->size());
      return DPL_OK;
    });
  }
  static dpl_status WaitFn(void* context, const char* const* keys, uint32_t key_count,
                           int64_t timeout_ms) {
    return Guard([&] {
      if (keys == nullptr && key_count > 0) {
        return Fail(DPL_ERR_INVALID_ARGUMENT, "store wait: keys is NULL");
      }
      auto& self = Self(context);
      std::vector<std::string> prefixed;
      for (uint32_t i = 0; i < key_count; ++i) {
        if (keys[i] == nullptr) return Fail(DPL_ERR_INVALID_ARGUMENT, "store wait: a key is NULL");
        prefixed.push_back(self.key_prefix_ + keys[i]);
      }
      return FromStatus(self.client_.Wait(prefixed, Timeout(timeout_ms)));
    });
  }
  static dpl_status AddFn(void* context, const char* key, int64_t delta, int64_t* result) {
    return Guard([&] {
      if (key == nullptr || result == nullptr) {
        return Fail(DPL_ERR_INVALID_ARGUMENT, "store add: key or result is NULL");
      }
      auto& self = Self(context);
      auto value = self.client_.Add(self.key_prefix_ + key, delta);
      if (!value.ok()) return FromStatus(value.status());
      *result = *value;
      return DPL_OK;
    });
  }
  static const char* LastErrorFn(void* /*context*/) { return last_error.c_str(); }
};

thread_local std::string PluginStoreViewAccess::last_error;

PluginStoreView::PluginStoreView(StoreClient& client, std::string key_prefix)
    : client_(client), key_prefix_(std::move(key_prefix)) {
  view_.struct_size = sizeof(dpl_store_v1);
  view_.version = DPL_STORE_VERSION;
  view_.context = this;
  view_.set = &PluginStoreViewAccess::SetFn;
  view_.get = &PluginStoreViewAccess::GetFn;
  view_.wait = &PluginStoreViewAccess::WaitFn;
  view_.add = &PluginStoreViewAccess::AddFn;
  view_.last_error = &PluginStoreViewAccess::LastErrorFn;
}

}  // namespace dpl::rendezvous
