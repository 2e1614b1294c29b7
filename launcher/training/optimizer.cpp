#include "training/optimizer.hpp"

#include <algorithm>
#include <cmath>

namespace dpl::training {

namespace {

// Elements a thread updates at least: below it the wake-up costs more than the work.
constexpr size_t kElementsPerThread = 32768;

// torch.optim.Adadelta: square_avg = rho*sa + (1-rho)*g^2; std = sqrt(sa+eps);
// delta = sqrt(acc_delta+eps)/std*g; acc_delta = rho*ad + (1-rho)*delta^2; p += -lr*delta.
class Adadelta final : public Optimizer {
 public:
  Adadelta(const OptimizerOptions& o, std::vector<OptimizedTensor> tensors)
      : Optimizer(o, std::move(tensors)), square_avg_(ZeroBuffers()), acc_delta_(ZeroBuffers()) {}

  std::vector<std::vector<float>*> StateBuffers() override {
    std::vector<std::vector<float>*> out;
    for (auto& b : square_avg_) out.push_back(&b);
    for (auto& b : acc_delta_) out.push_back(&b);
    return out;
  }

 private:
  void Prepare(int64_t) override {
    rho_ = float(options_.rho);
    one_minus_rho_ = float(1.0 - options_.rho);
    eps_ = float(options_.eps);
    neg_lr_ = float(-learning_rate_);
  }
  void Update(size_t t, size_t offset, size_t n, float weight_decay, float* __restrict p,
              const float* __restrict g) override {
    float* __restrict sa = square_avg_[t].data() + offset;
    float* __restrict ad = acc_delta_[t].data() + offset;
    const float rho = rho_, one_minus_rho = one_minus_rho_, eps = eps_, neg_lr = neg_lr_;
    for (size_t i = 0; i < n; ++i) {
      const float grad = weight_decay != 0.0f ? g[i] + weight_decay * p[i] : g[i];
      sa[i] = sa[i] * rho + one_minus_rho * (grad * grad);
      const float std_dev = std::sqrt(sa[i] + eps);
      const float delta = std::sqrt(ad[i] + eps) / std_dev * grad;
      ad[i] = ad[i] * rho + one_minus_rho * (delta * delta);
      p[i] = p[i] + neg_lr * delta;
    }
  }

  std::vector<std::vector<float>> square_avg_, acc_delta_;
  float rho_ = 0, one_minus_rho_ = 0, eps_ = 0, neg_lr_ = 0;
};

// torch.optim.SGD (dampening 0, no nesterov): the momentum buffer starts as a copy of the first
// gradient, then buf = momentum*buf + g; p += -lr*buf.
class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerOptions& o, std::vector<OptimizedTensor> tensors)
      : Optimizer(o, std::move(tensors)), momentum_buffer_(ZeroBuffers()) {}

  std::vector<std::vector<float>*> StateBuffers() override {
    std::vector<std::vector<float>*> out;
    for (auto& b : momentum_buffer_) out.push_back(&b);
    return out;
  }

 private:
  void Prepare(int64_t step) override {
    momentum_ = float(options_.momentum);
    neg_lr_ = float(-learning_rate_);
    first_ = step == 1;
  }
  void Update(size_t t, size_t offset, size_t n, float weight_decay, float* __restrict p,
              const float* __restrict g) override {
    float* __restrict buf = momentum_buffer_[t].data() + offset;
    const float momentum = momentum_, neg_lr = neg_lr_;
    const bool first = first_;
    for (size_t i = 0; i < n; ++i) {
      float d_p = weight_decay != 0.0f ? g[i] + weight_decay * p[i] : g[i];
      if (momentum != 0.0f) {
        buf[i] = first ? d_p : buf[i] * momentum + d_p;
        d_p = buf[i];
      }
      p[i] = p[i] + neg_lr * d_p;
    }
  }

  std::vector<std::vector<float>> momentum_buffer_;
  float momentum_ = 0, neg_lr_ = 0;
  bool first_ = false;
};

