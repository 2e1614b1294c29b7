// The SDK's promises: struct prefixes (struct_size first), fixed enum values, the magic, and the
// same layout in C and C++ (the C side is sdk_c_layout.c, compiled as strict C99).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "dpl/dataset_v2.h"
#include "dpl/dpl.h"
#include "sdk_c_layout.h"

namespace {

#define ENTRY(type, field) \
  { #type "." #field, offsetof(type, field) }
#define SIZE(type) \
  { "sizeof " #type, sizeof(type) }

TEST(SdkTest, CAndCppAgreeOnEveryLayout) {
  const std::vector<sdk_layout_entry> cpp = {
#include "sdk_layout_entries.inc"
  };
  size_t count = 0;
  const sdk_layout_entry* c = sdk_c_layout(&count);
  ASSERT_EQ(count, cpp.size());
  for (size_t i = 0; i < count; ++i) {
    EXPECT_STREQ(c[i].what, cpp[i].what);
    EXPECT_EQ(c[i].value, cpp[i].value) << cpp[i].what;
  }
}

TEST(SdkTest, EveryCrossingStructStartsWithItsSize) {
  EXPECT_EQ(offsetof(dpl_plugin_header, struct_size), 0u);
  EXPECT_EQ(offsetof(dpl_plugin_header, magic), 4u);
  EXPECT_EQ(offsetof(dpl_plugin_header, kind), 8u);
  EXPECT_EQ(offsetof(dpl_plugin_header, abi_version), 12u);
  EXPECT_EQ(offsetof(dpl_backend_plugin_v1, header), 0u);
  EXPECT_EQ(offsetof(dpl_model_plugin_v1, header), 0u);
  EXPECT_EQ(offsetof(dpl_model_plugin_v2, header), 0u);
  EXPECT_EQ(offsetof(dpl_store_v1, struct_size), 0u);
  EXPECT_EQ(offsetof(dpl_store_v1, version), 4u);
  EXPECT_EQ(offsetof(dpl_backend_config_v1, struct_size), 0u);
  EXPECT_EQ(offsetof(dpl_backend_config_v1, version), 4u);
  EXPECT_EQ(offsetof(dpl_model_config_v1, struct_size), 0u);
  EXPECT_EQ(offsetof(dpl_model_config_v1, version), 4u);
  EXPECT_EQ(offsetof(dpl_model_info_v1, struct_size), 0u);
  EXPECT_EQ(offsetof(dpl_parameter_v1, struct_size), 0u);
  // The host reads struct_size as 32 bits before it knows anything else.
  EXPECT_EQ(sizeof(dpl_plugin_header{}.struct_size), 4u);
}

TEST(SdkTest, EnumValuesAreFixed) {
  EXPECT_EQ(DPL_OK, 0);
  EXPECT_EQ(DPL_ERR_INVALID_ARGUMENT, 1);
  EXPECT_EQ(DPL_ERR_UNSUPPORTED, 2);
  EXPECT_EQ(DPL_ERR_TIMEOUT, 3);
  EXPECT_EQ(DPL_ERR_COMMUNICATION, 4);
  EXPECT_EQ(DPL_ERR_NO_DEVICE, 5);
  EXPECT_EQ(DPL_ERR_IO, 6);
  EXPECT_EQ(DPL_ERR_BUFFER_TOO_SMALL, 7);
  EXPECT_EQ(DPL_ERR_NOT_FOUND, 8);
  EXPECT_EQ(DPL_ERR_INTERNAL, 9);
  EXPECT_EQ(DPL_PLUGIN_KIND_BACKEND, 1);
  EXPECT_EQ(DPL_PLUGIN_KIND_MODEL, 2);
  EXPECT_EQ(DPL_PLUGIN_KIND_DATASET, 3);
  EXPECT_EQ(DPL_DATASET_SPLIT_TRAIN, 0);
  EXPECT_EQ(DPL_DATASET_SPLIT_TEST, 1);
  EXPECT_EQ(DPL_DATASET_SPLIT_VALIDATION, 2);
  EXPECT_EQ(DPL_PRECISION_FP32, 0);
  EXPECT_EQ(DPL_PRECISION_BF16, 1);
  EXPECT_EQ(DPL_PRECISION_FP16, 2);
  EXPECT_EQ(DPL_MODEL_BROADCAST_BUFFERS, 1u);
  EXPECT_EQ(DPL_MODEL_HOST_BATCH_SLOTS, 2);
  EXPECT_EQ(DPL_LOG_DEBUG, 0);
  EXPECT_EQ(DPL_LOG_INFO, 1);
  EXPECT_EQ(DPL_LOG_WARNING, 2);
  EXPECT_EQ(DPL_LOG_ERROR, 3);
  EXPECT_EQ(DPL_REDUCE_SUM, 0);
  EXPECT_EQ(DPL_REDUCE_AVG, 1);
  EXPECT_EQ(DPL_REDUCE_MIN, 2);
  EXPECT_EQ(DPL_REDUCE_MAX, 3);
  EXPECT_EQ(DPL_MODEL_MODE_TRAIN, 0);
  EXPECT_EQ(DPL_MODEL_MODE_EVAL, 1);
  EXPECT_EQ(DPL_BACKEND_ABI_VERSION, 5u);
  EXPECT_EQ(DPL_MODEL_ABI_VERSION, 4u);
  EXPECT_EQ(DPL_DATASET_ABI_VERSION, 2u);
  EXPECT_EQ(DPL_MODEL_TENSORS_VALUES, 0);
  EXPECT_EQ(DPL_MODEL_TENSORS_GRADIENTS, 1);
  EXPECT_EQ(DPL_STORE_VERSION, 1u);
  EXPECT_EQ(DPL_MODEL_MAX_INPUT_DIMS, 8);
  EXPECT_EQ(DPL_MODEL_DEVICE_OPTIMIZER, 2u);
  EXPECT_EQ(DPL_MODEL_REPLACED_GRADIENTS, 4u);
  EXPECT_EQ(DPL_MODEL_TENSORS_OPTIMIZER_STATE, 16);
  EXPECT_EQ(DPL_OPTIMIZER_SGD, 0);
  EXPECT_EQ(DPL_OPTIMIZER_ADAM, 1);
  EXPECT_EQ(DPL_OPTIMIZER_ADAMW, 2);
  EXPECT_EQ(DPL_OPTIMIZER_ADADELTA, 3);
}

// Note [Adapting model ABI v1] of the plugin host: version 2 keeps version 1's functions in
// their places and only appends, so a v2 table begins with a v1 table.
TEST(SdkTest, ModelAbiV2AppendsToV1) {
  EXPECT_EQ(offsetof(dpl_model_plugin_v2, create), offsetof(dpl_model_plugin_v1, create));
  EXPECT_EQ(offsetof(dpl_model_plugin_v2, train_step), offsetof(dpl_model_plugin_v1, train_step));
  EXPECT_EQ(offsetof(dpl_model_plugin_v2, last_error), offsetof(dpl_model_plugin_v1, last_error));
  EXPECT_EQ(offsetof(dpl_model_plugin_v2, host_batch), sizeof(dpl_model_plugin_v1));
  EXPECT_GT(sizeof(dpl_model_plugin_v2), sizeof(dpl_model_plugin_v1));
}

// Version 3 appends to version 2's table, and its config and info begin with version 1's, so the
// host hands an older plugin the prefix it knows.
TEST(SdkTest, ModelAbiV3AppendsToV2AndItsStructsToV1s) {
  EXPECT_EQ(offsetof(dpl_model_plugin_v3, write_tensors),
            offsetof(dpl_model_plugin_v2, write_tensors));
  EXPECT_EQ(offsetof(dpl_model_plugin_v3, buffer), sizeof(dpl_model_plugin_v2));
  EXPECT_EQ(offsetof(dpl_model_config_v3, log_context), offsetof(dpl_model_config_v1, log_context));
  EXPECT_EQ(offsetof(dpl_model_config_v3, rank), offsetof(dpl_model_config_v1, reserved));
  EXPECT_EQ(offsetof(dpl_model_config_v3, input_ndim), sizeof(dpl_model_config_v1));
  EXPECT_EQ(offsetof(dpl_model_info_v3, reserved), offsetof(dpl_model_info_v1, reserved));
  EXPECT_EQ(offsetof(dpl_model_info_v3, buffer_count), sizeof(dpl_model_info_v1));
  EXPECT_EQ(offsetof(dpl_backend_plugin_v2, last_error),
            offsetof(dpl_backend_plugin_v1, last_error));
  EXPECT_EQ(offsetof(dpl_backend_plugin_v2, synchronize), sizeof(dpl_backend_plugin_v1));
  EXPECT_EQ(offsetof(dpl_backend_config_v2, options), offsetof(dpl_backend_config_v1, options));
  EXPECT_EQ(offsetof(dpl_backend_config_v2, local_address), sizeof(dpl_backend_config_v1));
}

// Version 4 appends to version 3's table, config and info, so a v3 plugin gets the prefix it
// knows.
TEST(SdkTest, ModelAbiV4AppendsToV3) {
  EXPECT_EQ(offsetof(dpl_model_plugin_v4, set_loss_scale),
            offsetof(dpl_model_plugin_v3, set_loss_scale));
  EXPECT_EQ(offsetof(dpl_model_plugin_v4, set_optimizer), sizeof(dpl_model_plugin_v3));
  EXPECT_EQ(offsetof(dpl_model_config_v4, precision), offsetof(dpl_model_config_v3, precision));
  EXPECT_EQ(offsetof(dpl_model_config_v4, input), sizeof(dpl_model_config_v3));
  EXPECT_EQ(offsetof(dpl_model_info_v4, stream), offsetof(dpl_model_info_v3, stream));
  EXPECT_EQ(offsetof(dpl_model_info_v4, input), sizeof(dpl_model_info_v3));
}

// Dataset ABI v2 keeps version 1's config and the places of its functions; its info is new
// (typed input and target), so the host converts a v1 plugin's info whole.
TEST(SdkTest, DatasetAbiV2KeepsV1sConfigAndEntries) {
  EXPECT_EQ(sizeof(dpl_dataset_config_v2), sizeof(dpl_dataset_config_v1));
  EXPECT_EQ(sizeof(dpl_dataset_plugin_v2), sizeof(dpl_dataset_plugin_v1));
  EXPECT_EQ(offsetof(dpl_dataset_plugin_v2, fill), offsetof(dpl_dataset_plugin_v1, fill));
  EXPECT_EQ(offsetof(dpl_dataset_plugin_v2, last_error),
            offsetof(dpl_dataset_plugin_v1, last_error));
  EXPECT_EQ(offsetof(dpl_dataset_info_v2, input), 8u);
  EXPECT_EQ(sizeof(dpl_sample_tensor_v2), 8u + 8u * DPL_DATASET_MAX_SAMPLE_DIMS);
  EXPECT_EQ(offsetof(dpl_dataset_info_v2, count), 8u + 2 * sizeof(dpl_sample_tensor_v2));
}

// Backend version 3 appends reduce_scatter to version 2's table and keeps its config.
TEST(SdkTest, BackendAbiV3AppendsToV2) {
  EXPECT_EQ(offsetof(dpl_backend_plugin_v3, synchronize),
            offsetof(dpl_backend_plugin_v2, synchronize));
  EXPECT_EQ(offsetof(dpl_backend_plugin_v3, reduce_scatter), sizeof(dpl_backend_plugin_v2));
  EXPECT_EQ(sizeof(dpl_backend_config_v3), sizeof(dpl_backend_config_v2));
}

// Backend version 4 appends abort to version 3's table and keeps its config.
TEST(SdkTest, BackendAbiV4AppendsToV3) {
  EXPECT_EQ(offsetof(dpl_backend_plugin_v4, reduce_scatter),
            offsetof(dpl_backend_plugin_v3, reduce_scatter));
  EXPECT_EQ(offsetof(dpl_backend_plugin_v4, abort), sizeof(dpl_backend_plugin_v3));
  EXPECT_EQ(sizeof(dpl_backend_plugin_v4), sizeof(dpl_backend_plugin_v3) + sizeof(void*));
  EXPECT_EQ(sizeof(dpl_backend_config_v4), sizeof(dpl_backend_config_v3));
}

// Backend version 5 appends send_receive to version 4's table and keeps its config.
TEST(SdkTest, BackendAbiV5AppendsToV4) {
  EXPECT_EQ(offsetof(dpl_backend_plugin_v5, abort), offsetof(dpl_backend_plugin_v4, abort));
  EXPECT_EQ(offsetof(dpl_backend_plugin_v5, send_receive), sizeof(dpl_backend_plugin_v4));
  EXPECT_EQ(sizeof(dpl_backend_plugin_v5), sizeof(dpl_backend_plugin_v4) + sizeof(void*));
  EXPECT_EQ(sizeof(dpl_backend_config_v5), sizeof(dpl_backend_config_v4));
}

TEST(SdkTest, MagicSpellsDplpInMemory) {
  const uint32_t magic = DPL_PLUGIN_MAGIC;
  char bytes[5] = {};
  std::memcpy(bytes, &magic, 4);
  EXPECT_STREQ(bytes, "DPLP");  // x86-64 and aarch64 are little-endian
}

TEST(SdkTest, EntrySymbolMacroNamesTheTable) {
  // The C translation unit declared its table under another name with DPL_PLUGIN_ENTRY_SYMBOL.
  const dpl_backend_plugin_v1* table = sdk_c_backend();
  ASSERT_NE(table, nullptr);
  EXPECT_EQ(table->header.struct_size, sizeof(dpl_backend_plugin_v1));
  EXPECT_EQ(table->header.magic, DPL_PLUGIN_MAGIC);
  EXPECT_STREQ(table->header.name, "c");
}

TEST(SdkTest, EntrySymbolMacroExpandsAMacroArgument) {
  // sdk_c_layout.c names its table through a macro; the symbol must carry the macro's value.
  void* self = dlopen(nullptr, RTLD_NOW);
  ASSERT_NE(self, nullptr);
  const auto* header =
      static_cast<const dpl_plugin_header*>(dlsym(self, "sdk_c_test_macro_named_entry"));
  ASSERT_NE(header, nullptr) << "the entry symbol did not get the macro's value";
  EXPECT_STREQ(header->name, "macro");
  EXPECT_EQ(dlsym(self, "SDK_C_MACRO_NAMED_ENTRY"), nullptr);
  dlclose(self);
}

}  // namespace
