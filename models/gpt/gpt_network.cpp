// nanoGPT's decoder-only transformer (gpt_network.hpp).
#include "gpt_network.hpp"

#include <cmath>
#include <limits>
#include <map>
#include <regex>
#include <sstream>

#include "dpl/torch_model.hpp"
#include "dpl/torch_model/batched_matmul.hpp"
#include "dpl/torch_model/libtorch_versions.hpp"

namespace dpl::gpt {
namespace {

using torch_model::InvalidArgument;
using torch_model::InvalidOption;
using torch_model::ShapeText;

constexpr double kInitStd = 0.02;  // nanoGPT's normal init of every Linear and Embedding weight
constexpr double kLayerNormEps = 1e-5;
constexpr const char* kTiedName = "transformer.wte.weight";
constexpr const char* kHeadName = "lm_head.weight";

void RequirePositive(const char* option, int64_t value) {
  if (value < 1) {
    throw InvalidOption(std::string("option \"") + option + "\" must be at least 1, got " +
                        std::to_string(value));
  }
}

std::string NumberText(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

// Note [Same draws as Python]: Python's GPT builds its layers with PyTorch's default init (which
// draws from the generator), then redraws every Linear and Embedding weight with nanoGPT's init,
// in module order, then the c_proj weights. This network builds the same libtorch layers in the
// same order and redraws in the same order, so that after the same torch.manual_seed both sides
// hold the same numbers bit for bit. The one layer it lacks is Python's lm_head, a Linear(dim,
// vocab) whose default init draws before the tie discards it (the tie keeps lm_head's tensor as
// wte's, which nanoGPT's init then draws last among the leaves): the draw is repeated here into a
// tensor nobody keeps.
void DrawAsPythonsLmHead(const GptConfig& config) {
  torch::NoGradGuard no_grad;
  torch::Tensor discarded = torch::empty({config.vocab, config.dim});
  torch::nn::init::kaiming_uniform_(discarded, std::sqrt(5.0));
}

// Note [ATen's linear]: the C++ frontend's Linear::forward multiplies a (batch, T, dim) input by
// matmul and then adds the bias in place, a separate broadcast sum forward and backward, where
// ATen's linear (Python's nn.Linear) folds the batch into one addmm with the bias. At two threads
// the frontend's way made the tiny GPT's step 9 % slower than its TorchScript twin's; this is the
// twin's op, so both sides also run the same arithmetic.
torch::Tensor Project(const torch::nn::Linear& linear, const torch::Tensor& x) {
  return torch::linear(x, linear->weight, linear->bias);
}

void InitLinear(torch::nn::Linear& linear) {
  torch::nn::init::normal_(linear->weight, 0.0, kInitStd);
  if (linear->bias.defined()) torch::nn::init::zeros_(linear->bias);
}

// `tensors` by name, the tied weight under kTiedName only (Gpt::LoadStateDict).
std::map<std::string, torch::Tensor> ByName(const NamedTensors& tensors,
                                            const std::string& source) {
  static const std::regex nano_gpt_mask(R"(transformer\.h\.[0-9]+\.attn\.bias)");
  std::map<std::string, torch::Tensor> named;
  for (const auto& [name, tensor] : tensors) {
    if (std::regex_match(name, nano_gpt_mask)) continue;
    if (!named.emplace(name, tensor).second) {
      throw InvalidOption(source + " holds tensor \"" + name + "\" twice");
    }
  }
  const auto head = named.find(kHeadName);
  if (head == named.end()) return named;
  const auto tied = named.find(kTiedName);
  if (tied == named.end()) {
    named.emplace(kTiedName, head->second);
  } else if (tied->second.sizes() != head->second.sizes() ||
             tied->second.scalar_type() != head->second.scalar_type() ||
             !torch::equal(tied->second, head->second)) {
    throw InvalidOption(source + ": \"" + kTiedName + "\" and \"" + kHeadName +
                        "\" differ, but the network ties them (one tensor for both)");
  }
  named.erase(kHeadName);
  return named;
}

std::string NamesText(const std::map<std::string, torch::Tensor>& named) {
  constexpr size_t kListed = 5;
  std::string text;
  size_t listed = 0;
  for (const auto& entry : named) {
    if (listed++ == kListed)
      return text + " and " + std::to_string(named.size() - kListed) + " more";
    text += (text.empty() ? "\"" : ", \"") + entry.first + "\"";
  }
  return text;
}

}  // namespace

void CheckGptConfig(const GptConfig& config) {
  if (config.vocab < 1) {
    throw InvalidOption("the vocabulary must hold at least 1 token, got " +
                        std::to_string(config.vocab));
  }
  RequirePositive("layers", config.layers);
  RequirePositive("heads", config.heads);
  RequirePositive("dim", config.dim);
  RequirePositive("block", config.block);
  if (config.dim % config.heads != 0) {
    throw InvalidOption("option \"dim\" (" + std::to_string(config.dim) +
                        ") must be divisible by option \"heads\" (" + std::to_string(config.heads) +
                        "): each head attends over dim / heads of the dimensions");
  }
  if (!(config.dropout >= 0.0 && config.dropout < 1.0)) {
    throw InvalidOption("option \"dropout\" must be in [0, 1), got " + NumberText(config.dropout));
  }
}

GptConfig ReadGptConfig(const support::KeyValueOptions& options, int64_t vocab,
                        int64_t default_block) {
  GptConfig config;
  config.vocab = vocab;
  config.layers = options.GetInt("layers", GptConfig::kDefaultLayers);
  config.heads = options.GetInt("heads", GptConfig::kDefaultHeads);
  config.dim = options.GetInt("dim", GptConfig::kDefaultDim);
  config.block = options.GetInt("block", default_block);
  config.dropout = options.GetDouble("dropout", config.dropout);
  config.bias = options.GetBool("bias", config.bias);
  CheckGptConfig(config);
  return config;
}

LayerNormImpl::LayerNormImpl(int64_t dim, bool bias) {
  weight = register_parameter("weight", torch::ones({dim}));
  if (bias) this->bias = register_parameter("bias", torch::zeros({dim}));
}

torch::Tensor LayerNormImpl::forward(const torch::Tensor& x) {
  return torch::layer_norm(x, {weight.size(0)}, weight, bias, kLayerNormEps);
}

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GptConfig& config)
    : heads_(config.heads), dropout_(config.dropout) {
  const auto linear = [&](int64_t in, int64_t out) {
    return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(config.bias));
  };
  c_attn = register_module("c_attn", linear(config.dim, 3 * config.dim));
  c_proj = register_module("c_proj", linear(config.dim, config.dim));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x,
                                               const torch::Tensor& future) {
  const int64_t batch = x.size(0);
  const int64_t steps = x.size(1);
  const int64_t dim = x.size(2);
  const std::vector<torch::Tensor> qkv = Project(c_attn, x).split(dim, 2);
  const auto split_heads = [&](const torch::Tensor& part) {
    return part.view({batch, steps, heads_, dim / heads_}).transpose(1, 2);
  };
  torch::Tensor y = Attend(split_heads(qkv[0]), split_heads(qkv[1]), split_heads(qkv[2]), future);
  y = y.transpose(1, 2).contiguous().view({batch, steps, dim});
  return torch::dropout(Project(c_proj, y), dropout_, is_training());
}

