#include "worker/step_time_exchange.hpp"

#include <unistd.h>

#include <algorithm>
#include <optional>
#include <sstream>
#include <utility>

#include "common/log.hpp"
#include "rendezvous/step_times.hpp"
#include "worker/store_client_options.hpp"

namespace dpl::worker {
namespace {

std::string HostName() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return "unknown";
  return host;
}

}  // namespace

bool StepTimeExchange::Wanted(const cli::Options& options,
                              const training::WorkerIdentity& identity) {
  return identity.world_size > 1 && options.training.stragglers.factor > 0.0;
}

Result<std::unique_ptr<StepTimeExchange>> StepTimeExchange::Start(
    const cli::Options& options, const training::WorkerIdentity& identity,
    const std::string& attempt_prefix) {
  auto client = ConnectWorkerStore(options, kStoreCallBound);
  if (!client.ok()) return client.status().WithContext("connecting the step times' exchange");
  std::unique_ptr<StepTimeExchange> exchange(
      new StepTimeExchange(std::move(*client), identity, options.machine_id, attempt_prefix));
  exchange->thread_ = std::thread([self = exchange.get()] { self->Loop(); });
  return exchange;
}

StepTimeExchange::StepTimeExchange(std::unique_ptr<rendezvous::StoreClient> store,
                                   const training::WorkerIdentity& identity, int machine,
                                   std::string attempt_prefix)
    : store_(std::move(store)),
      rank_(identity.rank),
      world_size_(identity.world_size),
      machine_(machine),
      host_(HostName()),
      prefix_(std::move(attempt_prefix)),
      newest_read_(size_t(identity.world_size), -1) {}

StepTimeExchange::~StepTimeExchange() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  stopping_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StepTimeExchange::Record(int64_t step, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  recent_.emplace_back(step, seconds);
  while (recent_.size() > kPostedSteps) recent_.pop_front();
  recorded_ = true;
}

std::vector<training::RankStepTimes> StepTimeExchange::Collect() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(collected_, {});
}

std::string StepTimeExchange::Encode(const training::RankStepTimes& times) {
  std::string text = std::to_string(times.machine) + " " + times.host + "\n";
  for (const auto& [step, seconds] : times.seconds_of_step) {
    text += std::to_string(step) + " " + std::to_string(int64_t(seconds * 1e6)) + "\n";
  }
  return text;
}

std::optional<training::RankStepTimes> StepTimeExchange::Decode(int rank, const std::string& text) {
  const size_t end_of_machine = text.find('\n');
  if (end_of_machine == std::string::npos) return std::nullopt;
  training::RankStepTimes times;
  times.rank = rank;
  std::istringstream machine(text.substr(0, end_of_machine));
  if (!(machine >> times.machine >> times.host)) return std::nullopt;
  std::istringstream lines(text.substr(end_of_machine + 1));
  int64_t step = 0, microseconds = 0;
  while (lines >> step >> microseconds) {
    times.seconds_of_step.emplace_back(step, double(microseconds) / 1e6);
  }
  if (!lines.eof()) return std::nullopt;
  return times;
}

void StepTimeExchange::Loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    stopping_.wait_for(lock, kExchangePeriod, [&] { return stop_; });
    if (stop_) return;
    lock.unlock();
    const bool working = Exchange();
    lock.lock();
    if (!working) return;
  }
}

bool StepTimeExchange::Exchange() {
  training::RankStepTimes mine{rank_, machine_, host_, {}};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (recorded_) mine.seconds_of_step.assign(recent_.begin(), recent_.end());
    recorded_ = false;
  }
  if (!mine.seconds_of_step.empty()) {
    const Status posted = rendezvous::PostStepTimes(*store_, prefix_, rank_, Encode(mine));
    if (!posted.ok()) {
      log::Debug("the step times' exchange stops: " + posted.message());
      return false;
    }
  }
  if (rank_ != 0) return true;
  Result<std::vector<std::string>> posts = rendezvous::ReadStepTimes(*store_, prefix_, world_size_);
  if (!posts.ok()) {
    log::Debug("the step times' exchange stops: " + posts.status().message());
    return false;
  }
  std::vector<training::RankStepTimes> news;
  for (int rank = 0; rank < world_size_; ++rank) {
    std::optional<training::RankStepTimes> times = Decode(rank, (*posts)[size_t(rank)]);
    if (!times) continue;
    int64_t& newest = newest_read_[size_t(rank)];
    auto& steps = times->seconds_of_step;
    steps.erase(std::remove_if(steps.begin(), steps.end(),
                               [&](const auto& entry) { return entry.first <= newest; }),
                steps.end());
    if (steps.empty()) continue;
    newest = steps.back().first;
    news.push_back(std::move(*times));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (training::RankStepTimes& times : news) collected_.push_back(std::move(times));
  return true;
}

}  // namespace dpl::worker
