// dpl SDK, libtorch model helper, for models that include it: batched matrix products
// for attention on the CPU (Note [Many small products]).
//
// Note [Many small products]: the attention multiplies one small matrix per sequence and head
// (a tiny GPT's 32 x 16 by 16 x 32, 256 of them in a batch of 64). libtorch 1.13's CPU bmm, in a
// build without MKL such as Debian's, takes them one after another through the dispatcher (a
// select of each operand, an addmm, then BLAS): about 1 us of overhead for 0.3 us of arithmetic
// each, all of it on one thread whatever the worker's thread count. BatchedMatmul calls the BLAS
// sgemm that libtorch itself loaded straight on each matrix's memory, the matrices split among
// the OpenMP team (where sgemm then runs on one thread each): measured on a [256, 32, 16] x
// [256, 16, 32] product, 270 us for bmm, 86 us on one thread and 44 us on two. Each matrix is the
// same sgemm call on the same operands whatever the thread count, so the product's values do not
// depend on it; they differ from bmm's by float rounding only (bmm may hand sgemm the transposed
// problem). Elsewhere (a libtorch with MKL, whose bmm batches itself, or libtorch 2.x, where the
// model uses scaled_dot_product_attention) it is torch::matmul.
#ifndef DPL_TORCH_MODEL_BATCHED_MATMUL_HPP
#define DPL_TORCH_MODEL_BATCHED_MATMUL_HPP

#include <dlfcn.h>
#include <torch/torch.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <optional>
#include <vector>

#include "dpl/torch_model/libtorch_versions.hpp"
#include "dpl/torch_model/parallel.hpp"

