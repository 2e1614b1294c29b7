// --clip-grad-norm: torch.nn.utils.clip_grad_norm_ (torch 1.13, norm_type 2) on the float32 host
// gradients, with a norm that is the same bits on every rank and every run for the same gradients
// (Note [Deterministic gradient norm] in the .cpp).
#pragma once

#include <cstddef>
#include <vector>

#include "training/float_span.hpp"

namespace dpl::training {

// The L2 norm of all gradients taken as one vector, computed as clip_grad_norm_ does: the norm of
// the per-gradient norms, each a float32. 0 for no gradients or only empty ones; inf or NaN when
// a gradient holds one.
float GradientNorm(const std::vector<FloatSpan>& gradients);

// The sums of squares of the pieces of `count` values that begin at a piece boundary of their
// parameter (Note [Pieces] in shard_layout.hpp), one double each into `sums`.
void PieceSumsOfSquares(const float* values, size_t count, double* sums);

// GradientNorm from every parameter's piece sums: parameter p's pieces are
// sums[first_piece[p] .. first_piece[p + 1]) (the last parameter's end at sums.size()).
float NormOfPieces(const std::vector<double>& sums, const std::vector<size_t>& first_piece);

// The factor clip_grad_norm_ multiplies the gradients by, in its float32 arithmetic:
// clamp(max_norm / (total_norm + 1e-6), max=1), with torch's float division done as
// reciprocal(total_norm + 1e-6) * float(max_norm). 0 when total_norm is inf, NaN when it is NaN.
float ClipCoefficient(float total_norm, double max_norm);

// clip_grad_norm_(max_norm): multiplies every gradient in place by
// ClipCoefficient(GradientNorm(gradients), max_norm) (not at all when that is exactly 1, which
// changes no bit) and returns the norm before clipping. `max_norm` > 0. Gradients holding inf or
// NaN become NaN or 0, as with torch (a loss scaler skips such a step).
float ClipGradNorm(const std::vector<FloatSpan>& gradients, double max_norm);

}  // namespace dpl::training
