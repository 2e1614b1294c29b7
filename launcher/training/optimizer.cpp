#include "training/optimizer.hpp"

#include <algorithm>
#include <cmath>

namespace dpl::training {
namespace {

// Elements a thread updates at least: below it the wake-up costs more than the work.
constexpr size_t kElementsPerThread = 32768;

std::vector<std::vector<float>> ZeroBuffers(const std::vector<size_t>& sizes) {
  std::vector<std::vector<float>> buffers;
  for (size_t n : sizes) buffers.emplace_back(n, 0.0f);
  return buffers;
}

// torch.optim.Adadelta: square_avg = rho*sa + (1-rho)*g^2; std = sqrt(sa+eps);
// delta = sqrt(acc_delta+eps)/std*g; acc_delta = rho*ad + (1-rho)*delta^2; p += -lr*delta.
class Adadelta final : public Optimizer {
 public:
  Adadelta(const OptimizerOptions& o, const std::vector<size_t>& sizes)
      : Optimizer(o.learning_rate, sizes),
        options_(o),
        square_avg_(ZeroBuffers(sizes)),
        acc_delta_(ZeroBuffers(sizes)) {}

  void Step(const std::vector<float*>& parameters,
            const std::vector<const float*>& gradients) override {
    const float rho = float(options_.rho), one_minus_rho = float(1.0 - options_.rho);
    const float eps = float(options_.eps), neg_lr = float(-learning_rate_);
    const float weight_decay = float(options_.weight_decay);
    ForEachRange([&](size_t t, size_t begin, size_t end) {
      float* __restrict p = parameters[t] + begin;
      const float* __restrict g = gradients[t] + begin;
      float* __restrict sa = square_avg_[t].data() + begin;
      float* __restrict ad = acc_delta_[t].data() + begin;
      const size_t n = end - begin;
      for (size_t i = 0; i < n; ++i) {
        const float grad = weight_decay != 0.0f ? g[i] + weight_decay * p[i] : g[i];
        sa[i] = sa[i] * rho + one_minus_rho * (grad * grad);
        const float std_dev = std::sqrt(sa[i] + eps);
        const float delta = std::sqrt(ad[i] + eps) / std_dev * grad;
        ad[i] = ad[i] * rho + one_minus_rho * (delta * delta);
        p[i] = p[i] + neg_lr * delta;
      }
    });
    ++steps_;
  }
  std::vector<std::vector<float>*> StateBuffers() override {
    std::vector<std::vector<float>*> out;
    for (auto& b : square_avg_) out.push_back(&b);
    for (auto& b : acc_delta_) out.push_back(&b);
    return out;
  }
  std::vector<std::string> StateNames() const override { return {"square_avg", "acc_delta"}; }

 private:
  OptimizerOptions options_;
  std::vector<std::vector<float>> square_avg_, acc_delta_;
};

// torch.optim.SGD (dampening 0, no nesterov): the momentum buffer starts as a copy of the first
// gradient, then buf = momentum*buf + g; p += -lr*buf.
class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerOptions& o, const std::vector<size_t>& sizes)
      : Optimizer(o.learning_rate, sizes), options_(o), momentum_buffer_(ZeroBuffers(sizes)) {}

  void Step(const std::vector<float*>& parameters,
            const std::vector<const float*>& gradients) override {
    const float momentum = float(options_.momentum), neg_lr = float(-learning_rate_);
    const float weight_decay = float(options_.weight_decay);
    const bool first = steps_ == 0;
    ForEachRange([&](size_t t, size_t begin, size_t end) {
      float* __restrict p = parameters[t] + begin;
      const float* __restrict g = gradients[t] + begin;
      float* __restrict buf = momentum_buffer_[t].data() + begin;
      const size_t n = end - begin;
      for (size_t i = 0; i < n; ++i) {
        float d_p = weight_decay != 0.0f ? g[i] + weight_decay * p[i] : g[i];
        if (momentum != 0.0f) {
          buf[i] = first ? d_p : buf[i] * momentum + d_p;
          d_p = buf[i];
        }
        p[i] = p[i] + neg_lr * d_p;
      }
    });
    ++steps_;
  }
  std::vector<std::vector<float>*> StateBuffers() override {
    std::vector<std::vector<float>*> out;
    for (auto& b : momentum_buffer_) out.push_back(&b);
    return out;
  }
  std::vector<std::string> StateNames() const override { return {"momentum_buffer"}; }

