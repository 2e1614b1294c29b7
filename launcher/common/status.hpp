// The launcher's one error style: Status and Result<T> (dpl/support/status.hpp). The class lives
// in the SDK because the torch_files library, shared by the launcher and the SDK's libtorch
// helper, returns it too.
#pragma once

#include "dpl/support/status.hpp"

// `lhs` (a declaration such as `int count`, or a variable) gets the value of `expr`, a Result; a
// failure is returned as it is:
//     DPL_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Create(plugin, config));
// (A type with a comma in it is written `auto`.)
#define DPL_ASSIGN_OR_RETURN(lhs, ...) \
  DPL_ASSIGN_OR_RETURN_IMPL_(DPL_STATUS_CONCAT_(dpl_result_, __LINE__), lhs, (__VA_ARGS__))
#define DPL_ASSIGN_OR_RETURN_IMPL_(result, lhs, expr) \
  auto result = expr;                                 \
  if (!result.ok()) return result.status();           \
  lhs = std::move(result).value()
#define DPL_STATUS_CONCAT_(a, b) DPL_STATUS_CONCAT_INNER_(a, b)
#define DPL_STATUS_CONCAT_INNER_(a, b) a##b
