// Log lines: their time stamps, the status line (the launcher's progress bar) kept below them,
// and the human units of sizes and durations.
#include "common/log.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

namespace dpl::log {
namespace {

TEST(LogUnits, BytesUseBinaryPrefixesAndThreeDigits) {
  EXPECT_EQ(Bytes(0), "0 B");
  EXPECT_EQ(Bytes(12), "12 B");
  EXPECT_EQ(Bytes(1023), "1023 B");
  EXPECT_EQ(Bytes(1024), "1 KiB");
  EXPECT_EQ(Bytes(1536), "1.5 KiB");
  EXPECT_EQ(Bytes(10239), "10 KiB");  // 9.999 KiB rounds to 10, not "10." or "10.00"
  EXPECT_EQ(Bytes(19200), "18.8 KiB");
  EXPECT_EQ(Bytes(1201704), "1.15 MiB");  // the ConvNet's gradients
  EXPECT_EQ(Bytes(26214400), "25 MiB");   // the default bucket cap
  EXPECT_EQ(Bytes(300ull << 20), "300 MiB");
  EXPECT_EQ(Bytes(5ull << 40), "5 TiB");
  EXPECT_EQ(Bytes(~0ull), "16 EiB");
}

TEST(LogUnits, DurationsPickTheirUnit) {
  EXPECT_EQ(Duration(0.0), "0 ms");
  EXPECT_EQ(Duration(0.0123), "12.3 ms");
  EXPECT_EQ(Duration(0.5), "500 ms");
  EXPECT_EQ(Duration(1.0), "1 s");
  EXPECT_EQ(Duration(4.5), "4.5 s");
  EXPECT_EQ(Duration(61.5), "1 min 02 s");
  EXPECT_EQ(Duration(754.0), "12 min 34 s");
  EXPECT_EQ(Duration(7384.0), "2 h 03 min");
  EXPECT_EQ(Duration(-1.0), "0 s");
}

// Runs `body` with stderr going to a file and returns what it wrote.
template <typename Body>
std::string CaptureStderr(Body body) {
  const std::string path = std::string(DPL_TEST_BINARY_DIR) + "/stderr-" +
                           ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::fflush(stderr);
  const int saved = ::dup(STDERR_FILENO);
  std::FILE* file = std::fopen(path.c_str(), "w");
  ::dup2(::fileno(file), STDERR_FILENO);
  body();
  std::fflush(stderr);
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  std::fclose(file);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::remove(path.c_str());
  return text.str();
}

class LogLines : public ::testing::Test {
 protected:
  void TearDown() override {
    SetTimeFormat(TimeFormat::kNone);
    SetPrefix("");
  }
};

TEST_F(LogLines, IsoTimesAreLocalTimeWithMillisecondsAndTheOffset) {
  SetTimeFormat(TimeFormat::kIso);
  SetPrefix("[rank 3]");
  const std::string text = CaptureStderr([] { Warning("disk almost full"); });
  const std::regex line(
      R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d \[rank 3\] warning: disk almost full\n)");
  EXPECT_TRUE(std::regex_match(text, line)) << text;
}

TEST_F(LogLines, ElapsedTimesCountFromTheStartInSeconds) {
  StartElapsedClock();
  SetTimeFormat(TimeFormat::kElapsed);
  const std::string text = CaptureStderr([] { WriteLine("[rank 1] epoch: 0 [10/30]"); });
  std::smatch match;
  ASSERT_TRUE(std::regex_match(text, match,
                               std::regex(R"( +(\d+\.\d{3})s \[rank 1\] epoch: 0 \[10/30\]\n)")))
      << text;
  EXPECT_LT(std::stod(match[1]), 60.0);
  // The origin is exported for the processes the launcher starts.
  ASSERT_NE(std::getenv("DPL_LOG_START_NS"), nullptr);
}

TEST_F(LogLines, NoTimeWritesTheLineAlone) {
  const std::string text = CaptureStderr([] {
    Info("plain");
    WriteRecord(
        "\x1e"
        "record");
  });
  EXPECT_EQ(text, "plain\n\x1erecord\n");
  EXPECT_EQ(TimePrefix(), "");
}

// Lines written while a status is shown go above it, and the status is drawn again below them.
TEST_F(LogLines, LinesGoAboveTheStatusLine) {
  const std::string text = CaptureStderr([] {
    ShowStatus("[=>  ] 1/4");
    Info("first");
    ShowStatus("[==> ] 2/4");
    WriteLine("[rank 0] second");
    EndStatus();
    Info("after");
    EndStatus();  // nothing shown: nothing written
  });
  EXPECT_EQ(text,
            "\r\033[K[=>  ] 1/4"
            "\r\033[Kfirst\n[=>  ] 1/4"
            "\r\033[K[==> ] 2/4"
            "\r\033[K[rank 0] second\n[==> ] 2/4"
            "\n"
            "after\n");
}

}  // namespace
}  // namespace dpl::log
