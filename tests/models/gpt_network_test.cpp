// The C++ gpt network on its own: options and their refusals, parameter counts, nanoGPT's
// initialisation, the causal mask, and its state dict with the tied weight.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "dpl/support/options.hpp"
#include "gpt_network.hpp"
#include "gpt_test_support.hpp"

namespace dpl::gpt_test {
namespace {

using gpt::Gpt;
using gpt::GptConfig;

void ExpectRefused(const std::function<void()>& action, const std::string& message) {
  try {
    action();
    ADD_FAILURE() << "accepted; expected the refusal: " << message;
  } catch (const support::PluginError& error) {
    EXPECT_EQ(error.status(), DPL_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(std::string(error.what()), message);
  }
}

GptConfig Read(const char* text, int64_t vocab = 256) {
  support::KeyValueOptions options(text, "--model-options");
  GptConfig config = gpt::ReadGptConfig(options, vocab);
  options.CheckAllKnown();
  return config;
}

TEST(GptConfigTest, ReadsTheOptionsAndKeepsNanoGptsShakespeareSizeAsDefaults) {
  const GptConfig given = Read("layers=2,heads=4,dim=64,block=32,dropout=0.1,bias=0", 65);
  EXPECT_EQ(given.vocab, 65);
  EXPECT_EQ(given.layers, 2);
  EXPECT_EQ(given.heads, 4);
  EXPECT_EQ(given.dim, 64);
  EXPECT_EQ(given.block, 32);
  EXPECT_DOUBLE_EQ(given.dropout, 0.1);
  EXPECT_FALSE(given.bias);
  const GptConfig defaults = Read("");
  EXPECT_EQ(defaults.layers, 6);
  EXPECT_EQ(defaults.heads, 6);
  EXPECT_EQ(defaults.dim, 384);
  EXPECT_EQ(defaults.block, 256);
  EXPECT_DOUBLE_EQ(defaults.dropout, 0.0);
  EXPECT_TRUE(defaults.bias);
}

TEST(GptConfigTest, RefusesSizesTheNetworkCannotHave) {
  const std::vector<std::pair<const char*, std::string>> refusals = {
      {"layers=0", "option \"layers\" must be at least 1, got 0"},
      {"heads=-2", "option \"heads\" must be at least 1, got -2"},
      {"dim=0", "option \"dim\" must be at least 1, got 0"},
      {"block=0", "option \"block\" must be at least 1, got 0"},
      {"dim=100,heads=3",
       "option \"dim\" (100) must be divisible by option \"heads\" (3): each head attends over "
       "dim / heads of the dimensions"},
      {"dropout=1", "option \"dropout\" must be in [0, 1), got 1"},
      {"dropout=-0.5", "option \"dropout\" must be in [0, 1), got -0.5"},
      {"layers=two", "option \"layers\" expects an integer, got \"two\""},
      {"bias=yes", "option \"bias\" expects 0, 1, true or false, got \"yes\""},
  };
  for (const auto& [text, message] : refusals) {
    SCOPED_TRACE(text);
    ExpectRefused([text = text] { Read(text); }, message);
  }
  ExpectRefused([] { Read("", 0); }, "the vocabulary must hold at least 1 token, got 0");
  GptConfig config = TinyConfig();
  config.heads = 5;
  ExpectRefused([&] { Gpt network(config); },
                "option \"dim\" (64) must be divisible by option \"heads\" (5): each head attends "
                "over dim / heads of the dimensions");
}

TEST(GptNetworkTest, RefusesInputsItCannotTake) {
  Gpt network(TinyConfig());
  const auto ids = [](std::vector<int64_t> shape) { return torch::zeros(shape, torch::kLong); };
  ExpectRefused([&] { network.forward(ids({32})); },
                "the gpt network takes token ids of shape (batch, T), got shape (32)");
  ExpectRefused(
      [&] {
        network.forward(torch::zeros({2, 8}));
      },
      "the gpt network takes integer token ids, got Float");
  ExpectRefused(
      [&] {
        network.forward(ids({2, 33}));
      },
      "a sequence of 33 tokens does not fit the network's block of 32 positions "
      "(option block)");
  ExpectRefused(
      [&] {
        network.forward(ids({2, 0}));
      },
      "a sequence of 0 tokens does not fit the network's block of 32 positions "
      "(option block)");
  torch::Tensor too_large = ids({2, 8});
  too_large[1][3] = 256;
  ExpectRefused([&] { network.forward(too_large); },
                "token id 256 is outside the vocabulary of 256 tokens");
  torch::Tensor negative = ids({2, 8});
  negative[0][0] = -1;
  ExpectRefused([&] { network.forward(negative); },
                "token id -1 is outside the vocabulary of 256 tokens");
}

TEST(GptNetworkTest, TakesNarrowIntegerIds) {
  torch::manual_seed(0);
  Gpt network(TinyConfig());
  network.eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor ids = torch::randint(0, 256, {3, 32}, torch::kLong);
  const torch::Tensor logits = network.forward(ids);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{3, 32, 256}));
  EXPECT_TRUE(torch::equal(network.forward(ids.to(torch::kInt)), logits));
  EXPECT_TRUE(torch::equal(network.forward(ids.to(torch::kByte)), logits));
  // A shorter sequence gives the same logits for its positions (other matrix shapes: rounding).
  EXPECT_LE(MaxDifference(network.forward(ids.slice(1, 0, 7)), logits.slice(1, 0, 7)), 1e-5);
}

// Parameters counted from the architecture: per block ln_1, c_attn (dim -> 3 dim), c_proj, ln_2,
// c_fc (dim -> 4 dim), c_proj (4 dim -> dim), biases 11 dim; then ln_f, both embeddings.
int64_t ExpectedParameters(const GptConfig& c) {
  const int64_t block = 12 * c.dim * c.dim + 2 * c.dim + (c.bias ? 11 * c.dim : 0);
  return c.vocab * c.dim + c.block * c.dim + c.layers * block + (c.bias ? 2 : 1) * c.dim;
}

int64_t CountParameters(const Gpt& network) {
  int64_t count = 0;
  std::set<const void*> storages;
  for (const auto& parameter : network.parameters()) {
    count += parameter.numel();
    EXPECT_TRUE(storages.insert(parameter.data_ptr()).second) << "a parameter listed twice";
  }
  return count;
}

TEST(GptNetworkTest, CountsParametersAsNanoGpt) {
  const int64_t tiny = CountParameters(Gpt(TinyConfig()));
  EXPECT_EQ(tiny, ExpectedParameters(TinyConfig()));
  GptConfig shakespeare;  // nanoGPT's config/train_shakespeare_char.py, bias off as its train.py
  shakespeare.vocab = 65;
  shakespeare.bias = false;
  const int64_t without_bias = CountParameters(Gpt(shakespeare));
  EXPECT_EQ(without_bias, ExpectedParameters(shakespeare));
  // nanoGPT prints "number of parameters: 10.65M", without the position embedding.
  const int64_t non_embedding = without_bias - shakespeare.block * shakespeare.dim;
  EXPECT_EQ(std::lround(non_embedding / 1e4), 1065);
  shakespeare.bias = true;
  const int64_t with_bias = CountParameters(Gpt(shakespeare));
  EXPECT_EQ(with_bias, ExpectedParameters(shakespeare));
  std::cout << "parameters: tiny " << tiny << ", shakespeare-char " << without_bias
            << " without biases (" << non_embedding << " without wpe), " << with_bias
            << " with biases\n";
}

TEST(GptNetworkTest, InitialisesAsNanoGpt) {
  torch::manual_seed(0);
  GptConfig config = TinyConfig();
  config.layers = 4;
  config.dim = 128;
  config.vocab = 512;
  config.block = 128;
  const Gpt network(config);
  const double projection_std = 0.02 / std::sqrt(2.0 * config.layers);
  for (const auto& named : network.named_parameters()) {
    const std::string& name = named.key();
    const torch::Tensor& value = named.value();
    SCOPED_TRACE(name);
    if (value.dim() == 1) {  // LayerNorm weights are ones, every bias zero
      const bool ones =
          name.find("ln_") != std::string::npos && name.compare(name.size() - 7, 7, ".weight") == 0;
      EXPECT_TRUE(torch::equal(value, torch::full_like(value, ones ? 1.0 : 0.0)));
      continue;
    }
    const bool projection = name.find("c_proj.weight") != std::string::npos;
    const double expected = projection ? projection_std : 0.02;
    EXPECT_NEAR(value.std().item<double>() / expected, 1.0, 0.03);
    EXPECT_NEAR(value.mean().item<double>(), 0.0, 4 * expected / std::sqrt(value.numel()));
  }
}

TEST(GptNetworkTest, EarlierPositionsDoNotSeeLaterTokens) {
  torch::manual_seed(0);
  Gpt network(TinyConfig());
  network.eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor ids = torch::randint(0, 256, {2, 32}, torch::kLong);
  torch::Tensor changed = ids.clone();
  changed.select(1, 10).add_(1).remainder_(256);
  const torch::Tensor before = network.forward(ids);
  const torch::Tensor after = network.forward(changed);
  EXPECT_EQ(MaxDifference(before.slice(1, 0, 10), after.slice(1, 0, 10)), 0.0);
  // Every later position sees the change in some logit.
  const torch::Tensor later = (before.slice(1, 10) - after.slice(1, 10)).abs().amax(-1);
  EXPECT_GT(later.min().item<double>(), 0.0);
}

// nanoGPT's written-out attention over every key, masked, through `attention`'s own layers: the
// reference for the halved form the network takes on long sequences.
torch::Tensor WrittenOutAttention(gpt::CausalSelfAttention& attention, const torch::Tensor& x,
                                  int64_t heads) {
  const int64_t batch = x.size(0), steps = x.size(1), dim = x.size(2);
  const std::vector<torch::Tensor> qkv = attention->c_attn->forward(x).split(dim, 2);
  const auto split_heads = [&](const torch::Tensor& part) {
    return part.view({batch, steps, heads, dim / heads}).transpose(1, 2);
  };
  const torch::Tensor key = split_heads(qkv[1]);
  torch::Tensor weights = torch::matmul(split_heads(qkv[0]), key.transpose(-2, -1)) /
                          std::sqrt(static_cast<double>(dim / heads));
  weights = weights.masked_fill(torch::ones({steps, steps}, torch::kBool).triu(1),
                                -std::numeric_limits<double>::infinity());
  const torch::Tensor y = torch::matmul(torch::softmax(weights, -1), split_heads(qkv[2]));
  return attention->c_proj->forward(y.transpose(1, 2).contiguous().view({batch, steps, dim}));
}

TEST(GptNetworkTest, AttendsToLongSequencesAsTheWrittenOutAttention) {
  // Long sequences attend in two halves on libtorch without fused attention (Note [Attention
  // in two halves]): same outputs and gradients as the whole masked attention, odd lengths too.
  GptConfig config = TinyConfig();
  config.block = 200;
  for (const int64_t steps : {int64_t{16}, int64_t{128}, int64_t{199}}) {
    SCOPED_TRACE("T = " + std::to_string(steps));
    torch::manual_seed(3);
    gpt::CausalSelfAttention attention(config);
    const torch::Tensor x = torch::randn({2, steps, config.dim}).requires_grad_();
    const torch::Tensor future = gpt::FutureMask(steps, torch::kCPU);
    const torch::Tensor y = attention->forward(x, future);
    const torch::Tensor weight = torch::randn_like(y);
    const std::vector<torch::Tensor> inputs = {x, attention->c_attn->weight};
    const auto grads = torch::autograd::grad({(y * weight).sum()}, inputs);
    const torch::Tensor reference = WrittenOutAttention(attention, x, config.heads);
    const auto reference_grads = torch::autograd::grad({(reference * weight).sum()}, inputs);
    // Within float rounding of the largest value: the keys' gradients add the two halves'
    // parts where the whole attention sums them in one product.
    const auto relative = [](const torch::Tensor& got, const torch::Tensor& expected) {
      return MaxDifference(got, expected) / expected.abs().max().item<double>();
    };
    EXPECT_LE(relative(y, reference), 1e-6);
    EXPECT_LE(relative(grads[0], reference_grads[0]), 1e-6);
    EXPECT_LE(relative(grads[1], reference_grads[1]), 1e-6);
    // The comparison can fail: the outputs and gradients vary far beyond the tolerance.
    EXPECT_GT(reference.std().item<double>(), 1e-2);
    EXPECT_GT(reference_grads[1].std().item<double>(), 1e-2);
  }
}

std::vector<std::string> Names(const gpt::NamedTensors& tensors) {
  std::vector<std::string> names;
  for (const auto& named : tensors) names.push_back(named.first);
  return names;
}

TEST(GptStateTest, NamesEveryTensorAsNanoGptsStateDict) {
  const Gpt network(TinyConfig());
  const gpt::NamedTensors state = network.StateDict();
  std::vector<std::string> expected = {"transformer.wte.weight", "transformer.wpe.weight"};
  for (int layer = 0; layer < 2; ++layer) {
    const std::string prefix = "transformer.h." + std::to_string(layer) + ".";
    for (const char* module :
         {"ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"}) {
      expected.push_back(prefix + module + ".weight");
      expected.push_back(prefix + module + ".bias");
    }
  }
  for (const char* name : {"transformer.ln_f.weight", "transformer.ln_f.bias", "lm_head.weight"}) {
    expected.push_back(name);
  }
  EXPECT_EQ(Names(state), expected);
  // The parameters hold the tied weight once; the state dict under both names, one tensor.
  expected.pop_back();
  std::vector<std::string> parameters;
  for (const auto& named : network.named_parameters()) parameters.push_back(named.key());
  EXPECT_EQ(parameters, expected);
  EXPECT_TRUE(state.back().second.is_same(state.front().second));
  EXPECT_EQ(Names(Gpt(TinyConfig(/*bias=*/false)).StateDict()).size(), 2 + 2 * 6 + 1 + 1u);
}

torch::Tensor Logits(Gpt& network, const torch::Tensor& ids) {
  network.eval();
  torch::NoGradGuard no_grad;
  return network.forward(ids);
}

TEST(GptStateTest, LoadsAStateDictNamingTheTiedWeightEitherWay) {
  torch::manual_seed(1);
  Gpt source(TinyConfig());
  const torch::Tensor ids = torch::randint(0, 256, {2, 32}, torch::kLong);
  const torch::Tensor expected = Logits(source, ids);
  gpt::NamedTensors state = source.StateDict();
  state.emplace_back("transformer.h.0.attn.bias", torch::ones({1, 1, 32, 32}).tril());
  torch::manual_seed(2);
  Gpt both(TinyConfig());
  ASSERT_GT(MaxDifference(Logits(both, ids), expected), 1e-3);
  both.LoadStateDict(state, "state");
  EXPECT_TRUE(torch::equal(Logits(both, ids), expected));
  for (const char* kept : {"lm_head.weight", "transformer.wte.weight"}) {
    SCOPED_TRACE(kept);
    gpt::NamedTensors one_name;
    for (const auto& named : source.StateDict()) {
      const bool tied = named.first == "lm_head.weight" || named.first == "transformer.wte.weight";
      if (!tied || named.first == kept) one_name.push_back(named);
    }
    torch::manual_seed(3);
    Gpt loaded(TinyConfig());
    loaded.LoadStateDict(one_name, "state");
    EXPECT_TRUE(torch::equal(Logits(loaded, ids), expected));
  }
}

gpt::NamedTensors Edited(gpt::NamedTensors state, const std::string& name, torch::Tensor value) {
  for (auto it = state.begin(); it != state.end(); ++it) {
    if (it->first != name) continue;
    if (value.defined()) {
      it->second = value;
    } else {
      state.erase(it);
    }
    return state;
  }
  state.emplace_back(name, value);
  return state;
}

TEST(GptStateTest, RefusesAStateDictOfAnotherNetworkBeforeCopyingAnything) {
  torch::manual_seed(1);
  Gpt network(TinyConfig());
  const torch::Tensor before = network.StateDict().front().second.clone();
  const gpt::NamedTensors state = Gpt(TinyConfig()).StateDict();
  const std::string bias = "transformer.h.1.mlp.c_proj.bias";
  ExpectRefused([&] { network.LoadStateDict(Edited(state, bias, {}), "state x.pt"); },
                "state x.pt has no tensor \"" + bias + "\"");
  ExpectRefused(
      [&] {
        network.LoadStateDict(Edited(state, "transformer.wpe.weight", torch::zeros({16, 64})),
                              "state x.pt");
      },
      "state x.pt: tensor \"transformer.wpe.weight\" has shape (16, 64), the network's is "
      "(32, 64)");
  ExpectRefused(
      [&] {
        network.LoadStateDict(Edited(state, "lm_head.weight", torch::zeros({256, 64})), "s");
      },
      "s: \"transformer.wte.weight\" and \"lm_head.weight\" differ, but the network ties them (one "
      "tensor for both)");
  ExpectRefused([&] { Gpt(TinyConfig(/*bias=*/false)).LoadStateDict(state, "state x.pt"); },
                "state x.pt holds 13 tensors the network does not have: "
                "\"transformer.h.0.attn.c_attn.bias\", \"transformer.h.0.attn.c_proj.bias\", "
                "\"transformer.h.0.ln_1.bias\", \"transformer.h.0.ln_2.bias\", "
                "\"transformer.h.0.mlp.c_fc.bias\" and 8 more");
  EXPECT_TRUE(torch::equal(network.StateDict().front().second, before));
}

}  // namespace
}  // namespace dpl::gpt_test
