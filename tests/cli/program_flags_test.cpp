// A program's job on the command line: the words after `--`, passed on last to other launchers and
// compared at the join; --env and --log-ranks, each bad value with its exact message.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "cli/options.hpp"
#include "cli_test_support.hpp"

namespace dpl::cli {
namespace {

Options MustParse(const std::vector<std::string>& arguments) {
  auto options = Parse(arguments);
  EXPECT_TRUE(options.ok()) << options.status().message();
  return options.ok() ? *options : Options{};
}

std::string MatchedValue(const Options& options, const std::string& flag) {
  for (const auto& [name, value] : SettingsThatMustMatch(options)) {
    if (name == flag) return value;
  }
  return "(missing)";
}

TEST(ProgramFlags, TheWordsAfterTwoDashesAreTheProgram) {
  const Options options =
      MustParse({"--num-processes", "2", "--", "python3", "train.py", "--lr", "0.1", "--", "it's"});
  EXPECT_EQ(options.program,
            (std::vector<std::string>{"python3", "train.py", "--lr", "0.1", "--", "it's"}));
  EXPECT_TRUE(options.runs_program());
  EXPECT_EQ(options.num_processes, 2);
  // Last on another launcher's command line, whatever the table adds before it.
  const std::vector<std::string> arguments = LauncherArguments(options);
  ASSERT_GE(arguments.size(), 7u);
  EXPECT_EQ(std::vector<std::string>(arguments.end() - 7, arguments.end()),
            (std::vector<std::string>{"--", "python3", "train.py", "--lr", "0.1", "--", "it's"}));
  EXPECT_EQ(MatchedValue(options, "--program"), "python3 train.py --lr 0.1 -- 'it'\\''s'");
  EXPECT_EQ(MatchedValue(MustParse({}), "--program"), "(none)");
  EXPECT_FALSE(MustParse({}).runs_program());
  EXPECT_EQ(MustParse({"--", "a b"}).program, std::vector<std::string>{"a b"});
  EXPECT_NE(MatchedValue(MustParse({"--", "a b"}), "--program"),
            MatchedValue(MustParse({"--", "a", "b"}), "--program"));
}

TEST(ProgramFlags, AProgramSplitsNoBatchAndNeedsNoCheckpointsToBeElastic) {
  EXPECT_EQ(MustParse({"--num-processes", "3", "--", "true"}).num_processes, 3);
  EXPECT_EQ(MustParse({"--num-machines", "1:2", "--", "true"}).min_machines, 1);
}

TEST(ProgramFlags, BadProgramsAreRefused) {
  EXPECT_EQ(ErrorOf({"--num-processes", "2", "--"}),
            "`--` must be followed by the program to run: launcher [flags] -- PROGRAM [ARGS...] "
            "(e.g. -- python3 train.py)");
  EXPECT_EQ(ErrorOf({"--", ""}), "--program: the program's name is empty");
  EXPECT_EQ(ErrorOf({"--program", "x"}),
            "--program: give the program after `--`: launcher [flags] -- PROGRAM [ARGS...]");
  EXPECT_EQ(ErrorOf({"--selftest", "--", "true"}),
            "--selftest checks the rendezvous and a backend without a program; leave out either "
            "--selftest or the program after --");
  EXPECT_EQ(ErrorOf({"--nproc-per-node", "2", "train.py"}),
            "unexpected argument 'train.py' (the only subcommand is `plugins`, given first); see "
            "launcher --help; to run it as the workers, put it after `--`: launcher [flags] -- "
            "python3 train.py");
}

TEST(ProgramFlags, EnvGivesAValueOrThisHostsOne) {
  setenv("DPL_TEST_HOSTS_VALUE", "from here", 1);
  const Options options =
      MustParse({"--env", "A=1", "--env", "DPL_TEST_HOSTS_VALUE", "--env", "EMPTY="});
  EXPECT_EQ(options.environment,
            (std::vector<std::string>{"A=1", "DPL_TEST_HOSTS_VALUE=from here", "EMPTY="}));
  // Values stay out of other launchers' command lines (--hostfile passes them on ssh's stdin).
  for (const std::string& argument : LauncherArguments(options)) {
    EXPECT_EQ(argument.find("from here"), std::string::npos) << argument;
    EXPECT_NE(argument, "--env");
  }
}

TEST(ProgramFlags, BadEnvIsRefused) {
  unsetenv("DPL_TEST_UNSET_VARIABLE");
  EXPECT_EQ(ErrorOf({"--env", "DPL_TEST_UNSET_VARIABLE"}),
            "--env DPL_TEST_UNSET_VARIABLE: DPL_TEST_UNSET_VARIABLE is not set here; set it, or "
            "give --env DPL_TEST_UNSET_VARIABLE=VALUE");
  EXPECT_EQ(ErrorOf({"--env", "1A=x"}),
            "--env '1A=x': give NAME or NAME=VALUE, NAME of letters, digits and _ (not first a "
            "digit)");
  EXPECT_EQ(ErrorOf({"--env", "=x"}),
            "--env '=x': give NAME or NAME=VALUE, NAME of letters, digits and _ (not first a "
            "digit)");
  EXPECT_EQ(ErrorOf({"--env", "RANK=3"}), "--env RANK: the launcher sets it for each worker");
  EXPECT_EQ(ErrorOf({"--env", "TORCHELASTIC_RUN_ID=x"}),
            "--env TORCHELASTIC_RUN_ID: the launcher sets it for each worker");
  EXPECT_EQ(ErrorOf({"--env", "OMP_NUM_THREADS=4"}),
            "--env OMP_NUM_THREADS: the launcher sets it from --threads-per-worker");
  EXPECT_EQ(ErrorOf({"--env", "DPL_JOB_TOKEN=t"}),
            "--env DPL_JOB_TOKEN: give the job's token with --job-token or DPL_JOB_TOKEN");
  EXPECT_EQ(ErrorOf({"--env", "A=two\nlines"}),
            "--env A: the value holds a line break, which cannot be passed on");
}

TEST(ProgramFlags, LogRanksSaysWhoseLinesReachTheConsole) {
  const Options program = MustParse({"--num-processes", "4", "--", "true"});
  const Options builtin = MustParse({"--num-processes", "4"});
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_TRUE(LogsRank(program, rank)) << rank;
    EXPECT_EQ(LogsRank(builtin, rank), rank == 0) << rank;
  }
  const Options listed = MustParse({"--num-processes", "4", "--log-ranks", "0,3", "--", "true"});
  EXPECT_TRUE(LogsRank(listed, 0));
  EXPECT_FALSE(LogsRank(listed, 1));
  EXPECT_TRUE(LogsRank(listed, 3));
  EXPECT_TRUE(LogsRank(MustParse({"--num-processes", "4", "--log-ranks", "all"}), 2));
  EXPECT_EQ(ErrorOf({"--log-ranks", "0,x"}),
            "--log-ranks (all, or ranks apart by commas) must be an integer between 0 and "
            "1048575 (got 'x')");
  EXPECT_EQ(ErrorOf({"--num-processes", "2", "--log-ranks", "1,2"}),
            "--log-ranks 1,2: rank 2 is not in the job, whose ranks are 0..1");
}

}  // namespace
}  // namespace dpl::cli
