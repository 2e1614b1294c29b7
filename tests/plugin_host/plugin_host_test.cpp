// The plugin host through its library API: good plugins load, each broken one is refused with its
// exact message, discovery finds duplicates, lookups list what exists.
#include "plugin_host/plugin_host.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace dpl::plugin_host {
namespace {

const std::string kGood = std::string(DPL_TEST_BINARY_DIR) + "/good";
const std::string kBroken = std::string(DPL_TEST_BINARY_DIR) + "/broken";
const std::string kModelV2 = std::string(DPL_TEST_BINARY_DIR) + "/model_v2";
const std::string kBrokenModels = std::string(DPL_TEST_BINARY_DIR) + "/broken_models";
const std::string kDuplicateA = std::string(DPL_TEST_BINARY_DIR) + "/duplicate_a";
const std::string kDuplicateB = std::string(DPL_TEST_BINARY_DIR) + "/duplicate_b";

class PluginHostTest : public ::testing::Test {
 protected:
  void SetUp() override { unsetenv("DPL_PLUGIN_PATH"); }
};

std::string Refusal(const std::string& path) {
  auto plugin = LoadPluginFile(path);
  EXPECT_FALSE(plugin.ok()) << path << " was loaded but should be refused";
  return plugin.status().message();
}

TEST_F(PluginHostTest, LoadsGoodBackend) {
  const std::string path = kGood + "/libtestgood_backend.so";
  auto plugin = LoadPluginFile(path);
  ASSERT_TRUE(plugin.ok()) << plugin.status().message();
  EXPECT_EQ(plugin->path, path);
  EXPECT_EQ(plugin->kind, DPL_PLUGIN_KIND_BACKEND);
  EXPECT_EQ(plugin->abi_version, 1u);
  EXPECT_EQ(plugin->name, "testgood");
  EXPECT_EQ(plugin->version, "0.0.1");
  EXPECT_EQ(plugin->description, "a plugin of the plugin host tests");
  ASSERT_NE(plugin->backend, nullptr);
  EXPECT_EQ(plugin->backend->abi, "backend ABI v1");
  EXPECT_FALSE(plugin->backend->Has(BackendCapability::kSynchronize));
  EXPECT_EQ(plugin->model, nullptr);
  EXPECT_EQ(plugin->dataset, nullptr);
  EXPECT_NE(plugin->library, nullptr);
}

TEST_F(PluginHostTest, LoadsGoodModel) {
  auto plugin = LoadPluginFile(kGood + "/libtestgood_model.so");
  ASSERT_TRUE(plugin.ok()) << plugin.status().message();
  EXPECT_EQ(plugin->kind, DPL_PLUGIN_KIND_MODEL);
  EXPECT_EQ(plugin->name, "testmodel");
  EXPECT_EQ(plugin->version, "0.0.2");
  ASSERT_NE(plugin->model, nullptr);
  EXPECT_EQ(plugin->backend, nullptr);
}

TEST_F(PluginHostTest, ModelAbiV1IsAdaptedToTheNewestInterface) {
  auto plugin = LoadPluginFile(kGood + "/libtestgood_model.so");
  ASSERT_TRUE(plugin.ok()) << plugin.status().message();
  EXPECT_EQ(plugin->abi_version, 1u);
  EXPECT_EQ(plugin->name, "testmodel");
  ASSERT_NE(plugin->model, nullptr);
  EXPECT_EQ(plugin->model->abi, "model ABI v1");
  // Every v1 function is carried over (the last one proves the order), the v2 ones are empty.
  ASSERT_TRUE(plugin->model->last_error);
  EXPECT_FALSE(plugin->model->Has(ModelCapability::kHostCopy));
  EXPECT_FALSE(plugin->model->host_batch);
  EXPECT_FALSE(plugin->model->read_tensors);
  EXPECT_FALSE(plugin->model->write_tensors);
  dpl_model_config config{};
  config.struct_size = sizeof config;
  config.options = "";
  dpl_model* model = nullptr;
  EXPECT_EQ(plugin->model->create(&config, &model), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(plugin->model->last_error(), "test model has no weights on purpose");
}

TEST_F(PluginHostTest, LoadsModelAbiV2AsIs) {
  auto plugin = LoadPluginFile(kModelV2 + "/libtestgood_model_v2.so");
  ASSERT_TRUE(plugin.ok()) << plugin.status().message();
  EXPECT_EQ(plugin->abi_version, 2u);
  EXPECT_EQ(plugin->name, "testmodel2");
  ASSERT_NE(plugin->model, nullptr);
  EXPECT_EQ(plugin->model->abi, "model ABI v2");
  EXPECT_TRUE(plugin->model->Has(ModelCapability::kHostCopy));
  EXPECT_FALSE(plugin->model->Has(ModelCapability::kBuffers));
  EXPECT_TRUE(plugin->model->host_batch);
  EXPECT_TRUE(plugin->model->read_tensors);
  EXPECT_TRUE(plugin->model->write_tensors);
}

TEST_F(PluginHostTest, RefusesModelV2WithoutAV2Function) {
  const std::string path = kBrokenModels + "/libnohostbatch.so";
  EXPECT_EQ(Refusal(path),
            path + ": model plugin 'nohostbatch' leaves the required function 'host_batch' NULL");
}

TEST_F(PluginHostTest, RefusesNewerModelAbi) {
  const std::string path = kBrokenModels + "/libmodelabi99.so";
  EXPECT_EQ(Refusal(path), path +
                               ": model plugin ABI v99 is newer than this launcher supports "
                               "(v1..v4); upgrade the launcher or rebuild the plugin against SDK "
                               "v4");
}

TEST_F(PluginHostTest, BackendCreateFailureCarriesPluginMessage) {
  auto plugin = LoadPluginFile(kGood + "/libtestgood_backend.so");
  ASSERT_TRUE(plugin.ok()) << plugin.status().message();
  dpl_backend_config config{};
  config.struct_size = sizeof config;
  config.world_size = 1;
  config.options = "";
  config.local_address = "";
  dpl_backend* backend = nullptr;
  const dpl_status status = plugin->backend->create(&config, &backend);
  EXPECT_EQ(backend, nullptr);
  EXPECT_EQ(DescribeCallFailure(*plugin, "create", status).message(),
            "backend plugin 'testgood' (" + kGood +
                "/libtestgood_backend.so) create failed with DPL_ERR_COMMUNICATION: test backend "
                "cannot reach its peers on purpose");
  EXPECT_TRUE(DescribeCallFailure(*plugin, "create", DPL_OK).ok());
}

TEST_F(PluginHostTest, ModelCreateFailureCarriesPluginMessage) {
  auto plugin = LoadPluginFile(kGood + "/libtestgood_model.so");
  ASSERT_TRUE(plugin.ok()) << plugin.status().message();
  dpl_model_config config{};
  config.struct_size = sizeof config;
  config.options = "";
  config.num_threads = 1;
  dpl_model* model = nullptr;
  const dpl_status status = plugin->model->create(&config, &model);
  EXPECT_EQ(DescribeCallFailure(*plugin, "create", status).message(),
            "model plugin 'testmodel' (" + kGood +
                "/libtestgood_model.so) create failed with DPL_ERR_INVALID_ARGUMENT: test model "
                "has no weights on purpose");
}

TEST_F(PluginHostTest, RefusesTextFile) {
  const std::string path = kBroken + "/libfake.so";
  EXPECT_EQ(Refusal(path),
            path + ": not a loadable shared library: " + path + ": invalid ELF header");
}

TEST_F(PluginHostTest, RefusesMissingFile) {
  const std::string path = kBroken + "/libdoesnotexist.so";
  EXPECT_EQ(Refusal(path), path + ": not a loadable shared library: " + path +
                               ": cannot open shared object file: No such file or directory");
}

TEST_F(PluginHostTest, RefusesLibraryWithoutEntrySymbol) {
  const std::string path = kBroken + "/libnosymbol.so";
  EXPECT_EQ(Refusal(path), path +
                               ": not a dpl plugin: no symbol dpl_backend_plugin_v5, "
                               "dpl_model_plugin_v4 or dpl_dataset_plugin_v2");
}

TEST_F(PluginHostTest, RefusesBadMagic) {
  const std::string path = kBroken + "/libbadmagic.so";
  EXPECT_EQ(Refusal(path), path +
                               ": symbol dpl_backend_plugin_v1 has bad magic 0x12345678 (expected "
                               "0x504C5044); it was not built against the dpl SDK");
}

TEST_F(PluginHostTest, RefusesNewerAbi) {
  const std::string path = kBroken + "/libabi9.so";
  EXPECT_EQ(Refusal(path), path +
                               ": backend plugin ABI v9 is newer than this launcher supports "
                               "(v1..v5); upgrade the launcher or rebuild the plugin against SDK "
                               "v5");
}

TEST_F(PluginHostTest, RefusesOlderAbi) {
  const std::string path = kBroken + "/libabi0.so";
  EXPECT_EQ(Refusal(path), path +
                               ": backend plugin ABI v0 is older than this launcher supports "
                               "(v1..v5); rebuild the plugin against SDK v5");
}

TEST_F(PluginHostTest, RefusesKindMismatch) {
  const std::string path = kBroken + "/libkindmismatch.so";
  EXPECT_EQ(Refusal(path), path +
                               ": symbol dpl_backend_plugin_v1 declares plugin kind 2 (model), "
                               "expected 1 (backend)");
}

TEST_F(PluginHostTest, RefusesAbiVersionNotMatchingSymbol) {
  const std::string path = kBroken + "/libabimismatch.so";
  EXPECT_EQ(Refusal(path), path +
                               ": symbol dpl_backend_plugin_v1 declares ABI version 2, which does "
                               "not match its name; rebuild the plugin against the dpl SDK");
}

TEST_F(PluginHostTest, RefusesTableSmallerThanAbi) {
  const std::string path = kBroken + "/libsmalltable.so";
  EXPECT_EQ(Refusal(path), path + ": symbol dpl_backend_plugin_v1 is a table of " +
                               std::to_string(sizeof(dpl_plugin_header)) +
                               " bytes, smaller than the " +
                               std::to_string(sizeof(dpl_backend_plugin_v1)) +
                               " bytes of backend ABI v1; rebuild the plugin against the dpl SDK");
}

TEST_F(PluginHostTest, RefusesNullRequiredFunction) {
  const std::string path = kBroken + "/libnullcreate.so";
  EXPECT_EQ(Refusal(path),
            path + ": backend plugin 'nullcreate' leaves the required function 'create' NULL");
}

TEST_F(PluginHostTest, DiscoveryListsGoodAndRefusedInOrder) {
  auto discovery = DiscoverPlugins({kGood, kBroken});
  ASSERT_TRUE(discovery.ok()) << discovery.status().message();
  ASSERT_GE(discovery->search_path.size(), 2u);
  EXPECT_EQ(discovery->search_path[0], kGood);
  EXPECT_EQ(discovery->search_path[1], kBroken);
  ASSERT_EQ(discovery->plugins.size(), 2u);
  EXPECT_EQ(discovery->plugins[0].name, "testgood");
  EXPECT_EQ(discovery->plugins[1].name, "testmodel");
  // Every broken file, sorted by name; README.txt is not considered at all.
  std::vector<std::string> refused;
  for (const auto& file : discovery->refused) refused.push_back(file.path);
  const std::vector<std::string> expected = {
      kBroken + "/libabi0.so",     kBroken + "/libabi9.so",       kBroken + "/libabimismatch.so",
      kBroken + "/libbadmagic.so", kBroken + "/libfake.so",       kBroken + "/libkindmismatch.so",
      kBroken + "/libnosymbol.so", kBroken + "/libnullcreate.so", kBroken + "/libsmalltable.so"};
  EXPECT_EQ(refused, expected);
  EXPECT_EQ(discovery->refused[6].reason,
            "not a dpl plugin: no symbol dpl_backend_plugin_v5, dpl_model_plugin_v4 or "
            "dpl_dataset_plugin_v2");
}

TEST_F(PluginHostTest, DuplicateNamesNameBothPaths) {
  auto discovery = DiscoverPlugins({kDuplicateA, kDuplicateB});
  ASSERT_FALSE(discovery.ok());
  EXPECT_EQ(discovery.status().message(), "two backend plugins are named 'dup': " + kDuplicateA +
                                              "/libdup.so and " + kDuplicateB +
                                              "/libdup.so; remove or rename one of them");
}

TEST_F(PluginHostTest, SameFolderTwiceIsSearchedOnce) {
  auto discovery = DiscoverPlugins({kDuplicateA, kDuplicateA + "/"});
  ASSERT_TRUE(discovery.ok()) << discovery.status().message();
  EXPECT_EQ(discovery->plugins.size(), 1u);
}

TEST_F(PluginHostTest, EnvironmentPathComesAfterPluginDirs) {
  setenv("DPL_PLUGIN_PATH", (kDuplicateA + ":" + kGood).c_str(), 1);
  const auto path = PluginSearchPath({kBroken});
  ASSERT_GE(path.size(), 3u);
  EXPECT_EQ(path[0], kBroken);
  EXPECT_EQ(path[1], kDuplicateA);
  EXPECT_EQ(path[2], kGood);
  unsetenv("DPL_PLUGIN_PATH");
}

TEST_F(PluginHostTest, MissingPluginDirIsAnError) {
  auto discovery = DiscoverPlugins({kGood + "/nope"});
  ASSERT_FALSE(discovery.ok());
  EXPECT_EQ(
      discovery.status().message(),
      "--plugin-dir " + kGood + "/nope is not a folder; pass a folder holding plugin .so files");
}

TEST_F(PluginHostTest, UnknownNameListsWhatExists) {
  auto discovery = DiscoverPlugins({kGood});
  ASSERT_TRUE(discovery.ok()) << discovery.status().message();
  auto backend = FindPlugin(*discovery, DPL_PLUGIN_KIND_BACKEND, "nosuch");
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().message(),
            "unknown --backend 'nosuch'; the backend plugins found are: testgood (searched: " +
                kGood + ")");
  auto model = FindPlugin(*discovery, DPL_PLUGIN_KIND_MODEL, "testgood");
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().message(),
            "unknown --model 'testgood'; the model plugins found are: testmodel (searched: " +
                kGood + ")");
  auto found = FindPlugin(*discovery, DPL_PLUGIN_KIND_MODEL, "testmodel");
  ASSERT_TRUE(found.ok()) << found.status().message();
  EXPECT_EQ(found->name, "testmodel");
}

