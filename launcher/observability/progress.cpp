#include "observability/progress.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/log.hpp"

namespace dpl::observability {
namespace {

constexpr size_t kDefaultWidth = 80;
constexpr size_t kMaxBarCells = 30;
constexpr size_t kMinBarCells = 10;

std::string Clock(double seconds) {
  const long whole = std::lround(std::max(0.0, seconds));
  char text[32];
  if (whole >= 3600) {
    std::snprintf(text, sizeof text, "%ld:%02ld:%02ld", whole / 3600, whole / 60 % 60, whole % 60);
  } else {
    std::snprintf(text, sizeof text, "%ld:%02ld", whole / 60, whole % 60);
  }
  return text;
}

}  // namespace

std::string RenderProgressBar(const protocol::ProgressRecord& r, size_t width) {
  const int64_t total = std::max<int64_t>(r.total, r.step);
  const double fraction = total > 0 ? double(r.step) / double(total) : 1.0;
  char counts[64];
  std::snprintf(counts, sizeof counts, " %lld/%lld steps %3d%%", static_cast<long long>(r.step),
                static_cast<long long>(total), int(std::floor(fraction * 100.0)));
  std::vector<std::string> fields;
  char field[64];
  std::snprintf(field, sizeof field, " %.0f samples/s", r.samples_per_s);
  fields.push_back(field);
  const int64_t run_steps = r.step - r.start_step;
  if (r.done) {
    fields.push_back(" in " + Clock(r.seconds));
  } else if (run_steps > 0) {
    fields.push_back(" ETA " + Clock(r.seconds / double(run_steps) * double(total - r.step)));
  } else {
    fields.push_back(" ETA -");
  }
  if (run_steps > 0) {  // no loss before the first step
    std::snprintf(field, sizeof field, " loss %.4f", r.loss);
    fields.push_back(field);
  }
  if (r.epochs > 1) {
    std::snprintf(field, sizeof field, " epoch %lld/%lld", static_cast<long long>(r.epoch + 1),
                  static_cast<long long>(r.epochs));
    fields.push_back(field);
  }
  std::string tail = counts;
  size_t kept = 0;
  for (; kept < fields.size(); ++kept) {
    if (2 + kMinBarCells + tail.size() + fields[kept].size() > width) break;
    tail += fields[kept];
  }
  if (2 + kMinBarCells + tail.size() > width) return tail.substr(1, width);  // a tiny terminal
  const size_t cells = std::min(kMaxBarCells, width - 2 - tail.size());
  const size_t filled = std::min(cells, size_t(std::floor(fraction * double(cells))));
  std::string bar = "[" + std::string(filled, '=');
  if (filled < cells) bar += '>' + std::string(cells - filled - 1, ' ');
  return bar + "]" + tail;
}

size_t TerminalWidth() {
  winsize size{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return kDefaultWidth;
}

ProgressBar::ProgressBar(bool enabled) {
  const char* term = std::getenv("TERM");
  drawing_ = enabled && ::isatty(STDERR_FILENO) == 1 &&
             !(term != nullptr && std::strcmp(term, "dumb") == 0);
}

ProgressBar::~ProgressBar() {
  Finish();
}

void ProgressBar::Update(const protocol::ProgressRecord& record) {
  if (!drawing_) return;
  // One column less than the terminal: a line that fills the last column wraps on some terminals.
  log::ShowStatus(RenderProgressBar(record, std::max<size_t>(TerminalWidth(), 2) - 1));
  shown_ = true;
  if (record.done) Finish();
}

void ProgressBar::Finish() {
  if (!shown_) return;
  log::EndStatus();
  shown_ = false;
}

}  // namespace dpl::observability
