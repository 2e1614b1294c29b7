// The enum name of an SDK status code, for messages ("failed with DPL_ERR_TIMEOUT: ...").
#pragma once

#include "dpl/common.h"

namespace dpl {

const char* StatusName(dpl_status status);

}  // namespace dpl
