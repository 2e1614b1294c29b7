/* dpl SDK: the newest dataset ABI. Plugins include this and export the matching symbol. */
#ifndef DPL_DATASET_H
#define DPL_DATASET_H

#include "dpl/dataset_v1.h"

#define DPL_DATASET_ABI_VERSION DPL_DATASET_ABI_VERSION_1
typedef dpl_dataset_config_v1 dpl_dataset_config;
typedef dpl_dataset_info_v1 dpl_dataset_info;
typedef dpl_dataset_plugin_v1 dpl_dataset_plugin;

#endif /* DPL_DATASET_H */
