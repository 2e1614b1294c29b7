// Training jobs of the launcher on data in every in-tree format, written here in the real file
// formats by tests/data_jobs/write_data.py (numpy.save, CIFAR-10 binary batches, PNG and JPEG
// images by PIL): the MLP on 2 ranks to a falling loss with bit-identical ranks, a TorchScript
// CIFAR ConvNet exported from Python, Fashion-MNIST through idx and through npy giving the same
// training, Fashion-MNIST through idx giving the losses the launcher's former IDX reader gave, and
// data the model cannot take or cannot be read refused before the first step.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

using Args = std::vector<std::string>;

constexpr const char* kPython = DPL_TEST_PYTHON;
constexpr const char* kFashionMnist = "/usr/share/datasets/fashion-mnist";

std::string Quoted(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

struct RunResult {
  int exit_code = -1;
  std::string output;
};

// Runs `command` through the shell, stdout and stderr together.
RunResult RunCommand(const std::string& command) {
  RunResult result;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) result.output.append(buffer, n);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

RunResult RunLauncher(const Args& args) {
  std::string command = Quoted(DPL_TEST_LAUNCHER);
  for (const std::string& argument :
       Args{"--plugin-dir", DPL_TEST_PLUGIN_DIR, "--master-port", "0", "--no-progress",
            "--threads-per-worker", "1", "--data-cache", "none", "--seed", "7"}) {
    command += " " + Quoted(argument);
  }
  for (const std::string& argument : args) command += " " + Quoted(argument);
  return RunCommand(command);
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The loss of every step line of a --metrics file, in order.
std::vector<double> StepLosses(const std::string& metrics) {
  std::ifstream in(metrics);
  const std::regex step_loss(R"(^\{"kind": "step", .*"loss": ([0-9.e+-]+), )");
  std::vector<double> losses;
  std::smatch match;
  for (std::string line; std::getline(in, line);) {
    if (std::regex_search(line, match, step_loss)) losses.push_back(std::stod(match[1]));
  }
  return losses;
}

bool PythonImports(const std::string& modules) {
  return RunCommand(std::string(kPython) + " -c " + Quoted("import " + modules)).exit_code == 0;
}

class DataJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!PythonImports("numpy, PIL"))
      GTEST_SKIP() << DPL_TEST_PYTHON " cannot import numpy and PIL (run tools/setup.sh)";
    char pattern[] = "/tmp/dpl-data-jobs-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ignored;
    if (!dir_.empty()) fs::remove_all(dir_, ignored);
  }

  // Runs write_data.py `command` `arguments...`; the data lands below the test's folder.
  void WriteData(const std::string& command, const Args& arguments) {
    std::string line = std::string(kPython) + " " + Quoted(DPL_TEST_DATA_WRITER) + " " + command;
    for (const std::string& argument : arguments) line += " " + Quoted(argument);
    const RunResult written = RunCommand(line);
    ASSERT_EQ(written.exit_code, 0) << line << "\n" << written.output;
  }
  std::string Folder(const std::string& name) const {
    const std::string path = dir_ + "/" + name;
    fs::create_directories(path);
    return path;
  }

  // Checks a finished 2-rank job: exit 0, every logged loss read, the last far below the first,
  // both ranks' dumped parameters the same `parameters` floats, and the whole test set evaluated,
  // at least half of it right (its labels agree with the training set's).
  void ExpectLearntOnTwoRanks(const RunResult& job, const std::string& metrics,
                              const std::string& dump, size_t parameters, int test_samples) {
    ASSERT_EQ(job.exit_code, 0) << job.output;
    const std::vector<double> losses = StepLosses(metrics);
    ASSERT_GE(losses.size(), 4u) << job.output;
    EXPECT_LT(losses.back(), 0.5 * losses.front()) << "the loss did not fall:\n" << job.output;
    const std::string rank0 = ReadBytes(dump + "/rank-0.bin");
    EXPECT_EQ(rank0.size(), parameters * sizeof(float)) << "the model was not built for the data";
    EXPECT_TRUE(rank0 == ReadBytes(dump + "/rank-1.bin")) << "the ranks' parameters differ";
    std::smatch accuracy;
    ASSERT_TRUE(std::regex_search(
        job.output, accuracy,
        std::regex("accuracy: ([0-9]+)/" + std::to_string(test_samples) + " \\(")))
        << job.output;
    EXPECT_GE(2 * std::stoi(accuracy[1]), test_samples) << job.output;
  }

  std::string dir_;
};

