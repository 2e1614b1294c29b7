// A TorchScript module's matrix products through the SDK's BatchedMatmul (Note [TorchScript's
// batched products]).
#ifndef DPL_MODELS_TORCHSCRIPT_MATMUL_REWRITE_HPP
#define DPL_MODELS_TORCHSCRIPT_MATMUL_REWRITE_HPP

#include <torch/csrc/jit/ir/subgraph_matcher.h>
#include <torch/csrc/jit/passes/subgraph_rewrite.h>
#include <torch/script.h>

#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "dpl/torch_model/batched_matmul.hpp"

namespace dpl::torchscript {
namespace {

// Note [TorchScript's batched products]: a module's `a @ b` is aten::matmul in its graphs, whose
// batched case on Debian's libtorch is the per-matrix bmm of Note [Many small products]. Where the
// SDK's BatchedMatmul has its BLAS and the module runs on the CPU, every method of the module and
// its submodules calls the operator dpl_torchscript::batched_matmul instead (registered by this
// plugin, torchscript.cpp), which is torch::matmul itself for anything BatchedMatmul does not
// take (two dimensions, broadcasting, other types, autocast). The module --export writes gets
// aten::matmul back, so torch.jit.load reads it without dpl.
constexpr const char* kBatchedMatmulOperator = "dpl_torchscript::batched_matmul";

// Note [TorchScript's masked scores]: an attention written out as nanoGPT writes it without
// flash, `(q @ k.transpose(-2, -1)) * scale` then `.masked_fill(mask, float("-inf"))`, is one
// call of dpl_torchscript::scaled_masked_matmul, which computes the scores, their scale and the
// mask in one pass over them (the SDK's ScaledBatchedMatmul, as the gpt plugin does). It takes
// the pattern only with a number for the scale and the value. The one pass needs a -inf fill of
// one boolean (T, T) matrix: a (T, T) mask or one behind sizes of 1, as nanoGPT's causal buffer
// sliced to (1, 1, T, T); any other mask or value is the three operations themselves.
constexpr const char* kScaledMaskedMatmulOperator = "dpl_torchscript::scaled_masked_matmul";

// The graphs of every method of `module` and of its submodules, each once (a submodule type's
// methods share their graphs).
inline std::vector<std::shared_ptr<torch::jit::Graph>> Graphs(const torch::jit::Module& module) {
  std::set<const torch::jit::Graph*> seen;
  std::vector<std::shared_ptr<torch::jit::Graph>> graphs;
  for (const torch::jit::Module& each : module.modules()) {
    for (const torch::jit::Method& method : each.get_methods()) {
      std::shared_ptr<torch::jit::Graph> graph = method.graph();
      if (seen.insert(graph.get()).second) graphs.push_back(std::move(graph));
    }
  }
  return graphs;
}

// Replaces aten::matmul by the batched operator and the masked scores by theirs
// (`to_batched`), or back, in every method of `module` and of its submodules (which share their
// type's graphs).
inline void RewriteMatmuls(const torch::jit::Module& module, bool to_batched) {
  const std::string scores = R"(
graph(%a, %b, %scale, %mask, %value):
  %product = aten::matmul(%a, %b)
  %scaled = aten::mul(%product, %scale)
  %masked = aten::masked_fill(%scaled, %mask, %value)
  return (%masked))";
  const std::string fused_scores = std::string(R"(
graph(%a, %b, %scale, %mask, %value):
  %masked = )") + kScaledMaskedMatmulOperator +
                                   R"((%a, %b, %scale, %mask, %value)
  return (%masked))";
  const std::string matmul = R"(
graph(%a, %b):
  %product = aten::matmul(%a, %b)
  return (%product))";
  const std::string batched = std::string(R"(
graph(%a, %b):
  %product = )") + kBatchedMatmulOperator +
                              R"((%a, %b)
  return (%product))";
  // The scale and the fill value as numbers: the operator's schema (a tensor scale is left). The
  // filter gets the pattern's values by name, and the match maps them to the graph's.
  const auto numbers = [](const torch::jit::Match& match,
                          const std::unordered_map<std::string, torch::jit::Value*>& pattern) {
    for (const char* name : {"scale", "value"}) {
      const c10::TypeKind kind = match.values_map.at(pattern.at(name))->type()->kind();
      if (kind != c10::TypeKind::FloatType && kind != c10::TypeKind::IntType) return false;
    }
    return true;
  };
  torch::jit::SubgraphRewriter fuse_scores, products;
  fuse_scores.RegisterRewritePattern(to_batched ? scores : fused_scores,
                                     to_batched ? fused_scores : scores);
  products.RegisterRewritePattern(to_batched ? matmul : batched, to_batched ? batched : matmul);
  for (std::shared_ptr<torch::jit::Graph>& graph : Graphs(module)) {
    fuse_scores.runOnGraph(graph, numbers);
    products.runOnGraph(graph);
  }
}

// The calls of `kind` in `block` and in the blocks of its nodes (an if's branches, a loop's body).
inline size_t CountCallsIn(const torch::jit::Block* block, const std::string& kind) {
  size_t count = 0;
  for (const torch::jit::Node* node : block->nodes()) {
    if (node->kind().toQualString() == kind) ++count;
    for (const torch::jit::Block* inner : node->blocks()) count += CountCallsIn(inner, kind);
  }
  return count;
}

// The calls of `kind` in the methods of `module` and its submodules, each graph once, nested
// blocks included: the rewrite reaches into them too, and a module rewritten with a count of 0
// would be exported still calling the plugin's operators.
inline size_t CountCalls(const torch::jit::Module& module, const char* kind) {
  size_t count = 0;
  for (const std::shared_ptr<torch::jit::Graph>& graph : Graphs(module)) {
    count += CountCallsIn(graph->block(), kind);
  }
  return count;
}

}  // namespace
}  // namespace dpl::torchscript

#endif  // DPL_MODELS_TORCHSCRIPT_MATMUL_REWRITE_HPP
