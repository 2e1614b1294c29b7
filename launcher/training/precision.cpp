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

// Note [16-bit gradients between machines only]: 16-bit buckets halve the bytes a backend sends,
// for a conversion of every gradient to 16 bits and of every sum back. Between machines the
// bytes are what costs. On one machine there is no wire: the workers sum through the machine's
// shared memory, where float32 gradients are summed in place (Note [Gradients in shared memory])
// and 16-bit ones must be converted and copied first, or through the backend on loopback. The
// Shakespeare-sized GPT in bf16 at 2 x 1 on one machine ran 16-25 % slower a step with bf16
// buckets through shared memory (forward+backward 264-273 against 224-236 ms, the wait 18-25
// against 2-3 ms: the conversions run beside the backward on the same two cores) and the same
// through gloo on loopback. So auto sends float32 there, and rank 0 says so.
GradientWire ResolveGradientWire(Precision precision, WireFormat requested, bool across_machines) {
  if (requested != WireFormat::kAuto) return {requested, false, false};
  WireFormat format = WireFormat::kNone;
  if (precision == Precision::kBf16) format = WireFormat::kBf16;
  if (precision == Precision::kFp16) format = WireFormat::kFp16;
  if (format != WireFormat::kNone && !across_machines) {
    return {WireFormat::kNone, true, true};
  }
  return {format, true, false};
}

std::string WireText(const GradientWire& wire) {
  if (wire.format == WireFormat::kNone) return "";
  return std::string(", sent as ") + NameOf(WireFormatNames(), wire.format) +
         (wire.from_precision ? " (the precision's, --grad-compression auto)" : "");
}

}  // namespace dpl::training
