#include "observability/tensorboard_writer.hpp"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace dpl::observability {
namespace {

namespace fs = std::filesystem;

struct Scalar {
  std::string tag;
  int64_t step;
  double value;
  double wall_time;
};

struct ReaderRun {
  int exit_code;
  std::string output;
};

std::string Python() {
  return std::string(DPL_TEST_PYTHON);
}

constexpr const char* kNoPythonProtobuf = "the events reader needs protobuf, which " DPL_TEST_PYTHON
                                          " cannot import (run "
                                          "tools/setup.sh)";

bool PythonHasProtobuf() {
  const std::string command = Python() + " -c 'import google.protobuf' >/dev/null 2>&1";
  return std::system(command.c_str()) == 0;
}

// Runs read_events.py on `path` with the module protoc generated into this test's build folder.
ReaderRun ReadEvents(const std::string& path) {
  const std::string command = Python() + " " + DPL_TEST_EVENTS_READER + " '" + path + "' '" +
                              DPL_TEST_BINARY_DIR + "' 2>&1";
  ReaderRun run{-1, ""};
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) run.output.append(buffer, n);
  const int status = ::pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

// The reader's "scalar TAG STEP VALUE WALL_TIME" lines; VALUE is read as a float32.
std::vector<Scalar> ParseScalars(const std::string& output) {
  std::vector<Scalar> scalars;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string kind, value, wall_time;
    Scalar s;
    if (!(fields >> kind) || kind != "scalar") continue;
    fields >> s.tag >> s.step >> value >> wall_time;
    s.value = std::strtof(value.c_str(), nullptr);
    s.wall_time = std::strtod(wall_time.c_str(), nullptr);
    scalars.push_back(s);
  }
  return scalars;
}

std::vector<char> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteBytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
}

std::string HostName() {
  char name[HOST_NAME_MAX + 1] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// Scalars under two tags, with a 0 (which proto3 would drop outside a oneof), a negative value,
// values that a float32 rounds, and a step beyond 32 bits.
std::vector<Scalar> SampleScalars() {
  std::vector<Scalar> scalars;
  const double base_time = 1700000000.25;
  for (int64_t step = 0; step < 5; ++step) {
    scalars.push_back({"train/loss", step * 10, 2.302585 / double(step + 1), base_time + step});
    if (step % 2 == 0) {
      scalars.push_back({"eval/accuracy", step * 10, 0.1 * double(step), base_time + step + 0.5});
    }
  }
  scalars.push_back({"train/loss", int64_t(1) << 40, -1.5e-7, base_time + 100});
  scalars.push_back({"train/samples_per_second", 7, 123456.789, base_time + 101});
  return scalars;
}

class TensorBoardWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::string(DPL_TEST_BINARY_DIR) + "/tensorboard-" + info->name() + "-" +
           std::to_string(::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes SampleScalars() into a new file under `directory` and returns its path.
  std::string WriteSample(const std::string& directory, bool flush_explicitly) {
    Result<std::unique_ptr<TensorBoardWriter>> writer = TensorBoardWriter::Open(directory, "");
    EXPECT_TRUE(writer.ok()) << writer.status().message();
    if (!writer.ok()) return "";
    for (const Scalar& s : SampleScalars()) {
      const Status status = (*writer)->AddScalar(s.tag, s.step, s.value, s.wall_time);
      EXPECT_TRUE(status.ok()) << status.message();
    }
    if (flush_explicitly) {
      const Status status = (*writer)->Flush();
      EXPECT_TRUE(status.ok()) << status.message();
    }
    return (*writer)->path();
  }

  void ExpectSample(const std::string& path) {
    const ReaderRun run = ReadEvents(path);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const std::vector<Scalar> expected = SampleScalars();
    const std::vector<Scalar> actual = ParseScalars(run.output);
    ASSERT_EQ(actual.size(), expected.size()) << run.output;
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ(actual[i].tag, expected[i].tag) << "scalar " << i;
      EXPECT_EQ(actual[i].step, expected[i].step) << "scalar " << i;
      EXPECT_EQ(float(actual[i].value), float(expected[i].value)) << "scalar " << i;
      EXPECT_EQ(actual[i].wall_time, expected[i].wall_time) << "scalar " << i;
    }
    EXPECT_NE(run.output.find("records " + std::to_string(expected.size() + 1) + "\n"),
              std::string::npos)
        << run.output;
  }

  std::string dir_;
};

