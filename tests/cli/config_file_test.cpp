// --config files (Note [Config file errors] in launcher/cli/config_file.cpp): the good forms, and
// every bad line refused naming the file, the line and the problem.
#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>
#include <string>

#include "cli/config_file.hpp"
#include "cli/options.hpp"
#include "cli_test_support.hpp"

namespace dpl::cli {
namespace {

class ConfigFileTest : public ::testing::Test {
 protected:
  // Writes `content` (any bytes) to this test's config file and returns its path.
  std::string Write(const std::string& content) {
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << content;
    return path_;
  }
  void TearDown() override { ::unlink(path_.c_str()); }

  const std::string path_ =
      std::string(DPL_TEST_BINARY_DIR) + "/config-" + std::to_string(::getpid()) + "-" +
      ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".cfg";
};

// Six good lines of every form, then `line7`.
std::string SixGoodLinesThen(const std::string& line7) {
  return "# training\n"
         "epochs = 2\n"
         "\n"
         "batch_size=64   # a comment after the value\n"
         "  drop-last = true\r\n"
         "\tlr = 0.25\n" +
         line7 + "\n";
}

TEST_F(ConfigFileTest, GoodFormsAreRead) {
  const std::string path = Write(SixGoodLinesThen("optimizer = adamw # the last line"));
  auto options = Parse({"--config", path});
  ASSERT_TRUE(options.ok()) << options.status().message();
  EXPECT_EQ(options->training.epochs, 2);
  EXPECT_EQ(options->training.batch_size, 64);
  EXPECT_TRUE(options->training.drop_last);
  EXPECT_EQ(options->training.optimizer.learning_rate, 0.25);
  EXPECT_EQ(options->training.optimizer.kind, training::OptimizerKind::kAdamW);
  auto entries = ReadConfigFile(path);
  ASSERT_TRUE(entries.ok()) << entries.status().message();
  ASSERT_EQ(entries->size(), 5u);
  EXPECT_EQ((*entries)[1].line, 4);
  EXPECT_EQ((*entries)[1].name, "batch_size");
  EXPECT_EQ((*entries)[1].value, "64");
  EXPECT_EQ((*entries)[4].line, 7);
  EXPECT_EQ((*entries)[4].value, "adamw");
  // UTF-8 text is text, after the byte order mark some editors put first.
  const std::string accented = Write(
      "\xef\xbb\xbf"
      "data-dir = /données/jeu\n");
  auto utf8 = Parse({"--config", accented});
  ASSERT_TRUE(utf8.ok()) << utf8.status().message();
  EXPECT_EQ(utf8->training.data_dir, "/données/jeu");
}

TEST_F(ConfigFileTest, ABinaryFileIsNotText) {
  // The start of an ELF file: the first line holds a NUL.
  const std::string path = Write(std::string("\x7f"
                                             "ELF\x02\x01\x01\x00\x00\x00",
                                             10) +
                                 "\n");
  EXPECT_EQ(ErrorOf({"--config", path}),
            "config file " + path +
                ", line 1: not text (byte 0x7f at column 1); a config file holds `name = value` "
                "lines");
  const std::string gzip = Write(std::string("\x1f\x8b\x08\x00", 4));
  EXPECT_EQ(ErrorOf({"--config", gzip}),
            "config file " + gzip +
                ", line 1: not text (byte 0x1f at column 1); a config file holds `name = value` "
                "lines");
}

TEST_F(ConfigFileTest, ABadLineSevenIsNamedWithItsProblem) {
  const std::string prefix = "config file " + path_ + ", line 7: ";
  EXPECT_EQ(ErrorOf({"--config", Write(SixGoodLinesThen("epochs 3"))}),
            prefix + "'epochs 3' is not `name = value`");
  EXPECT_EQ(ErrorOf({"--config", Write(SixGoodLinesThen("= 3"))}),
            prefix + "'= 3' is not `name = value`");
  EXPECT_EQ(ErrorOf({"--config", Write(SixGoodLinesThen("colour = blue"))}),
            prefix + "unknown flag colour; see launcher --help");
  EXPECT_EQ(ErrorOf({"--config", Write(SixGoodLinesThen("max_step = 3"))}),
            prefix + "unknown flag max_step (did you mean max-steps?); see launcher --help");
  EXPECT_EQ(ErrorOf({"--config", Write(SixGoodLinesThen("lr = 0.5"))}),
            prefix + "lr was given more than once; give it once");
  EXPECT_EQ(ErrorOf({"--config", Write(SixGoodLinesThen("config = other.cfg"))}),
            prefix + "a config file cannot name another");
  EXPECT_EQ(ErrorOf({"--config", Write(SixGoodLinesThen("nproc-per-node = gpu"))}),
            prefix +
                "--nproc-per-node: 'gpu' needs the number of GPUs, which the launcher does not "
                "count; give the number of processes instead (e.g. 4)");
  EXPECT_EQ(ErrorOf({"--config", Write(SixGoodLinesThen("name = caf\xe9"))}),
            prefix + "not text (byte 0xe9 at column 11); a config file holds `name = value` lines");
  EXPECT_EQ(ErrorOf({"--config", Write(SixGoodLinesThen("seed = 1\x1b[0m"))}),
            prefix + "not text (byte 0x1b at column 9); a config file holds `name = value` lines");
  // A bad value names the flag, the place and the range.
  EXPECT_EQ(
      ErrorOf({"--config", Write(SixGoodLinesThen("momentum = 1"))}),
      "--momentum (config file " + path_ + ", line 7) must be at least 0 and less than 1 (got 1)");
  EXPECT_EQ(ErrorOf({"--config", Write(SixGoodLinesThen("betas = 0.9"))}),
            "--betas (config file " + path_ +
                ", line 7) must be two numbers B1,B2, each at least 0 and less than 1 (got "
                "'0.9')");
}

TEST_F(ConfigFileTest, ALongLineIsShownCut) {
  const std::string line(100, 'x');
  EXPECT_EQ(
      ErrorOf({"--config", Write(line)}),
      "config file " + path_ + ", line 1: '" + std::string(60, 'x') + "...' is not `name = value`");
}

TEST_F(ConfigFileTest, ALargeFileIsRefusedBeforeItIsRead) {
  const std::string path = Write(std::string(kMaxConfigFileBytes + 1, '#'));
  EXPECT_EQ(ErrorOf({"--config", path}),
            "--config: '" + path +
                "' is 1048577 bytes, not a config file of `name = value` lines (at most 1048576 "
                "bytes)");
}

TEST_F(ConfigFileTest, TheCommandLineStillWins) {
  const std::string path = Write(SixGoodLinesThen("lr = oops"));
  // The file's bad value is never applied when the command line gives the flag...
  auto options = Parse({"--config", path, "--lr", "0.1", "--epochs", "5"});
  ASSERT_TRUE(options.ok()) << options.status().message();
  EXPECT_EQ(options->training.optimizer.learning_rate, 0.1);
  EXPECT_EQ(options->training.epochs, 5);
  // ...but a line that is not `name = value` is refused all the same.
  EXPECT_EQ(ErrorOf({"--config", Write(SixGoodLinesThen("lr")), "--lr", "0.1"}),
            "config file " + path_ + ", line 7: 'lr' is not `name = value`");
}

// A repeatable flag's entries add to the command line's, which come last and so win where both
// set one variable (the last value of a name is the only one a worker gets).
TEST_F(ConfigFileTest, RepeatableEntriesAddToTheCommandLines) {
  const std::string path = Write("env = FOO=1\nenv = BAR=2\n");
  auto options = Parse({"--config", path, "--env", "BAZ=3", "--env", "FOO=4"});
  ASSERT_TRUE(options.ok()) << options.status().message();
  EXPECT_EQ(options->environment, (std::vector<std::string>{"BAR=2", "BAZ=3", "FOO=4"}));
}

}  // namespace
}  // namespace dpl::cli