TEST_F(PluginHostTest, UnknownNameAlsoShowsRefusedFiles) {
  auto discovery = DiscoverPlugins({kDuplicateA, kBroken});
  ASSERT_TRUE(discovery.ok()) << discovery.status().message();
  auto backend = FindPlugin(*discovery, DPL_PLUGIN_KIND_BACKEND, "abi9");
  ASSERT_FALSE(backend.ok());
  EXPECT_NE(backend.status().message().find(
                "; refused " + kBroken +
                "/libabi9.so: backend plugin ABI v9 is newer than this launcher supports (v1..v5)"),
            std::string::npos)
      << backend.status().message();
}

TEST_F(PluginHostTest, AutoBackendFallsBackAndSaysWhy) {
  auto discovery = DiscoverPlugins({kGood});
  ASSERT_TRUE(discovery.ok()) << discovery.status().message();
  std::string reason;
  auto chosen = ChooseBackend(*discovery, "auto", "cuda", &reason);
  ASSERT_FALSE(chosen.ok());
  EXPECT_EQ(chosen.status().message(),
            "--backend auto found none of nccl, gloo, tcp; the backend plugins found are: "
            "testgood (searched: " +
                kGood + "); pass --backend <name> or --plugin-dir");
  auto named = ChooseBackend(*discovery, "testgood", "cpu", &reason);
  ASSERT_TRUE(named.ok()) << named.status().message();
  EXPECT_EQ(named->name, "testgood");
  EXPECT_EQ(reason, "--backend testgood was requested");
}

