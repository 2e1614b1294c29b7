/* dpl SDK: the newest backend ABI. Plugins include this and export the matching symbol. */
#ifndef DPL_BACKEND_H
#define DPL_BACKEND_H

#include "dpl/backend_v4.h"

#define DPL_BACKEND_ABI_VERSION DPL_BACKEND_ABI_VERSION_4
typedef dpl_backend_config_v4 dpl_backend_config;
typedef dpl_backend_plugin_v4 dpl_backend_plugin;

#endif /* DPL_BACKEND_H */
