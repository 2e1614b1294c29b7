// The flags of what a run reports: --log-time, --stall-warning, --metrics, --tensorboard,
// --trace; their defaults, values, exact refusals, config-file spellings, --help, and what a
// worker receives of them.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "cli/options.hpp"
#include "cli_test_support.hpp"

namespace dpl::cli {
namespace {

TEST(ObservabilityFlags, Defaults) {
  auto options = Parse({});
  ASSERT_TRUE(options.ok()) << options.status().message();
  EXPECT_EQ(options->log_time, log::TimeFormat::kIso);
  EXPECT_EQ(options->stall_warning, std::chrono::seconds(60));
  EXPECT_EQ(options->training.tensorboard_dir, "");
  EXPECT_EQ(options->training.trace_file, "");
}

TEST(ObservabilityFlags, Values) {
  auto options = Parse({"--log-time", "elapsed", "--stall-warning", "2.5", "--tensorboard", "tb",
                        "--trace", "t.json", "--metrics", "m.jsonl"});
  ASSERT_TRUE(options.ok()) << options.status().message();
  EXPECT_EQ(options->log_time, log::TimeFormat::kElapsed);
  EXPECT_EQ(options->stall_warning, std::chrono::milliseconds(2500));
  EXPECT_EQ(options->training.tensorboard_dir, "tb");
  EXPECT_EQ(options->training.trace_file, "t.json");
  EXPECT_EQ(options->training.metrics_file, "m.jsonl");
  EXPECT_EQ(Parse({"--log-time=none"})->log_time, log::TimeFormat::kNone);
  EXPECT_EQ(Parse({"--stall-warning", "0"})->stall_warning, std::chrono::milliseconds(0));
}

TEST(ObservabilityFlags, BadValuesAreRefusedNamingTheRange) {
  EXPECT_EQ(ErrorOf({"--log-time", "utc"}),
            "--log-time must be one of iso|elapsed|none (got 'utc')");
  EXPECT_EQ(ErrorOf({"--stall-warning", "-1"}),
            "--stall-warning must be seconds, at least 0.001 and at most 604800 (got -1)");
  EXPECT_EQ(ErrorOf({"--stall-warning", "soon"}),
            "--stall-warning must be a number seconds, at least 0.001 and at most 604800 (got "
            "'soon')");
  EXPECT_EQ(ErrorOf({"--trace"}), "--trace needs a value; see launcher --help");
  EXPECT_EQ(ErrorOf({"--tensorbaord", "tb"}),
            "unknown flag --tensorbaord (did you mean --tensorboard?); see launcher --help");
}

TEST(ObservabilityFlags, ConfigFilesTakeEitherSpelling) {
  const std::string path = std::string(DPL_TEST_BINARY_DIR) + "/observability.conf";
  std::ofstream(path) << "log_time = none\nstall-warning = 5\nstall_warnnig = 6\n";
  EXPECT_EQ(ErrorOf({"--config", path}),
            "config file " + path +
                ", line 3: unknown flag stall_warnnig (did you mean stall-warning?); see launcher "
                "--help");
  std::ofstream(path) << "log_time = none\nstall-warning = 5\ntrace = run.json\n";
  auto options = Parse({"--config", path});
  ASSERT_TRUE(options.ok()) << options.status().message();
  EXPECT_EQ(options->log_time, log::TimeFormat::kNone);
  EXPECT_EQ(options->stall_warning, std::chrono::seconds(5));
  EXPECT_EQ(options->training.trace_file, "run.json");
}

TEST(ObservabilityFlags, WorkersReceiveThem) {
  auto options = Parse({"--log-time", "elapsed", "--stall-warning", "0.25", "--tensorboard", "tb",
                        "--trace", "t.json"});
  ASSERT_TRUE(options.ok()) << options.status().message();
  auto worker = Parse(WorkerLoaderArguments(*options, {7}, "127.0.0.1:5555"));
  ASSERT_TRUE(worker.ok()) << worker.status().message();
  EXPECT_EQ(worker->log_time, log::TimeFormat::kElapsed);
  EXPECT_EQ(worker->stall_warning, std::chrono::milliseconds(250));
  EXPECT_EQ(worker->training.tensorboard_dir, "tb");
  EXPECT_EQ(worker->training.trace_file, "t.json");
  auto off = Parse({"--stall-warning", "0"});
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(Parse(WorkerArguments(*off, 0, "127.0.0.1:1"))->stall_warning,
            std::chrono::milliseconds(0));
}

TEST(ObservabilityFlags, HelpShowsThemAndNoInternalFlag) {
  const std::string help = HelpText();
  for (const char* flag : {"--log-time FORMAT", "--stall-warning SECONDS", "--tensorboard DIR",
                           "--trace FILE", "--metrics FILE", "--no-progress"}) {
    EXPECT_NE(help.find(flag), std::string::npos) << flag;
  }
  for (const char* internal : {"--local-rank", "--worker-outputs", "--store-addr", "--worker "}) {
    EXPECT_EQ(help.find(internal), std::string::npos) << internal;
  }
}

}  // namespace
}  // namespace dpl::cli
