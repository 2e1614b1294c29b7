/* dpl SDK: the newest model ABI. Plugins include this and export the matching symbol. */
#ifndef DPL_MODEL_H
#define DPL_MODEL_H

#include "dpl/model_v4.h"

#define DPL_MODEL_ABI_VERSION DPL_MODEL_ABI_VERSION_4
typedef dpl_model_config_v4 dpl_model_config;
typedef dpl_model_info_v4 dpl_model_info;
typedef dpl_parameter_v2 dpl_parameter;
typedef dpl_buffer_v3 dpl_buffer;
typedef dpl_eval_result_v4 dpl_eval_result;
typedef dpl_optimizer_config_v4 dpl_optimizer_config;
typedef dpl_update_v4 dpl_update;
typedef dpl_gradient_statistics_v4 dpl_gradient_statistics;
typedef dpl_model_plugin_v4 dpl_model_plugin;

#endif /* DPL_MODEL_H */
