// The launcher's one error style: Status and Result<T> (dpl/support/status.hpp). The class lives
// in the SDK because the torch_files library, shared by the launcher and the SDK's libtorch
// helper, returns it too.
#pragma once

#include "dpl/support/status.hpp"
