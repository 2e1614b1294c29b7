// dpl SDK, libtorch model helper, for the files of a model that run loops on the worker's
// threads: at::parallel_for, and the check that the file is compiled to run it in parallel.
//
// Note [Loops of the thread team]: at::parallel_for and at::parallel_reduce are header
// templates. They run on libtorch's OpenMP thread team only in code compiled with OpenMP (ATen's
// INTRA_OP_PARALLEL follows _OPENMP); compiled without it, every loop runs on the calling thread
// while the worker's other threads wait, and nothing says so. It happened twice: to the ConvNet's
// own kernels, and to the gpt network's attention products, whose static library was built
// without OpenMP (9 % of the tiny GPT's step at two threads). Including this header makes it a
// compile error instead. dpl_torch_model_plugin() compiles the plugin itself with OpenMP; a
// library or test that includes a model's loops links OpenMP::OpenMP_CXX as well.
#ifndef DPL_TORCH_MODEL_PARALLEL_HPP
#define DPL_TORCH_MODEL_PARALLEL_HPP

#include <ATen/Config.h>
#include <ATen/Parallel.h>

#if AT_PARALLEL_OPENMP && !defined(_OPENMP)
// Note [Loops of the thread team] above says why.
#error "compile with OpenMP (OpenMP::OpenMP_CXX), or at::parallel_for runs on one thread here"
#endif

#endif  // DPL_TORCH_MODEL_PARALLEL_HPP
