// The adapter registry (plugin_host/adapter_registry.cpp): the versions it supports come from its
// adapters, and an adapter added at run time (as a test's) extends them.
#include "adapters/fake_tables.hpp"
#include "plugin_host/plugin_host.hpp"

namespace dpl::plugin_host::testing {
namespace {

TEST(AdapterRegistry, TheBuiltInVersions) {
  EXPECT_EQ(SupportedVersions(DPL_PLUGIN_KIND_BACKEND), (std::vector<uint32_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(SupportedVersions(DPL_PLUGIN_KIND_MODEL), (std::vector<uint32_t>{1, 2, 3, 4}));
  EXPECT_EQ(SupportedVersions(DPL_PLUGIN_KIND_DATASET), (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(SupportedAbiText(), "backend ABI v1..v5, model ABI v1..v4, dataset ABI v1..v2");
  EXPECT_EQ(FindAdapter(DPL_PLUGIN_KIND_MODEL, 5), nullptr);
  EXPECT_EQ(FindAdapter(DPL_PLUGIN_KIND_MODEL, 0), nullptr);
}

TEST(AdapterRegistry, TheFirstAbiWithACapability) {
  EXPECT_EQ(FirstAbiWith(ModelCapability::kHostCopy), "model ABI v2");
  for (ModelCapability capability : AllModelCapabilities()) {
    if (capability == ModelCapability::kHostCopy) continue;
    const bool v4 = capability == ModelCapability::kTypedSamples ||
                    capability == ModelCapability::kDeviceOptimizer;
    EXPECT_EQ(FirstAbiWith(capability), v4 ? "model ABI v4" : "model ABI v3")
        << uint32_t(capability);
  }
}

TEST(AdapterRegistry, TheNewestTablesRequiredEntries) {
  EXPECT_EQ(RequiredFunctions(DPL_PLUGIN_KIND_BACKEND),
            Names(AdapterOf(DPL_PLUGIN_KIND_BACKEND, 5).required(nullptr)));
  EXPECT_EQ(RequiredFunctions(DPL_PLUGIN_KIND_MODEL),
            Names(AdapterOf(DPL_PLUGIN_KIND_MODEL, 4).required(nullptr)));
  EXPECT_EQ(RequiredFunctions(DPL_PLUGIN_KIND_DATASET),
            Names(AdapterOf(DPL_PLUGIN_KIND_DATASET, 2).required(nullptr)));
}

RequiredEntries NoEntries(const void*) {
  return {};
}
DatasetInterface NoDataset(const void*) {
  return {};
}

TEST(AdapterRegistry, RefusesABadOrASecondAdapter) {
  const Adapter twin = AdapterOf(DPL_PLUGIN_KIND_MODEL, 2);
  EXPECT_EQ(RegisterAdapter(twin).message(), "an adapter for model ABI v2 is registered already");
  EXPECT_EQ(
      RegisterAdapter(MakeAdapter(0, 8, CapabilitySet<DatasetCapability>{}, &NoEntries, &NoDataset))
          .message(),
      "no adapter for dataset ABI v0");
  Adapter half = MakeAdapter(7, 8, CapabilitySet<DatasetCapability>{}, &NoEntries, &NoDataset);
  half.dataset = nullptr;
  EXPECT_EQ(RegisterAdapter(half).message(),
            "the adapter for dataset ABI v7 lacks its required entries or its interface; build "
            "it with MakeAdapter");
  EXPECT_EQ(FindAdapter(DPL_PLUGIN_KIND_DATASET, 7), nullptr);
}

TEST(AdapterRegistry, AnAddedVersionJoinsTheSupportedOnes) {
  ASSERT_TRUE(
      RegisterAdapter(MakeAdapter(5, 8, CapabilitySet<DatasetCapability>{}, &NoEntries, &NoDataset))
          .ok());
  EXPECT_EQ(SupportedVersionsText(DPL_PLUGIN_KIND_DATASET), "v1..v2, v5..v5");
  ASSERT_NE(FindAdapter(DPL_PLUGIN_KIND_DATASET, 5), nullptr);
  EXPECT_EQ(AbiName(DPL_PLUGIN_KIND_DATASET, 5), "dataset ABI v5");
}

}  // namespace
}  // namespace dpl::plugin_host::testing
