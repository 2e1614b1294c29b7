// A TorchScript module's matrix products through the SDK's BatchedMatmul (Note [TorchScript's
// batched products]).
#ifndef DPL_MODELS_TORCHSCRIPT_MATMUL_REWRITE_HPP
#define DPL_MODELS_TORCHSCRIPT_MATMUL_REWRITE_HPP

#include <torch/csrc/jit/passes/subgraph_rewrite.h>
#include <torch/script.h>

#include <set>

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

// Replaces aten::matmul by the batched operator (`to_batched`) or back, in every method of
// `module` and of its submodules (which share their type's graphs).
inline void RewriteMatmuls(const torch::jit::Module& module, bool to_batched) {
  const std::string matmul = R"(
graph(%a, %b):
  %product = aten::matmul(%a, %b)
  return (%product))";
  const std::string batched = std::string(R"(
graph(%a, %b):
  %product = )") + kBatchedMatmulOperator +
                              R"((%a, %b)
  return (%product))";
  torch::jit::SubgraphRewriter rewriter;
  rewriter.RegisterRewritePattern(to_batched ? matmul : batched, to_batched ? batched : matmul);
  for (const torch::jit::Module& each : module.modules()) rewriter.runOnModule(each);
}

// The batched operator's calls in the methods of `module` and its submodules, each graph once.
inline size_t CountBatchedMatmuls(const torch::jit::Module& module) {
  std::set<const torch::jit::Graph*> seen;
  size_t count = 0;
  for (const torch::jit::Module& each : module.modules()) {
    for (const torch::jit::Method& method : each.get_methods()) {
      const std::shared_ptr<torch::jit::Graph> graph = method.graph();
      if (!seen.insert(graph.get()).second) continue;
      for (const torch::jit::Node* node : graph->nodes()) {
        if (std::string(node->kind().toQualString()) == kBatchedMatmulOperator) ++count;
      }
    }
  }
  return count;
}

}  // namespace
}  // namespace dpl::torchscript

#endif  // DPL_MODELS_TORCHSCRIPT_MATMUL_REWRITE_HPP
