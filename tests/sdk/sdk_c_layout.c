/* Compiled as strict C99 (-std=c99 -pedantic -Werror): every SDK header must stay C. It also
 * reports the C compiler's view of the ABI layout, which sdk_test.cpp compares with C++'s. */
#include <stddef.h>

#include "dpl/backend.h"
#include "dpl/backend_v1.h"
#include "dpl/backend_v2.h"
#include "dpl/backend_v3.h"
#include "dpl/backend_v4.h"
#include "dpl/backend_v5.h"
#include "dpl/common.h"
#include "dpl/dataset.h"
#include "dpl/dataset_v1.h"
#include "dpl/dataset_v2.h"
#include "dpl/dpl.h"
#include "dpl/model.h"
#include "dpl/model_v1.h"
#include "dpl/model_v2.h"
#include "dpl/model_v3.h"
#include "dpl/model_v4.h"
#include "dpl/store.h"
#include "sdk_c_layout.h"

/* A plugin written in C can declare its entry table the documented way. */
DPL_PLUGIN_EXPORT extern const dpl_backend_plugin_v1 sdk_c_backend_table
    DPL_PLUGIN_ENTRY_SYMBOL(sdk_c_test_backend_entry);
const dpl_backend_plugin_v1 sdk_c_backend_table = {
    {(uint32_t)sizeof(dpl_backend_plugin_v1), DPL_PLUGIN_MAGIC, DPL_PLUGIN_KIND_BACKEND,
     DPL_BACKEND_ABI_VERSION_1, "c", "1", NULL},
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL};

/* The entry symbol's name may come from a macro: DPL_PLUGIN_ENTRY_SYMBOL expands it first. */
#define SDK_C_MACRO_NAMED_ENTRY sdk_c_test_macro_named_entry
DPL_PLUGIN_EXPORT extern const dpl_plugin_header sdk_c_macro_table
    DPL_PLUGIN_ENTRY_SYMBOL(SDK_C_MACRO_NAMED_ENTRY);
const dpl_plugin_header sdk_c_macro_table = {(uint32_t)sizeof(dpl_plugin_header),
                                             DPL_PLUGIN_MAGIC,
                                             DPL_PLUGIN_KIND_DATASET,
                                             DPL_DATASET_ABI_VERSION_1,
                                             "macro",
                                             "1",
                                             NULL};

#define ENTRY(type, field) \
  { #type "." #field, offsetof(type, field) }
#define SIZE(type) \
  { "sizeof " #type, sizeof(type) }

static const sdk_layout_entry kLayout[] = {
#include "sdk_layout_entries.inc"
};

const sdk_layout_entry* sdk_c_layout(size_t* count) {
  *count = sizeof kLayout / sizeof kLayout[0];
  return kLayout;
}

const dpl_backend_plugin_v1* sdk_c_backend(void) {
  return &sdk_c_backend_table;
}
