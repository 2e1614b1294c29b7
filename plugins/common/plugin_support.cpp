#include "plugin_support.hpp"

#include <sstream>

namespace dpl::plugin {
namespace {
thread_local std::string thread_last_error;
}  // namespace

dpl_status fail(dpl_status status, const std::string& message) {
  thread_last_error = message;
  return status;
}

void clear_error() {
  thread_last_error.clear();
}

const char* last_error() {
  return thread_last_error.c_str();
}

std::map<std::string, std::string> parse_options(const char* options,
                                                 const std::vector<std::string>& allowed_keys) {
  std::map<std::string, std::string> parsed;
  const std::string text = options == nullptr ? "" : options;
  std::string allowed;
  for (const auto& key : allowed_keys) allowed += (allowed.empty() ? "" : ", ") + key;
  if (allowed.empty()) allowed = "none";
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    const std::string entry = text.substr(begin, end - begin);
    begin = end + 1;
    if (entry.empty()) continue;
    const size_t equals = entry.find('=');
    if (equals == std::string::npos || equals == 0) {
      throw PluginError(
          DPL_ERR_INVALID_ARGUMENT,
          "backend option '" + entry + "' is not key=value; allowed keys: " + allowed);
    }
    const std::string key = entry.substr(0, equals);
    bool known = false;
    for (const auto& allowed_key : allowed_keys) known = known || allowed_key == key;
    if (!known) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                        "unknown backend option '" + key + "'; allowed keys: " + allowed);
    }
    parsed[key] = entry.substr(equals + 1);
  }
  return parsed;
}

ElementType element_type(const DLDataType& dtype) {
  if (dtype.lanes != 1) return ElementType::kUnknown;
  switch (dtype.code) {
    case kDLFloat:
      if (dtype.bits == 16) return ElementType::kFloat16;
      if (dtype.bits == 32) return ElementType::kFloat32;
      if (dtype.bits == 64) return ElementType::kFloat64;
      break;
    case kDLBfloat:
      if (dtype.bits == 16) return ElementType::kBFloat16;
      break;
    case kDLInt:
      if (dtype.bits == 8) return ElementType::kInt8;
      if (dtype.bits == 32) return ElementType::kInt32;
      if (dtype.bits == 64) return ElementType::kInt64;
      break;
    case kDLUInt:
      if (dtype.bits == 8) return ElementType::kUInt8;
      break;
    default:
      break;
  }
  return ElementType::kUnknown;
}

std::string dtype_name(const DLDataType& dtype) {
  std::string base;
  switch (dtype.code) {
    case kDLInt:
      base = "int";
      break;
    case kDLUInt:
      base = "uint";
      break;
    case kDLFloat:
      base = "float";
      break;
    case kDLBfloat:
      base = "bfloat";
      break;
    case kDLComplex:
      base = "complex";
      break;
    case kDLOpaqueHandle:
      base = "opaque";
      break;
    default:
      base = "dtype_code" + std::to_string(dtype.code) + "_";
      break;
  }
  std::string name = base + std::to_string(dtype.bits);
  if (dtype.lanes != 1) name += "x" + std::to_string(dtype.lanes);
  return name;
}

const char* op_name(dpl_reduce_op op) {
  switch (op) {
    case DPL_REDUCE_SUM:
      return "sum";
    case DPL_REDUCE_AVG:
      return "avg";
    case DPL_REDUCE_MIN:
      return "min";
    case DPL_REDUCE_MAX:
      return "max";
  }
  return "unknown";
}

int64_t numel(const DLTensor& tensor) {
  int64_t count = 1;
  for (int32_t d = 0; d < tensor.ndim; ++d) count *= tensor.shape[d];
  return count;
}

size_t element_size(const DLDataType& dtype) {
  return static_cast<size_t>((dtype.bits + 7) / 8) * dtype.lanes;
}

void check_contiguous(const DLTensor& tensor, const char* what) {
  if (tensor.ndim < 0 || (tensor.ndim > 0 && tensor.shape == nullptr)) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT, std::string(what) + " has no shape");
  }
  for (int32_t d = 0; d < tensor.ndim; ++d) {
    if (tensor.shape[d] < 0) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT, std::string(what) + " has a negative extent");
    }
  }
  if (tensor.strides != nullptr) {
    int64_t expected = 1;
    for (int32_t d = tensor.ndim - 1; d >= 0; --d) {
      if (tensor.shape[d] != 1 && tensor.strides[d] != expected) {
        throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                          std::string(what) +
                              " is not contiguous; pass a dense row-major tensor (call "
                              ".contiguous() first)");
      }
      expected *= tensor.shape[d];
    }
  }
  if (numel(tensor) > 0 && tensor.data == nullptr) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT, std::string(what) + " has no data pointer");
  }
}

void check_cpu(const DLTensor& tensor, const char* backend_name, const char* what) {
  if (tensor.device.device_type != kDLCPU && tensor.device.device_type != kDLCUDAHost) {
    throw PluginError(DPL_ERR_UNSUPPORTED,
                      std::string(what) + " is on device type " +
                          std::to_string(tensor.device.device_type) + " but the " + backend_name +
                          " backend only moves CPU tensors; use --backend nccl "
                          "for CUDA tensors");
  }
}

size_t check_cpu_broadcast(const DLTensor& tensor, int32_t root, int32_t world_size,
                           const char* backend_name) {
  check_contiguous(tensor, "broadcast tensor");
  check_cpu(tensor, backend_name, "broadcast tensor");
  if (root < 0 || root >= world_size) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT, "broadcast root " + std::to_string(root) +
                                                    " is outside world size " +
                                                    std::to_string(world_size));
  }
  return static_cast<size_t>(numel(tensor)) * element_size(tensor.dtype);
}

size_t check_cpu_allgather(const DLTensor& input, const DLTensor& output, int32_t world_size,
                           const char* backend_name) {
  check_contiguous(input, "allgather input");
  check_contiguous(output, "allgather output");
  check_cpu(input, backend_name, "allgather input");
  check_cpu(output, backend_name, "allgather output");
  const size_t block = static_cast<size_t>(numel(input)) * element_size(input.dtype);
  const size_t out_bytes = static_cast<size_t>(numel(output)) * element_size(output.dtype);
  if (out_bytes != block * static_cast<size_t>(world_size)) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                      "allgather output holds " + std::to_string(out_bytes) +
                          " bytes but needs world_size * input = " +
                          std::to_string(block * static_cast<size_t>(world_size)));
  }
  return block;
}

void check_config(const dpl_backend_config_v1* config) {
  if (config == nullptr) throw PluginError(DPL_ERR_INVALID_ARGUMENT, "config is NULL");
  if (config->struct_size < sizeof(dpl_backend_config_v1)) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                      "config struct_size " + std::to_string(config->struct_size) +
                          " is smaller than dpl_backend_config_v1 (" +
                          std::to_string(sizeof(dpl_backend_config_v1)) + ")");
  }
  if (config->world_size < 1 || config->rank < 0 || config->rank >= config->world_size) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT, "rank " + std::to_string(config->rank) +
                                                    " is outside world size " +
                                                    std::to_string(config->world_size));
  }
  if (config->timeout_ms <= 0) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT, "timeout_ms must be > 0");
  }
  if (config->store == nullptr) throw PluginError(DPL_ERR_INVALID_ARGUMENT, "config has no store");
}

void log(const dpl_backend_config_v1& config, dpl_log_level level, const std::string& message) {
  if (config.log != nullptr) config.log(config.log_context, level, message.c_str());
}

}  // namespace dpl::plugin
