// Command-line parsing: defaults, every flag, config files, environment defaults, and each bad
// value's exact message.
#include "cli/options.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli_test_support.hpp"

namespace dpl::cli {
namespace {

class OptionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    unsetenv("DPL_JOB_TOKEN");
  }
  void TearDown() override { SetUp(); }
};

TEST_F(OptionsTest, DefaultsAreTheRecipe) {
  auto options = Parse({});
  ASSERT_TRUE(options.ok()) << options.status().message();
  EXPECT_EQ(options->command, Command::kTrain);
  EXPECT_EQ(options->backend, "auto");
  EXPECT_EQ(options->training.model, "convnet");
  EXPECT_EQ(options->num_processes, 1);
  EXPECT_EQ(options->num_machines, 1);
  EXPECT_EQ(options->machine_id, 0);
  EXPECT_EQ(options->master_addr, "127.0.0.1");
  EXPECT_EQ(options->master_port, kDefaultMasterPort);
  EXPECT_EQ(options->training.batch_size, 128);
  EXPECT_EQ(options->training.epochs, 1);
  EXPECT_EQ(options->training.data_dir, kDefaultDataDir);
  EXPECT_EQ(options->training.optimizer.kind, training::OptimizerKind::kAdadelta);
  EXPECT_DOUBLE_EQ(options->training.optimizer.learning_rate, 0.5);
  EXPECT_EQ(options->rendezvous_timeout, kDefaultRendezvousTimeout);
  EXPECT_EQ(options->training.bucket_cap_bytes, kDefaultBucketCapBytes);
  EXPECT_TRUE(options->training.progress);
  EXPECT_TRUE(options->plugin_dirs.empty());
}