TEST_F(TensorBoardWriterTest, ReaderParsesEveryScalarWhileTheWriterIsOpen) {
  if (!PythonHasProtobuf()) GTEST_SKIP() << kNoPythonProtobuf;
  const std::string directory = dir_ + "/runs/first";  // two folders to create
  const long long before = std::time(nullptr);
  Result<std::unique_ptr<TensorBoardWriter>> writer = TensorBoardWriter::Open(directory, ".rank0");
  const long long after = std::time(nullptr);
  ASSERT_TRUE(writer.ok()) << writer.status().message();
  ASSERT_TRUE(fs::is_directory(directory));

  // events.out.tfevents.<unix seconds>.<hostname>.<pid><suffix>
  const std::string path = (*writer)->path();
  const std::string prefix = directory + "/events.out.tfevents.";
  const std::string tail = "." + HostName() + "." + std::to_string(::getpid()) + ".rank0";
  ASSERT_EQ(path.rfind(prefix, 0), 0u) << path;
  ASSERT_GT(path.size(), prefix.size() + tail.size()) << path;
  ASSERT_EQ(path.substr(path.size() - tail.size()), tail) << path;
  const std::string seconds = path.substr(prefix.size(), path.size() - prefix.size() - tail.size());
  ASSERT_EQ(seconds.find_first_not_of("0123456789"), std::string::npos) << path;
  EXPECT_GE(std::stoll(seconds), before);
  EXPECT_LE(std::stoll(seconds), after);

  for (const Scalar& s : SampleScalars()) {
    const Status status = (*writer)->AddScalar(s.tag, s.step, s.value, s.wall_time);
    ASSERT_TRUE(status.ok()) << status.message();
  }
  const Status flushed = (*writer)->Flush();
  ASSERT_TRUE(flushed.ok()) << flushed.message();
  ExpectSample(path);  // the writer is still open: Flush() alone made the records readable
}

TEST_F(TensorBoardWriterTest, DestructorFlushes) {
  if (!PythonHasProtobuf()) GTEST_SKIP() << kNoPythonProtobuf;
  const std::string path = WriteSample(dir_, /*flush_explicitly=*/false);
  ASSERT_FALSE(path.empty());
  ExpectSample(path);
}

// The first record is the file_version event, framed exactly as TensorFlow frames it: every
// TensorFlow events file starts with these 12 bytes (length 24, then its masked CRC-32C).
TEST_F(TensorBoardWriterTest, FileStartsLikeTensorFlowEventsFiles) {
  std::string path;
  {
    Result<std::unique_ptr<TensorBoardWriter>> writer = TensorBoardWriter::Open(dir_, "");
    ASSERT_TRUE(writer.ok()) << writer.status().message();
    path = (*writer)->path();
  }
  const std::vector<char> bytes = ReadBytes(path);
  ASSERT_EQ(bytes.size(), 12u + 24u + 4u);
  const std::vector<uint8_t> expected_header = {0x18, 0, 0, 0, 0, 0, 0, 0, 0xa3, 0x7f, 0x4b, 0x22};
  EXPECT_EQ(std::vector<uint8_t>(bytes.begin(), bytes.begin() + 12), expected_header);
  const std::string file_version(bytes.data() + 12 + 9 + 2, 13);  // after wall_time, tag, length
  EXPECT_EQ(file_version, "brain.Event:2");
}

// The reader checks both CRCs itself: a flipped byte in a length or in the data is caught.
TEST_F(TensorBoardWriterTest, ReaderRejectsACorruptRecord) {
  if (!PythonHasProtobuf()) GTEST_SKIP() << kNoPythonProtobuf;
  const std::string path = WriteSample(dir_, /*flush_explicitly=*/true);
  ASSERT_FALSE(path.empty());
  const std::vector<char> good = ReadBytes(path);
  ASSERT_GT(good.size(), 60u);

  std::vector<char> bad = good;
  bad[40 + 1] ^= 0x01;  // record 1's length (record 0 is 40 bytes)
  WriteBytes(path, bad);
  ReaderRun run = ReadEvents(path);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(run.output, "record 1: length CRC mismatch at byte 40\n");

  bad = good;
  bad[good.size() - 6] ^= 0x20;  // inside the last record's data
  WriteBytes(path, bad);
  run = ReadEvents(path);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("data CRC mismatch"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("scalar train/samples_per_second"), std::string::npos) << run.output;
}

