#include "training/gradient_clipping.hpp"

#include <algorithm>
#include <cmath>

#include "training/collectives/shard_layout.hpp"

namespace dpl::training {
namespace {

// Note [Deterministic gradient norm]: every rank must clip by the same factor, so the norm is a
// function of the gradients' values alone: a fixed order, no dependence on alignment, threads or
// the CPU's vector width. A gradient's sum of squares is the sum, in order, of its pieces' sums
// (Note [Pieces] in shard_layout.hpp: what lets a sharded optimizer add the same numbers); each
// piece's is accumulated in double over kLanes interleaved partial sums (element i goes to lane
// i % kLanes: independent chains the compiler can vectorise), added in a fixed tree at the end. A
// float's square is exact in double, so the sum is exact to about 2^-53 relative and the float32
// norm is almost always the correctly rounded one. torch 1.13 accumulates the squares in float32
// instead: its norm differs from this one by its own rounding error (about 1e-6 relative for 1e5
// elements; it overflows to inf for gradients above ~1e19, where this one stays finite).
constexpr size_t kLanes = 8;

double SumOfSquares(const float* values, size_t count) {
  double lanes[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= count; i += kLanes)
    for (size_t lane = 0; lane < kLanes; ++lane)
      lanes[lane] += double(values[i + lane]) * double(values[i + lane]);
  for (size_t lane = 0; i < count; ++i, ++lane)
    lanes[lane] += double(values[i]) * double(values[i]);
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

}  // namespace

void PieceSumsOfSquares(const float* values, size_t count, double* sums) {
  for (size_t first = 0, piece = 0; first < count; first += kPieceElements, ++piece) {
    sums[piece] = SumOfSquares(values + first, std::min(kPieceElements, count - first));
  }
}

float NormOfPieces(const std::vector<double>& sums, const std::vector<size_t>& first_piece) {
  double sum_of_squared_norms = 0.0;
  for (size_t p = 0; p < first_piece.size(); ++p) {
    const size_t end = p + 1 < first_piece.size() ? first_piece[p + 1] : sums.size();
    double sum = 0.0;
    for (size_t piece = first_piece[p]; piece < end; ++piece) sum += sums[piece];
    const float norm = float(std::sqrt(sum));
    sum_of_squared_norms += double(norm) * double(norm);
  }
  return float(std::sqrt(sum_of_squared_norms));
}

float GradientNorm(const std::vector<FloatSpan>& gradients) {
  std::vector<size_t> first_piece;
  std::vector<double> sums;
  for (const FloatSpan& gradient : gradients) {
    first_piece.push_back(sums.size());
    sums.resize(sums.size() + PiecesOf(gradient.size));
    PieceSumsOfSquares(gradient.data, gradient.size, sums.data() + first_piece.back());
  }
  return NormOfPieces(sums, first_piece);
}

float ClipCoefficient(float total_norm, double max_norm) {
  const float coefficient = (1.0f / (total_norm + 1e-6f)) * float(max_norm);
  // torch.clamp(max=1.0) keeps a NaN; std::min(NaN, 1) returns its first argument.
  return std::min(coefficient, 1.0f);
}

float ClipGradNorm(const std::vector<FloatSpan>& gradients, double max_norm) {
  const float total_norm = GradientNorm(gradients);
  const float coefficient = ClipCoefficient(total_norm, max_norm);
  if (coefficient == 1.0f) return total_norm;
  for (const FloatSpan& gradient : gradients) {
    float* __restrict values = gradient.data;
    for (size_t i = 0; i < gradient.size; ++i) values[i] *= coefficient;
  }
  return total_norm;
}

}  // namespace dpl::training
