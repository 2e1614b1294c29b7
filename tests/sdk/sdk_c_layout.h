/* The C side of the SDK layout test: offsets and sizes as the C compiler sees them. */
#ifndef DPL_TESTS_SDK_C_LAYOUT_H
#define DPL_TESTS_SDK_C_LAYOUT_H

#include <stddef.h>

#include "dpl/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sdk_layout_entry {
  const char* what; /* "type.field" or "sizeof type" */
  size_t value;
} sdk_layout_entry;

const sdk_layout_entry* sdk_c_layout(size_t* count);
const dpl_backend_plugin_v1* sdk_c_backend(void);

#ifdef __cplusplus
}
#endif

#endif /* DPL_TESTS_SDK_C_LAYOUT_H */