namespace dpl {
namespace torch_model {
namespace {

// Fortran BLAS's sgemm_, with the two hidden lengths of its character arguments.
using SgemmFunction = void (*)(const char* transa, const char* transb, const int* m, const int* n,
                               const int* k, const float* alpha, const float* a, const int* lda,
                               const float* b, const int* ldb, const float* beta, float* c,
                               const int* ldc, size_t transa_length, size_t transb_length);

// The sgemm_ of the BLAS libtorch computes with: Debian's libtorch loads the system's BLAS
// (libblas.so.3, OpenBLAS), pip's links MKL into libtorch_cpu and exports its sgemm_ there. Only a
// library already loaded: never another BLAS of the system's.
inline SgemmFunction LoadedSgemm() {
  static const SgemmFunction sgemm = []() -> SgemmFunction {
    for (const char* library : {"libblas.so.3", "libtorch_cpu.so"}) {
      void* handle = dlopen(library, RTLD_NOW | RTLD_NOLOAD);
      if (handle == nullptr) continue;
      if (void* symbol = dlsym(handle, "sgemm_")) return reinterpret_cast<SgemmFunction>(symbol);
    }
    return nullptr;
  }();
  return sgemm;
}

// One operand's matrices as BLAS (column-major) sees them: `transposed` when the memory holds
// the row-major matrix's columns contiguously.
struct SgemmOperand {
  const float* data;
  std::vector<int64_t> offsets;  // of each matrix of the batch, in elements
  bool transposed;
  int leading;
};

// The layout of `x` (..., rows, columns), or nothing when its matrices are not BLAS matrices.
inline std::optional<SgemmOperand> DescribeForSgemm(const torch::Tensor& x) {
  const int64_t rows = x.size(-2), columns = x.size(-1);
  const int64_t row_stride = x.stride(-2), column_stride = x.stride(-1);
  SgemmOperand operand{x.data_ptr<float>(), {}, false, 0};
  if (column_stride == 1 && row_stride >= std::max<int64_t>(columns, 1) && row_stride < INT_MAX) {
    operand.leading = static_cast<int>(row_stride);
  } else if (row_stride == 1 && column_stride >= std::max<int64_t>(rows, 1) &&
             column_stride < INT_MAX) {
    operand.transposed = true;
    operand.leading = static_cast<int>(column_stride);
  } else {
    return std::nullopt;
  }
  // The matrices in row-major order of the leading indices, from their strides.
  operand.offsets.assign(1, 0);
  for (int64_t d = 0; d < x.dim() - 2; ++d) {
    std::vector<int64_t> next;
    next.reserve(operand.offsets.size() * size_t(x.size(d)));
    for (const int64_t offset : operand.offsets) {
      for (int64_t i = 0; i < x.size(d); ++i) next.push_back(offset + i * x.stride(d));
    }
    operand.offsets = std::move(next);
  }
  return operand;
}

inline std::optional<SgemmOperand> DescribeForSgemmOrCopy(const torch::Tensor& x,
                                                          torch::Tensor* copy) {
  std::optional<SgemmOperand> operand = DescribeForSgemm(x);
  if (operand) return operand;
  *copy = x.contiguous();
  return DescribeForSgemm(*copy);
}

inline bool DirectSgemmApplies(const torch::Tensor& a, const torch::Tensor& b) {
  const auto fits = [](int64_t size) { return size > 0 && size < INT_MAX; };
  return LoadedSgemm() != nullptr && a.device().is_cpu() && b.device().is_cpu() &&
         a.scalar_type() == torch::kFloat && b.scalar_type() == torch::kFloat &&
         !torch_model::AutocastEnabled(/*cuda=*/false) && a.dim() >= 3 && a.dim() == b.dim() &&
         a.sizes().slice(0, a.dim() - 2) == b.sizes().slice(0, b.dim() - 2) &&
         a.size(-1) == b.size(-2) && fits(a.size(-2)) && fits(a.size(-1)) && fits(b.size(-1));
}

// scale * (a @ b) + addend through sgemm, for operands DirectSgemmApplies accepted; `addend`
// (broadcast to the product's shape, float32) may be undefined. The row-major product C = A B
// is, column-major, C' = B' A': B is sgemm's first operand and A its second. The addend is the
// product's initial value, which sgemm's beta of 1 keeps: its pass replaces the zeroing of a beta
// of 0, where the scale and masked_fill would each be one more.
inline torch::Tensor MultiplyBySgemm(const torch::Tensor& a, const torch::Tensor& b,
                                     float scale = 1.0f, const torch::Tensor& addend = {}) {
  torch::Tensor a_copy, b_copy;
  const std::optional<SgemmOperand> left = DescribeForSgemmOrCopy(a, &a_copy);
  const std::optional<SgemmOperand> right = DescribeForSgemmOrCopy(b, &b_copy);
  std::vector<int64_t> shape = a.sizes().vec();
  shape.back() = b.size(-1);
  torch::Tensor c =
      addend.defined()
          ? addend.expand(shape).contiguous()
          : torch::empty(shape, a.options().memory_format(c10::MemoryFormat::Contiguous));
  const int m = static_cast<int>(b.size(-1)), n = static_cast<int>(a.size(-2));
  const int k = static_cast<int>(a.size(-1));
  const int64_t matrices = static_cast<int64_t>(left->offsets.size());
  float* out = c.data_ptr<float>();
  const float beta = addend.defined() ? 1.0f : 0.0f;
  // About 64K multiply-adds a task, so that a matrix's call is not all of a task's cost.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / (int64_t(m) * n * k));
  at::parallel_for(0, matrices, grain, [&](int64_t begin, int64_t end) {
    const SgemmFunction sgemm = LoadedSgemm();
    const char* transa = right->transposed ? "T" : "N";
    const char* transb = left->transposed ? "T" : "N";
    for (int64_t i = begin; i < end; ++i) {
      sgemm(transa, transb, &m, &n, &k, &scale, right->data + right->offsets[size_t(i)],
            &right->leading, left->data + left->offsets[size_t(i)], &left->leading, &beta,
            out + i * int64_t(m) * n, &m, 1, 1);
    }
  });
  return c;
}

// scale * (a @ b) + addend, differentiable in a and b (the addend is a constant).
class BatchedMatmulFunction : public torch::autograd::Function<BatchedMatmulFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* context, const torch::Tensor& a,
                               const torch::Tensor& b, double scale,
                               const c10::optional<torch::Tensor>& addend) {
    context->save_for_backward({a, b});
    context->saved_data["scale"] = scale;
    return MultiplyBySgemm(a, b, static_cast<float>(scale), addend.value_or(torch::Tensor()));
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* context,
                                               torch::autograd::tensor_list gradients) {
    const torch::autograd::variable_list saved = context->get_saved_variables();
    const auto scale = static_cast<float>(context->saved_data["scale"].toDouble());
    const torch::Tensor& gradient = gradients[0];
    torch::Tensor a_gradient, b_gradient;
    if (context->needs_input_grad(0))
      a_gradient = MultiplyBySgemm(gradient, saved[1].transpose(-2, -1), scale);
    if (context->needs_input_grad(1))
      b_gradient = MultiplyBySgemm(saved[0].transpose(-2, -1), gradient, scale);
    return {a_gradient, b_gradient, torch::Tensor(), torch::Tensor()};
  }
};

// Whether this process has the BLAS sgemm that BatchedMatmul calls.
inline bool HasDirectSgemm() {
  return LoadedSgemm() != nullptr;
}

// a: (..., M, K) and b: (..., K, P) with the same leading sizes -> (..., M, P), as torch::matmul,
// differentiable. Float32 CPU tensors outside autocast go to the BLAS sgemm that libtorch loaded,
// one call per matrix, the matrices split among the thread's OpenMP team; anything else (another
// type or device, autocast, broadcast leading sizes, no such BLAS) is torch::matmul.
inline torch::Tensor BatchedMatmul(const torch::Tensor& a, const torch::Tensor& b) {
  if (!DirectSgemmApplies(a, b)) return torch::matmul(a, b);
  return BatchedMatmulFunction::apply(a, b, 1.0, c10::optional<torch::Tensor>());
}

// scale * (a @ b) + addend, the addend (M, P) a constant of any dtype broadcast over the leading
// sizes: an attention's scaled scores and its mask (0 where a position may attend, -inf where
// not) in one pass over the scores where BatchedMatmul applies, instead of a multiplication and
// a masked_fill forward and again backward. The values are those of the three operations: the
// addend is added to the scaled product once, and x + 0 is x, x - inf is -inf.
inline torch::Tensor ScaledBatchedMatmul(const torch::Tensor& a, const torch::Tensor& b,
                                         double scale, const torch::Tensor& addend) {
  if (!DirectSgemmApplies(a, b) || addend.requires_grad() || addend.dim() != 2 ||
      addend.scalar_type() != torch::kFloat || !addend.device().is_cpu()) {
    return torch::matmul(a, b) * scale + addend;
  }
  return BatchedMatmulFunction::apply(a, b, scale, c10::optional<torch::Tensor>(addend));
}

}  // namespace
}  // namespace torch_model
}  // namespace dpl

#endif  // DPL_TORCH_MODEL_BATCHED_MATMUL_HPP