// The MLP on 2 ranks for each format (fc1: sample elements x 128, fc2: 128 x classes).
struct FormatCase {
  const char* name;
  const char* format;
  int64_t sample_elements;
  int64_t classes;
  int test_samples;
};

void PrintTo(const FormatCase& format_case, std::ostream* out) {
  *out << format_case.name;
}

class MlpOnEachFormat : public DataJobTest, public ::testing::WithParamInterface<FormatCase> {};

TEST_P(MlpOnEachFormat, LossFallsAndRanksStayBitIdentical) {
  const FormatCase& format = GetParam();
  if (format.format == std::string("imagefolder") && !DPL_TEST_IMAGEFOLDER_BUILT) {
    GTEST_SKIP() << "the imagefolder plugin is not built (libpng or libjpeg missing)";
  }
  const std::string data = Folder("data"), dump = Folder("dump");
  WriteData(format.format, {data});
  const std::string metrics = dir_ + "/metrics.jsonl";
  const RunResult job =
      RunLauncher({"--data", format.format, "--data-dir", data, "--model", "mlp", "--num-processes",
                   "2", "--batch-size", "16", "--epochs", "3", "--log-interval", "4", "--metrics",
                   metrics, "--dump-parameters", dump});
  const int64_t hidden = 128;
  const int64_t parameters =
      format.sample_elements * hidden + hidden + hidden * format.classes + format.classes;
  ExpectLearntOnTwoRanks(job, metrics, dump, size_t(parameters), format.test_samples);
}

INSTANTIATE_TEST_SUITE_P(
    Formats, MlpOnEachFormat,
    ::testing::Values(FormatCase{"NumpySave", "npy", 4 * 10, 4, 64},
                      FormatCase{"Cifar10Binary", "cifar10", 3 * 32 * 32, 10, 40},
                      FormatCase{"PngAndJpegFolder", "imagefolder", 3 * 16 * 16, 4, 32}),
    [](const ::testing::TestParamInfo<FormatCase>& info) { return std::string(info.param.name); });

// A CIFAR ConvNet defined in Python (cifar_convnet.py), exported by tools/export_model.py.
TEST_F(DataJobTest, TorchScriptCifarConvNetLearnsCifarFiles) {
  if (!PythonImports("torch"))
    GTEST_SKIP() << DPL_TEST_PYTHON " cannot import torch (run tools/setup.sh)";
  const std::string data = Folder("data"), dump = Folder("dump");
  WriteData("cifar10", {data});
  const std::string model = dir_ + "/cifar_convnet.pt";
  const RunResult exported =
      RunCommand(std::string(kPython) + " " + Quoted(DPL_TEST_EXPORT_MODEL) + " " + Quoted(model) +
                 " --module " + Quoted(std::string(DPL_TEST_CIFAR_CONVNET) + ":CifarConvNet") +
                 " --input-shape 3,32,32");
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  ASSERT_TRUE(Contains(exported.output, "input (3, 32, 32) -> output (10,)")) << exported.output;
  const std::string metrics = dir_ + "/metrics.jsonl";
  const RunResult job =
      RunLauncher({"--data",          "cifar10",     "--data-dir",        data,
                   "--model",         "torchscript", "--model-options",   "file=" + model,
                   "--num-processes", "2",           "--batch-size",      "16",
                   "--epochs",        "3",           "--log-interval",    "4",
                   "--metrics",       metrics,       "--dump-parameters", dump});
  // cn1 3x8x3x3 + 8, bn1 8 + 8, cn2 8x16x3x3 + 16, fc 1024x10 + 10.
  ExpectLearntOnTwoRanks(job, metrics, dump, 224 + 16 + 1168 + 10250, 40);
  EXPECT_TRUE(Contains(job.output,
                       "model torchscript 1.0.0: 8 parameter tensors, 11658 "
                       "elements, on cpu, 3 buffers"))
      << job.output;
}