TEST_F(PluginHostTest, AutoBackendPreferenceOrder) {
  auto all = DiscoverPlugins({std::string(DPL_TEST_BINARY_DIR) + "/all_backends"});
  ASSERT_TRUE(all.ok()) << all.status().message();
  std::string reason;
  auto on_cuda = ChooseBackend(*all, "auto", "cuda", &reason);
  ASSERT_TRUE(on_cuda.ok()) << on_cuda.status().message();
  EXPECT_EQ(on_cuda->name, "nccl");
  EXPECT_EQ(reason, "--backend auto chose nccl: the device is cuda and the nccl plugin is present");
  auto on_cpu = ChooseBackend(*all, "auto", "cpu", &reason);
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status().message();
  EXPECT_EQ(on_cpu->name, "gloo");
  EXPECT_EQ(reason, "--backend auto chose gloo: the device is cpu");

  auto tcp_only = DiscoverPlugins({std::string(DPL_TEST_BINARY_DIR) + "/tcp_only"});
  ASSERT_TRUE(tcp_only.ok()) << tcp_only.status().message();
  auto fallback = ChooseBackend(*tcp_only, "auto", "cuda", &reason);
  ASSERT_TRUE(fallback.ok()) << fallback.status().message();
  EXPECT_EQ(fallback->name, "tcp");
  EXPECT_EQ(reason,
            "--backend auto chose tcp: the device is cuda but no nccl plugin was found and no gloo "
            "plugin was found");
}