// torch.optim.Adam (amsgrad off): m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
// denom = sqrt(v)/sqrt(1-b2^t) + eps; p += -(lr/(1-b1^t)) * m/denom. Adam adds the weight decay
// to the gradient (g + wd*p); torch.optim.AdamW (decoupled) first multiplies the parameter by
// 1 - lr*wd and leaves the gradient as it is.
class Adam final : public Optimizer {
 public:
  Adam(const OptimizerOptions& o, std::vector<OptimizedTensor> tensors, bool decoupled)
      : Optimizer(o, std::move(tensors)),
        decoupled_(decoupled),
        exp_avg_(ZeroBuffers()),
        exp_avg_sq_(ZeroBuffers()) {}

  std::vector<std::vector<float>*> StateBuffers() override {
    std::vector<std::vector<float>*> out;
    for (auto& b : exp_avg_) out.push_back(&b);
    for (auto& b : exp_avg_sq_) out.push_back(&b);
    return out;
  }

 private:
  void Prepare(int64_t step) override {
    const double b1 = options_.adam_beta1, b2 = options_.adam_beta2;
    beta1_ = float(b1);
    one_minus_beta1_ = float(1.0 - b1);
    beta2_ = float(b2);
    one_minus_beta2_ = float(1.0 - b2);
    const double bias_correction1 = 1.0 - std::pow(b1, double(step));
    const double bias_correction2 = 1.0 - std::pow(b2, double(step));
    neg_step_size_ = float(-(learning_rate_ / bias_correction1));
    bias_correction2_sqrt_ = float(std::sqrt(bias_correction2));
    eps_ = float(options_.adam_eps);
    decay_factor_ = float(1.0 - learning_rate_ * options_.weight_decay);  // AdamW's
  }
  void Update(size_t t, size_t offset, size_t n, float weight_decay, float* __restrict p,
              const float* __restrict g) override {
    float* __restrict m = exp_avg_[t].data() + offset;
    float* __restrict v = exp_avg_sq_[t].data() + offset;
    const bool add_to_gradient = !decoupled_ && weight_decay != 0.0f;
    const bool decay_parameter = decoupled_ && weight_decay != 0.0f;
    const float beta1 = beta1_, one_minus_beta1 = one_minus_beta1_, beta2 = beta2_;
    const float one_minus_beta2 = one_minus_beta2_, neg_step_size = neg_step_size_;
    const float bias_correction2_sqrt = bias_correction2_sqrt_, eps = eps_;
    const float decay_factor = decay_factor_;
    for (size_t i = 0; i < n; ++i) {
      if (decay_parameter) p[i] = p[i] * decay_factor;
      const float grad = add_to_gradient ? g[i] + weight_decay * p[i] : g[i];
      m[i] = m[i] * beta1 + one_minus_beta1 * grad;
      v[i] = v[i] * beta2 + one_minus_beta2 * (grad * grad);
      const float denom = std::sqrt(v[i]) / bias_correction2_sqrt + eps;
      p[i] = p[i] + neg_step_size * (m[i] / denom);
    }
  }

  bool decoupled_;
  std::vector<std::vector<float>> exp_avg_, exp_avg_sq_;
  float beta1_ = 0, one_minus_beta1_ = 0, beta2_ = 0, one_minus_beta2_ = 0;
  float neg_step_size_ = 0, bias_correction2_sqrt_ = 0, eps_ = 0, decay_factor_ = 1;
};

}  // namespace

bool DecaysTensor(OptimizerKind kind, bool decay_all, int ndim) {
  return kind != OptimizerKind::kAdamW || decay_all || ndim >= 2;
}