TEST_F(TensorBoardWriterTest, OpenFailsWhenTheParentIsARegularFile) {
  const std::string file = dir_ + "/not_a_folder";
  std::ofstream(file) << "x";
  Result<std::unique_ptr<TensorBoardWriter>> writer = TensorBoardWriter::Open(file + "/tb", "");
  ASSERT_FALSE(writer.ok());
  EXPECT_EQ(writer.status().code(), DPL_ERR_IO);
  EXPECT_EQ(writer.status().message(),
            "cannot create TensorBoard folder " + file + "/tb: " + file +
                " is not a folder (Not a directory); choose a folder path that does not run "
                "through a file");
  EXPECT_FALSE(fs::exists(file + "/tb"));
}

TEST_F(TensorBoardWriterTest, OpenFailsWhenTheFolderIsARegularFile) {
  const std::string file = dir_ + "/not_a_folder";
  std::ofstream(file) << "x";
  Result<std::unique_ptr<TensorBoardWriter>> writer = TensorBoardWriter::Open(file, "");
  ASSERT_FALSE(writer.ok());
  EXPECT_EQ(writer.status().code(), DPL_ERR_IO);
  EXPECT_EQ(writer.status().message(),
            "cannot create TensorBoard folder " + file + ": " + file +
                " is not a folder (Not a directory); choose a folder path that does not run "
                "through a file");
}

TEST_F(TensorBoardWriterTest, BadArgumentsAreRefused) {
  Result<std::unique_ptr<TensorBoardWriter>> writer = TensorBoardWriter::Open("", "");
  ASSERT_FALSE(writer.ok());
  EXPECT_EQ(writer.status().code(), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(writer.status().message(), "the TensorBoard folder is empty; give a folder path");

  writer = TensorBoardWriter::Open(dir_, ".rank/0");
  ASSERT_FALSE(writer.ok());
  EXPECT_EQ(writer.status().code(), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(
      writer.status().message(),
      "the TensorBoard file suffix '.rank/0' contains a '/'; a suffix is part of a file name");

  writer = TensorBoardWriter::Open(dir_, "");
  ASSERT_TRUE(writer.ok()) << writer.status().message();
  const Status status = (*writer)->AddScalar("", 3, 1.0, 0.0);
  EXPECT_EQ(status.code(), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(status.message(), "a TensorBoard scalar needs a tag (got an empty one at step 3)");
  EXPECT_TRUE((*writer)->AddScalar("train/loss", 3, 1.0, 0.0).ok());  // the writer stays usable
}

// A write that the system refuses (here: beyond RLIMIT_FSIZE, as a full disk would) comes back as
// Status::Io naming the file, and every later call returns it again. The limit is set in a
// child process so that nothing else this test binary writes is affected.
TEST_F(TensorBoardWriterTest, WriteErrorIsReturnedNamingTheFile) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(fds[0]);
    std::string report;
    rlimit limit{};
    ::getrlimit(RLIMIT_FSIZE, &limit);
    limit.rlim_cur = 1000;
    ::signal(SIGXFSZ, SIG_IGN);  // write(2) then fails with EFBIG instead of killing us
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) {
      report = "setrlimit failed";
    } else if (auto writer = TensorBoardWriter::Open(dir_, ".limited"); !writer.ok()) {
      report = "open failed: " + writer.status().message();
    } else {
      Status first = Status::Ok();
      for (int step = 0; step < 1000 && first.ok(); ++step) {
        first = (*writer)->AddScalar("train/loss", step, 0.5, 1.0);
      }
      if (first.ok()) first = (*writer)->Flush();
      const Status again = (*writer)->Flush();
      const Status after = (*writer)->AddScalar("train/loss", 0, 0.5, 1.0);
      report = (*writer)->path() + "\n" + std::to_string(int(first.code())) + "\n" +
               first.message() + "\n" + (again.message() == first.message() ? "same" : "other") +
               "\n" + (after.message() == first.message() ? "same" : "other") + "\n";
    }
    (void)!::write(fds[1], report.data(), report.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string report;
  char buffer[1024];
  ssize_t n;
  while ((n = ::read(fds[0], buffer, sizeof buffer)) > 0) report.append(buffer, size_t(n));
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << report;

  std::istringstream lines(report);
  std::string path, code, message, again, after;
  std::getline(lines, path);
  std::getline(lines, code);
  std::getline(lines, message);
  std::getline(lines, again);
  std::getline(lines, after);
  ASSERT_EQ(path.rfind(dir_ + "/events.out.tfevents.", 0), 0u) << report;
  EXPECT_EQ(code, std::to_string(int(DPL_ERR_IO))) << report;
  EXPECT_EQ(message,
            "writing TensorBoard events file " + path + " failed: " + std::strerror(EFBIG));
  EXPECT_EQ(again, "same");
  EXPECT_EQ(after, "same");
}

}  // namespace
}  // namespace dpl::observability
