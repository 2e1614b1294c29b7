// Note [Flags that must agree] (launcher/cli/flags.hpp): every row of the flag table says whether
// its value must match across machines and on resume, and why it may differ where it may; the
// join's and the resume's lists are derived from the rows, and a checkpoint records its options
// as the first checkpoints did.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/flags.hpp"
#include "cli/options.hpp"
#include "cli_test_support.hpp"

namespace dpl::cli {
namespace {

// The flags that change the trained values: a resumed run must give what its checkpoint recorded.
// These names are inside every checkpoint written so far; a flag leaves this list only with a
// reason that old checkpoints stay readable.
const std::vector<std::string> kChangeTheMath = {
    "model",
    "model-options",
    "batch-size",
    "seed",
    "optimizer",
    "lr",
    "momentum",
    "grad-accum",
    "precision",
    "weight-decay",
    "clip-grad-norm",
    "lr-schedule",
    "warmup-steps",
    "lr-step-size",
    "lr-gamma",
    "loss-scale-growth-factor",
    "loss-scale-backoff-factor",
    "loss-scale-growth-interval",
    "drop-last",
    "decay-all",
    "betas",
    "eps",
};

// And these change the job's collectives, shape or data: every machine gives the same, a resumed
// run may change them.
const std::vector<std::string> kSameOnEveryMachine = {
    "backend",
    "num-machines",
    "num-processes",
    "epochs",
    "data",
    "data-dir",
    "data-options",
    "max-steps",
    "device",
    "grad-compression",
    "loss-scale-init",
    "bucket-cap-mb",
    "selftest",
    "no-eval",
    "mirror-parameters",
    "store",
    "preflight",
    "eval-every",
    "eval-batches",
    "early-stop-patience",
    "check-replicas",
    "program",
    "local-reduce",
    "shard-optimizer",
    "shard-copy",
    "restart-workers",
    "offload-optimizer",
    "checkpoint-every",
    "straggler-factor",
};

bool Contains(const std::vector<std::string>& names, const std::string& name) {
  for (const std::string& entry : names) {
    if (entry == name) return true;
  }
  return false;
}

TEST(FlagAgreement, EveryRowSaysWhatMustAgreeAndWhyTheRestMayDiffer) {
  for (const Flag& flag : FlagTable()) {
    ASSERT_TRUE(flag.agreement.has_value()) << "--" << flag.name << " is not classified";
    const Agreement& agreement = *flag.agreement;
    if (!agreement.on_resume || !agreement.across_machines) {
      EXPECT_FALSE(agreement.why_it_may_differ.empty())
          << "--" << flag.name << " may differ but says not why";
    }
    if (agreement.on_resume) {
      EXPECT_TRUE(agreement.across_machines)
          << "--" << flag.name << " must match a checkpoint but not the other machines";
      EXPECT_TRUE(flag.recorded_value) << "--" << flag.name << " has no text for checkpoints";
    }
  }
}

TEST(FlagAgreement, FlagsThatChangeTheMathAreMarked) {
  std::vector<std::string> on_resume, machines_only;
  for (const Flag& flag : FlagTable()) {
    if (flag.MustMatchOnResume()) on_resume.push_back(flag.name);
    if (flag.MustMatchAcrossMachines() && !flag.MustMatchOnResume()) {
      machines_only.push_back(flag.name);
    }
  }
  for (const std::string& name : kChangeTheMath) {
    EXPECT_TRUE(Contains(on_resume, name)) << "--" << name << " must match on resume";
  }
  for (const std::string& name : on_resume) {
    EXPECT_TRUE(Contains(kChangeTheMath, name)) << "--" << name << ": a new resume check";
  }
  for (const std::string& name : kSameOnEveryMachine) {
    EXPECT_TRUE(Contains(machines_only, name)) << "--" << name << " must match across machines";
  }
  for (const std::string& name : machines_only) {
    EXPECT_TRUE(Contains(kSameOnEveryMachine, name)) << "--" << name << ": a new join check";
  }
}

TEST(FlagAgreement, TheJoinComparesEveryFlagThatMustMatchAcrossMachines) {
  auto options = Parse({"--lr", "0.25", "--drop-last"});
  ASSERT_TRUE(options.ok()) << options.status().message();
  std::vector<std::string> names;
  for (const auto& [name, value] : SettingsThatMustMatch(*options)) {
    names.push_back(name.substr(2));
    if (name == "--lr") {
      EXPECT_EQ(value, "0.25");
    } else if (name == "--drop-last") {
      EXPECT_EQ(value, "on");
    } else if (name == "--no-eval") {
      EXPECT_EQ(value, "off");
    }
  }
  EXPECT_EQ(names.size(), kChangeTheMath.size() + kSameOnEveryMachine.size());
  for (const std::string& name : names) {
    EXPECT_TRUE(Contains(kChangeTheMath, name) || Contains(kSameOnEveryMachine, name)) << name;
  }
}

// Note [Values in checkpoints] in launcher/cli/flag_kinds.cpp: the texts of the checkpoints
// written before the list came from the flag table.
TEST(FlagAgreement, CheckpointsRecordTheOptionsAsBefore) {
  auto options = Parse({});
  ASSERT_TRUE(options.ok()) << options.status().message();
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"--model", "convnet"},
      {"--model-options", ""},
      {"--batch-size", "128"},
      {"--seed", "0"},
      {"--optimizer", "adadelta"},
      {"--lr", "0.5"},
      {"--momentum", "0"},
      {"--grad-accum", "1"},
      {"--precision", "fp32"},
      {"--weight-decay", "0"},
      {"--clip-grad-norm", "0"},
      {"--lr-schedule", "constant"},
      {"--warmup-steps", "0"},
      {"--lr-step-size", "0"},
      {"--lr-gamma", "0.1"},
      {"--loss-scale-growth-factor", "2"},
      {"--loss-scale-backoff-factor", "0.5"},
      {"--loss-scale-growth-interval", "2000"},
      {"--drop-last", "false"},
  };
  // The flags a checkpoint records since AdamW came (a checkpoint written before has none of them,
  // and had these values: Adam's constants, every tensor decayed by the optimizers there were).
  const std::vector<std::pair<std::string, std::string>> since_adamw = {
      {"--decay-all", "false"},
      {"--betas", "0.9,0.999"},
      {"--eps", "1e-08"},
  };
  const std::vector<training::ResumeSetting>& settings = options->training.resume_settings;
  ASSERT_EQ(settings.size(), expected.size() + since_adamw.size());
  std::vector<training::ResumeSetting> first, later;
  for (const training::ResumeSetting& setting : settings) {
    bool new_flag = false;
    for (const auto& entry : since_adamw) new_flag = new_flag || entry.first == setting.flag;
    (new_flag ? later : first).push_back(setting);
  }
  ASSERT_EQ(first.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(first[i].flag, expected[i].first);
    EXPECT_EQ(first[i].value, expected[i].second) << expected[i].first;
    EXPECT_EQ(first[i].default_value, expected[i].second) << expected[i].first;
  }
  ASSERT_EQ(later.size(), since_adamw.size());
  for (size_t i = 0; i < since_adamw.size(); ++i) {
    EXPECT_EQ(later[i].flag, since_adamw[i].first);
    EXPECT_EQ(later[i].value, since_adamw[i].second) << since_adamw[i].first;
    EXPECT_EQ(later[i].default_value, since_adamw[i].second) << since_adamw[i].first;
  }
}