// Note [Attention by libtorch version]: libtorch 2.x fuses attention (flash or memory-efficient
// kernels on CUDA) in scaled_dot_product_attention; 1.13 has none, so there the attention is
// written out as nanoGPT writes it without flash, with the values of tools/gpt_model.py's ops
// (long sequences in two halves, the scale and mask in the scores' product), which keeps the two
// sides' logits equal on 1.13.
torch::Tensor CausalSelfAttentionImpl::Attend(const torch::Tensor& query, const torch::Tensor& key,
                                              const torch::Tensor& value,
                                              const torch::Tensor& future) {
#if DPL_LIBTORCH_HAS_SCALED_DOT_PRODUCT_ATTENTION
  static_cast<void>(future);
  return at::scaled_dot_product_attention(query, key, value, /*attn_mask=*/{},
                                          is_training() ? dropout_ : 0.0, /*is_causal=*/true);
#else
  // Below this length the halves' slicing costs more than the masked quarter of the work saves.
  constexpr int64_t kHalvedAttentionMinSteps = 128;
  const int64_t steps = query.size(-2);
  if (steps < kHalvedAttentionMinSteps) return AttendToPrefix(query, key, value, future);
  // Note [Attention in two halves]: the first half of the positions sees only the first half
  // of the keys, so its scores and weighted sum are computed over those alone: 3/4 of the
  // written-out attention's matrix work. The scores left out are the masked ones, whose softmax
  // weight is exactly 0, so each row sums the same terms; the logits stay those of
  // tools/gpt_model.py (the CPU tests compare them within 1e-5). Two halves measured fastest
  // on the CPU at block 256; more pieces cost more in slicing and concatenation than they save.
  const int64_t half = steps / 2;
  const torch::Tensor first =
      AttendToPrefix(query.narrow(-2, 0, half), key.narrow(-2, 0, half), value.narrow(-2, 0, half),
                     future.narrow(0, 0, half).narrow(1, 0, half));
  const torch::Tensor second = AttendToPrefix(query.narrow(-2, half, steps - half), key, value,
                                              future.narrow(0, half, steps - half));
  return torch::cat({first, second}, -2);
#endif
}

