// Does the host use every entry of every plugin table it requires? The recording plugins
// (recording_*.cpp) wrap real plugins (tcp, a BatchNorm model with buffers, idx) and record each
// function the host calls; the launcher runs a set of jobs that together should reach every
// entry: a selftest, training in place and with --mirror-parameters, --export and --init-from,
// checkpoints and --resume, and creates that fail (last_error). The union of the calls must hold
// every function the recording plugins expose, which must be the functions the plugin host
// requires of the newest ABI of each kind (plugin_host::RequiredFunctions). Older ABIs (backend
// v1, model v2) train through the launcher as well; model v1: tests/training/end_to_end_test.cpp;
// dataset v1: the recording dataset itself (it is a v1 table around the newest idx).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "plugin_host/plugin_host.hpp"
#include "support/idx_writer.hpp"

namespace {

namespace fs = std::filesystem;
using dpl::plugin_host::LoadPluginFile;
using dpl::plugin_host::RequiredFunctions;

const std::string kPluginDir = DPL_TEST_PLUGIN_DIR;
const std::string kRecordingDir = DPL_TEST_RECORDING_DIR;
const std::string kRecordingV1Dir = DPL_TEST_RECORDING_V1_DIR;
// The backend the recording one wraps: of the newest backend ABI (v5; tcp is of v4).
const std::string kGloo = kPluginDir + "/libdpl_backend_gloo.so";
const std::string kIdx = kPluginDir + "/libdpl_dataset_idx.so";
const std::string kBatchNorm = DPL_TEST_BATCHNORM_MODEL;
const std::string kBatchNormV2 = DPL_TEST_BATCHNORM_V2_MODEL;
const std::string kScaled = DPL_TEST_SCALED_MODEL;

struct RecordingPlugin {
  dpl_plugin_kind kind;
  const char* word;  // as in the names of the files of recorded calls
  std::string path;
};

const std::vector<RecordingPlugin>& RecordingPlugins() {
  static const std::vector<RecordingPlugin> plugins = {
      {DPL_PLUGIN_KIND_BACKEND, "backend", kRecordingDir + "/libdpl_recording_backend.so"},
      {DPL_PLUGIN_KIND_MODEL, "model", kRecordingDir + "/libdpl_recording_model.so"},
      {DPL_PLUGIN_KIND_DATASET, "dataset", kRecordingDir + "/libdpl_recording_dataset.so"}};
  return plugins;
}

// Note [Entries a CPU run does not reach]: an entry the host calls only where this machine
// cannot run (a GPU, several machines) or only on a failure these jobs do not make is listed here
// with the reason; every other entry must be called by the jobs below. An exempt entry that is
// called after all fails the test too, so the list never outlives its reason.
struct Exemption {
  const char* kind;
  const char* function;
  const char* reason;
};
const std::vector<Exemption> kExemptions = {
    {"backend", "abort",
     "the host aborts a backend instance only when a front's collectives are aborted (Note "
     "[Aborting collectives]), for a peer lost while a collective runs; no job here loses one "
     "(tests/backends/backend_abort_test.cpp calls it on tcp and gloo)"},
    {"backend", "send_receive",
     "the host sends to one rank only the gradients of the copy of each part of the sharded "
     "optimizer (Note [A copy of each part]), which is kept on another machine; every job here "
     "runs on one (tests/backends/send_receive_conformance_test.cpp calls it on gloo, and "
     "tests/supervision's shrink-in-place tests run it in 3-machine jobs)"}};

std::set<std::string> Lines(const std::string& text) {
  std::set<std::string> lines;
  std::stringstream stream(text);
  for (std::string line; std::getline(stream, line);) {
    if (!line.empty()) lines.insert(line);
  }
  return lines;
}

std::string Joined(const std::set<std::string>& names) {
  std::string text;
  for (const auto& name : names) text += (text.empty() ? "" : ", ") + name;
  return text.empty() ? "(none)" : text;
}

// The functions a recording plugin's table exposes (its non-NULL slots), as it lists them.
std::set<std::string> ExposedFunctions(const std::string& path) {
  void* library = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    ADD_FAILURE() << "cannot load " << path << ": " << ::dlerror();
    return {};
  }
  using ListFunction = const char* (*)();
  auto list = reinterpret_cast<ListFunction>(::dlsym(library, "dpl_recording_exposed_functions"));
  if (list == nullptr) {
    ADD_FAILURE() << path << " has no dpl_recording_exposed_functions";
    return {};
  }
  return Lines(list());
}

// Every function recorded for plugins of `word` by any process of the jobs under `dir`.
std::set<std::string> RecordedCalls(const fs::path& dir, const std::string& word) {
  std::set<std::string> calls;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || name.rfind(word + "-", 0) != 0) continue;
    std::ifstream file(entry.path());
    const std::string text((std::istreambuf_iterator<char>(file)),
                           std::istreambuf_iterator<char>());
    const std::set<std::string> lines = Lines(text);
    calls.insert(lines.begin(), lines.end());
  }
  return calls;
}

