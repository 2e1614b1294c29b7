// The recording dataset plugin "recording" (recording_plugin.hpp): a dataset of ABI v1 that
// forwards every call to the dataset of ABI v1 named by --data-options wrap=PATH (e.g. idx).
#include "dpl/dataset.h"
#include "recording_plugin.hpp"

static_assert(DPL_DATASET_ABI_VERSION == 1,
              "a new dataset ABI: record its table here (the newest is what the host requires)");

// The slots forwarded as they are (the others: create, last_error), and every slot of the table.
#define DPL_RECORDING_FORWARDED(X) X(destroy) X(describe) X(fill)
#define DPL_RECORDING_SLOTS(X) X(create) X(last_error) DPL_RECORDING_FORWARDED(X)

namespace dpl::abi_coverage {
namespace {

using Table = dpl_dataset_plugin_v1;
static_assert(sizeof(Table) ==
                  sizeof(dpl_plugin_header) +
                      (0 DPL_RECORDING_SLOTS(DPL_RECORDING_COUNT_SLOT)) * sizeof(void (*)(void)),
              "the slot list must name every function of the table");

DPL_RECORDING_SLOTS(DPL_RECORDING_SLOT_NAME)

struct DatasetKind {
  static constexpr const char* kWord = "dataset";
  static constexpr const char* kPrefix = "recording dataset";
  static WrappedPlugin<Table>& Wrapped() {
    static WrappedPlugin<Table> wrapped("dpl_dataset_plugin_v1", DPL_PLUGIN_KIND_DATASET, 1);
    return wrapped;
  }
};

dpl_status Create(const dpl_dataset_config_v1* config, dpl_dataset** out) {
  RecordCall(DatasetKind::kWord, "create");
  return support::Guarded(DatasetKind::kPrefix, [&] {
    support::Require(config != nullptr && out != nullptr, "config or out is NULL");
    const WrapOptions options = SplitWrapOption(config->options, "--data-options");
    const Table& inner = DatasetKind::Wrapped().Load(options.path);
    dpl_dataset_config_v1 forwarded = *config;
    forwarded.options = options.forwarded.c_str();
    return inner.create(&forwarded, out);
  });
}

constexpr Table MakeTable() {
  Table table{};
  table.header = {sizeof(Table),
                  DPL_PLUGIN_MAGIC,
                  DPL_PLUGIN_KIND_DATASET,
                  DPL_DATASET_ABI_VERSION_1,
                  "recording",
                  "1.0.0",
                  "records each call of the host and forwards it to the dataset wrap=PATH"};
#define DPL_RECORDING_FORWARD(slot) DPL_RECORDING_FORWARD_SLOT(DatasetKind, Table, table, slot)
  DPL_RECORDING_FORWARDED(DPL_RECORDING_FORWARD)
#undef DPL_RECORDING_FORWARD
  table.create = &Create;
  table.last_error = &LastError<DatasetKind>;
  return table;
}

}  // namespace
}  // namespace dpl::abi_coverage

DPL_PLUGIN_EXPORT extern const dpl_dataset_plugin_v1 recording_dataset_table
    DPL_PLUGIN_ENTRY_SYMBOL(dpl_dataset_plugin_v1);
const dpl_dataset_plugin_v1 recording_dataset_table = dpl::abi_coverage::MakeTable();

DPL_RECORDING_EXPOSED_FUNCTIONS(recording_dataset_table, DPL_RECORDING_SLOTS)
