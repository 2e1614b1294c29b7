/* dpl SDK: everything. */
#ifndef DPL_DPL_H
#define DPL_DPL_H
#include "dpl/backend.h"
#include "dpl/common.h"
#include "dpl/dataset.h"
#include "dpl/model.h"
#include "dpl/store.h"
#define DPL_SDK_VERSION_STRING "0.1.0"
#endif /* DPL_DPL_H */
