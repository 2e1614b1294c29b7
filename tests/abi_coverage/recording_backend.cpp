// The recording backend plugin "recording" (recording_plugin.hpp): a backend of ABI v5, or of
// ABI v1 when built with DPL_RECORDING_BACKEND_ABI=1, that forwards every call to the backend of
// ABI v5 named by --backend-options wrap=PATH (gloo). Built as v1 it is also the check that the
// host still drives a backend of the older ABI: it gets the v1 config and passes the v5 one on,
// with local_address "" (dpl/backend_v2.h: the host could not tell).
#include "dpl/backend.h"
#include "recording_plugin.hpp"

#ifndef DPL_RECORDING_BACKEND_ABI
#define DPL_RECORDING_BACKEND_ABI 5
#endif

static_assert(DPL_BACKEND_ABI_VERSION == 5,
              "a new backend ABI: record its table here (the newest is what the host requires)");

// The slots forwarded as they are (the others: create, last_error), and every slot of the table.
#if DPL_RECORDING_BACKEND_ABI == 1
#define DPL_RECORDING_FORWARDED(X) X(destroy) X(allreduce) X(broadcast) X(allgather) X(barrier)
#else
#define DPL_RECORDING_FORWARDED(X) \
  X(destroy)                       \
  X(allreduce)                     \
  X(broadcast) X(allgather) X(barrier) X(synchronize) X(reduce_scatter) X(abort) X(send_receive)
#endif
#define DPL_RECORDING_SLOTS(X) X(create) X(last_error) DPL_RECORDING_FORWARDED(X)

namespace dpl::abi_coverage {
namespace {

#if DPL_RECORDING_BACKEND_ABI == 1
using Table = dpl_backend_plugin_v1;
using Config = dpl_backend_config_v1;
#else
using Table = dpl_backend_plugin_v5;
using Config = dpl_backend_config_v5;
#endif
static_assert(sizeof(Table) ==
                  sizeof(dpl_plugin_header) +
                      (0 DPL_RECORDING_SLOTS(DPL_RECORDING_COUNT_SLOT)) * sizeof(void (*)(void)),
              "the slot list must name every function of the table");

DPL_RECORDING_SLOTS(DPL_RECORDING_SLOT_NAME)

struct BackendKind {
  static constexpr const char* kWord = "backend";
  static constexpr const char* kPrefix = "recording backend";
  static WrappedPlugin<dpl_backend_plugin_v5>& Wrapped() {
    static WrappedPlugin<dpl_backend_plugin_v5> wrapped("dpl_backend_plugin_v5",
                                                        DPL_PLUGIN_KIND_BACKEND, 5);
    return wrapped;
  }
};

dpl_status Create(const Config* config, dpl_backend** out) {
  RecordCall(BackendKind::kWord, "create");
  return support::Guarded(BackendKind::kPrefix, [&] {
    support::Require(config != nullptr && out != nullptr, "config or out is NULL");
    const WrapOptions options = SplitWrapOption(config->options, "--backend-options");
    const dpl_backend_plugin_v5& inner = BackendKind::Wrapped().Load(options.path);
    dpl_backend_config_v5 forwarded{};
#if DPL_RECORDING_BACKEND_ABI == 1
    forwarded.rank = config->rank;
    forwarded.world_size = config->world_size;
    forwarded.local_rank = config->local_rank;
    forwarded.local_world_size = config->local_world_size;
    forwarded.device_type = config->device_type;
    forwarded.device_id = config->device_id;
    forwarded.timeout_ms = config->timeout_ms;
    forwarded.store = config->store;
    forwarded.log = config->log;
    forwarded.log_context = config->log_context;
    forwarded.local_address = "";
#else
    forwarded = *config;
#endif
    forwarded.struct_size = sizeof forwarded;
    forwarded.version = DPL_BACKEND_ABI_VERSION_5;
    forwarded.options = options.forwarded.c_str();
    return inner.create(&forwarded, out);
  });
}

constexpr Table MakeTable() {
  Table table{};
  table.header = {sizeof(Table),
                  DPL_PLUGIN_MAGIC,
                  DPL_PLUGIN_KIND_BACKEND,
                  DPL_RECORDING_BACKEND_ABI,
                  "recording",
                  "1.0.0",
                  "records each call of the host and forwards it to the backend wrap=PATH"};
#define DPL_RECORDING_FORWARD(slot) \
  DPL_RECORDING_FORWARD_SLOT(BackendKind, dpl_backend_plugin_v5, table, slot)
  DPL_RECORDING_FORWARDED(DPL_RECORDING_FORWARD)
#undef DPL_RECORDING_FORWARD
  table.create = &Create;
  table.last_error = &LastError<BackendKind>;
  return table;
}

}  // namespace
}  // namespace dpl::abi_coverage

#if DPL_RECORDING_BACKEND_ABI == 1
DPL_PLUGIN_EXPORT extern const dpl_backend_plugin_v1 recording_backend_table
    DPL_PLUGIN_ENTRY_SYMBOL(dpl_backend_plugin_v1);
const dpl_backend_plugin_v1 recording_backend_table = dpl::abi_coverage::MakeTable();
#else
DPL_PLUGIN_EXPORT extern const dpl_backend_plugin_v5 recording_backend_table
    DPL_PLUGIN_ENTRY_SYMBOL(dpl_backend_plugin_v5);
const dpl_backend_plugin_v5 recording_backend_table = dpl::abi_coverage::MakeTable();
#endif

DPL_RECORDING_EXPOSED_FUNCTIONS(recording_backend_table, DPL_RECORDING_SLOTS)
