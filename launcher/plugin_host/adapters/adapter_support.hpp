// What the adapters share: moving a config or an info between the struct of an older ABI version
// and the newest one, and listing a table's required entries.
//
// Note [Prefixes]: every struct that crosses the library edge grows only at its end
// (dpl/common.h), so the struct an older version knows is the first bytes of the newest one (the
// SDK's layout tests check the offsets). An older plugin gets those bytes with its own
// struct_size; what it fills is read back into the newest struct, the rest zero.
#pragma once

#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "plugin_host/adapter_registry.hpp"

namespace dpl::plugin_host::adapters {

// The first sizeof(Older) bytes of `newer`, with Older's struct_size.
template <typename Older, typename Newer>
Older PrefixOf(const Newer& newer) {
  static_assert(sizeof(Older) <= sizeof(Newer), "an older struct is a prefix of the newer one");
  static_assert(std::is_trivially_copyable_v<Older> && std::is_trivially_copyable_v<Newer>);
  Older older;
  std::memcpy(&older, &newer, sizeof older);
  older.struct_size = sizeof older;
  return older;
}

// `older` as the newest struct: its bytes, then zeros, with Newer's struct_size.
template <typename Newer, typename Older>
Newer Widened(const Older& older) {
  static_assert(sizeof(Older) <= sizeof(Newer), "an older struct is a prefix of the newer one");
  static_assert(std::is_trivially_copyable_v<Older> && std::is_trivially_copyable_v<Newer>);
  Newer newer{};
  std::memcpy(&newer, &older, sizeof older);
  newer.struct_size = sizeof newer;
  return newer;
}

// An older plugin's create as the newest one: it gets the OwnConfig prefix of the newest config,
// with its `version`.
template <typename OwnConfig, typename Create>
auto CreateWithPrefix(Create create, uint32_t version) {
  return [create, version](const auto* config, auto** out) {
    OwnConfig own = PrefixOf<OwnConfig>(*config);
    own.version = version;
    return create(&own, out);
  };
}

// An older plugin's describe as the newest one: it fills its OwnInfo, read back into the newest.
template <typename OwnInfo, typename Describe>
auto DescribeWidened(Describe describe) {
  return [describe](auto* instance, auto* info) {
    OwnInfo own{};
    own.struct_size = sizeof own;
    const dpl_status status = describe(instance, &own);
    *info = Widened<std::remove_pointer_t<decltype(info)>>(own);
    return status;
  };
}

// The entry lists of `parts`, one after the other.
inline RequiredEntries Joined(std::initializer_list<RequiredEntries> parts) {
  RequiredEntries joined;
  for (const RequiredEntries& part : parts) joined.insert(joined.end(), part.begin(), part.end());
  return joined;
}

// The checked table behind an adapter's `const void*`.
template <typename Table>
const Table& TableAt(const void* table) {
  return *static_cast<const Table*>(table);
}

}  // namespace dpl::plugin_host::adapters

// {"name", whether `table` (a pointer, NULL for names only) sets entry `name`}.
#define DPL_REQUIRED_ENTRY(table, name) \
  { #name, (table) != nullptr && (table)->name != nullptr }
