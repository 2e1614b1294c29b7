// The adapter registry: for each (plugin kind, ABI version) the host supports, how to check a
// table of that version and turn it into the kind's one interface (backend_interface.hpp,
// model_interface.hpp, dataset_interface.hpp), and which capabilities that version has.
//
// The loader (plugin_file.cpp) consults it: the versions a kind supports are the versions that
// have an adapter, the newest of a plugin's entry symbols that has one is used, and every message
// about supported versions comes from here. The built-in adapters are one file each under
// adapters/ (Note [Adding an ABI version]); a test may register more.
//
// Note [Adding an ABI version]: a new version N of a kind is
//  1. the frozen header sdk/include/dpl/<kind>_vN.h, and the kind's unversioned header
//     (dpl/<kind>.h) pointing at it;
//  2. the interface of the kind (<kind>_interface.hpp) grown by the new entries, and the kind's
//     capability enum (capabilities.hpp) by the new capabilities, both at their end;
//  3. the adapter adapters/<kind>_vN.cpp (the table's required entries, the interface built from
//     it), declared and listed in adapters/builtin_adapters.* and in CMakeLists.txt; the older
//     adapters of the kind convert the newest config down to what they hand their plugin, and
//     bridge an entry whose type changed;
//  4. its test, tests/plugin_host/adapters/<kind>_vN_test.cpp.
// Nothing outside plugin_host/ asks for the version: the code that uses a new capability asks for
// it by name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.hpp"
#include "dpl/common.h"
#include "plugin_host/backend_interface.hpp"
#include "plugin_host/capabilities.hpp"
#include "plugin_host/dataset_interface.hpp"
#include "plugin_host/model_interface.hpp"

namespace dpl::plugin_host {

// The entries the host requires of a table, in the table's order, each with whether it is set.
using RequiredEntries = std::vector<std::pair<const char*, bool>>;

// How the host takes a table of one (kind, ABI version). `table` always points to a table whose
// header was checked: magic, kind, version and a struct_size of at least table_size.
struct Adapter {
  dpl_plugin_kind kind;
  uint32_t abi_version;
  size_t table_size;      // sizeof the version's table
  uint64_t capabilities;  // CapabilitySet<the kind's capability enum>::bits()
  // The required entries of `table`; NULL: their names only (each reported unset).
  RequiredEntries (*required)(const void* table);
  // Exactly the one of the adapter's kind is set: the table as the kind's interface. The
  // registry fills in the interface's capabilities and abi.
  BackendInterface (*backend)(const void* table) = nullptr;
  ModelInterface (*model)(const void* table) = nullptr;
  DatasetInterface (*dataset)(const void* table) = nullptr;
};

// What ties an interface to its kind, its capabilities and its factory in Adapter.
template <typename Interface>
struct InterfaceOf;
template <>
struct InterfaceOf<BackendInterface> {
  static constexpr dpl_plugin_kind kKind = DPL_PLUGIN_KIND_BACKEND;
  using Capability = BackendCapability;
  static constexpr auto kFactory = &Adapter::backend;
};
template <>
struct InterfaceOf<ModelInterface> {
  static constexpr dpl_plugin_kind kKind = DPL_PLUGIN_KIND_MODEL;
  using Capability = ModelCapability;
  static constexpr auto kFactory = &Adapter::model;
};
template <>
struct InterfaceOf<DatasetInterface> {
  static constexpr dpl_plugin_kind kKind = DPL_PLUGIN_KIND_DATASET;
  using Capability = DatasetCapability;
  static constexpr auto kFactory = &Adapter::dataset;
};

// The adapter whose `adapt` makes the interface of its kind.
template <typename Interface>
Adapter MakeAdapter(uint32_t abi_version, size_t table_size,
                    CapabilitySet<typename InterfaceOf<Interface>::Capability> capabilities,
                    RequiredEntries (*required)(const void*), Interface (*adapt)(const void*)) {
  Adapter adapter{InterfaceOf<Interface>::kKind, abi_version, table_size, capabilities.bits(),
                  required};
  adapter.*InterfaceOf<Interface>::kFactory = adapt;
  return adapter;
}

// Adds an adapter next to the built-in ones (a test's: an ABI version this host does not ship).
// Refuses a second adapter for the same kind and version, version 0, and an adapter without the
// functions of its kind. Call it before plugins are loaded; not thread-safe.
Status RegisterAdapter(const Adapter& adapter);

// The adapter of `kind` at `abi_version`, or NULL when this host supports no such version.
const Adapter* FindAdapter(dpl_plugin_kind kind, uint32_t abi_version);

// The ABI versions of `kind` this host supports, oldest first (never empty for a known kind).
std::vector<uint32_t> SupportedVersions(dpl_plugin_kind kind);

// "v1..v3", runs of versions apart joined by ", " ("v1..v3, v99..v99"), for messages and
// `launcher --version`.
std::string SupportedVersionsText(dpl_plugin_kind kind);

// The required entries of the newest supported table of `kind`, by name.
std::vector<std::string> NewestRequiredEntries(dpl_plugin_kind kind);

// "model ABI v3".
std::string AbiName(dpl_plugin_kind kind, uint32_t abi_version);

// The interface of the checked `table` of `adapter` (of Interface's kind), with its
// capabilities and abi set.
template <typename Interface>
Interface AdaptTable(const Adapter& adapter, const void* table) {
  using Of = InterfaceOf<Interface>;
  Interface adapted = (adapter.*Of::kFactory)(table);
  adapted.capabilities = CapabilitySet<typename Of::Capability>::FromBits(adapter.capabilities);
  adapted.abi = AbiName(adapter.kind, adapter.abi_version);
  return adapted;
}

}  // namespace dpl::plugin_host