// Note [Adding an optimizer]: an optimizer is its class above, its row here, its value in
// OptimizerKind and OptimizerNames (config.hpp: what --optimizer takes) and its test against
// torch.optim (tests/training/optimizer_test.cpp). Nothing else names it: the checkpoint, the
// device runner and the messages read this table.
const std::vector<OptimizerType>& OptimizerTypes() {
  static const std::vector<OptimizerType> types = {
      {OptimizerKind::kAdadelta,
       {"square_avg", "acc_delta"},
       DPL_OPTIMIZER_ADADELTA,
       [](const OptimizerOptions& options, std::vector<OptimizedTensor> tensors) {
         return std::unique_ptr<Optimizer>(new Adadelta(options, std::move(tensors)));
       }},
      {OptimizerKind::kSgd,
       {"momentum_buffer"},
       DPL_OPTIMIZER_SGD,
       [](const OptimizerOptions& options, std::vector<OptimizedTensor> tensors) {
         return std::unique_ptr<Optimizer>(new Sgd(options, std::move(tensors)));
       }},
      {OptimizerKind::kAdam,
       {"exp_avg", "exp_avg_sq"},
       DPL_OPTIMIZER_ADAM,
       [](const OptimizerOptions& options, std::vector<OptimizedTensor> tensors) {
         return std::unique_ptr<Optimizer>(new Adam(options, std::move(tensors), false));
       }},
      {OptimizerKind::kAdamW,
       {"exp_avg", "exp_avg_sq"},
       DPL_OPTIMIZER_ADAMW,
       [](const OptimizerOptions& options, std::vector<OptimizedTensor> tensors) {
         return std::unique_ptr<Optimizer>(new Adam(options, std::move(tensors), true));
       }},
  };
  return types;
}

const OptimizerType* FindOptimizerType(OptimizerKind kind) {
  for (const OptimizerType& type : OptimizerTypes()) {
    if (type.kind == kind) return &type;
  }
  return nullptr;
}

std::vector<std::string> StateNamesOf(OptimizerKind kind) {
  const OptimizerType* type = FindOptimizerType(kind);
  return type != nullptr ? type->state_names : std::vector<std::string>();
}

Optimizer::Optimizer(const OptimizerOptions& options, std::vector<OptimizedTensor> tensors)
    : options_(options), tensors_(std::move(tensors)), learning_rate_(options.learning_rate) {
  size_t total = 0;
  for (const OptimizedTensor& tensor : tensors_) {
    starts_.push_back(total);
    total += tensor.elements;
  }
  starts_.push_back(total);
}

std::vector<std::vector<float>> Optimizer::ZeroBuffers() const {
  std::vector<std::vector<float>> buffers;
  for (const OptimizedTensor& tensor : tensors_) buffers.emplace_back(tensor.elements, 0.0f);
  return buffers;
}

void Optimizer::Step(const std::vector<float*>& parameters,
                     const std::vector<const float*>& gradients) {
  BeginStep();
  // Ranges of the elements of all the tensors, on the pool's threads: [first, last) of the
  // concatenation, cut at the tensors' borders.
  auto run = [&](size_t first, size_t last) {
    size_t t =
        size_t(std::upper_bound(starts_.begin(), starts_.end(), first) - starts_.begin()) - 1;
    for (; t < tensors_.size() && starts_[t] < last; ++t) {
      const size_t begin = std::max(first, starts_[t]) - starts_[t];
      const size_t end = std::min(last, starts_[t + 1]) - starts_[t];
      if (begin < end)
        UpdateSlice(t, begin, end - begin, parameters[t] + begin, gradients[t] + begin);
    }
  };
  if (pool_ == nullptr) {
    run(0, starts_.back());
  } else {
    pool_->ParallelFor(starts_.back(), kElementsPerThread, run);
  }
  EndStep();
}

void Optimizer::BeginStep() {
  Prepare(steps_ + 1);
}

void Optimizer::UpdateSlice(size_t tensor, size_t offset, size_t count, float* parameters,
                            const float* gradients) {
  const float weight_decay = tensors_[tensor].decayed ? float(options_.weight_decay) : 0.0f;
  Update(tensor, offset, count, weight_decay, parameters, gradients);
}

void Optimizer::EndStep() {
  ++steps_;
}

Result<std::unique_ptr<Optimizer>> CreateOptimizer(const OptimizerOptions& options,
                                                   std::vector<OptimizedTensor> tensors) {
  const OptimizerType* type = FindOptimizerType(options.kind);
  if (type == nullptr) {
    return Status::Error("unknown optimizer kind " + std::to_string(int(options.kind)));
  }
  return type->create(options, std::move(tensors));
}

}  // namespace dpl::training
