#include "protocol/progress_record.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace dpl::protocol {
namespace {

constexpr const char* kMarker =
    "\x1e"
    "dpl-progress ";

}  // namespace

std::string EncodeProgress(const ProgressRecord& r) {
  char text[256];
  std::snprintf(text, sizeof text,
                "%sstep=%lld total=%lld start=%lld epoch=%lld epochs=%lld rate=%.3f seconds=%.3f "
                "loss=%.6g done=%d",
                kMarker, static_cast<long long>(r.step), static_cast<long long>(r.total),
                static_cast<long long>(r.start_step), static_cast<long long>(r.epoch),
                static_cast<long long>(r.epochs), r.samples_per_s, r.seconds, r.loss,
                r.done ? 1 : 0);
  return text;
}

bool IsProgressRecord(const std::string& line) {
  return line.rfind(kMarker, 0) == 0;
}

std::optional<ProgressRecord> DecodeProgress(const std::string& line) {
  if (!IsProgressRecord(line)) return std::nullopt;
  ProgressRecord r;
  long long step = 0, total = 0, start = 0, epoch = 0, epochs = 0;
  int done = 0, used = 0;
  char loss[64] = {};
  const int fields = std::sscanf(line.c_str() + std::strlen(kMarker),
                                 "step=%lld total=%lld start=%lld epoch=%lld epochs=%lld rate=%lf "
                                 "seconds=%lf loss=%63s done=%d%n",
                                 &step, &total, &start, &epoch, &epochs, &r.samples_per_s,
                                 &r.seconds, loss, &done, &used);
  if (fields != 9 || std::strlen(kMarker) + size_t(used) != line.size()) return std::nullopt;
  if (step < 0 || total < 0 || start < 0 || start > step || epochs < 0) return std::nullopt;
  r.step = step;
  r.total = total;
  r.start_step = start;
  r.epoch = epoch;
  r.epochs = epochs;
  r.loss = std::strtod(loss, nullptr);  // "nan" and "inf" read back as such
  r.done = done != 0;
  return r;
}

}  // namespace dpl::protocol