struct Job {
  std::string name;
  std::string arguments;
  bool succeeds;
  std::string expected_output;  // a line the job's output must contain
};

struct JobResult {
  int exit_code = -1;
  std::string output;
};

class AbiCoverageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/dpl-abi-coverage-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    // 64 training images: 4 steps of 16 (8 a rank) in an epoch; 16 test images.
    using namespace ::dpl::testing;
    fs::create_directories(dir_ / "data");
    WriteRaw(dir_ / "data/train-images-idx3-ubyte", IdxImages(64, 28, 28));
    WriteRaw(dir_ / "data/train-labels-idx1-ubyte", IdxLabels(64));
    WriteRaw(dir_ / "data/t10k-images-idx3-ubyte", IdxImages(16, 28, 28));
    WriteRaw(dir_ / "data/t10k-labels-idx1-ubyte", IdxLabels(16));
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // Runs the launcher with the build's plugins and `plugin_dir`, recording into calls/<name>.
  JobResult Run(const std::string& name, const std::string& plugin_dir,
                const std::string& arguments) {
    const fs::path calls = dir_ / "calls" / name;
    fs::create_directories(calls);
    const std::string command = "DPL_RECORDING_DIR='" + calls.string() + "' " + DPL_TEST_LAUNCHER +
                                " --plugin-dir " + kPluginDir + " --plugin-dir " + plugin_dir +
                                " --master-port 0 --no-progress --threads-per-worker 1 " +
                                arguments + " 2>&1";
    JobResult result;
    FILE* pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr) return result;
    char buffer[4096];
    while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) result.output.append(buffer, n);
    const int status = ::pclose(pipe);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return result;
  }

  void RunJob(const Job& job, const std::string& plugin_dir) {
    const JobResult result = Run(job.name, plugin_dir, job.arguments);
    if (job.succeeds) {
      EXPECT_EQ(result.exit_code, 0) << "job " << job.name << ":\n" << result.output;
    } else {
      EXPECT_NE(result.exit_code, 0) << "job " << job.name << ":\n" << result.output;
    }
    EXPECT_NE(result.output.find(job.expected_output), std::string::npos)
        << "job " << job.name << " should say: " << job.expected_output << "\n"
        << result.output;
  }

  std::string Data(const std::string& format, const std::string& options) const {
    return " --data " + format + (options.empty() ? "" : " --data-options " + options) +
           " --data-dir " + (dir_ / "data").string() +
           " --data-cache none --batch-size 16 --epochs 1 --seed 1 ";
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

TEST_F(AbiCoverageTest, RecordingPluginsExposeWhatTheHostRequires) {
  for (const RecordingPlugin& plugin : RecordingPlugins()) {
    SCOPED_TRACE(plugin.path);
    auto loaded = LoadPluginFile(plugin.path);
    ASSERT_TRUE(loaded.ok()) << loaded.status().message();
    EXPECT_EQ(loaded->kind, plugin.kind);
    EXPECT_EQ(loaded->name, "recording");
    const std::vector<std::string> required = RequiredFunctions(plugin.kind);
    EXPECT_EQ(ExposedFunctions(plugin.path),
              std::set<std::string>(required.begin(), required.end()))
        << "the recording " << plugin.word
        << " must expose exactly the functions the host requires";
  }
  auto v1 = LoadPluginFile(kRecordingV1Dir + "/libdpl_recording_backend_v1.so");
  ASSERT_TRUE(v1.ok()) << v1.status().message();
  EXPECT_EQ(v1->abi_version, 1u);
  ASSERT_NE(v1->backend, nullptr);
  EXPECT_EQ(v1->backend->abi, "backend ABI v1");
  auto v2 = LoadPluginFile(kBatchNormV2);
  ASSERT_TRUE(v2.ok()) << v2.status().message();
  EXPECT_EQ(v2->abi_version, 2u);
}

// Every entry a recording plugin's table exposes was called by some job (the exemptions aside,
// which none may call), and nothing it does not expose was.
void ExpectEveryExposedEntryCalled(const fs::path& calls) {
  for (const RecordingPlugin& plugin : RecordingPlugins()) {
    const std::set<std::string> called = RecordedCalls(calls, plugin.word);
    std::set<std::string> exempt;
    for (const Exemption& exemption : kExemptions) {
      if (plugin.word != std::string(exemption.kind)) continue;
      exempt.insert(exemption.function);
      EXPECT_EQ(called.count(exemption.function), 0u)
          << "the host now calls " << plugin.word << " entry '" << exemption.function
          << "'; remove its exemption (" << exemption.reason << ")";
    }
    const std::set<std::string> exposed = ExposedFunctions(plugin.path);
    for (const std::string& function : exposed) {
      if (exempt.count(function) != 0) continue;
      EXPECT_TRUE(called.count(function) != 0)
          << "no job made the host call " << plugin.word << " entry '" << function
          << "'; the host calls: " << Joined(called);
    }
    for (const std::string& function : called) {
      EXPECT_TRUE(exposed.count(function) != 0) << "the recording " << plugin.word << " recorded '"
                                                << function << "', which its table does not expose";
    }
  }
}

TEST_F(AbiCoverageTest, TheHostCallsEveryRequiredEntry) {
  const std::string backend = " --backend recording --backend-options wrap=" + kGloo;
  const std::string model = " --model recording --model-options wrap=" + kBatchNorm;
  const std::string data = Data("recording", "wrap=" + kIdx);
  // Through the backend: a machine's workers would sum in their shared memory otherwise.
  const std::string train = backend + model + data + " --num-processes 2 --local-reduce backend";
  const std::string exported = Path("exported.pt"), checkpoints = Path("checkpoints");
  const std::string unknown = "no_such_option=1";
  const std::vector<Job> jobs = {
      {"selftest", backend + " --selftest --num-processes 2", true, "selftest ok"},
      // In place, buffers broadcast every step, checkpoints (read_buffers, rng_state), --export.
      {"train",
       train + " --max-steps 2 --checkpoint-every 1 --checkpoint-dir " + checkpoints +
           " --export " + exported,
       true, "the trained model is in " + exported},
      // --resume: write_buffers, set_rng_state.
      {"resume",
       train + " --max-steps 3 --checkpoint-every 1 --resume --checkpoint-dir " + checkpoints, true,
       "resumed from "},
      // The host copy (read_tensors, write_tensors) and --init-from (load_state).
      {"mirror",
       train + " --max-steps 1 --mirror-parameters --offload-optimizer --init-from " + exported,
       true, "parameters from " + exported},
      // The sharded optimizer through the backend: reduce_scatter, and allgather in place.
      {"sharded", train + " --max-steps 2 --shard-optimizer", true, "training done: 2 steps"},
      // fp16's dynamic loss scaling (set_loss_scale), on a model that computes fp16 on the CPU.
      {"fp16",
       backend + " --model recording --model-options wrap=" + kScaled + data +
           " --num-processes 2 --max-steps 2 --precision fp16",
       true, "fp16 loss scaling: 0 steps of 2 skipped"},
      // Creates that fail: the host reports the wrapped plugin's last_error.
      {"backend-refused",
       " --backend recording --backend-options wrap=" + kGloo + "," + unknown + model + data, false,
       "unknown option \"no_such_option\" in --backend-options"},
      {"model-refused",
       backend + " --model recording --model-options wrap=" + kBatchNorm + "," + unknown + data,
       false, "unknown option \"no_such_option\" in --model-options"},
      {"data-refused", backend + model + Data("recording", "wrap=" + kIdx + "," + unknown), false,
       "unknown option \"no_such_option\" in --data-options"},
  };
  for (const Job& job : jobs) RunJob(job, kRecordingDir);
  ExpectEveryExposedEntryCalled(dir_ / "calls");
}

// The older ABIs still train through the launcher: a backend of ABI v1 (the recording backend
// built as v1, unsharded and sharded) and a model of ABI v2 (the BatchNorm test model built as
// v2), on the host copy.
TEST_F(AbiCoverageTest, OlderAbisTrainThroughTheLauncher) {
  const std::string common = Data("idx", "") + " --num-processes 2 --max-steps 2 ";
  const std::string v1 = " --backend recording --backend-options wrap=" + kGloo + " --model mlp" +
                         common + " --local-reduce backend";
  RunJob({"backend-v1", v1, true, "training done: 2 steps"}, kRecordingV1Dir);
  const std::set<std::string> called = RecordedCalls(dir_ / "calls" / "backend-v1", "backend");
  for (const char* function : {"create", "broadcast", "allreduce", "destroy"}) {
    EXPECT_TRUE(called.count(function) != 0)
        << "backend v1 entry " << function << " was not called";
  }
  // The sharded optimizer on a v1 backend: reduce_scatter and the in-place allgather made of its
  // allreduce and allgather (Note [Collectives older backends lack]).
  RunJob({"backend-v1-sharded", v1 + " --shard-optimizer", true, "training done: 2 steps"},
         kRecordingV1Dir);
  const std::set<std::string> sharded =
      RecordedCalls(dir_ / "calls" / "backend-v1-sharded", "backend");
  for (const char* function : {"allreduce", "allgather"}) {
    EXPECT_TRUE(sharded.count(function) != 0)
        << "backend v1 entry " << function << " was not called by the sharded run";
  }

  const fs::path v2_dir = dir_ / "model_v2";
  fs::create_directories(v2_dir);
  fs::create_symlink(kBatchNormV2, v2_dir / fs::path(kBatchNormV2).filename());
  const std::string exported = Path("v2.pt");
  RunJob({"model-v2",
          " --backend tcp --model batchnorm --mirror-parameters --export " + exported + common,
          true, "training done: 2 steps"},
         v2_dir.string());
  EXPECT_TRUE(fs::exists(exported));
}

}  // namespace