// ChooseBackend's preference order on the real in-tree backends, when they are built.
TEST_F(PluginHostTest, AutoBackendPrefersGlooOnCpu) {
  auto discovery = DiscoverPlugins({DPL_TEST_PLUGIN_DIR});
  ASSERT_TRUE(discovery.ok()) << discovery.status().message();
  std::string reason;
  auto chosen = ChooseBackend(*discovery, "auto", "cpu", &reason);
  bool has_gloo = false;
  bool has_tcp = false;
  for (const auto& plugin : discovery->plugins) {
    has_gloo |= plugin.kind == DPL_PLUGIN_KIND_BACKEND && plugin.name == "gloo";
    has_tcp |= plugin.kind == DPL_PLUGIN_KIND_BACKEND && plugin.name == "tcp";
  }
  if (!has_gloo && !has_tcp) GTEST_SKIP() << "no gloo or tcp plugin built in " DPL_TEST_PLUGIN_DIR;
  ASSERT_TRUE(chosen.ok()) << chosen.status().message();
  if (has_gloo) {
    EXPECT_EQ(chosen->name, "gloo");
    EXPECT_EQ(reason, "--backend auto chose gloo: the device is cpu");
  } else {
    EXPECT_EQ(chosen->name, "tcp");
    EXPECT_EQ(reason, "--backend auto chose tcp: the device is cpu and no gloo plugin was found");
  }
}