// The first Fashion-MNIST images as IDX files and as npy files (uint8, (N, 1, 28, 28)): with
// idx's normalisation passed to npy, the two plugins give the ConvNet the same training.
TEST_F(DataJobTest, FashionMnistThroughIdxAndThroughNpyTrainsAlike) {
  if (!fs::exists(std::string(kFashionMnist) + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << kFashionMnist << " is missing (Debian's dataset-fashion-mnist)";
  }
  const std::string idx = Folder("idx"), npy = Folder("npy");
  WriteData("idx-and-npy", {kFashionMnist, idx, npy, "1024", "256"});
  struct Trained {
    std::vector<double> losses;
    std::string parameters;
  };
  auto train = [&](const std::string& name, const Args& data) -> Trained {
    const std::string metrics = dir_ + "/" + name + ".jsonl", dump = Folder(name);
    Args args = {"--model",           "convnet", "--num-processes", "2", "--batch-size", "64",
                 "--max-steps",       "12",      "--log-interval",  "2", "--metrics",    metrics,
                 "--dump-parameters", dump};
    args.insert(args.end(), data.begin(), data.end());
    const RunResult job = RunLauncher(args);
    EXPECT_EQ(job.exit_code, 0) << job.output;
    EXPECT_TRUE(Contains(job.output, "accuracy: ")) << job.output;
    return {StepLosses(metrics), ReadBytes(dump + "/rank-1.bin")};
  };
  const Trained through_idx = train("idx", {"--data", "idx", "--data-dir", idx});
  const Trained through_npy = train(
      "npy", {"--data", "npy", "--data-dir", npy, "--data-options", "mean=0.1302,std=0.3069"});
  ASSERT_EQ(through_idx.losses.size(), 6u);
  EXPECT_EQ(through_idx.losses, through_npy.losses);
  ASSERT_EQ(through_idx.parameters.size(), 300426u * sizeof(float));
  EXPECT_TRUE(through_idx.parameters == through_npy.parameters);
  // Without the normalisation the same bytes train differently: the comparison can tell.
  const Trained unnormalised = train("raw", {"--data", "npy", "--data-dir", npy});
  EXPECT_NE(through_idx.losses, unnormalised.losses);
}

// What fashion_mnist_golden.txt recorded of a job on the launcher's former built-in IDX reader.
struct FormerReaderRun {
  std::vector<double> losses;  // every step's
  std::string test_line;       // "average loss: L, accuracy: C/10000"
  std::string parameters;      // "BYTES FNV1A64" of rank 0's dumped parameters
};

FormerReaderRun ReadFormerReaderRun(const std::string& path) {
  std::ifstream in(path);
  FormerReaderRun run;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string kind, first, second;
    fields >> kind >> first >> second;
    if (kind == "loss") run.losses.push_back(std::stod(second));
    if (kind == "test") run.test_line = "average loss: " + first + ", accuracy: " + second + "/";
    if (kind == "parameters") run.parameters = first + " " + second;
  }
  return run;
}

// "BYTES FNV1A64" of `bytes`, as fashion_mnist_golden.txt writes it.
std::string SizeAndFnv1a(const std::string& bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char byte : bytes) hash = (hash ^ byte) * 0x100000001b3ull;
  char text[40];
  std::snprintf(text, sizeof text, "%zu %016llx", bytes.size(),
                static_cast<unsigned long long>(hash));
  return text;
}

