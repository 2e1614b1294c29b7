// The gpt model plugin: nanoGPT's transformer (gpt_network.hpp) trained on token data through the
// SDK's libtorch helper, model ABI v4 (typed samples).
//     launcher --model gpt --model-options layers=2,heads=4,dim=64 --data text ...
// Its input is (batch, T) integer token ids, its target the next token at each position; the
// vocabulary is the data's number of classes and T the network's block (models/gpt/README.md).
#include "dpl/torch_model.hpp"
#include "gpt_network.hpp"

namespace dpl::gpt {
namespace {

using torch_model::InvalidOption;

// The network as the helper drives it; its state files are nanoGPT's state dicts.
class GptNetwork : public torch_model::ModuleNetwork<Gpt> {
 public:
  using ModuleNetwork::ModuleNetwork;

  // save_state: the state dict with both names of the tied weight (transformer.wte.weight and
  // lm_head.weight), so Python's GPT().load_state_dict(torch.load(path)) takes it strictly.
  void Save(const std::string& path) override {
    torch_model::WriteStateDict(path, module().StateDict());
  }

  // load_state (--init-from): a state dict of Python's GPT, of nanoGPT or of save_state; the tied
  // weight under either name, nanoGPT's mask buffers ignored, anything else unknown refused.
  std::vector<std::string> Load(const torch_model::NamedTensors& saved,
                                const std::string& prefix) override {
    module().LoadStateDict(saved, prefix);
    return {};
  }
};

// The data's tokens per sample, or the network's default block when the host does not say.
int64_t DataBlock(const torch_model::DataShape& data) {
  return data.input_shape.empty() ? GptConfig::kDefaultBlock : data.input_shape[0];
}

struct GptTraits {
  using Options = torch_model::ModelOptions;
  static constexpr const char* kName = "gpt";
  static constexpr const char* kVersion = "1.0.0";
  static constexpr const char* kDescription =
      "nanoGPT's decoder-only transformer on token data (--model-options "
      "layers=,heads=,dim=,block=,dropout=,bias=)";

  // Token ids with the next token per position; any block and vocabulary (the data's).
  static torch_model::DataSpec Accepts() {
    return {torch_model::AnyInputShape({GptConfig::kDefaultBlock}),
            torch_model::AnyNumClasses(GptConfig::kDefaultVocab),
            torch_model::Samples::kTokenSequences};
  }

  static torch_model::NetworkSpec Build(Options& options,
                                        const torch_model::BuildContext& context) {
    const int64_t block = DataBlock(context.data);
    GptConfig config = ReadGptConfig(options, context.data.num_classes, block);
    if (options.Has("block") && config.block != block) {
      throw InvalidOption("option \"block\" is " + std::to_string(config.block) +
                          " but the data's samples hold " + std::to_string(block) +
                          " tokens; give the model block=" + std::to_string(block) +
                          " or the data block=" + std::to_string(config.block));
    }
    auto module = std::make_shared<Gpt>(config);
    module->to(context.device);
    torch_model::NetworkSpec spec;
    spec.network = std::make_unique<GptNetwork>(std::move(module));
    spec.input_shape = {config.block};
    spec.num_classes = config.vocab;
    spec.loss = torch_model::Loss::kCrossEntropy;
    return spec;
  }
};

}  // namespace
}  // namespace dpl::gpt

extern "C" {
DPL_PLUGIN_EXPORT extern const dpl_model_plugin_v4 dpl_gpt_model_table
    DPL_PLUGIN_ENTRY_SYMBOL(dpl_model_plugin_v4);
const dpl_model_plugin_v4 dpl_gpt_model_table =
    ::dpl::torch_model::Plugin<::dpl::gpt::GptTraits>::TableV4();
}
