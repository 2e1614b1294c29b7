// The recording dataset plugin "recording" (recording_plugin.hpp): a dataset of ABI v1 that
// forwards every call to the dataset of the newest ABI named by --data-options wrap=PATH (e.g.
// idx). It stays v1 so that the launcher's jobs drive the v1 adapter (Note [Adapting dataset ABI
// v1]) end to end, while its slots are those the host requires of the newest table; create and
// describe bridge the two versions, the other slots have the same types in both.
#include "dpl/dataset.h"
#include "dpl/dataset_v1.h"
#include "recording_plugin.hpp"

static_assert(DPL_DATASET_ABI_VERSION == 2,
              "a new dataset ABI: wrap its table here (the newest is what the host requires)");

// The slots forwarded as they are (the others: create, describe, last_error), and every slot of
// the table.
#define DPL_RECORDING_FORWARDED(X) X(destroy) X(fill)
#define DPL_RECORDING_SLOTS(X) X(create) X(describe) X(last_error) DPL_RECORDING_FORWARDED(X)

namespace dpl::abi_coverage {
namespace {

using Table = dpl_dataset_plugin_v1;
using Inner = dpl_dataset_plugin;
static_assert(sizeof(Table) ==
                  sizeof(dpl_plugin_header) +
                      (0 DPL_RECORDING_SLOTS(DPL_RECORDING_COUNT_SLOT)) * sizeof(void (*)(void)),
              "the slot list must name every function of the table");

DPL_RECORDING_SLOTS(DPL_RECORDING_SLOT_NAME)

struct DatasetKind {
  static constexpr const char* kWord = "dataset";
  static constexpr const char* kPrefix = "recording dataset";
  static WrappedPlugin<Inner>& Wrapped() {
    static WrappedPlugin<Inner> wrapped("dpl_dataset_plugin_v2", DPL_PLUGIN_KIND_DATASET,
                                        DPL_DATASET_ABI_VERSION);
    return wrapped;
  }
};

dpl_status Create(const dpl_dataset_config_v1* config, dpl_dataset** out) {
  RecordCall(DatasetKind::kWord, "create");
  return support::Guarded(DatasetKind::kPrefix, [&] {
    support::Require(config != nullptr && out != nullptr, "config or out is NULL");
    const WrapOptions options = SplitWrapOption(config->options, "--data-options");
    const Inner& inner = DatasetKind::Wrapped().Load(options.path);
    dpl_dataset_config forwarded = *config;  // v2's config is v1's
    forwarded.version = DPL_DATASET_ABI_VERSION;
    forwarded.options = options.forwarded.c_str();
    return inner.create(&forwarded, out);
  });
}

// The wrapped plugin's typed info as v1's, for samples v1 can hold: float32 with one int64 label.
dpl_status Describe(dpl_dataset* dataset, dpl_dataset_info_v1* info) {
  RecordCall(DatasetKind::kWord, "describe");
  return support::Guarded(DatasetKind::kPrefix, [&] {
    support::Require(info != nullptr, "info is NULL");
    const Inner* inner = DatasetKind::Wrapped().table();
    support::Require(inner != nullptr, "describe was called before create");
    dpl_dataset_info typed{};
    typed.struct_size = sizeof typed;
    if (const dpl_status status = inner->describe(dataset, &typed); status != DPL_OK) {
      return status;
    }
    support::Require(typed.input.dtype.code == kDLFloat && typed.input.dtype.bits == 32 &&
                         typed.target.dtype.code == kDLInt && typed.target.dtype.bits == 64 &&
                         typed.target.ndim == 0,
                     "wrap=: the wrapped dataset's samples are not float32 with one int64 label");
    info->sample_ndim = typed.input.ndim;
    for (int d = 0; d < DPL_DATASET_MAX_SAMPLE_DIMS; ++d)
      info->sample_shape[d] = typed.input.shape[d];
    info->count = typed.count;
    info->num_classes = typed.num_classes;
    return DPL_OK;
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
#define DPL_RECORDING_FORWARD(slot) DPL_RECORDING_FORWARD_SLOT(DatasetKind, Inner, table, slot)
  DPL_RECORDING_FORWARDED(DPL_RECORDING_FORWARD)
#undef DPL_RECORDING_FORWARD
  table.create = &Create;
  table.describe = &Describe;
  table.last_error = &LastError<DatasetKind>;
  return table;
}

}  // namespace
}  // namespace dpl::abi_coverage

DPL_PLUGIN_EXPORT extern const dpl_dataset_plugin_v1 recording_dataset_table
    DPL_PLUGIN_ENTRY_SYMBOL(dpl_dataset_plugin_v1);
const dpl_dataset_plugin_v1 recording_dataset_table = dpl::abi_coverage::MakeTable();

DPL_RECORDING_EXPOSED_FUNCTIONS(recording_dataset_table, DPL_RECORDING_SLOTS)