 private:
  OptimizerOptions options_;
  std::vector<std::vector<float>> momentum_buffer_;
};

// torch.optim.Adam (amsgrad off): m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
// denom = sqrt(v)/sqrt(1-b2^t) + eps; p += -(lr/(1-b1^t)) * m/denom.
class Adam final : public Optimizer {
 public:
  Adam(const OptimizerOptions& o, const std::vector<size_t>& sizes)
      : Optimizer(o.learning_rate, sizes),
        options_(o),
        exp_avg_(ZeroBuffers(sizes)),
        exp_avg_sq_(ZeroBuffers(sizes)) {}

  void Step(const std::vector<float*>& parameters,
            const std::vector<const float*>& gradients) override {
    ++steps_;
    const double b1 = options_.adam_beta1, b2 = options_.adam_beta2;
    const float beta1 = float(b1), one_minus_beta1 = float(1.0 - b1);
    const float beta2 = float(b2), one_minus_beta2 = float(1.0 - b2);
    const double bias_correction1 = 1.0 - std::pow(b1, double(steps_));
    const double bias_correction2 = 1.0 - std::pow(b2, double(steps_));
    const float neg_step_size = float(-(learning_rate_ / bias_correction1));
    const float bias_correction2_sqrt = float(std::sqrt(bias_correction2));
    const float eps = float(options_.adam_eps), weight_decay = float(options_.weight_decay);
    ForEachRange([&](size_t t, size_t begin, size_t end) {
      float* __restrict p = parameters[t] + begin;
      const float* __restrict g = gradients[t] + begin;
      float* __restrict m = exp_avg_[t].data() + begin;
      float* __restrict v = exp_avg_sq_[t].data() + begin;
      const size_t n = end - begin;
      for (size_t i = 0; i < n; ++i) {
        const float grad = weight_decay != 0.0f ? g[i] + weight_decay * p[i] : g[i];
        m[i] = m[i] * beta1 + one_minus_beta1 * grad;
        v[i] = v[i] * beta2 + one_minus_beta2 * (grad * grad);
        const float denom = std::sqrt(v[i]) / bias_correction2_sqrt + eps;
        p[i] = p[i] + neg_step_size * (m[i] / denom);
      }
    });
  }
  std::vector<std::vector<float>*> StateBuffers() override {
    std::vector<std::vector<float>*> out;
    for (auto& b : exp_avg_) out.push_back(&b);
    for (auto& b : exp_avg_sq_) out.push_back(&b);
    return out;
  }
  std::vector<std::string> StateNames() const override { return {"exp_avg", "exp_avg_sq"}; }

 private:
  OptimizerOptions options_;
  std::vector<std::vector<float>> exp_avg_, exp_avg_sq_;
};

}  // namespace

Optimizer::Optimizer(double learning_rate, const std::vector<size_t>& sizes)
    : learning_rate_(learning_rate) {
  size_t total = 0;
  for (size_t n : sizes) {
    starts_.push_back(total);
    total += n;
  }
  starts_.push_back(total);
}

void Optimizer::ForEachRange(
    const std::function<void(size_t t, size_t begin, size_t end)>& update) const {
  const size_t buffers = starts_.size() - 1;
  auto run = [&](size_t first, size_t last) {  // elements [first, last) of all the buffers
    size_t t =
        size_t(std::upper_bound(starts_.begin(), starts_.end(), first) - starts_.begin()) - 1;
    for (; t < buffers && starts_[t] < last; ++t) {
      const size_t begin = std::max(first, starts_[t]), end = std::min(last, starts_[t + 1]);
      if (begin < end) update(t, begin - starts_[t], end - starts_[t]);
    }
  };
  if (pool_ == nullptr) {
    run(0, starts_.back());
    return;
  }
  pool_->ParallelFor(starts_.back(), kElementsPerThread, run);
}

Result<std::unique_ptr<Optimizer>> CreateOptimizer(const OptimizerOptions& options,
                                                   const std::vector<size_t>& sizes) {
  switch (options.kind) {
    case OptimizerKind::kAdadelta:
      return std::unique_ptr<Optimizer>(new Adadelta(options, sizes));
    case OptimizerKind::kSgd:
      return std::unique_ptr<Optimizer>(new Sgd(options, sizes));
    case OptimizerKind::kAdam:
      return std::unique_ptr<Optimizer>(new Adam(options, sizes));
  }
  return Status::Error("unknown optimizer kind " + std::to_string(int(options.kind)));
}

}  // namespace dpl::training
