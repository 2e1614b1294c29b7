#include "training/precision.hpp"

namespace dpl::training {

dpl_precision DplPrecision(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return DPL_PRECISION_FP32;
    case Precision::kBf16:
      return DPL_PRECISION_BF16;
    case Precision::kFp16:
      return DPL_PRECISION_FP16;
  }
  return DPL_PRECISION_FP32;
}

Status CheckPrecisionSupported(const ModelPlugin& plugin, Precision precision) {
  if (precision == Precision::kFp32 || plugin.table->Has(ModelCapability::kAutocast)) {
    return Status::Ok();
  }
  return Status::Error(
      DPL_ERR_UNSUPPORTED,
      ModelAbiText(plugin, "computes in float32 only; --precision ") +
          NameOf(PrecisionNames(), precision) + " needs a plugin built against the dpl SDK's " +
          plugin_host::FirstAbiWith(ModelCapability::kAutocast) + " (or use --precision fp32)");
}

GradientWire ResolveGradientWire(Precision precision, GradientCompression requested) {
  if (requested != GradientCompression::kAuto) return {requested, false};
  switch (precision) {
    case Precision::kFp32:
      return {GradientCompression::kNone, true};
    case Precision::kBf16:
      return {GradientCompression::kBf16, true};
    case Precision::kFp16:
      return {GradientCompression::kFp16, true};
  }
  return {GradientCompression::kNone, true};
}

}  // namespace dpl::training
