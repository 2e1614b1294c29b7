/* dpl SDK: the newest model ABI. Plugins include this and export the matching symbol. */
#ifndef DPL_MODEL_H
#define DPL_MODEL_H

#include "dpl/model_v3.h"

#define DPL_MODEL_ABI_VERSION DPL_MODEL_ABI_VERSION_3
typedef dpl_model_config_v3 dpl_model_config;
typedef dpl_model_info_v3 dpl_model_info;
typedef dpl_parameter_v2 dpl_parameter;
typedef dpl_buffer_v3 dpl_buffer;
typedef dpl_model_plugin_v3 dpl_model_plugin;

#endif /* DPL_MODEL_H */
