// dpl SDK, libtorch model helper (internal part of dpl/torch_model.hpp): the state of the random
// generators a model draws from (dropout), as the opaque bytes of model ABI v3's rng_state.
//
// A model draws from libtorch's default CPU generator and, on CUDA, from its device's default
// generator (torch.manual_seed seeds both in Python). The bytes are a small header ("DPLRNG",
// format 1, the generator count) followed, per generator, by its device type and index, the size
// of its state and the state libtorch's get_state() gives (what torch.get_rng_state() returns in
// Python). These generators belong to the process, not to one instance: two model instances in
// one process draw from the same ones.
#ifndef DPL_TORCH_MODEL_RNG_STATE_HPP
#define DPL_TORCH_MODEL_RNG_STATE_HPP

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "dpl/torch_model/errors.hpp"

namespace dpl {
namespace torch_model {
namespace {

constexpr char kRngStateMagic[8] = {'D', 'P', 'L', 'R', 'N', 'G', 0, 1};

struct GeneratorEntry {
  int32_t device_type;  // kDLCPU or kDLCUDA
  int32_t device_id;
  at::Generator generator;
};

inline std::vector<GeneratorEntry> ModelGenerators(c10::Device device) {
  std::vector<GeneratorEntry> generators{{kDLCPU, 0, at::detail::getDefaultCPUGenerator()}};
  if (device.is_cuda()) {
    generators.push_back({kDLCUDA, device.index(), at::globalContext().defaultGenerator(device)});
  }
  return generators;
}

inline torch::Tensor GeneratorState(at::Generator& generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

template <typename T>
void AppendBytes(std::vector<uint8_t>& bytes, const T& value) {
  const auto* first = reinterpret_cast<const uint8_t*>(&value);
  bytes.insert(bytes.end(), first, first + sizeof value);
}

inline std::vector<uint8_t> CaptureRngState(c10::Device device) {
  std::vector<uint8_t> bytes(kRngStateMagic, kRngStateMagic + sizeof kRngStateMagic);
  std::vector<GeneratorEntry> generators = ModelGenerators(device);
  AppendBytes(bytes, static_cast<uint32_t>(generators.size()));
  for (auto& entry : generators) {
    const torch::Tensor state = GeneratorState(entry.generator).contiguous();
    AppendBytes(bytes, entry.device_type);
    AppendBytes(bytes, entry.device_id);
    AppendBytes(bytes, static_cast<uint64_t>(state.numel()));
    const auto* data = state.data_ptr<uint8_t>();
    bytes.insert(bytes.end(), data, data + state.numel());
  }
  return bytes;
}

// Reads what CaptureRngState wrote for a model on the same device; anything else is refused
// before any generator changes.
inline void RestoreRngState(c10::Device device, const void* state, uint64_t size) {
  RequireNotNull(state, "state");
  const auto* bytes = static_cast<const uint8_t*>(state);
  uint64_t offset = 0;
  auto read = [&](void* target, uint64_t count) {
    if (size - offset < count) {
      throw InvalidArgument("rng state of " + std::to_string(size) +
                            " bytes is truncated; pass the bytes rng_state wrote");
    }
    std::memcpy(target, bytes + offset, count);
    offset += count;
  };
  char magic[sizeof kRngStateMagic] = {};
  if (size >= sizeof magic) read(magic, sizeof magic);
  if (std::memcmp(magic, kRngStateMagic, sizeof magic) != 0) {
    throw InvalidArgument("rng state of " + std::to_string(size) +
                          " bytes was not written by a dpl torch model's rng_state");
  }
  std::vector<GeneratorEntry> generators = ModelGenerators(device);
  uint32_t count = 0;
  read(&count, sizeof count);
  if (count != generators.size()) {
    throw InvalidArgument("rng state holds " + std::to_string(count) +
                          " generators, this model on " + device.str() + " draws from " +
                          std::to_string(generators.size()));
  }
  std::vector<torch::Tensor> states;
  for (const auto& entry : generators) {
    int32_t device_type = 0, device_id = 0;
    uint64_t length = 0;
    read(&device_type, sizeof device_type);
    read(&device_id, sizeof device_id);
    read(&length, sizeof length);
    if (device_type != entry.device_type || device_id != entry.device_id) {
      throw InvalidArgument("rng state is of generator (device type " +
                            std::to_string(device_type) + ", " + std::to_string(device_id) +
                            "), this model's is (device type " + std::to_string(entry.device_type) +
                            ", " + std::to_string(entry.device_id) + ")");
    }
    at::Generator generator = entry.generator;
    const int64_t expected = GeneratorState(generator).numel();
    if (length != static_cast<uint64_t>(expected)) {
      throw InvalidArgument("rng state of device type " + std::to_string(device_type) + " has " +
                            std::to_string(length) + " bytes, its generator's state " +
                            std::to_string(expected));
    }
    torch::Tensor restored = torch::empty({expected}, torch::kUInt8);
    read(restored.data_ptr<uint8_t>(), length);
    states.push_back(restored);
  }
  if (offset != size) {
    throw InvalidArgument("rng state has " + std::to_string(size - offset) +
                          " bytes past its last generator");
  }
  for (size_t i = 0; i < generators.size(); ++i) {
    std::lock_guard<std::mutex> lock(generators[i].generator.mutex());
    generators[i].generator.set_state(states[i]);
  }
}

// Restores the generators when the scope ends: work in between leaves no trace in them.
class RngStateKeeper {
 public:
  explicit RngStateKeeper(c10::Device device) : device_(device), state_(CaptureRngState(device)) {}
  ~RngStateKeeper() {
    try {
      RestoreRngState(device_, state_.data(), state_.size());
    } catch (...) {
      // The same bytes this process just wrote: nothing to report, nowhere to report it.
    }
  }
  RngStateKeeper(const RngStateKeeper&) = delete;
  RngStateKeeper& operator=(const RngStateKeeper&) = delete;

 private:
  c10::Device device_;
  std::vector<uint8_t> state_;
};

}  // namespace
}  // namespace torch_model
}  // namespace dpl

#endif  // DPL_TORCH_MODEL_RNG_STATE_HPP
