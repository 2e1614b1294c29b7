// The SDK's batched products (Note [Many small products] in dpl/torch_model/batched_matmul.hpp):
// torch::matmul's values and gradients for every layout the attention hands it, the same values
// at any thread count, and torch::matmul itself where it does not apply.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/Parallel.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "dpl/torch_model/batched_matmul.hpp"

namespace dpl::gpt_test {
namespace {

using torch_model::BatchedMatmul;
using torch_model::ScaledBatchedMatmul;

// The attention's operands: queries, keys and values as views of one (batch, T, 3 * dim) tensor,
// split into heads, as CausalSelfAttention makes them.
struct Heads {
  torch::Tensor query, key, value;
};
Heads SplitHeads(int64_t batch, int64_t steps, int64_t heads, int64_t head_dim) {
  const int64_t dim = heads * head_dim;
  const torch::Tensor qkv = torch::randn({batch, steps, 3 * dim});
  std::vector<torch::Tensor> parts = qkv.split(dim, 2);
  for (torch::Tensor& part : parts) {
    part = part.view({batch, steps, heads, head_dim}).transpose(1, 2);
  }
  return {parts[0], parts[1], parts[2]};
}

bool Direct() {
  return torch_model::HasDirectSgemm();
}

// Within float rounding of a sum of products: 1e-5 of the largest magnitude.
::testing::AssertionResult Close(const torch::Tensor& value, const torch::Tensor& reference) {
  const float error = (value - reference).abs().max().item<float>();
  const float bound = 1e-5f * reference.abs().max().item<float>() + 1e-6f;
  if (error <= bound) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "differs by " << error << " (bound " << bound << ")";
}

// `a` @ `b` both ways, forward and backward, with a random gradient of the product.
void ExpectMatmulsValues(const torch::Tensor& a_in, const torch::Tensor& b_in,
                         const std::string& what) {
  SCOPED_TRACE(what);
  const torch::Tensor a = a_in.detach().requires_grad_(true);
  const torch::Tensor b = b_in.detach().requires_grad_(true);
  const torch::Tensor reference_a = a_in.detach().requires_grad_(true);
  const torch::Tensor reference_b = b_in.detach().requires_grad_(true);
  const torch::Tensor product = BatchedMatmul(a, b);
  const torch::Tensor reference = torch::matmul(reference_a, reference_b);
  ASSERT_EQ(product.sizes(), reference.sizes());
  EXPECT_TRUE(Close(product, reference));
  if (Direct()) {
    EXPECT_NE(product.grad_fn()->name().find("BatchedMatmulFunction"), std::string::npos)
        << product.grad_fn()->name();
  }
  const torch::Tensor upstream = torch::randn(reference.sizes());
  product.backward(upstream);
  reference.backward(upstream);
  EXPECT_TRUE(Close(a.grad(), reference_a.grad()));
  EXPECT_TRUE(Close(b.grad(), reference_b.grad()));
}

TEST(BatchedMatmulTest, GivesMatmulsValuesForEveryLayoutOfTheAttention) {
  torch::manual_seed(0);
  ExpectMatmulsValues(torch::randn({2, 3, 5, 4}), torch::randn({2, 3, 4, 6}), "contiguous");
  const Heads heads = SplitHeads(4, 32, 4, 16);
  ExpectMatmulsValues(heads.query, heads.key.transpose(-2, -1), "scores: query @ key^T");
  const torch::Tensor weights = torch::softmax(torch::randn({4, 4, 32, 32}), -1);
  ExpectMatmulsValues(weights, heads.value, "weights @ value");
  // Note [Attention in two halves]: the first half of the positions over the first half of the
  // keys.
  ExpectMatmulsValues(heads.query.narrow(-2, 0, 16), heads.key.narrow(-2, 0, 16).transpose(-2, -1),
                      "half of the positions");
  // A matrix whose memory is no BLAS matrix (a broadcast row) is copied first.
  ExpectMatmulsValues(torch::randn({3, 1, 4}).expand({3, 5, 4}), torch::randn({3, 4, 2}),
                      "a broadcast row");
  ExpectMatmulsValues(torch::randn({6, 1, 8}), torch::randn({6, 8, 1}), "one row, one column");
}

TEST(BatchedMatmulTest, GivesTheSameValuesOnOneThreadAndOnSeveral) {
  if (!Direct()) GTEST_SKIP() << "this libtorch loaded no libblas.so.3: BatchedMatmul is matmul";
  torch::manual_seed(1);
  const Heads heads = SplitHeads(16, 64, 4, 16);
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const torch::Tensor one = BatchedMatmul(heads.query, heads.key.transpose(-2, -1));
  at::set_num_threads(2);
  const torch::Tensor two = BatchedMatmul(heads.query, heads.key.transpose(-2, -1));
  at::set_num_threads(threads);
  EXPECT_TRUE(torch::equal(one, two));
}

// The attention's scores as Python's GPT writes them, (query @ key^T) * scale, then -inf above
// the diagonal by masked_fill; the product BatchedMatmul's, so that only the scale and the mask
// differ from ScaledBatchedMatmul.
torch::Tensor MaskedScores(const torch::Tensor& query, const torch::Tensor& key, double scale) {
  const int64_t steps = query.size(-2);
  const torch::Tensor future = torch::ones({steps, key.size(-2)}, torch::kBool).triu(1);
  return (BatchedMatmul(query, key.transpose(-2, -1)) * scale)
      .masked_fill(future, -std::numeric_limits<double>::infinity());
}

torch::Tensor AdditiveMask(int64_t rows, int64_t columns) {
  return torch::full({rows, columns}, -std::numeric_limits<float>::infinity()).triu(1);
}

// ScaledBatchedMatmul against MaskedScores, through a softmax (as the attention uses them, and
// so that the masked scores pass no gradient), values and gradients.
void ExpectMaskedScores(const Heads& heads, double scale, double tolerance,
                        const std::string& what) {
  SCOPED_TRACE(what);
  const torch::Tensor query = heads.query.detach().requires_grad_(true);
  const torch::Tensor key = heads.key.detach().requires_grad_(true);
  const torch::Tensor reference_query = heads.query.detach().requires_grad_(true);
  const torch::Tensor reference_key = heads.key.detach().requires_grad_(true);
  const int64_t steps = query.size(-2);
  const torch::Tensor scores =
      ScaledBatchedMatmul(query, key.transpose(-2, -1), scale, AdditiveMask(steps, steps));
  const torch::Tensor reference = MaskedScores(reference_query, reference_key, scale);
  ASSERT_EQ(scores.sizes(), reference.sizes());
  // The masked scores are -inf on both sides, the others close (equal for a power of two).
  EXPECT_TRUE(torch::equal(torch::isinf(scores), torch::isinf(reference)));
  const torch::Tensor seen = torch::isfinite(reference);
  EXPECT_LE((scores - reference).masked_select(seen).abs().max().item<double>(), tolerance);
  if (Direct()) {
    EXPECT_NE(scores.grad_fn()->name().find("BatchedMatmulFunction"), std::string::npos)
        << scores.grad_fn()->name();
  }
  const torch::Tensor upstream = torch::randn(reference.sizes());
  (torch::softmax(scores, -1) * upstream).sum().backward();
  (torch::softmax(reference, -1) * upstream).sum().backward();
  EXPECT_LE((query.grad() - reference_query.grad()).abs().max().item<double>(), tolerance);
  EXPECT_LE((key.grad() - reference_key.grad()).abs().max().item<double>(), tolerance);
  // The comparisons can fail: the gradients are far from zero.
  EXPECT_GT(reference_key.grad().abs().max().item<double>(), 1e-2);
}

TEST(BatchedMatmulTest, ScalesAndMasksAsMultiplicationAndMaskedFill) {
  torch::manual_seed(3);
  // Heads of 16: a scale of 1/4, a power of two, so every step is exact on both sides.
  ExpectMaskedScores(SplitHeads(4, 32, 4, 16), 0.25, 0.0, "1/4");
  // Heads of 36 (nanoGPT's 1M size): 1/6 rounds once in the product, once after it in Python.
  ExpectMaskedScores(SplitHeads(2, 24, 4, 36), 1.0 / 6.0, 1e-5, "1/6");
}

TEST(BatchedMatmulTest, ScaledScoresAreMatmulsWhereTheyDoNotApply) {
  torch::manual_seed(4);
  const Heads heads = SplitHeads(2, 8, 2, 4);
  const torch::Tensor key_t = heads.key.transpose(-2, -1);
  // A mask that asks for its own gradient is added by autograd's addition.
  const torch::Tensor learnt = torch::zeros({8, 8}, torch::requires_grad());
  const torch::Tensor scores = ScaledBatchedMatmul(heads.query, key_t, 0.5, learnt);
  EXPECT_TRUE(torch::equal(scores, torch::matmul(heads.query, key_t) * 0.5));
  scores.sum().backward();
  ASSERT_TRUE(learnt.grad().defined());
  EXPECT_TRUE(torch::equal(learnt.grad(), torch::full({8, 8}, 2.0f * 2.0f)));
  // Another type.
  const torch::Tensor doubles = ScaledBatchedMatmul(
      heads.query.to(torch::kDouble), key_t.to(torch::kDouble), 0.5, AdditiveMask(8, 8));
  EXPECT_EQ(doubles.scalar_type(), torch::kDouble);
  EXPECT_TRUE(
      torch::equal(torch::isinf(doubles), torch::isinf(AdditiveMask(8, 8)).expand({2, 2, 8, 8})));
}

TEST(BatchedMatmulTest, IsMatmulWhereItDoesNotApply) {
  torch::manual_seed(2);
  const torch::Tensor a = torch::randn({2, 3, 5, 4});
  const torch::Tensor b = torch::randn({2, 3, 4, 6});
  // Another type.
  EXPECT_TRUE(torch::equal(BatchedMatmul(a.to(torch::kDouble), b.to(torch::kDouble)),
                           torch::matmul(a.to(torch::kDouble), b.to(torch::kDouble))));
  // Leading sizes that broadcast.
  const torch::Tensor one_batch = torch::randn({1, 3, 5, 4});
  EXPECT_TRUE(torch::equal(BatchedMatmul(one_batch, b), torch::matmul(one_batch, b)));
  // Under autocast the product is bfloat16, as matmul's.
  const bool was_enabled = torch_model::AutocastEnabled(/*cuda=*/false);
  const c10::ScalarType was_type = torch_model::AutocastType(/*cuda=*/false);
  torch_model::SetAutocastType(/*cuda=*/false, torch::kBFloat16);
  torch_model::SetAutocastEnabled(/*cuda=*/false, true);
  const torch::Tensor low = BatchedMatmul(a, b);
  const torch::Tensor reference = torch::matmul(a, b);
  torch_model::SetAutocastEnabled(/*cuda=*/false, was_enabled);
  torch_model::SetAutocastType(/*cuda=*/false, was_type);
  at::autocast::clear_cache();
  EXPECT_EQ(low.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(low, reference));
}

}  // namespace
}  // namespace dpl::gpt_test
