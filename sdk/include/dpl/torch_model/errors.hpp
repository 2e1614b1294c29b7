// dpl SDK, libtorch model helper (internal part of dpl/torch_model.hpp): the error edge of every
// entry point. Each entry runs its body through Guarded, so no exception crosses the plugin edge
// and every message starts with `model "<name>": ` (dpl/support/error.hpp).
#ifndef DPL_TORCH_MODEL_ERRORS_HPP
#define DPL_TORCH_MODEL_ERRORS_HPP

#include <torch/torch.h>

#include <cstdint>
#include <exception>
#include <new>
#include <string>
#include <utility>

#include "dpl/support/error.hpp"

namespace dpl {
namespace torch_model {
namespace {

using support::PluginError;

// Runs `body` for the entry point `what` of model `model_name`; libtorch's own errors say which
// call failed (an IndexError, such as a label out of range, is the caller's fault).
template <typename Body>
dpl_status Guarded(const char* model_name, const char* what, Body&& body) {
  return support::Guarded(std::string("model \"") + model_name + "\"", [&] {
    try {
      body();
    } catch (const PluginError&) {
      throw;
    } catch (const c10::IndexError& error) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                        std::string(what) + ": " + error.what_without_backtrace());
    } catch (const c10::Error& error) {
      throw PluginError(DPL_ERR_INTERNAL, std::string(what) + " failed in libtorch: " +
                                              error.what_without_backtrace());
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception& error) {
      throw PluginError(DPL_ERR_INTERNAL, std::string(what) + " failed: " + error.what());
    } catch (...) {
      throw PluginError(DPL_ERR_INTERNAL, std::string(what) + " failed: unknown exception");
    }
  });
}

inline PluginError InvalidArgument(const std::string& message) {
  return PluginError(DPL_ERR_INVALID_ARGUMENT, message);
}

inline void RequireNotNull(const void* pointer, const char* what) {
  if (pointer == nullptr) throw InvalidArgument(std::string(what) + " is NULL");
}

// "(1, 28, 28)".
inline std::string ShapeText(const int64_t* shape, int64_t ndim) {
  std::string text = "(";
  for (int64_t i = 0; i < ndim; ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + ")";
}

inline std::string ShapeText(c10::IntArrayRef shape) {
  return ShapeText(shape.data(), static_cast<int64_t>(shape.size()));
}

}  // namespace
}  // namespace torch_model
}  // namespace dpl

#endif  // DPL_TORCH_MODEL_ERRORS_HPP
