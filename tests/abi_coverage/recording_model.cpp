// The recording model plugin "recording" (recording_plugin.hpp): a model of ABI v4 that forwards
// every call to the model of ABI v4 named by --model-options wrap=PATH (e.g. a BatchNorm model,
// whose buffers reach the buffer entries). It has no optimizer on its device (the optional
// entries NULL): it hides the wrapped model's DPL_MODEL_DEVICE_OPTIMIZER.
#include "dpl/model.h"
#include "recording_plugin.hpp"

static_assert(DPL_MODEL_ABI_VERSION == 4,
              "a new model ABI: record its table here (the newest is what the host requires)");

// The slots forwarded as they are (the others: create, last_error), and every slot of the table.
// clang-format off
#define DPL_RECORDING_FORWARDED(X)                                                        \
  X(destroy) X(parameter) X(set_gradient_ready_callback) X(set_mode)          \
  X(zero_gradients) X(train_step) X(eval_step) X(save_state) X(load_state) X(host_batch)  \
  X(read_tensors) X(write_tensors) X(buffer) X(read_buffers) X(write_buffers)             \
  X(rng_state) X(set_rng_state) X(host_batch_slot) X(set_loss_scale)
// clang-format on
// The optional entries, left NULL: the host does not require them.
#define DPL_RECORDING_OPTIONAL(X) \
  X(set_optimizer) X(gradient_statistics) X(apply_update) X(share_parameters) X(share_gradients)
#define DPL_RECORDING_SLOTS(X) \
  X(create) X(describe) X(last_error) DPL_RECORDING_FORWARDED(X) DPL_RECORDING_OPTIONAL(X)

namespace dpl::abi_coverage {
namespace {

using Table = dpl_model_plugin_v4;
static_assert(sizeof(Table) ==
                  sizeof(dpl_plugin_header) +
                      (0 DPL_RECORDING_SLOTS(DPL_RECORDING_COUNT_SLOT)) * sizeof(void (*)(void)),
              "the slot list must name every function of the table");

DPL_RECORDING_SLOTS(DPL_RECORDING_SLOT_NAME)

struct ModelKind {
  static constexpr const char* kWord = "model";
  static constexpr const char* kPrefix = "recording model";
  static WrappedPlugin<Table>& Wrapped() {
    static WrappedPlugin<Table> wrapped("dpl_model_plugin_v4", DPL_PLUGIN_KIND_MODEL, 4,
                                        DPL_MODEL_PLUGIN_V4_FIRST_SIZE);
    return wrapped;
  }
};

dpl_status Create(const dpl_model_config_v4* config, dpl_model** out) {
  RecordCall(ModelKind::kWord, "create");
  return support::Guarded(ModelKind::kPrefix, [&] {
    support::Require(config != nullptr && out != nullptr, "config or out is NULL");
    const WrapOptions options = SplitWrapOption(config->options, "--model-options");
    const Table& inner = ModelKind::Wrapped().Load(options.path);
    dpl_model_config_v4 forwarded = *config;
    forwarded.options = options.forwarded.c_str();
    return inner.create(&forwarded, out);
  });
}

// The wrapped model's description without DPL_MODEL_DEVICE_OPTIMIZER, whose entries this table
// leaves NULL.
dpl_status Describe(dpl_model* model, dpl_model_info_v4* info) {
  const dpl_status status =
      Forward<ModelKind, kSlotName_describe, &Table::describe>::Call(model, info);
  if (status == DPL_OK && info != nullptr && info->struct_size >= sizeof *info) {
    info->flags &= ~uint32_t(DPL_MODEL_DEVICE_OPTIMIZER);
  }
  return status;
}

constexpr Table MakeTable() {
  Table table{};
  table.header = {sizeof(Table),
                  DPL_PLUGIN_MAGIC,
                  DPL_PLUGIN_KIND_MODEL,
                  DPL_MODEL_ABI_VERSION_4,
                  "recording",
                  "1.0.0",
                  "records each call of the host and forwards it to the model wrap=PATH"};
#define DPL_RECORDING_FORWARD(slot) DPL_RECORDING_FORWARD_SLOT(ModelKind, Table, table, slot)
  DPL_RECORDING_FORWARDED(DPL_RECORDING_FORWARD)
#undef DPL_RECORDING_FORWARD
  table.create = &Create;
  table.describe = &Describe;
  table.last_error = &LastError<ModelKind>;
  return table;
}

}  // namespace
}  // namespace dpl::abi_coverage

DPL_PLUGIN_EXPORT extern const dpl_model_plugin_v4 recording_model_table
    DPL_PLUGIN_ENTRY_SYMBOL(dpl_model_plugin_v4);
const dpl_model_plugin_v4 recording_model_table = dpl::abi_coverage::MakeTable();

DPL_RECORDING_EXPOSED_FUNCTIONS(recording_model_table, DPL_RECORDING_SLOTS)
