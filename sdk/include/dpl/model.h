/* dpl SDK: the newest model ABI. Plugins include this and export the matching symbol. */
#ifndef DPL_MODEL_H
#define DPL_MODEL_H

#include "dpl/model_v2.h"

#define DPL_MODEL_ABI_VERSION DPL_MODEL_ABI_VERSION_2
typedef dpl_model_config_v2 dpl_model_config;
typedef dpl_model_info_v2 dpl_model_info;
typedef dpl_parameter_v2 dpl_parameter;
typedef dpl_model_plugin_v2 dpl_model_plugin;

#endif /* DPL_MODEL_H */
