// --init-from FILE: a state dict written by Python that lacks a tensor, or holds one of the wrong
// shape, is refused before the first step naming the tensor; a model dpl exported is fine-tuned
// from exactly its parameters (the first step's loss is the exported model's loss on that batch,
// as Python computes it).
#include "interop_support.hpp"

namespace dpl::interop_test {
namespace {

class InitFrom : public InteropTest {
 protected:
  // One rank, one batch of 64: interop.py's small folder holds exactly 64 training samples.
  static Args Small(const Args& extra) {
    Args args = {"--num-processes", "1",        "--batch-size", "64", "--data-dir",
                 Fixture("small"),  "--no-eval"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
};

TEST_F(InitFrom, RefusesAStateDictWithAMissingOrMisshapenTensorNamingIt) {
  const std::string plugin = std::string(DPL_TEST_PLUGIN_DIR) + "/libdpl_model_convnet.so";
  const std::string missing = Fixture("missing_tensor.pt"),
                    misshapen = Fixture("misshapen_tensor.pt"), ddp = Fixture("ddp_state_dict.pt"),
                    empty = Fixture("empty.pt"), folder = Fixture("small");
  const std::pair<std::string, std::string> cases[] = {
      {missing, "state file " + missing + " has no tensor \"fc2.bias\""},
      {misshapen, "state file " + misshapen +
                      ": tensor \"fc1.weight\" has shape [64, 4000], the model expects [64, 4608]"},
      {ddp, "state file " + ddp +
                " has no tensor \"cn1.weight\" but has \"module.cn1.weight\": a "
                "DistributedDataParallel's state dict; save ddp.module.state_dict() instead"},
      {empty, "state file " + empty + " is empty; torch.save writes a zip archive"},
      {folder, "state file " + folder + " is a folder; name the file torch.save wrote"}};
  for (const auto& [file, problem] : cases) {
    const JobResult job = Run(Small({"--max-steps", "1", "--init-from", file}), "refused");
    EXPECT_TRUE(test::ExitedWith(job.status, 1)) << test::Describe(job.status) << "\n"
                                                 << job.output;
    EXPECT_TRUE(Contains(job.output, "[rank 0] error: --init-from " + file +
                                         ": model plugin 'convnet' (" + plugin +
                                         ") load_state failed with DPL_ERR_INVALID_ARGUMENT: "
                                         "model \"convnet\": " +
                                         problem + "\n"))
        << job.output;
    EXPECT_FALSE(Contains(job.output, "training loss")) << "a step ran:\n" << job.output;
  }
}

// A checkpoint is not a state dict: the refusal says which flag takes it.
TEST_F(InitFrom, ACheckpointIsRefusedNamingResume) {
  const JobResult first =
      Run(Small({"--max-steps", "1", "--checkpoint-dir", Path("checkpoints")}), "checkpointed");
  ASSERT_TRUE(first.ok()) << test::Describe(first.status) << "\n" << first.output;
  const std::string checkpoint = Path("checkpoints/checkpoint-0000000001.pt");
  const JobResult job = Run(Small({"--max-steps", "1", "--init-from", checkpoint}), "refused");
  EXPECT_TRUE(test::ExitedWith(job.status, 1)) << test::Describe(job.status) << "\n" << job.output;
  EXPECT_TRUE(Contains(job.output, "state file " + checkpoint +
                                       " is a dpl checkpoint, not a state dict: go on from it "
                                       "with --resume --checkpoint-dir and its folder"))
      << job.output;
}

TEST_F(InitFrom, FineTuningStartsFromTheExportedParameters) {
  const std::string exported = Path("pretrained.pt");
  const JobResult pretraining = Run(Small({"--max-steps", "5", "--export", exported}), "pretrain");
  ASSERT_TRUE(pretraining.ok()) << test::Describe(pretraining.status) << "\n" << pretraining.output;

  const std::string metrics = Path("metrics.jsonl");
  // Without dropout the first step's loss is the loss of the starting parameters on the batch.
  const JobResult fine_tuning =
      Run(Small({"--init-from", exported, "--model-options", "dropout=0", "--max-steps", "1",
                 "--log-interval", "1", "--metrics", metrics}),
          "fine_tune");
  ASSERT_TRUE(fine_tuning.ok()) << test::Describe(fine_tuning.status) << "\n" << fine_tuning.output;
  EXPECT_TRUE(Contains(fine_tuning.output, "parameters from " + exported)) << fine_tuning.output;
  const std::vector<double> losses = StepLosses(metrics);
  ASSERT_EQ(losses.size(), 1u);

  const std::string python = RunPython("loss state " + exported + " " + Fixture("small"));
  ASSERT_FALSE(Field(python, "loss").empty()) << python;
  const double expected = std::stod(Field(python, "loss"));
  // The metrics file has 6 decimals.
  EXPECT_NEAR(losses[0], expected, 0.5e-6 + 1e-6 * expected)
      << "the first step did not start from " << exported;
}

}  // namespace
}  // namespace dpl::interop_test
