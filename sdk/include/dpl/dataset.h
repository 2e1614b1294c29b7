/* dpl SDK: the newest dataset ABI. Plugins include this and export the matching symbol. */
#ifndef DPL_DATASET_H
#define DPL_DATASET_H

#include "dpl/dataset_v2.h"

#define DPL_DATASET_ABI_VERSION DPL_DATASET_ABI_VERSION_2
typedef dpl_dataset_config_v2 dpl_dataset_config;
typedef dpl_dataset_info_v2 dpl_dataset_info;
typedef dpl_dataset_plugin_v2 dpl_dataset_plugin;
typedef dpl_sample_tensor_v2 dpl_sample_tensor;

#endif /* DPL_DATASET_H */
