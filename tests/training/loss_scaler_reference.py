"""Reference for loss_scaler_test. torch 1.13 runs GradScaler's kernels on CUDA only, so the scale
update is torch's _amp_update_scale_ kernel transcribed (with the float32 overflow guard torch
added in 2.1) and driven as GradScaler.update drives it; unscaling is GradScaler.unscale_'s
arithmetic on CPU tensors.
Usage: loss_scaler_reference.py update OUT INIT_SCALE GROWTH_FACTOR BACKOFF_FACTOR INTERVAL FLAGS
         FLAGS: a string of 0/1, whether step k found inf/NaN.
         OUT: per step float32 scale, int32 growth_tracker, int32 skipped (after the update).
       loss_scaler_reference.py unscale IN OUT SCALE
         IN: float32 gradient values. OUT: int32 found_inf, float32 unscaled values.
Exits with 77 when torch cannot be imported."""
import array
import math
import struct
import sys

try:
    import torch
except ImportError as error:
    print("import torch failed:", error, file=sys.stderr)
    sys.exit(77)


def to_float32(value):
    """A double rounded to float32 as a C++ static_cast<float> does (inf beyond its range)."""
    return torch.tensor([value], dtype=torch.float64).float().item()


def amp_update_scale(scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                     growth_interval):
    """aten/src/ATen/native/cuda/AmpKernels.cu amp_update_scale_cuda_kernel: float scale times a
    double factor, stored as float."""
    if found_inf:
        return to_float32(scale * backoff_factor), 0
    successful = growth_tracker + 1
    if successful == growth_interval:
        new_scale = to_float32(scale * growth_factor)
        return (new_scale if math.isfinite(new_scale) else scale), 0
    return scale, successful


def update(argv):
    out, init_scale, growth_factor, backoff_factor, interval, flags = argv
    # GradScaler._lazy_init_scale_growth_tracker: torch.full((1,), init_scale, dtype=float32).
    scale = torch.full((1,), float(init_scale), dtype=torch.float32).item()
    tracker = 0
    with open(out, "wb") as f:
        for flag in flags:
            found = flag == "1"
            # GradScaler.step skips optimizer.step() when found_inf is nonzero; update() follows.
            scale, tracker = amp_update_scale(scale, tracker, found, float(growth_factor),
                                              float(backoff_factor), int(interval))
            f.write(struct.pack("<fii", scale, tracker, int(found)))


def unscale(argv):
    src, dst, scale = argv
    grad = torch.tensor(array.array("f", open(src, "rb").read()), dtype=torch.float32)
    scale = torch.full((1,), float(scale), dtype=torch.float32)
    inv_scale = scale.double().reciprocal().float()  # GradScaler.unscale_
    # _amp_foreach_non_finite_check_and_unscale_: found_inf from the scaled values, then
    # val * inv_scale unless inv_scale is 1.
    found_inf = int(not bool(torch.isfinite(grad).all()))
    unscaled = grad if inv_scale.item() == 1.0 else grad * inv_scale
    with open(dst, "wb") as f:
        f.write(struct.pack("<i", found_inf))
        f.write(array.array("f", unscaled.tolist()).tobytes())


if __name__ == "__main__":
    {"update": update, "unscale": unscale}[sys.argv[1]](sys.argv[2:])