torch::Tensor CausalSelfAttentionImpl::AttendToPrefix(const torch::Tensor& query,
                                                      const torch::Tensor& key,
                                                      const torch::Tensor& value,
                                                      const torch::Tensor& future) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(key.size(-1)));
  // Note [Many small products] (dpl/torch_model/batched_matmul.hpp): torch::matmul's values,
  // without bmm's per-matrix overhead; the scale and the mask in the product's one pass, with the
  // values of Python's multiplication and masked_fill.
  torch::Tensor weights =
      torch_model::ScaledBatchedMatmul(query, key.transpose(-2, -1), scale, future);
  weights = torch::dropout(torch::softmax(weights, -1), dropout_, is_training());
  return torch_model::BatchedMatmul(weights, value);
}

MlpImpl::MlpImpl(const GptConfig& config) : dropout_(config.dropout) {
  const auto options = [&](int64_t in, int64_t out) {
    return torch::nn::LinearOptions(in, out).bias(config.bias);
  };
  c_fc = register_module("c_fc", torch::nn::Linear(options(config.dim, 4 * config.dim)));
  c_proj = register_module("c_proj", torch::nn::Linear(options(4 * config.dim, config.dim)));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  return torch::dropout(Project(c_proj, torch::gelu(Project(c_fc, x))), dropout_, is_training());
}

BlockImpl::BlockImpl(const GptConfig& config) {
  ln_1 = register_module("ln_1", LayerNorm(config.dim, config.bias));
  attn = register_module("attn", CausalSelfAttention(config));
  ln_2 = register_module("ln_2", LayerNorm(config.dim, config.bias));
  mlp = register_module("mlp", Mlp(config));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x, const torch::Tensor& future) {
  const torch::Tensor attended = x + attn->forward(ln_1->forward(x), future);
  return attended + mlp->forward(ln_2->forward(attended));
}

TransformerImpl::TransformerImpl(const GptConfig& config) {
  wte = register_module("wte", torch::nn::Embedding(config.vocab, config.dim));
  wpe = register_module("wpe", torch::nn::Embedding(config.block, config.dim));
  h = register_module("h", torch::nn::ModuleList());
  for (int64_t layer = 0; layer < config.layers; ++layer) {
    blocks.emplace_back(config);
    h->push_back(blocks.back());
  }
  ln_f = register_module("ln_f", LayerNorm(config.dim, config.bias));
}

Gpt::Gpt(const GptConfig& config) : config_(config) {
  CheckGptConfig(config_);
  transformer = register_module("transformer", Transformer(config_));
  DrawAsPythonsLmHead(config_);
  InitialiseAsNanoGpt();
}

// nanoGPT's _init_weights over the modules in order, then its c_proj rule (Note [Same draws as
// Python]); LayerNorms keep their ones and zeros.
void Gpt::InitialiseAsNanoGpt() {
  torch::NoGradGuard no_grad;
  torch::nn::init::normal_(transformer->wte->weight, 0.0, kInitStd);
  torch::nn::init::normal_(transformer->wpe->weight, 0.0, kInitStd);
  for (Block& block : transformer->blocks) {
    InitLinear(block->attn->c_attn);
    InitLinear(block->attn->c_proj);
    InitLinear(block->mlp->c_fc);
    InitLinear(block->mlp->c_proj);
  }
  torch::nn::init::normal_(transformer->wte->weight, 0.0, kInitStd);  // lm_head's turn
  // Residual projections scaled down with depth (GPT-2's paper).
  const double projection_std = kInitStd / std::sqrt(2.0 * static_cast<double>(config_.layers));
  for (Block& block : transformer->blocks) {
    torch::nn::init::normal_(block->attn->c_proj->weight, 0.0, projection_std);
    torch::nn::init::normal_(block->mlp->c_proj->weight, 0.0, projection_std);
  }
}

