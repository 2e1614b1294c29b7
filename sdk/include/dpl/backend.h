/* dpl SDK: the newest backend ABI. Plugins include this and export the matching symbol. */
#ifndef DPL_BACKEND_H
#define DPL_BACKEND_H

#include "dpl/backend_v5.h"

#define DPL_BACKEND_ABI_VERSION DPL_BACKEND_ABI_VERSION_5
typedef dpl_backend_config_v5 dpl_backend_config;
typedef dpl_backend_plugin_v5 dpl_backend_plugin;

#endif /* DPL_BACKEND_H */
