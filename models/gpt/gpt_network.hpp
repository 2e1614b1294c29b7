// nanoGPT's decoder-only transformer (github.com/karpathy/nanoGPT, model.py) as a libtorch module:
// token and learned position embeddings, dropout, pre-LayerNorm blocks of causal multi-head
// self-attention and a 4x GELU MLP, a final LayerNorm, and output weights tied to the token
// embedding. Parameter names, initialisation and arithmetic are nanoGPT's and those of the Python
// class tools/gpt_model.py, so a state dict written by either side loads into the other and gives
// the same logits (models/gpt/README.md).
#ifndef DPL_MODELS_GPT_GPT_NETWORK_HPP
#define DPL_MODELS_GPT_GPT_NETWORK_HPP

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dpl/support/options.hpp"

namespace dpl::gpt {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// The network's sizes. The defaults are nanoGPT's Shakespeare-char model (about 10.7M
// parameters for its 65 characters).
struct GptConfig {
  static constexpr int64_t kDefaultVocab = 256;  // byte-level tokens
  static constexpr int64_t kDefaultBlock = 256;
  static constexpr int64_t kDefaultLayers = 6;
  static constexpr int64_t kDefaultHeads = 6;
  static constexpr int64_t kDefaultDim = 384;

  int64_t vocab = kDefaultVocab;    // tokens 0..vocab-1
  int64_t block = kDefaultBlock;    // the longest sequence (learned positions)
  int64_t layers = kDefaultLayers;  // transformer blocks
  int64_t heads = kDefaultHeads;    // attention heads per block; divides dim
  int64_t dim = kDefaultDim;        // embedding width
  double dropout = 0.0;             // after the embeddings, on attention weights, after c_proj
  bool bias = true;                 // biases in every Linear and LayerNorm
};

// Throws dpl::torch_model::InvalidOption, naming the option and the rule, for sizes the network
// cannot have: anything below 1, dim not divisible by heads, dropout outside [0, 1).
void CheckGptConfig(const GptConfig& config);

// The model options layers, heads, dim, block, dropout and bias (defaults: GptConfig's, block
// `default_block`) for a vocabulary of `vocab` tokens, checked.
GptConfig ReadGptConfig(const support::KeyValueOptions& options, int64_t vocab,
                        int64_t default_block = GptConfig::kDefaultBlock);

// nanoGPT's LayerNorm: a weight, and a bias only when `bias`; eps 1e-5.
class LayerNormImpl : public torch::nn::Module {
 public:
  LayerNormImpl(int64_t dim, bool bias);
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight;
  torch::Tensor bias;  // undefined without a bias
};
TORCH_MODULE(LayerNorm);

// Multi-head self-attention where each position attends to itself and the positions before it.
class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit CausalSelfAttentionImpl(const GptConfig& config);
  // x: (batch, T, dim). future: (T, T) float, -inf above the diagonal (the positions a row must
  // not see) and 0 elsewhere, from FutureMask; undefined where the fused attention applies the
  // mask itself.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& future);

  torch::nn::Linear c_attn{nullptr};  // dim -> 3 * dim: queries, keys, values
  torch::nn::Linear c_proj{nullptr};  // dim -> dim

 private:
  torch::Tensor Attend(const torch::Tensor& query, const torch::Tensor& key,
                       const torch::Tensor& value, const torch::Tensor& future);
  // The written-out attention of `query`'s rows over the first key.size(-2) positions; `future`
  // masks (rows, keys). Unused where libtorch fuses attention.
  torch::Tensor AttendToPrefix(const torch::Tensor& query, const torch::Tensor& key,
                               const torch::Tensor& value, const torch::Tensor& future);

  int64_t heads_;
  double dropout_;
};
TORCH_MODULE(CausalSelfAttention);

// dim -> 4 * dim -> GELU (exact, erf) -> dim -> dropout.
class MlpImpl : public torch::nn::Module {
 public:
  explicit MlpImpl(const GptConfig& config);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::Linear c_fc{nullptr};
  torch::nn::Linear c_proj{nullptr};

 private:
  double dropout_;
};
TORCH_MODULE(Mlp);

// x + attn(ln_1(x)), then x + mlp(ln_2(x)).
class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const GptConfig& config);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& future);

  LayerNorm ln_1{nullptr};
  CausalSelfAttention attn{nullptr};
  LayerNorm ln_2{nullptr};
  Mlp mlp{nullptr};
};
TORCH_MODULE(Block);

// nanoGPT's `transformer` ModuleDict: wte, wpe, h.0 .. h.{layers-1}, ln_f.
class TransformerImpl : public torch::nn::Module {
 public:
  explicit TransformerImpl(const GptConfig& config);

  torch::nn::Embedding wte{nullptr};  // (vocab, dim); also the output weights (lm_head)
  torch::nn::Embedding wpe{nullptr};  // (block, dim)
  torch::nn::ModuleList h{nullptr};   // the blocks, for their names
  std::vector<Block> blocks;          // the same blocks, typed
  LayerNorm ln_f{nullptr};
};
TORCH_MODULE(Transformer);

// The whole network. Its parameters (named_parameters) hold the tied weight once, as
// transformer.wte.weight: the list a host averages and updates. StateDict adds lm_head.weight
// for Python, as nanoGPT's state_dict() does.
class Gpt : public torch::nn::Module {
 public:
  // Checks `config` (CheckGptConfig) and initialises as nanoGPT does, with the same random draws
  // as tools/gpt_model.py's GPT after the same torch.manual_seed (Note [Same draws as Python]).
  explicit Gpt(const GptConfig& config);

  // (batch, T) token ids (int64 or int32; other integer types are converted), 1 <= T <= block
  // -> (batch, T, vocab) logits.
  torch::Tensor forward(const torch::Tensor& idx);

  const GptConfig& config() const { return config_; }

  // nanoGPT's state_dict(): every parameter by name in registration order, and lm_head.weight
  // (the same tensor as transformer.wte.weight) after transformer.ln_f.
  NamedTensors StateDict() const;

  // Copies `tensors` into the parameters by name, converting the dtype; `source` names them in
  // messages ("state file x.pt"). The tied weight may come as transformer.wte.weight,
  // lm_head.weight or both (then they must be equal); nanoGPT's causal-mask buffers
  // (transformer.h.N.attn.bias, written by nanoGPT without fused attention) are ignored. Throws
  // dpl::torch_model::InvalidOption for a missing or unknown name or a shape that differs,
  // before anything is copied.
  void LoadStateDict(const NamedTensors& tensors, const std::string& source);

  Transformer transformer{nullptr};

 private:
  void InitialiseAsNanoGpt();
  // `idx` as int64 or int32 ids after checking its shape, type, length and (on the CPU) range.
  torch::Tensor CheckedTokenIds(const torch::Tensor& idx) const;

  GptConfig config_;
};

// (T, T) float32, -inf above the diagonal and 0 elsewhere, on `device`: added to the attention's
// scores, the mask Python's masked_fill applies. Undefined where fused attention is used.
torch::Tensor FutureMask(int64_t steps, const torch::Device& device);

// The mean cross-entropy over every position: logits (batch, T, vocab), targets (batch, T).
torch::Tensor GptLoss(const torch::Tensor& logits, const torch::Tensor& targets);

}  // namespace dpl::gpt

#endif  // DPL_MODELS_GPT_GPT_NETWORK_HPP
