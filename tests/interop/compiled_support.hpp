// What the compiled model's tests share: compiled.py's fixtures (the packages, from
// tools/compile_model.py's cache, which the ctest fixture compiled_packages fills first) and
// compiled.py run as the reference.
#pragma once

#include <string>
#include <vector>

#include "support/shell_capture.hpp"

namespace dpl::compiled_test {

// Runs tests/interop/compiled.py with `arguments`; fails the test when it exits non-zero.
inline std::string RunCompiledPython(const std::string& arguments) {
  return dpl::testing::RunPythonScript(DPL_TEST_COMPILED_PYTHON, arguments);
}

// The folder compiled.py write fills, once for its sources.
inline const std::string& CompiledFixtureDir() {
  static const std::string directory = [] {
    std::vector<std::string> sources;
    for (const char* file :
         {"/tests/interop/compiled.py", "/tests/interop/interop.py", "/tools/compile_model.py",
          "/tools/compiled_package.py", "/tools/gpt_model.py", "/tools/recipe_convnet.py",
          "/tests/data_jobs/write_data.py"}) {
      sources.push_back(std::string(DPL_TEST_SOURCE_DIR) + file);
    }
    return dpl::testing::PythonFixtureFolder(DPL_TEST_COMPILED_PYTHON, sources,
                                             DPL_TEST_BINARY_DIR);
  }();
  return directory;
}

inline std::string CompiledFixture(const std::string& name) {
  return CompiledFixtureDir() + "/" + name;
}

}  // namespace dpl::compiled_test