TEST_F(PluginHostTest, PluginListShowsTableAndRefusals) {
  auto discovery = DiscoverPlugins({kGood, kBroken});
  ASSERT_TRUE(discovery.ok()) << discovery.status().message();
  const std::string text = FormatPluginList(*discovery);
  EXPECT_NE(text.find("KIND     NAME       VERSION  ABI  PATH\n"), std::string::npos) << text;
  EXPECT_NE(text.find("backend  testgood   0.0.1    v1   " + kGood + "/libtestgood_backend.so\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("model    testmodel  0.0.2    v1   " + kGood + "/libtestgood_model.so\n"),
            std::string::npos)
      << text;
  // An older backend ABI: what it lacks, and what that costs.
  EXPECT_NE(text.find("backend testgood (ABI v1) lacks abort (a collective blocked on a lost peer "
                      "ends only at --backend-timeout), reduce_scatter (made of allreduce, at its "
                      "traffic), send_receive (one rank's bytes go by an allgather)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("refused:\n  " + kBroken +
                      "/libabi0.so: backend plugin ABI v0 is older than this launcher supports"),
            std::string::npos)
      << text;
}

TEST_F(PluginHostTest, StatusNamesAreTheEnumNames) {
  EXPECT_STREQ(StatusName(DPL_OK), "DPL_OK");
  EXPECT_STREQ(StatusName(DPL_ERR_NO_DEVICE), "DPL_ERR_NO_DEVICE");
  EXPECT_STREQ(StatusName(DPL_ERR_INTERNAL), "DPL_ERR_INTERNAL");
  EXPECT_STREQ(StatusName(static_cast<dpl_status>(77)), "unknown dpl_status");
}

}  // namespace
}  // namespace dpl::plugin_host
