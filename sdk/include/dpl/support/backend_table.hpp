// dpl SDK, C++ plugin support: a backend plugin's table made from a C++ class, as
// DPL_EXPORT_TORCH_MODEL makes a model's (dpl/torch_model.hpp). Every entry checks its handle and
// its pointers in one way, runs guarded (no exception leaves it; its message is last_error's,
// prefixed with the backend's name), and calls the class:
//
//   class MyBackend : public dpl::support::BackendDefaults<MyBackend> {
//    public:
//     static constexpr const char* kName = "mine";
//     explicit MyBackend(const dpl_backend_config_v4& config);  // refuses by throwing PluginError
//     dpl_status or void Allreduce(DLTensor* tensor, dpl_reduce_op op, void* stream);
//     ...          Broadcast(DLTensor* tensor, int32_t root, void* stream);
//     ...          Allgather(const DLTensor* input, DLTensor* output, void* stream);
//     ...          ReduceScatter(DLTensor* input, DLTensor* output, dpl_reduce_op op, void*
//     stream);
//     ...          Barrier();
//     // With DPL_EXPORT_BACKEND_V5 (backend ABI v5) also:
//     ...          SendReceive(const DLTensor* send, int32_t to, DLTensor* receive, int32_t from,
//                              void* stream);  (send/receive NULL where the side is left out)
//     // BackendDefaults has these; a class says otherwise by declaring its own:
//     //   void Synchronize(void* stream);  (none: host collectives are complete when they return)
//     //   void Abort();  (marks the instance aborted; Note [Aborted instances])
//     //   static void Destroy(MyBackend* backend);  (delete)
//     //   template <class Body> static dpl_status Guard(MyBackend* backend,
//     //       const dpl_backend_config_v4* config, Body&& body);  (Guarded under kName)
//   };
//   DPL_EXPORT_BACKEND(MyBackend, dpl_mine_backend_table, "1.0.0", "what it is");  (ABI v4)
//   DPL_EXPORT_BACKEND_V5(MyBackend, dpl_mine_backend_table, "1.0.0", "what it is");  (ABI v5)
//
// The class sees non-NULL pointers only; the config was checked (CheckBackendConfig).
//
// Note [Aborted instances]: abort (dpl/backend_v4.h) comes from another thread while one call
// runs. BackendDefaults::Abort marks the instance; from then on every call but abort and destroy
// fails at once, and the call under way fails when it returns, whatever it met on the way (a
// peer's closed socket, a timeout): both with DPL_ERR_COMMUNICATION and one message, which says
// the instance was aborted. A class whose calls wait on peers declares its own Abort, which calls
// BackendDefaults::Abort first and then wakes those waits without blocking (shuts its sockets
// down, asks its polling loop to stop); its destroy must then skip whatever waits on peers.
#ifndef DPL_SUPPORT_BACKEND_TABLE_HPP
#define DPL_SUPPORT_BACKEND_TABLE_HPP

#include <atomic>
#include <string>
#include <utility>

#include "dpl/backend_v5.h"
#include "dpl/support/backend.hpp"
#include "dpl/support/error.hpp"

namespace dpl::support {

template <typename Backend>
class BackendDefaults {
 public:
  // Runs one entry's body: `backend` is the instance (NULL in create, where `config` is given, in
  // destroy, whose body deletes it, and wherever the host passed none).
  template <typename Body>
  static dpl_status Guard(Backend* /*backend*/, const dpl_backend_config_v4* /*config*/,
                          Body&& body) noexcept {
    return Guarded(Backend::kName, std::forward<Body>(body));
  }
  static void Destroy(Backend* backend) { delete backend; }
  // A host backend's collectives are complete when they return (dpl/backend_v2.h).
  void Synchronize(void* /*stream*/) {}
  // Note [Aborted instances]: from any thread; never blocks.
  void Abort() { aborted_.store(true, std::memory_order_release); }
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> aborted_{false};
};

// What an aborted instance's calls say (Note [Aborted instances]).
inline dpl_status FailAborted(const char* backend_name) noexcept {
  try {
    return Fail(DPL_ERR_COMMUNICATION,
                std::string(backend_name) +
                    ": this instance was aborted (the host called abort, from another thread, "
                    "to end its collectives); it cannot be used again");
  } catch (...) {  // no memory for the message: the status at least
    return DPL_ERR_COMMUNICATION;
  }
}

// The entries of the table of `Backend`.
template <typename Backend>
class BackendEntries {
 public:
  static dpl_status Create(const dpl_backend_config_v4* config, dpl_backend** out) noexcept {
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
    return Collective(backend, [&](Backend& self) {
      Require(tensor != nullptr, "tensor is NULL");
      return self.Allreduce(tensor, op, stream);
    });
  }
  static dpl_status Broadcast(dpl_backend* backend, DLTensor* tensor, int32_t root,
                              void* stream) noexcept {
    return Collective(backend, [&](Backend& self) {
      Require(tensor != nullptr, "tensor is NULL");
      return self.Broadcast(tensor, root, stream);
    });
  }
  static dpl_status Allgather(dpl_backend* backend, const DLTensor* input, DLTensor* output,
                              void* stream) noexcept {
    return Collective(backend, [&](Backend& self) {
      Require(input != nullptr && output != nullptr, "input or output is NULL");
      return self.Allgather(input, output, stream);
    });
  }
  static dpl_status ReduceScatter(dpl_backend* backend, DLTensor* input, DLTensor* output,
                                  dpl_reduce_op op, void* stream) noexcept {
    return Collective(backend, [&](Backend& self) {
      Require(input != nullptr && output != nullptr, "input or output is NULL");
      return self.ReduceScatter(input, output, op, stream);
    });
  }
  // Backend ABI v5: the sides are checked by the class (dpl/support/backend.hpp's
  // CheckSendReceive), which knows its rank.
  static dpl_status SendReceive(dpl_backend* backend, const DLTensor* send, int32_t to,
                                DLTensor* receive, int32_t from, void* stream) noexcept {
    return Collective(
        backend, [&](Backend& self) { return self.SendReceive(send, to, receive, from, stream); });
  }
  static dpl_status Barrier(dpl_backend* backend) noexcept {
    return Collective(backend, [&](Backend& self) { return self.Barrier(); });
  }
  static dpl_status Synchronize(dpl_backend* backend, void* stream) noexcept {
    return Collective(backend, [&](Backend& self) { return self.Synchronize(stream); });
  }
  // From any thread (Note [Aborted instances]).
  static dpl_status Abort(dpl_backend* backend) noexcept {
    return Guarded(Backend::kName, [&] { Checked(backend).Abort(); });
  }
  static const char* LastErrorText() noexcept { return LastError(); }