// Fashion-MNIST through the idx plugin gives exactly the losses, test result and parameters the
// launcher's former built-in reader gave (fashion_mnist_golden.txt): 600 steps on 2 ranks, across
// an epoch boundary. The model computes the same bits on every x86-64 CPU (bitexact_logreg.c), so
// the recording holds on any machine that runs this test.
TEST_F(DataJobTest, FashionMnistThroughIdxGivesTheFormerReadersLosses) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "the recorded losses are for x86-64 (bitexact_logreg.c says why)";
#endif
  if (!fs::exists(std::string(kFashionMnist) + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << kFashionMnist << " is missing (Debian's dataset-fashion-mnist)";
  }
  const FormerReaderRun former = ReadFormerReaderRun(DPL_TEST_FASHION_MNIST_GOLDEN);
  ASSERT_EQ(former.losses.size(), 600u);
  auto train = [&](const std::string& name, const Args& extra) {
    const std::string metrics = dir_ + "/" + name + ".jsonl", dump = Folder(name);
    Args args = {"--plugin-dir",      DPL_TEST_BITEXACT_MODEL_DIR,
                 "--model",           "bitexact_logreg",
                 "--num-processes",   "2",
                 "--epochs",          "2",
                 "--log-interval",    "1",
                 "--data-dir",        kFashionMnist,
                 "--metrics",         metrics,
                 "--dump-parameters", dump};
    args.insert(args.end(), extra.begin(), extra.end());
    const RunResult job = RunLauncher(args);
    EXPECT_EQ(job.exit_code, 0) << job.output;
    return std::make_pair(job, StepLosses(metrics));
  };
  const auto [job, losses] = train("idx", {"--max-steps", "600"});
  EXPECT_EQ(losses, former.losses);
  EXPECT_TRUE(Contains(job.output, former.test_line)) << former.test_line << "\n" << job.output;
  EXPECT_EQ(SizeAndFnv1a(ReadBytes(dir_ + "/idx/rank-0.bin")), former.parameters);
  // Fashion-MNIST's own mean instead of the recipe's: the comparison tells such a change.
  const auto shifted = train("shifted", {"--max-steps", "20", "--data-options", "mean=0.2860"});
  ASSERT_EQ(shifted.second.size(), 20u) << shifted.first.output;
  EXPECT_NE(shifted.second, std::vector<double>(former.losses.begin(), former.losses.begin() + 20));
}

// A job refused before any worker started: it fails, says `message` once, as the launcher's
// error, and neither a worker ("[rank N]") nor training ever appears.
void ExpectRefusedBeforeAnyWorker(const RunResult& job, const std::string& message) {
  EXPECT_EQ(job.exit_code, 1) << job.output;
  const size_t at = job.output.find(message);
  ASSERT_NE(at, std::string::npos) << job.output;
  EXPECT_EQ(job.output.find(message, at + 1), std::string::npos) << "said twice:\n" << job.output;
  EXPECT_TRUE(Contains(job.output, "[launcher 0] error: job failed: ")) << job.output;
  EXPECT_FALSE(Contains(job.output, "[rank ")) << "a worker started:\n" << job.output;
  EXPECT_FALSE(Contains(job.output, "training loss")) << job.output;
  EXPECT_FALSE(Contains(job.output, "training done")) << job.output;
}

TEST_F(DataJobTest, CifarDataForTheFashionMnistConvNetIsRefusedNamingBothShapes) {
  const std::string data = Folder("cifar");
  WriteData("cifar10", {data});
  const Args job = {"--data", "cifar10", "--data-dir", data, "--num-processes", "2"};
  const std::string convnet_refusal =
      "create failed with DPL_ERR_INVALID_ARGUMENT: model \"convnet\": the data has samples of "
      "shape (3, 32, 32) and 10 classes; this model takes shape (1, 28, 28) and 10 classes; "
      "train it on data of that shape, or train a model that takes this data";
  Args convnet = job;
  convnet.insert(convnet.end(), {"--model", "convnet"});
  ExpectRefusedBeforeAnyWorker(RunLauncher(convnet), convnet_refusal);
  // One process: the machine's loader would become the worker; it refuses first all the same.
  convnet[5] = "1";  // --num-processes 1
  ExpectRefusedBeforeAnyWorker(RunLauncher(convnet), convnet_refusal);
  // A model ABI v1 plugin is not told the data's shape: the launcher compares the shapes.
  Args logreg = job;
  logreg.insert(logreg.end(), {"--plugin-dir", DPL_TEST_V1_MODEL_DIR, "--model", "logreg_v1"});
  ExpectRefusedBeforeAnyWorker(
      RunLauncher(logreg),
      "error: job failed: wrong shape: the model 'logreg_v1' takes samples of shape (1, 28, 28) in "
      "10 "
      "classes, but the cifar10 data at " +
          data +
          " has samples of shape (3, 32, 32) in 10 classes; use data that fits the model or "
          "another --model");
}

