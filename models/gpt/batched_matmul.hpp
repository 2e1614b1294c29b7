// The attention's batched matrix products on the CPU (Note [Many small products]).
#ifndef DPL_MODELS_GPT_BATCHED_MATMUL_HPP
#define DPL_MODELS_GPT_BATCHED_MATMUL_HPP

#include <torch/torch.h>

namespace dpl::gpt {

// a: (..., M, K) and b: (..., K, P) with the same leading sizes -> (..., M, P), as torch::matmul,
// differentiable. Float32 CPU tensors outside autocast go to the BLAS sgemm that libtorch loaded,
// one call per matrix, the matrices split among the thread's OpenMP team; anything else (another
// type or device, autocast, broadcast leading sizes, no such BLAS) is torch::matmul.
torch::Tensor BatchedMatmul(const torch::Tensor& a, const torch::Tensor& b);

// Whether this process has the BLAS sgemm that BatchedMatmul calls.
bool HasDirectSgemm();

}  // namespace dpl::gpt

#endif  // DPL_MODELS_GPT_BATCHED_MATMUL_HPP
