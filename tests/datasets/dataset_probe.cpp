// usage: dataset_probe PLUGIN.so DATA_DIR train|test
// Loads a dataset plugin as a host does (dlopen, the entry table checked), opens the split,
// describes it and fills every sample, printing what it got:
//     dataset <name> <version> v<abi>
//     shape (<dims>) count <n> classes <k>
//     <index>: <label> | <values...>
// or the plugin's error and exit status 1. Used by dataset_template_test.sh on the out-of-tree
// template.
#include <dlfcn.h>

#include <cstdio>
#include <string>
#include <vector>

#include "dpl/dataset.h"

namespace {

// The plugin's dataset ABI v1 table, or NULL after printing why there is none.
const dpl_dataset_plugin_v1* LoadTable(const char* path) {
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::printf("dlopen failed: %s\n", dlerror());
    return nullptr;
  }
  const auto* table =
      static_cast<const dpl_dataset_plugin_v1*>(dlsym(handle, "dpl_dataset_plugin_v1"));
  if (table == nullptr || table->header.magic != DPL_PLUGIN_MAGIC ||
      table->header.kind != DPL_PLUGIN_KIND_DATASET ||
      table->header.abi_version != DPL_DATASET_ABI_VERSION_1 ||
      table->header.struct_size < sizeof(dpl_dataset_plugin_v1)) {
    std::printf("%s: no dataset ABI v1 table\n", path);
    return nullptr;
  }
  return table;
}

// The split `split` of the data in `dir`, or NULL after printing the plugin's error.
dpl_dataset* Open(const dpl_dataset_plugin_v1& table, const char* dir, const std::string& split) {
  dpl_dataset_config_v1 config{};
  config.struct_size = sizeof config;
  config.version = DPL_DATASET_ABI_VERSION_1;
  config.path = dir;
  config.options = "";
  config.split = split == "test" ? DPL_DATASET_SPLIT_TEST : DPL_DATASET_SPLIT_TRAIN;
  config.num_threads = 1;
  config.cache_dir = "";
  dpl_dataset* dataset = nullptr;
  if (dpl_status status = table.create(&config, &dataset); status != DPL_OK) {
    std::printf("create failed (status %d): %s\n", int(status), table.last_error());
    return nullptr;
  }
  return dataset;
}

// Prints the split's shape and every sample; the exit status.
int PrintSamples(const dpl_dataset_plugin_v1& table, dpl_dataset* dataset) {
  dpl_dataset_info_v1 info{};
  info.struct_size = sizeof info;
  if (table.describe(dataset, &info) != DPL_OK) {
    std::printf("describe failed: %s\n", table.last_error());
    return 1;
  }
  std::vector<int64_t> input_shape{info.count};
  int64_t elements = 1;
  std::string shape;
  for (uint32_t d = 0; d < info.sample_ndim; ++d) {
    input_shape.push_back(info.sample_shape[d]);
    elements *= info.sample_shape[d];
    shape += (d ? ", " : "") + std::to_string(info.sample_shape[d]);
  }
  std::printf("shape (%s) count %lld classes %lld\n", shape.c_str(), (long long)info.count,
              (long long)info.num_classes);
  std::vector<float> values(size_t(info.count * elements));
  std::vector<int64_t> labels(size_t(info.count));
  std::vector<int64_t> indices(size_t(info.count));
  for (size_t i = 0; i < indices.size(); ++i) indices[i] = int64_t(i);
  int64_t label_shape[] = {info.count};
  DLTensor input{values.data(),
                 {kDLCPU, 0},
                 int32_t(input_shape.size()),
                 {kDLFloat, 32, 1},
                 input_shape.data(),
                 nullptr,
                 0};
  DLTensor targets{labels.data(), {kDLCPU, 0}, 1, {kDLInt, 64, 1}, label_shape, nullptr, 0};
  if (table.fill(dataset, indices.data(), 0, &input, &targets) != DPL_OK) {
    std::printf("fill failed: %s\n", table.last_error());
    return 1;
  }
  for (int64_t i = 0; i < info.count; ++i) {
    std::printf("%lld: %lld |", (long long)i, (long long)labels[size_t(i)]);
    for (int64_t e = 0; e < elements; ++e)
      std::printf(" %g", double(values[size_t(i * elements + e)]));
    std::printf("\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s PLUGIN.so DATA_DIR train|test\n", argv[0]);
    return 2;
  }
  const dpl_dataset_plugin_v1* table = LoadTable(argv[1]);
  if (table == nullptr) return 1;
  std::printf("dataset %s %s v%u\n", table->header.name, table->header.version,
              table->header.abi_version);
  dpl_dataset* dataset = Open(*table, argv[2], argv[3]);
  if (dataset == nullptr) return 1;
  const int printed = PrintSamples(*table, dataset);
  if (printed != 0) return printed;
  table->destroy(dataset);
  return 0;
}
