// The flags of precision, loss scaling, learning-rate schedules, weight decay and clipping: their
// defaults, values, what workers get, the settings every machine must share, and each bad value's
// exact message.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "cli/consistency.hpp"
#include "cli/options.hpp"
#include "cli_test_support.hpp"

namespace dpl::cli {
namespace {

using training::LrScheduleKind;
using training::Precision;
using training::WireFormat;

TEST(TrainingMathFlags, DefaultsAreFp32AConstantRateAndGradScalersNumbers) {
  auto options = Parse({});
  ASSERT_TRUE(options.ok()) << options.status().message();
  const training::TrainingConfig& c = options->training;
  EXPECT_EQ(c.precision, Precision::kFp32);
  EXPECT_EQ(c.grad_compression, WireFormat::kAuto);
  EXPECT_EQ(c.lr_schedule.kind, LrScheduleKind::kConstant);
  EXPECT_EQ(c.lr_schedule.warmup_steps, 0);
  EXPECT_EQ(c.lr_schedule.step_size, 0);
  EXPECT_EQ(c.lr_schedule.gamma, 0.1);
  EXPECT_EQ(c.optimizer.weight_decay, 0.0);
  EXPECT_EQ(c.clip_grad_norm, 0.0);
  EXPECT_EQ(c.loss_scaling.init_scale, 65536.0);
  EXPECT_EQ(c.loss_scaling.growth_factor, 2.0);
  EXPECT_EQ(c.loss_scaling.backoff_factor, 0.5);
  EXPECT_EQ(c.loss_scaling.growth_interval, 2000);
}

TEST(TrainingMathFlags, ValuesReachTheConfigAndTheWorkers) {
  auto options = Parse({"--precision",
                        "fp16",
                        "--lr-schedule",
                        "step",
                        "--lr-step-size",
                        "30",
                        "--lr-gamma",
                        "0.7",
                        "--warmup-steps",
                        "100",
                        "--weight-decay",
                        "0.0001",
                        "--clip-grad-norm",
                        "1.5",
                        "--grad-compression",
                        "none",
                        "--loss-scale-init",
                        "1024",
                        "--loss-scale-growth-factor",
                        "4",
                        "--loss-scale-backoff-factor",
                        "0.25",
                        "--loss-scale-growth-interval",
                        "100"});
  ASSERT_TRUE(options.ok()) << options.status().message();
  auto worker = Parse(WorkerArguments(*options, 0, "127.0.0.1:1"));
  ASSERT_TRUE(worker.ok()) << worker.status().message();
  for (const Options* o : {&*options, &*worker}) {
    const training::TrainingConfig& c = o->training;
    EXPECT_EQ(c.precision, Precision::kFp16);
    EXPECT_EQ(c.lr_schedule.kind, LrScheduleKind::kStep);
    EXPECT_EQ(c.lr_schedule.step_size, 30);
    EXPECT_EQ(c.lr_schedule.gamma, 0.7);
    EXPECT_EQ(c.lr_schedule.warmup_steps, 100);
    EXPECT_EQ(c.optimizer.weight_decay, 0.0001);
    EXPECT_EQ(c.clip_grad_norm, 1.5);
    EXPECT_EQ(c.grad_compression, WireFormat::kNone);
    EXPECT_EQ(c.loss_scaling.init_scale, 1024.0);
    EXPECT_EQ(c.loss_scaling.growth_factor, 4.0);
    EXPECT_EQ(c.loss_scaling.backoff_factor, 0.25);
    EXPECT_EQ(c.loss_scaling.growth_interval, 100);
  }
  // A step size that was not given is not given to workers either (0 is out of its range).
  auto plain = Parse({"--lr-schedule", "cosine"});
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  auto plain_worker = Parse(WorkerArguments(*plain, 0, "127.0.0.1:1"));
  ASSERT_TRUE(plain_worker.ok()) << plain_worker.status().message();
  EXPECT_EQ(plain_worker->training.lr_schedule.kind, LrScheduleKind::kCosine);
  EXPECT_EQ(plain_worker->training.lr_schedule.step_size, 0);
}

TEST(TrainingMathFlags, BadValuesNameTheFlagAndTheRange) {
  EXPECT_EQ(ErrorOf({"--precision", "fp8"}),
            "--precision must be one of fp32|bf16|fp16 (got 'fp8')");
  EXPECT_EQ(ErrorOf({"--lr-schedule", "exponential"}),
            "--lr-schedule must be one of constant|step|cosine|linear (got 'exponential')");
  EXPECT_EQ(ErrorOf({"--grad-compression", "int8"}),
            "--grad-compression must be one of auto|none|fp16|bf16 (got 'int8')");
  EXPECT_EQ(ErrorOf({"--warmup-steps", "-1"}),
            "--warmup-steps must be between 0 and 9223372036854775807 (got -1)");
  EXPECT_EQ(ErrorOf({"--lr-step-size", "0"}),
            "--lr-step-size must be between 1 and 9223372036854775807 (got 0)");
  EXPECT_EQ(ErrorOf({"--lr-gamma", "0"}), "--lr-gamma must be greater than 0 (got 0)");
  EXPECT_EQ(ErrorOf({"--weight-decay", "-0.1"}), "--weight-decay must be at least 0 (got -0.1)");
  EXPECT_EQ(ErrorOf({"--weight-decay", "much"}),
            "--weight-decay must be a number at least 0 (got 'much')");
  EXPECT_EQ(ErrorOf({"--clip-grad-norm", "-1"}), "--clip-grad-norm must be at least 0 (got -1)");
  EXPECT_EQ(ErrorOf({"--clip-grad-norm", "inf"}),
            "--clip-grad-norm must be a number at least 0 (got 'inf')");
  EXPECT_EQ(ErrorOf({"--loss-scale-init", "0"}),
            "--loss-scale-init must be greater than 0 and at most 3.4e38 (float32) (got 0)");
  EXPECT_EQ(ErrorOf({"--loss-scale-init", "1e39"}),
            "--loss-scale-init must be greater than 0 and at most 3.4e38 (float32) (got 1e39)");
  EXPECT_EQ(ErrorOf({"--loss-scale-growth-factor", "1"}),
            "--loss-scale-growth-factor must be greater than 1 (got 1)");
  EXPECT_EQ(ErrorOf({"--loss-scale-backoff-factor", "1"}),
            "--loss-scale-backoff-factor must be greater than 0 and less than 1 (got 1)");
  EXPECT_EQ(ErrorOf({"--loss-scale-growth-interval", "0"}),
            "--loss-scale-growth-interval must be between 1 and 2147483647 (got 0)");
  EXPECT_EQ(ErrorOf({"--lr-schedule", "step"}),
            "--lr-schedule step needs --lr-step-size N, the optimizer steps between decays by "
            "--lr-gamma (StepLR's step_size)");
}

TEST(TrainingMathFlags, EveryMachineMustGiveTheSameValues) {
  std::map<std::string, std::string> settings;
  auto options = Parse({"--precision", "bf16"});
  ASSERT_TRUE(options.ok()) << options.status().message();
  for (const auto& [name, value] : SettingsThatMustMatch(*options)) settings[name] = value;
  EXPECT_EQ(settings.at("--precision"), "bf16");
  EXPECT_EQ(settings.at("--grad-compression"), "auto");
  EXPECT_EQ(settings.at("--lr-schedule"), "constant");
  EXPECT_EQ(settings.at("--lr-step-size"), "(none)");
  for (const char* flag : {"--warmup-steps", "--lr-gamma", "--weight-decay", "--clip-grad-norm",
                           "--loss-scale-init", "--loss-scale-growth-factor",
                           "--loss-scale-backoff-factor", "--loss-scale-growth-interval"}) {
    EXPECT_EQ(settings.count(flag), 1u) << flag;
  }
}

TEST(TrainingMathFlags, HelpSaysWhatAutoCompressionSends) {
  // The help's words, with its line breaks and indentation as single spaces.
  std::string help;
  for (char c : HelpText()) {
    if (c == '\n') c = ' ';
    if (c != ' ' || help.empty() || help.back() != ' ') help += c;
  }
  for (const char* flag : {"--precision", "--lr-schedule", "--warmup-steps", "--lr-step-size",
                           "--lr-gamma", "--weight-decay", "--clip-grad-norm", "--loss-scale-init",
                           "--loss-scale-growth-interval"}) {
    EXPECT_NE(help.find(flag), std::string::npos) << flag;
  }
  EXPECT_NE(help.find("auto: the --precision's between machines, so bf16 and fp16"),
            std::string::npos)
      << help;
}

// The recipe's rate (0.5) is Adadelta's; Adam and AdamW without --lr get torch.optim's 0.001, on
// the launcher and its workers, and an --lr given wins.
TEST(OptimizerFlags, AdamsDefaultRateIsTorchOptimsAndAGivenOneWins) {
  const std::vector<std::pair<std::vector<std::string>, double>> cases = {
      {{}, 0.5},
      {{"--optimizer", "sgd"}, 0.5},
      {{"--optimizer", "adam"}, 0.001},
      {{"--optimizer", "adamw"}, 0.001},
      {{"--optimizer", "adam", "--lr", "0.5"}, 0.5},
  };
  for (const auto& [args, rate] : cases) {
    auto options = Parse(args);
    ASSERT_TRUE(options.ok()) << options.status().message();
    auto worker = Parse(WorkerArguments(*options, 0, "127.0.0.1:1"));
    ASSERT_TRUE(worker.ok()) << worker.status().message();
    const std::string named = args.empty() ? "defaults" : args[1];
    EXPECT_EQ(options->training.optimizer.learning_rate, rate) << named;
    EXPECT_EQ(worker->training.optimizer.learning_rate, rate) << named;
  }
}

TEST(OptimizerFlags, AdamwBetasEpsAndDecayAllReachTheConfigAndTheWorkers) {
  auto defaults = Parse({});
  ASSERT_TRUE(defaults.ok()) << defaults.status().message();
  EXPECT_EQ(defaults->training.optimizer.adam_beta1, 0.9);
  EXPECT_EQ(defaults->training.optimizer.adam_beta2, 0.999);
  EXPECT_EQ(defaults->training.optimizer.adam_eps, 1e-8);
  EXPECT_FALSE(defaults->training.optimizer.decay_all);
  auto options = Parse({"--optimizer", "adamw", "--betas", "0.8,0.95", "--eps", "1e-6",
                        "--weight-decay", "0.1", "--decay-all"});
  ASSERT_TRUE(options.ok()) << options.status().message();
  auto worker = Parse(WorkerArguments(*options, 0, "127.0.0.1:1"));
  ASSERT_TRUE(worker.ok()) << worker.status().message();
  for (const Options* o : {&*options, &*worker}) {
    const training::TrainingConfig& c = o->training;
    EXPECT_EQ(c.optimizer.kind, training::OptimizerKind::kAdamW);
    EXPECT_EQ(c.optimizer.adam_beta1, 0.8);
    EXPECT_EQ(c.optimizer.adam_beta2, 0.95);
    EXPECT_EQ(c.optimizer.adam_eps, 1e-6);
    EXPECT_EQ(c.optimizer.weight_decay, 0.1);
    EXPECT_TRUE(c.optimizer.decay_all);
  }
  // Betas that are not short decimals reach the workers bit for bit.
  auto exact = Parse({"--optimizer", "adam", "--betas", "0.123456789012345,0.9999999"});
  ASSERT_TRUE(exact.ok()) << exact.status().message();
  auto exact_worker = Parse(WorkerArguments(*exact, 0, "127.0.0.1:1"));
  ASSERT_TRUE(exact_worker.ok()) << exact_worker.status().message();
  EXPECT_EQ(exact_worker->training.optimizer.adam_beta1, 0.123456789012345);
  EXPECT_EQ(exact_worker->training.optimizer.adam_beta2, 0.9999999);
}

TEST(OptimizerFlags, BadValuesAreRefusedWithTheRange) {
  const std::string betas = "must be two numbers B1,B2, each at least 0 and less than 1";
  EXPECT_EQ(ErrorOf({"--betas", "0.9,1"}), "--betas " + betas + " (got '0.9,1')");
  EXPECT_EQ(ErrorOf({"--betas", "1,0.999"}), "--betas " + betas + " (got '1,0.999')");
  EXPECT_EQ(ErrorOf({"--betas", "-0.1,0.999"}), "--betas " + betas + " (got '-0.1,0.999')");
  EXPECT_EQ(ErrorOf({"--betas", "0.9"}), "--betas " + betas + " (got '0.9')");
  EXPECT_EQ(ErrorOf({"--betas", "0.9,0.99,0.999"}), "--betas " + betas + " (got '0.9,0.99,0.999')");
  EXPECT_EQ(ErrorOf({"--betas", "0.9,nan"}), "--betas " + betas + " (got '0.9,nan')");
  EXPECT_EQ(ErrorOf({"--eps", "0"}), "--eps must be greater than 0 (got 0)");
  EXPECT_EQ(ErrorOf({"--eps", "-1e-8"}), "--eps must be greater than 0 (got -1e-8)");
  EXPECT_EQ(ErrorOf({"--eps", "tiny"}), "--eps must be a number greater than 0 (got 'tiny')");
  EXPECT_EQ(ErrorOf({"--optimizer", "lamb"}),
            "--optimizer must be one of adadelta|sgd|adam|adamw (got 'lamb')");
  EXPECT_EQ(ErrorOf({"--optimizer", "sgd", "--decay-all"}),
            "--decay-all applies to --optimizer adamw, whose weight decay skips biases and norm "
            "weights; sgd decays every tensor already");
  EXPECT_EQ(ErrorOf({"--decay-all"}),
            "--decay-all applies to --optimizer adamw, whose weight decay skips biases and norm "
            "weights; adadelta decays every tensor already");
}

TEST(OptimizerFlags, EveryMachineAndEveryResumeMustGiveTheSameValues) {
  auto options = Parse({"--optimizer", "adamw", "--betas", "0.9,0.95", "--eps", "1e-07"});
  ASSERT_TRUE(options.ok()) << options.status().message();
  std::map<std::string, std::string> machines, resume;
  for (const auto& [name, value] : SettingsThatMustMatch(*options)) machines[name] = value;
  for (const training::ResumeSetting& s : options->training.resume_settings) {
    resume[s.flag] = s.value;
  }
  EXPECT_EQ(machines.at("--optimizer"), "adamw");
  EXPECT_EQ(machines.at("--betas"), "0.9,0.95");
  EXPECT_EQ(machines.at("--decay-all"), "off");
  EXPECT_EQ(resume.at("--optimizer"), "adamw");
  EXPECT_EQ(resume.at("--betas"), "0.9,0.95");
  EXPECT_EQ(resume.at("--eps"), "1e-07");
  EXPECT_EQ(resume.at("--decay-all"), "false");
}

// A flag given that changes nothing in its job is named, with why; the same flag where it applies
// is not.
TEST(FlagsWithoutEffect, AreNamedWithWhy) {
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> cases = {
      {{"--optimizer", "sgd", "--momentum", "0.9"}, {}},
      {{"--optimizer", "adam", "--momentum", "0.9"},
       {"--momentum has no effect with --optimizer adam: only sgd uses it"}},
      {{"--eps", "1e-3"},
       {"--eps has no effect with --optimizer adadelta: adam and adamw use it (adadelta keeps "
        "1e-06)"}},
      {{"--optimizer", "sgd", "--betas", "0.5,0.5", "--lr-step-size", "5"},
       {"--betas has no effect with --optimizer sgd: adam and adamw use it",
        "--lr-step-size and --lr-gamma have no effect without --lr-schedule step"}},
      {{"--loss-scale-init", "5", "--keep-checkpoints", "2", "--eval-batches", "5"},
       {"--loss-scale-init has no effect without --precision fp16",
        "--checkpoint-every and --keep-checkpoints have no effect without --checkpoint-dir: "
        "this run writes no checkpoints",
        "--eval-batches has no effect without --eval-every"}},
      {{"--checkpoint-dir", ""},
       {"--checkpoint-dir is empty, so it names nothing: this run goes without it"}},
      {{"--export", "x.pt", "--", "python3", "train.py"},
       {"--export has no effect on a program (after --), which trains as it is written"}},
  };
  for (const auto& [args, expected] : cases) {
    auto options = Parse(args);
    ASSERT_TRUE(options.ok()) << options.status().message();
    EXPECT_EQ(FlagsWithoutEffect(*options), expected) << args[1];
  }
}
}  // namespace
}  // namespace dpl::cli