TEST_F(DataJobTest, AMissingDataFolderIsRefusedWithTheFlagToPass) {
  const std::string missing = dir_ + "/no-such-folder";
  const std::string prefix = "error: job failed: opening the training set: dataset plugin '";
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"npy",
       "create failed with DPL_ERR_NOT_FOUND: dataset \"npy\": missing data file: " + missing +
           "/x.npy; pass --data-dir with the folder holding x.npy and y.npy (x_test.npy "
           "and y_test.npy for the test split)"},
      {"cifar10",
       "create failed with DPL_ERR_NOT_FOUND: dataset \"cifar10\": missing data file: "
       "looked for " +
           missing + "/data_batch_1.bin and " + missing +
           "/cifar-10-batches-bin/data_batch_1.bin; pass --data-dir with the folder "
           "holding the CIFAR-10 binary version (cifar-10-batches-bin)"},
      {"imagefolder",
       "create failed with DPL_ERR_NOT_FOUND: dataset \"imagefolder\": missing "
       "data folder: " +
           missing +
           "/train; pass --data-dir with a folder holding train/<class>/<image> "
           "and test/<class>/<image> or val/<class>/<image> (.png, .jpg or .jpeg)"},
      {"idx",
       "create failed with DPL_ERR_NOT_FOUND: dataset \"idx\": missing data file: looked "
       "for " +
           missing + "/train-images-idx3-ubyte.gz and " + missing +
           "/train-images-idx3-ubyte; pass --data-dir with the folder holding the "
           "MNIST-format files"}};
  for (const auto& [format, message] : expected) {
    SCOPED_TRACE(format);
    if (format == "imagefolder" && !DPL_TEST_IMAGEFOLDER_BUILT) continue;
    const RunResult job = RunLauncher(
        {"--data", format, "--data-dir", missing, "--model", "mlp", "--num-processes", "2"});
    ExpectRefusedBeforeAnyWorker(job, prefix + format + "' (");
    EXPECT_TRUE(Contains(job.output, message)) << job.output;
  }
}

TEST_F(DataJobTest, ABrokenFileIsRefusedNamingTheFileAndTheProblem) {
  const std::string cifar = Folder("cifar"), npy = Folder("npy"), images = Folder("images");
  WriteData("cifar10", {cifar});
  WriteData("npy", {npy});
  WriteData("imagefolder", {images});
  fs::resize_file(cifar + "/data_batch_3.bin", 5000);
  fs::resize_file(npy + "/x.npy", 30000);
  const std::string png = images + "/train/bands1/011.png";
  ASSERT_TRUE(fs::exists(png));
  fs::resize_file(png, 100);
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"cifar10", "dataset \"cifar10\": " + cifar +
                      "/data_batch_3.bin: not a whole number of records: its 5000 bytes are 1 "
                      "record of 3073 bytes (a label byte and 3x32x32 pixels) and 1927 bytes "
                      "more (a copy cut short, or bytes added to it); download the set again"},
      {"npy", "dataset \"npy\": " + npy +
                  "/x.npy: truncated: the header declares shape (256, 4, 10) of '<f4' (40960 "
                  "bytes of data) but 29872 bytes follow it"},
      {"imagefolder", "dataset \"imagefolder\": " + png +
                          ": the PNG image does not decode: the file ends inside the image data"}};
  const std::vector<std::string> folders = {cifar, npy, images};
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto& [format, message] = expected[i];
    SCOPED_TRACE(format);
    if (format == "imagefolder" && !DPL_TEST_IMAGEFOLDER_BUILT) continue;
    const RunResult job = RunLauncher(
        {"--data", format, "--data-dir", folders[i], "--model", "mlp", "--num-processes", "2"});
    ExpectRefusedBeforeAnyWorker(
        job, "error: job failed: opening the training set: dataset plugin '" + format + "' (");
    EXPECT_TRUE(Contains(job.output, "create failed with DPL_ERR_INVALID_ARGUMENT: " + message))
        << job.output;
  }
}

}  // namespace
