// What every fake table of the adapter tests shares: the record of the entries called, a
// table's header, the adapter of a version, and ways to look at its required entries.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dpl/common.h"
#include "plugin_host/adapter_registry.hpp"

namespace dpl::plugin_host::testing {

// The names of the fake entries called, in order.
inline std::vector<std::string>& Calls() {
  static std::vector<std::string> calls;
  return calls;
}

inline dpl_status Called(const char* name) {
  Calls().push_back(name);
  return DPL_OK;
}

// The adapter of `kind` at `version`; the test fails when there is none.
inline const Adapter& AdapterOf(dpl_plugin_kind kind, uint32_t version) {
  static const Adapter none{};
  const Adapter* adapter = FindAdapter(kind, version);
  EXPECT_NE(adapter, nullptr) << "no adapter for " << AbiName(kind, version);
  return adapter != nullptr ? *adapter : none;
}

inline dpl_plugin_header Header(dpl_plugin_kind kind, uint32_t version, size_t table_size) {
  return {uint32_t(table_size), DPL_PLUGIN_MAGIC, uint32_t(kind), version, "fake", "0", nullptr};
}

// The names of `entries`, and of those unset.
inline std::vector<std::string> Names(const RequiredEntries& entries) {
  std::vector<std::string> names;
  for (const auto& entry : entries) names.emplace_back(entry.first);
  return names;
}
inline std::vector<std::string> Unset(const RequiredEntries& entries) {
  std::vector<std::string> names;
  for (const auto& entry : entries) {
    if (!entry.second) names.emplace_back(entry.first);
  }
  return names;
}

// A log context to recognise.
inline void* LogContext() {
  static int context;
  return &context;
}

}  // namespace dpl::plugin_host::testing
