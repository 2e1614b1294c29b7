// A progress record in the middle of a run: 12 of 30 steps in 6 s, for the record's tests and the
// bar's (tests/observability/progress_test.cpp).
#pragma once

#include "protocol/progress_record.hpp"

namespace dpl::protocol {

inline ProgressRecord SampleProgress() {
  ProgressRecord r;
  r.step = 12;
  r.total = 30;
  r.start_step = 0;
  r.epoch = 0;
  r.epochs = 1;
  r.samples_per_s = 1432.4;
  r.seconds = 6.0;
  r.loss = 0.76407;
  return r;
}

}  // namespace dpl::protocol
