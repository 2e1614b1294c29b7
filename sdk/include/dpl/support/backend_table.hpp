// dpl SDK, C++ plugin support: a backend plugin's table made from a C++ class, as
// DPL_EXPORT_TORCH_MODEL makes a model's (dpl/torch_model.hpp). Every entry checks its handle and
// its pointers in one way, runs guarded (no exception leaves it; its message is last_error's,
// prefixed with the backend's name), and calls the class:
//
//   class MyBackend : public dpl::support::BackendDefaults<MyBackend> {
//    public:
//     static constexpr const char* kName = "mine";
//     explicit MyBackend(const dpl_backend_config_v3& config);  // refuses by throwing PluginError
//     dpl_status or void Allreduce(DLTensor* tensor, dpl_reduce_op op, void* stream);
//     ...          Broadcast(DLTensor* tensor, int32_t root, void* stream);
//     ...          Allgather(const DLTensor* input, DLTensor* output, void* stream);
//     ...          ReduceScatter(DLTensor* input, DLTensor* output, dpl_reduce_op op, void*
//     stream);
//     ...          Barrier();
//     // BackendDefaults has these; a class says otherwise by declaring its own:
//     //   void Synchronize(void* stream);  (none: host collectives are complete when they return)
//     //   static void Destroy(MyBackend* backend);  (delete)
//     //   template <class Body> static dpl_status Guard(MyBackend* backend,
//     //       const dpl_backend_config_v3* config, Body&& body);  (Guarded under kName)
//   };
//   DPL_EXPORT_BACKEND(MyBackend, dpl_mine_backend_table, "1.0.0", "what it is");
//
// The class sees non-NULL pointers only; the config was checked (CheckBackendConfig).
#ifndef DPL_SUPPORT_BACKEND_TABLE_HPP
#define DPL_SUPPORT_BACKEND_TABLE_HPP

#include <utility>

#include "dpl/backend_v3.h"
#include "dpl/support/backend.hpp"
#include "dpl/support/error.hpp"

namespace dpl::support {

template <typename Backend>
class BackendDefaults {
 public:
  // Runs one entry's body: `backend` is the instance (NULL in create, where `config` is given, in
  // destroy, whose body deletes it, and wherever the host passed none).
  template <typename Body>
  static dpl_status Guard(Backend* /*backend*/, const dpl_backend_config_v3* /*config*/,
                          Body&& body) noexcept {
    return Guarded(Backend::kName, std::forward<Body>(body));
  }
  static void Destroy(Backend* backend) { delete backend; }
  // A host backend's collectives are complete when they return (dpl/backend_v2.h).
  void Synchronize(void* /*stream*/) {}
};

// The entries of the table of `Backend`.
template <typename Backend>
class BackendEntries {
 public:
  static dpl_status Create(const dpl_backend_config_v3* config, dpl_backend** out) noexcept {
    return Backend::Guard(nullptr, config, [&] {
      Require(out != nullptr, "out is NULL");
      *out = nullptr;
      CheckBackendConfig(config);
      *out = reinterpret_cast<dpl_backend*>(new Backend(*config));
    });
  }
  static void Destroy(dpl_backend* backend) noexcept {
    if (backend == nullptr) return;
    Backend::Guard(nullptr, nullptr, [&] { Backend::Destroy(Self(backend)); });
  }
  static dpl_status Allreduce(dpl_backend* backend, DLTensor* tensor, dpl_reduce_op op,
                              void* stream) noexcept {
    return Backend::Guard(Self(backend), nullptr, [&] {
      Require(tensor != nullptr, "tensor is NULL");
      return Checked(backend).Allreduce(tensor, op, stream);
    });
  }
  static dpl_status Broadcast(dpl_backend* backend, DLTensor* tensor, int32_t root,
                              void* stream) noexcept {
    return Backend::Guard(Self(backend), nullptr, [&] {
      Require(tensor != nullptr, "tensor is NULL");
      return Checked(backend).Broadcast(tensor, root, stream);
    });
  }
  static dpl_status Allgather(dpl_backend* backend, const DLTensor* input, DLTensor* output,
                              void* stream) noexcept {
    return Backend::Guard(Self(backend), nullptr, [&] {
      Require(input != nullptr && output != nullptr, "input or output is NULL");
      return Checked(backend).Allgather(input, output, stream);
    });
  }
  static dpl_status ReduceScatter(dpl_backend* backend, DLTensor* input, DLTensor* output,
                                  dpl_reduce_op op, void* stream) noexcept {
    return Backend::Guard(Self(backend), nullptr, [&] {
      Require(input != nullptr && output != nullptr, "input or output is NULL");
      return Checked(backend).ReduceScatter(input, output, op, stream);
    });
  }
  static dpl_status Barrier(dpl_backend* backend) noexcept {
    return Backend::Guard(Self(backend), nullptr, [&] { return Checked(backend).Barrier(); });
  }
  static dpl_status Synchronize(dpl_backend* backend, void* stream) noexcept {
    return Backend::Guard(Self(backend), nullptr,
                          [&] { return Checked(backend).Synchronize(stream); });
  }
  static const char* LastErrorText() noexcept { return LastError(); }

 private:
  static Backend* Self(dpl_backend* backend) { return reinterpret_cast<Backend*>(backend); }
  static Backend& Checked(dpl_backend* backend) {
    Require(backend != nullptr, "backend handle is NULL");
    return *Self(backend);
  }
};

}  // namespace dpl::support

// The exported table `symbol` of backend class `Class` (model ABI's DPL_PLUGIN_ENTRY_SYMBOL and
// visibility rules apply): backend ABI v3, `version` and `description` for `launcher --list`.
#define DPL_EXPORT_BACKEND(Class, symbol, version, description)                            \
  extern "C" DPL_PLUGIN_EXPORT const dpl_backend_plugin_v3 symbol DPL_PLUGIN_ENTRY_SYMBOL( \
      dpl_backend_plugin_v3);                                                              \
  extern "C" const dpl_backend_plugin_v3 symbol = {                                        \
      {sizeof(dpl_backend_plugin_v3), DPL_PLUGIN_MAGIC, DPL_PLUGIN_KIND_BACKEND,           \
       DPL_BACKEND_ABI_VERSION_3, Class::kName, version, description},                     \
      &::dpl::support::BackendEntries<Class>::Create,                                      \
      &::dpl::support::BackendEntries<Class>::Destroy,                                     \
      &::dpl::support::BackendEntries<Class>::Allreduce,                                   \
      &::dpl::support::BackendEntries<Class>::Broadcast,                                   \
      &::dpl::support::BackendEntries<Class>::Allgather,                                   \
      &::dpl::support::BackendEntries<Class>::Barrier,                                     \
      &::dpl::support::BackendEntries<Class>::LastErrorText,                               \
      &::dpl::support::BackendEntries<Class>::Synchronize,                                 \
      &::dpl::support::BackendEntries<Class>::ReduceScatter,                               \
  }

#endif  // DPL_SUPPORT_BACKEND_TABLE_HPP
