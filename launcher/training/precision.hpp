// The compute precision of a run (--precision) as the host sees it: what the model is told, which
// models can run it, and the format the gradients travel in. The autocast itself is the model's
// (ModelCapability::kAutocast, dpl_precision; the SDK's libtorch helper runs it); the host keeps
// parameters, gradients and the optimizer in float32 whatever the precision, and scales the loss
// for fp16 (optimizer_runner.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "dpl/model.h"
#include "training/config.hpp"
#include "training/model.hpp"

namespace dpl::training {

// The model ABI's spelling of `precision`.
dpl_precision DplPrecision(Precision precision);

// Whether `plugin` can compute in `precision`: only a plugin with ModelCapability::kAutocast is
// told the precision; another trains in fp32 only. Asked before the model is created.
Status CheckPrecisionSupported(const ModelPlugin& plugin, Precision precision);

// The format of the gradients on the wire, and where it came from.
struct GradientWire {
  WireFormat format = WireFormat::kNone;  // never kAuto
  // Chosen by --grad-compression auto from the precision rather than given: a place that cannot
  // send 16-bit gradients then sends float32 instead of refusing.
  bool from_precision = false;
  // --grad-compression auto kept a 16-bit precision's gradients in float32: one machine.
  bool float32_on_one_machine = false;
};

// --grad-compression auto sends the compute precision's 16-bit format (bf16 training sends bf16
// buckets, fp16 training fp16 ones) between machines, and float32 for fp32 and on one machine
// (Note [16-bit gradients between machines only]); an explicit value wins.
GradientWire ResolveGradientWire(Precision precision, WireFormat requested, bool across_machines);

// ", sent as bf16 (...)" for a 16-bit wire format, else "": for the log.
std::string WireText(const GradientWire& wire);

}  // namespace dpl::training