// The words of `text`, split at spaces.
std::vector<std::string> Words(const std::string& text) {
  std::vector<std::string> words;
  std::istringstream in(text);
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

TEST_F(OptionsTest, ParsesTrainingFlags) {
  auto options = Parse(
      Words("--backend gloo --model=convnet --num-processes 4 --num-machines 2 --machine-id 1 "
            "--master-addr 10.0.0.1 --master-port 1234 --epochs 3 --batch-size 64 --data-dir /data "
            "--lr 0.25 --momentum 0.9 --optimizer sgd --grad-accum 2 --bucket-cap-mb 1.5 "
            "--max-steps 20 --seed 18446744073709551615 --rendezvous-timeout 2.5 --drop-last "
            "--no-progress --plugin-dir /a --plugin-dir /b --device cuda --grad-compression bf16"));
  ASSERT_TRUE(options.ok()) << options.status().message();
  EXPECT_EQ(options->backend, "gloo");
  EXPECT_EQ(options->num_processes, 4);
  EXPECT_EQ(options->num_machines, 2);
  EXPECT_EQ(options->machine_id, 1);
  EXPECT_EQ(options->master_addr, "10.0.0.1");
  EXPECT_EQ(options->master_port, 1234);
  EXPECT_EQ(options->training.epochs, 3);
  EXPECT_EQ(options->training.batch_size, 64);
  EXPECT_EQ(options->training.data_dir, "/data");
  EXPECT_DOUBLE_EQ(options->training.optimizer.learning_rate, 0.25);
  EXPECT_DOUBLE_EQ(options->training.optimizer.momentum, 0.9);
  EXPECT_EQ(options->training.optimizer.kind, training::OptimizerKind::kSgd);
  EXPECT_EQ(options->training.grad_accum, 2);
  EXPECT_EQ(options->training.bucket_cap_bytes, 1572864);
  EXPECT_EQ(options->training.max_steps, 20);
  EXPECT_EQ(options->training.seed, 18446744073709551615ull);
  EXPECT_EQ(options->rendezvous_timeout, std::chrono::milliseconds(2500));
  EXPECT_TRUE(options->training.drop_last);
  EXPECT_FALSE(options->training.progress);
  EXPECT_EQ(options->plugin_dirs, (std::vector<std::string>{"/a", "/b"}));
  EXPECT_EQ(options->training.device, training::Device::kCuda);
  EXPECT_EQ(options->training.grad_compression, training::WireFormat::kBf16);
}

TEST_F(OptionsTest, Subcommands) {
  auto plugins = Parse({"plugins", "--plugin-dir", "/x"});
  ASSERT_TRUE(plugins.ok()) << plugins.status().message();
  EXPECT_EQ(plugins->command, Command::kPlugins);
  EXPECT_EQ(plugins->plugin_dirs, std::vector<std::string>{"/x"});
  EXPECT_EQ(Parse({"--help"})->command, Command::kHelp);
  EXPECT_EQ(Parse({"-h"})->command, Command::kHelp);
  EXPECT_EQ(Parse({"--version"})->command, Command::kVersion);
  EXPECT_EQ(Parse({"--selftest"})->command, Command::kSelftest);
}

TEST_F(OptionsTest, RangeErrorsNameFlagAndRange) {
  EXPECT_EQ(ErrorOf({"--num-processes", "0"}),
            "--num-processes must be between 1 and 1024 (got 0)");
  EXPECT_EQ(ErrorOf({"--num-processes", "1025"}),
            "--num-processes must be between 1 and 1024 (got 1025)");
  EXPECT_EQ(ErrorOf({"--num-processes", "two"}),
            "--num-processes must be an integer between 1 and 1024 (got 'two')");
  EXPECT_EQ(ErrorOf({"--num-processes", "2x"}),
            "--num-processes must be an integer between 1 and 1024 (got '2x')");
  EXPECT_EQ(ErrorOf({"--num-machines", "0"}), "--num-machines must be between 1 and 1024 (got 0)");
  EXPECT_EQ(ErrorOf({"--num-machines", "2", "--machine-id", "2"}),
            "--machine-id must be between 0 and 1 (got 2)");
  EXPECT_EQ(ErrorOf({"--machine-id", "-1"}), "--machine-id must be between 0 and 0 (got -1)");
  EXPECT_EQ(ErrorOf({"--master-port", "65536"}),
            "--master-port must be between 0 and 65535 (got 65536)");
  EXPECT_EQ(ErrorOf({"--epochs", "0"}), "--epochs must be between 1 and 1000000 (got 0)");
  EXPECT_EQ(ErrorOf({"--batch-size", "0"}), "--batch-size must be between 1 and 1048576 (got 0)");
  EXPECT_EQ(ErrorOf({"--max-steps", "-1"}),
            "--max-steps must be between 0 and 9223372036854775807 (got -1)");
  EXPECT_EQ(ErrorOf({"--seed", "-3"}),
            "--seed must be an integer between 0 and 18446744073709551615 (got '-3')");
  EXPECT_EQ(ErrorOf({"--lr", "0"}), "--lr must be greater than 0 (got 0)");
  EXPECT_EQ(ErrorOf({"--lr", "fast"}), "--lr must be a number greater than 0 (got 'fast')");
  EXPECT_EQ(ErrorOf({"--lr", "0x10"}), "--lr must be a number greater than 0 (got '0x10')");
  EXPECT_EQ(ErrorOf({"--momentum", "1"}), "--momentum must be at least 0 and less than 1 (got 1)");
  EXPECT_EQ(ErrorOf({"--grad-accum", "0"}), "--grad-accum must be between 1 and 1024 (got 0)");
  EXPECT_EQ(ErrorOf({"--bucket-cap-mb", "0"}),
            "--bucket-cap-mb must be greater than 0 and at most 4096 (got 0)");
  EXPECT_EQ(ErrorOf({"--rendezvous-timeout", "0"}),
            "--rendezvous-timeout must be seconds, at least 0.001 and at most 604800 (got 0)");
  EXPECT_EQ(ErrorOf({"--backend-timeout", "soon"}),
            "--backend-timeout must be a number seconds, at least 0.001 and at most 604800 (got "
            "'soon')");
  EXPECT_EQ(ErrorOf({"--threads-per-worker", "-1"}),
            "--threads-per-worker must be between 0 and 1024 (got -1)");
  EXPECT_EQ(ErrorOf({"--log-interval", "0"}),
            "--log-interval must be between 1 and 2147483647 (got 0)");
  EXPECT_EQ(ErrorOf({"--max-restarts", "1001"}),
            "--max-restarts must be between 0 and 1000 (got 1001)");
}

TEST_F(OptionsTest, ChoiceErrorsListChoices) {
  EXPECT_EQ(ErrorOf({"--device", "tpu"}), "--device must be one of cpu|cuda (got 'tpu')");
  EXPECT_EQ(ErrorOf({"--optimizer", "lbfgs"}),
            "--optimizer must be one of adadelta|sgd|adam|adamw (got 'lbfgs')");
  EXPECT_EQ(ErrorOf({"--grad-compression", "int8"}),
            "--grad-compression must be one of auto|none|fp16|bf16 (got 'int8')");
  EXPECT_EQ(ErrorOf({"--backend", ""}), "--backend must not be empty");
}

// Note [Sharding by default]: auto unless given; the flag alone means on, as when it was a switch,
// and true or false (a config file's spelling of a switch) still read.
TEST_F(OptionsTest, ShardOptimizerTakesAnOptionalWhen) {
  using training::OptimizerSharding;
  auto sharding = [](std::vector<std::string> arguments) {
    auto options = Parse(arguments);
    EXPECT_TRUE(options.ok()) << options.status().message();
    return options.ok() ? options->training.shard_optimizer : OptimizerSharding::kAuto;
  };
  EXPECT_EQ(sharding({}), OptimizerSharding::kAuto);
  EXPECT_EQ(sharding({"--shard-optimizer"}), OptimizerSharding::kOn);
  EXPECT_EQ(sharding({"--shard-optimizer", "--no-eval"}), OptimizerSharding::kOn);
  EXPECT_EQ(sharding({"--shard-optimizer", "off"}), OptimizerSharding::kOff);
  EXPECT_EQ(sharding({"--shard-optimizer=on"}), OptimizerSharding::kOn);
  EXPECT_EQ(sharding({"--shard-optimizer", "auto"}), OptimizerSharding::kAuto);
  EXPECT_EQ(sharding({"--shard-optimizer", "false"}), OptimizerSharding::kOff);
  const std::string path = std::string(DPL_TEST_BINARY_DIR) + "/shard_optimizer.cfg";
  {
    std::ofstream file(path);
    file << "shard-optimizer = true\n";
  }
  EXPECT_EQ(sharding({"--config", path}), OptimizerSharding::kOn);
  EXPECT_EQ(ErrorOf({"--shard-optimizer", "half"}),
            "--shard-optimizer must be one of auto|on|off (got 'half')");
  for (const char* when : {"auto", "on", "off"}) {
    auto options = Parse({"--num-processes", "2", "--shard-optimizer", when});
    ASSERT_TRUE(options.ok()) << options.status().message();
    auto worker = Parse(WorkerArguments(*options, 1, "127.0.0.1:5555"));
    ASSERT_TRUE(worker.ok()) << worker.status().message();
    EXPECT_EQ(worker->training.shard_optimizer, options->training.shard_optimizer) << when;
  }
}

TEST_F(OptionsTest, BatchMustSplitEvenly) {
  EXPECT_EQ(ErrorOf({"--num-processes", "3"}),
            "--batch-size 128 is not divisible by the world size 3 (--num-processes 3 x "
            "--num-machines 1); the global batch is split evenly across workers");
  EXPECT_TRUE(Parse({"--num-processes", "3", "--batch-size", "129"}).ok());
}

TEST_F(OptionsTest, SyntaxErrors) {
  EXPECT_EQ(ErrorOf({"--no-such-flag"}), "unknown flag --no-such-flag; see launcher --help");
  // No guessing of abbreviations: --epoch is not --epochs, but the message points there.
  EXPECT_EQ(ErrorOf({"--epoch", "2"}),
            "unknown flag --epoch (did you mean --epochs?); see launcher --help");
  // Another launcher's flag, or a training script's, gets dpl's way of saying it.
  EXPECT_EQ(ErrorOf({"--rdzv-id", "5"}),
            "unknown flag --rdzv-id: dpl's job is its store: give every launcher the same "
            "--job-token instead");
  EXPECT_EQ(ErrorOf({"--learning_rate", "0.1"}),
            "unknown flag --learning_rate: dpl's flag is --lr");
  EXPECT_EQ(ErrorOf({"-m", "train"}),
            "unknown flag -m: put the module after --: launcher -- python3 -m MODULE");
  EXPECT_EQ(ErrorOf({"-v"}), "unknown flag -v; see launcher --help");
  EXPECT_EQ(ErrorOf({"--resume=yes"}), "--resume takes no value; see launcher --help");
  // Refused where it is read, not by the workers once every plugin has loaded.
  EXPECT_EQ(ErrorOf({"--resume"}), "--resume needs --checkpoint-dir (the folder to resume from)");
  EXPECT_EQ(ErrorOf({"--epochs"}), "--epochs needs a value; see launcher --help");
  EXPECT_EQ(ErrorOf({"--epochs", "1", "--epochs", "2"}),
            "--epochs was given more than once; give it once");
  EXPECT_EQ(ErrorOf({"train"}),
            "unexpected argument 'train' (the only subcommand is `plugins`, given first); see "
            "launcher --help");
  EXPECT_EQ(ErrorOf({"--epochs", "2", "plugins"}),
            "unexpected argument 'plugins' (the only subcommand is `plugins`, given first); see "
            "launcher --help");
}

TEST_F(OptionsTest, WorkerFlags) {
  auto worker = Parse(
      {"--worker", "--local-rank", "1", "--num-processes", "2", "--store-addr", "127.0.0.1:4000"});
  ASSERT_TRUE(worker.ok()) << worker.status().message();
  EXPECT_EQ(worker->command, Command::kWorker);
  EXPECT_EQ(worker->local_rank, 1);
  EXPECT_EQ(worker->store_addr, "127.0.0.1:4000");
  EXPECT_EQ(ErrorOf({"--worker", "--store-addr", "h:1"}),
            "--worker needs --local-rank or --worker-outputs");
  EXPECT_EQ(ErrorOf({"--worker", "--local-rank", "0"}), "--worker needs --store-addr host:port");
  EXPECT_EQ(
      ErrorOf({"--worker", "--local-rank", "2", "--num-processes", "2", "--store-addr", "h:1"}),
      "--local-rank must be between 0 and 1 (got 2)");
  EXPECT_EQ(ErrorOf({"--local-rank", "0"}),
            "--local-rank is internal and only valid with --worker");
}

TEST_F(OptionsTest, WorkerLoaderFlags) {
  auto options = Parse({"--num-processes", "3", "--batch-size", "96", "--backend", "tcp"});
  ASSERT_TRUE(options.ok()) << options.status().message();
  auto loader = Parse(WorkerLoaderArguments(*options, {7, 9, 11}, "127.0.0.1:4000"));
  ASSERT_TRUE(loader.ok()) << loader.status().message();
  EXPECT_EQ(loader->command, Command::kWorker);
  EXPECT_EQ(loader->worker_output_fds, (std::vector<int>{7, 9, 11}));
  EXPECT_EQ(loader->local_rank, -1);
  EXPECT_EQ(loader->store_addr, "127.0.0.1:4000");
  EXPECT_EQ(loader->backend, "tcp");
  EXPECT_EQ(ErrorOf({"--worker", "--worker-outputs", "7,9", "--num-processes", "4", "--store-addr",
                     "h:1"}),
            "--worker-outputs lists 2 descriptors for --num-processes 4");
  EXPECT_EQ(
      ErrorOf({"--worker", "--worker-outputs", "7", "--local-rank", "0", "--store-addr", "h:1"}),
      "--worker takes --local-rank or --worker-outputs, not both");
  EXPECT_EQ(ErrorOf({"--worker-outputs", "7"}),
            "--worker-outputs is internal and only valid with --worker");
  EXPECT_NE(ErrorOf({"--worker", "--worker-outputs", "7,x", "--num-processes", "2", "--store-addr",
                     "h:1"}),
            "");
}

TEST_F(OptionsTest, EnvironmentGivesDefaults) {
  setenv("MASTER_ADDR", "192.168.1.5", 1);
  setenv("MASTER_PORT", "4242", 1);
  setenv("DPL_JOB_TOKEN", "secret", 1);
  auto options = Parse({});
  ASSERT_TRUE(options.ok()) << options.status().message();
  EXPECT_EQ(options->master_addr, "192.168.1.5");
  EXPECT_EQ(options->master_port, 4242);
  EXPECT_EQ(options->job_token, "secret");
  // The command line wins over the environment.
  auto flagged = Parse({"--master-port", "5000", "--master-addr", "h"});
  ASSERT_TRUE(flagged.ok()) << flagged.status().message();
  EXPECT_EQ(flagged->master_port, 5000);
  EXPECT_EQ(flagged->master_addr, "h");
  setenv("MASTER_PORT", "http", 1);
  EXPECT_EQ(ErrorOf({}),
            "MASTER_PORT (environment) must be an integer between 0 and 65535 (got 'http')");
}

TEST_F(OptionsTest, ConfigFileSetsFlagsAndCommandLineWins) {
  const std::string path = std::string(DPL_TEST_BINARY_DIR) + "/options_test.cfg";
  {
    std::ofstream file(path);
    file << "# a comment\nepochs = 4\nbatch-size = 32\nbackend = tcp\ndrop-last = true\n"
            "plugin-dir = /from/config\n";
  }
  auto options = Parse({"--config", path, "--epochs", "2"});
  ASSERT_TRUE(options.ok()) << options.status().message();
  EXPECT_EQ(options->training.epochs, 2);
  EXPECT_EQ(options->training.batch_size, 32);
  EXPECT_EQ(options->backend, "tcp");
  EXPECT_TRUE(options->training.drop_last);
  EXPECT_EQ(options->plugin_dirs, std::vector<std::string>{"/from/config"});

  {
    std::ofstream file(path);
    file << "epochs = 0\n";
  }
  EXPECT_EQ(ErrorOf({"--config", path}),
            "--epochs (config file " + path + ", line 1) must be between 1 and 1000000 (got 0)");
  {
    std::ofstream file(path);
    file << "colour = blue\n";
  }
  EXPECT_EQ(ErrorOf({"--config", path}),
            "config file " + path + ", line 1: unknown flag colour; see launcher --help");
  EXPECT_EQ(ErrorOf({"--config", path + ".missing"}),
            "--config: cannot open '" + path + ".missing' (No such file or directory)");
}

TEST_F(OptionsTest, WorkerArgumentsRoundTrip) {
  auto options = Parse({"--backend",
                        "gloo",
                        "--num-processes",
                        "4",
                        "--lr",
                        "0.1",
                        "--rendezvous-timeout",
                        "0.25",
                        "--bucket-cap-mb",
                        "0.5",
                        "--seed",
                        "7",
                        "--plugin-dir",
                        "/p",
                        "--drop-last",
                        "--no-progress",
                        "--selftest",
                        "--model-options",
                        "dropout=0",
                        "--max-steps",
                        "9"});
  ASSERT_TRUE(options.ok()) << options.status().message();
  std::vector<std::string> arguments = WorkerArguments(*options, 3, "127.0.0.1:5555");
  auto worker = Parse(arguments);
  ASSERT_TRUE(worker.ok()) << worker.status().message();
  EXPECT_EQ(worker->command, Command::kWorker);
  EXPECT_EQ(worker->local_rank, 3);
  EXPECT_EQ(worker->store_addr, "127.0.0.1:5555");
  EXPECT_EQ(worker->backend, "gloo");
  EXPECT_EQ(worker->num_processes, 4);
  EXPECT_DOUBLE_EQ(worker->training.optimizer.learning_rate, 0.1);
  EXPECT_EQ(worker->rendezvous_timeout, std::chrono::milliseconds(250));
  EXPECT_EQ(worker->training.bucket_cap_bytes, options->training.bucket_cap_bytes);
  EXPECT_EQ(worker->training.seed, 7u);
  EXPECT_EQ(worker->plugin_dirs, std::vector<std::string>{"/p"});
  EXPECT_TRUE(worker->training.drop_last);
  EXPECT_FALSE(worker->training.progress);
  EXPECT_EQ(worker->training.model_options, "dropout=0");
  EXPECT_EQ(worker->training.max_steps, 9);
  EXPECT_EQ(worker->training.data_dir, options->training.data_dir);
  // The worker knows it belongs to a selftest job.
  EXPECT_TRUE(worker->selftest_job);
  EXPECT_FALSE(Parse({})->selftest_job);
}

TEST_F(OptionsTest, NamesTakeDashesOrUnderscoresAndValuesTheirEqualsSign) {
  auto options = Parse({"--num_processes", "2", "--batch-size=64", "--no_eval"});
  ASSERT_TRUE(options.ok()) << options.status().message();
  EXPECT_EQ(options->num_processes, 2);
  EXPECT_EQ(options->training.batch_size, 64);
  EXPECT_FALSE(options->training.evaluate);
  const std::string path = std::string(DPL_TEST_BINARY_DIR) + "/underscores.cfg";
  {
    std::ofstream file(path);
    file << "num_processes = 2\nmax_steps = 3 # a comment after the value\n";
  }
  auto configured = Parse({"--config", path});
  ASSERT_TRUE(configured.ok()) << configured.status().message();
  EXPECT_EQ(configured->num_processes, 2);
  EXPECT_EQ(configured->training.max_steps, 3);
  {
    std::ofstream file(path);
    file << "num_procceses = 2\n";
  }
  EXPECT_EQ(ErrorOf({"--config", path}),
            "config file " + path +
                ", line 1: unknown flag num_procceses (did you mean num-processes?); see launcher "
                "--help");
}

TEST_F(OptionsTest, AFolderIsNotAConfigFile) {
  EXPECT_EQ(ErrorOf({"--config", DPL_TEST_BINARY_DIR}),
            std::string("--config: '") + DPL_TEST_BINARY_DIR +
                "' is a folder; pass a file of `name = value` lines");
}

TEST_F(OptionsTest, HelpLeavesOutTheFlagsALauncherGivesItsWorkers) {
  const std::string help = HelpText();
  for (const char* internal : {"--local-rank", "--worker-outputs", "--store-addr", "--worker "}) {
    EXPECT_EQ(help.find(internal), std::string::npos) << internal;
  }
  EXPECT_NE(help.find("--selftest"), std::string::npos);
}

TEST_F(OptionsTest, HelpMentionsEveryRecipeFlag) {
  const std::string help = HelpText();
  for (const char* flag : {"--backend", "--model", "--num-processes", "--num-machines",
                           "--machine-id", "--master-addr", "--master-port", "--epochs",
                           "--batch-size", "--data-dir", "--config", "--plugin-dir", "--version"}) {
    EXPECT_NE(help.find(flag), std::string::npos) << flag;
  }
}

}  // namespace
}  // namespace dpl::cli