 private:
  static Backend* Self(dpl_backend* backend) { return reinterpret_cast<Backend*>(backend); }
  static Backend& Checked(dpl_backend* backend) {
    Require(backend != nullptr, "backend handle is NULL");
    return *Self(backend);
  }
  // Runs `body(instance)` guarded, unless the instance was aborted before or while it ran
  // (Note [Aborted instances]).
  template <typename Body>
  static dpl_status Collective(dpl_backend* backend, Body&& body) noexcept {
    const Backend* self = Self(backend);
    if (self != nullptr && self->aborted()) return FailAborted(Backend::kName);
    const dpl_status status =
        Backend::Guard(Self(backend), nullptr, [&] { return body(Checked(backend)); });
    if (self != nullptr && self->aborted()) return FailAborted(Backend::kName);
    return status;
  }
};

}  // namespace dpl::support

// The entries of backend ABI v4's table of class `Class`, in its order (v5's table begins so).
#define DPL_BACKEND_ENTRIES_V4_(Class)                                                             \
  &::dpl::support::BackendEntries<Class>::Create, &::dpl::support::BackendEntries<Class>::Destroy, \
      &::dpl::support::BackendEntries<Class>::Allreduce,                                           \
      &::dpl::support::BackendEntries<Class>::Broadcast,                                           \
      &::dpl::support::BackendEntries<Class>::Allgather,                                           \
      &::dpl::support::BackendEntries<Class>::Barrier,                                             \
      &::dpl::support::BackendEntries<Class>::LastErrorText,                                       \
      &::dpl::support::BackendEntries<Class>::Synchronize,                                         \
      &::dpl::support::BackendEntries<Class>::ReduceScatter,                                       \
      &::dpl::support::BackendEntries<Class>::Abort

// The exported table `symbol` of type `Type` (the entry symbol's name), ABI version `abi`, and its
// entries after the header.
#define DPL_EXPORT_BACKEND_TABLE_(Type, abi, Class, symbol, version, description, ...)      \
  extern "C" DPL_PLUGIN_EXPORT const Type symbol DPL_PLUGIN_ENTRY_SYMBOL(Type);             \
  extern "C" const Type symbol = {                                                          \
      {sizeof(Type), DPL_PLUGIN_MAGIC, DPL_PLUGIN_KIND_BACKEND, abi, Class::kName, version, \
       description},                                                                        \
      __VA_ARGS__,                                                                          \
  }

// The exported table `symbol` of backend class `Class` (model ABI's DPL_PLUGIN_ENTRY_SYMBOL and
// visibility rules apply): backend ABI v4, `version` and `description` for `launcher --list`.
#define DPL_EXPORT_BACKEND(Class, symbol, version, description)                              \
  DPL_EXPORT_BACKEND_TABLE_(dpl_backend_plugin_v4, DPL_BACKEND_ABI_VERSION_4, Class, symbol, \
                            version, description, DPL_BACKEND_ENTRIES_V4_(Class))

// The same for backend ABI v5: v4's entries, then the class's SendReceive.
#define DPL_EXPORT_BACKEND_V5(Class, symbol, version, description)                           \
  DPL_EXPORT_BACKEND_TABLE_(dpl_backend_plugin_v5, DPL_BACKEND_ABI_VERSION_5, Class, symbol, \
                            version, description, DPL_BACKEND_ENTRIES_V4_(Class),            \
                            &::dpl::support::BackendEntries<Class>::SendReceive)

#endif  // DPL_SUPPORT_BACKEND_TABLE_HPP