torch::Tensor Gpt::CheckedTokenIds(const torch::Tensor& idx) const {
  if (idx.dim() != 2) {
    throw InvalidArgument("the gpt network takes token ids of shape (batch, T), got shape " +
                          ShapeText(idx.sizes()));
  }
  const c10::ScalarType type = idx.scalar_type();
  if (!c10::isIntegralType(type, /*includeBool=*/false)) {
    throw InvalidArgument(std::string("the gpt network takes integer token ids, got ") +
                          c10::toString(type));
  }
  const int64_t steps = idx.size(1);
  if (steps < 1 || steps > config_.block) {
    throw InvalidArgument("a sequence of " + std::to_string(steps) +
                          " tokens does not fit the network's block of " +
                          std::to_string(config_.block) + " positions (option block)");
  }
  torch::Tensor ids = type == torch::kLong || type == torch::kInt ? idx : idx.to(torch::kLong);
  // Note [Token range check]: out-of-range ids fail in libtorch's embedding with an unhelpful
  // message on the CPU and a device-side assert on CUDA. The CPU check costs a reduction; on CUDA
  // it would cost a synchronisation per step, and the data's ids are checked where they are read.
  if (ids.device().is_cpu() && ids.numel() > 0) {
    const auto [low, high] = torch::aminmax(ids);
    for (const int64_t id : {low.item<int64_t>(), high.item<int64_t>()}) {
      if (id < 0 || id >= config_.vocab) {
        throw InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary of " +
                              std::to_string(config_.vocab) + " tokens");
      }
    }
  }
  return ids;
}

torch::Tensor Gpt::forward(const torch::Tensor& idx) {
  const torch::Tensor ids = CheckedTokenIds(idx);
  const int64_t steps = ids.size(1);
  const torch::Tensor positions =
      torch::arange(steps, torch::TensorOptions().dtype(torch::kLong).device(idx.device()));
  torch::Tensor x = transformer->wte->forward(ids) + transformer->wpe->forward(positions);
  x = torch::dropout(x, config_.dropout, is_training());
  const torch::Tensor future = FutureMask(steps, idx.device());
  for (Block& block : transformer->blocks) x = block->forward(x, future);
  return torch::linear(transformer->ln_f->forward(x), transformer->wte->weight);
}

NamedTensors Gpt::StateDict() const {
  NamedTensors tensors;
  for (const auto& named : named_parameters(/*recurse=*/true)) {
    tensors.emplace_back(named.key(), named.value());
  }
  tensors.emplace_back(kHeadName, transformer->wte->weight);
  return tensors;
}

void Gpt::LoadStateDict(const NamedTensors& tensors, const std::string& source) {
  std::map<std::string, torch::Tensor> saved = ByName(tensors, source);
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;
  for (const auto& named : named_parameters(/*recurse=*/true)) {
    const auto found = saved.find(named.key());
    if (found == saved.end()) {
      throw InvalidOption(source + " has no tensor \"" + named.key() + "\"");
    }
    if (found->second.sizes() != named.value().sizes()) {
      throw InvalidOption(source + ": tensor \"" + named.key() + "\" has shape " +
                          ShapeText(found->second.sizes()) + ", the network's is " +
                          ShapeText(named.value().sizes()));
    }
    copies.emplace_back(named.value(), found->second);
    saved.erase(found);
  }
  if (!saved.empty()) {
    throw InvalidOption(source + " holds " + std::to_string(saved.size()) +
                        " tensors the network does not have: " + NamesText(saved));
  }
  torch::NoGradGuard no_grad;
  for (auto& [target, value] : copies) target.copy_(value);
}

torch::Tensor FutureMask(int64_t steps, const torch::Device& device) {
#if DPL_LIBTORCH_HAS_SCALED_DOT_PRODUCT_ATTENTION
  static_cast<void>(steps);
  static_cast<void>(device);
  return {};
#else
  return torch::full({steps, steps}, -std::numeric_limits<float>::infinity(),
                     torch::TensorOptions().dtype(torch::kFloat).device(device))
      .triu(1);
#endif
}

torch::Tensor GptLoss(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                              targets.reshape({-1}));
}

}  // namespace dpl::gpt