TEST(FlagAgreement, RecordedValuesKeepTheirSpelling) {
  auto options =
      Parse({"--lr", "0.123456789", "--momentum", "0.9", "--optimizer", "sgd", "--weight-decay",
             "1e-5", "--drop-last", "--seed", "18446744073709551615", "--model-options",
             "dropout=0", "--lr-schedule", "step", "--lr-step-size", "30"});
  ASSERT_TRUE(options.ok()) << options.status().message();
  std::vector<std::pair<std::string, std::string>> recorded;
  for (const training::ResumeSetting& setting : ResumeSettings(*options)) {
    recorded.emplace_back(setting.flag, setting.value);
  }
  auto value_of = [&](const std::string& flag) {
    for (const auto& [name, value] : recorded) {
      if (name == flag) return value;
    }
    return std::string("(missing)");
  };
  EXPECT_EQ(value_of("--lr"), "0.123457");  // six significant digits, as ever
  EXPECT_EQ(value_of("--momentum"), "0.9");
  EXPECT_EQ(value_of("--optimizer"), "sgd");
  EXPECT_EQ(value_of("--weight-decay"), "1e-05");
  EXPECT_EQ(value_of("--drop-last"), "true");
  EXPECT_EQ(value_of("--seed"), "18446744073709551615");
  EXPECT_EQ(value_of("--model-options"), "dropout=0");
  EXPECT_EQ(value_of("--lr-schedule"), "step");
  EXPECT_EQ(value_of("--lr-step-size"), "30");
  // A worker parses its own argv and records the same.
  auto worker = Parse(WorkerArguments(*options, 0, "127.0.0.1:1"));
  ASSERT_TRUE(worker.ok()) << worker.status().message();
  ASSERT_EQ(worker->training.resume_settings.size(), recorded.size());
  for (size_t i = 0; i < recorded.size(); ++i) {
    EXPECT_EQ(worker->training.resume_settings[i].value, recorded[i].second) << recorded[i].first;
  }
}

}  // namespace
}  // namespace dpl::cli
