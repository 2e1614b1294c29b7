"""Reference for gradient_clipping_test: torch.nn.utils.clip_grad_norm_ on the gradients the test
wrote, and the same clipping from a norm accumulated in float64.
Usage: gradient_clipping_reference.py clip IN OUT MAX_NORM
         IN: int64 count, int64 sizes[count], float32 gradients (back to back).
         OUT: float32 torch_norm, float32 float64_norm, float32 torch_clipped[all elements],
              float32 float64_clipped[all elements].
       gradient_clipping_reference.py coefficients IN OUT MAX_NORM
         IN: float32 total norms. OUT: float32 clip_grad_norm_'s factor for each.
Exits with 77 when torch cannot be imported."""
import array
import struct
import sys

try:
    import torch
except ImportError as error:
    print("import torch failed:", error, file=sys.stderr)
    sys.exit(77)


def clip_with_norm(grads, total_norm, max_norm):
    """clip_grad_norm_'s arithmetic after the norm, on float32 tensors."""
    clip_coef = max_norm / (total_norm + 1e-6)
    clip_coef_clamped = torch.clamp(clip_coef, max=1.0)
    return [g * clip_coef_clamped for g in grads]


def coefficients(src, dst, max_norm):
    norms = torch.tensor(array.array("f", open(src, "rb").read()), dtype=torch.float32)
    factors = [torch.clamp(max_norm / (norm + 1e-6), max=1.0).item() for norm in norms]
    open(dst, "wb").write(array.array("f", factors).tobytes())


def main():
    mode, src, dst, max_norm = sys.argv[1:5]
    if mode == "coefficients":
        coefficients(src, dst, float(max_norm))
        return
    max_norm = float(max_norm)
    raw = open(src, "rb").read()
    (count,) = struct.unpack("<q", raw[:8])
    sizes = struct.unpack("<%dq" % count, raw[8:8 + 8 * count])
    values = torch.tensor(array.array("f", raw[8 + 8 * count:]), dtype=torch.float32)
    grads = list(torch.split(values, list(sizes)))

    # Each gradient's norm correctly rounded to float32, then the norm of those norms likewise.
    norms = torch.stack([torch.norm(g.double(), 2.0).float() for g in grads])
    float64_norm = torch.norm(norms.double(), 2.0).float()
    float64_clipped = clip_with_norm(grads, float64_norm, max_norm)

    params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    torch_norm = torch.nn.utils.clip_grad_norm_(params, max_norm)

    out = array.array("f", [torch_norm.item(), float64_norm.item()])
    for p in params:
        out.extend(p.grad.tolist())
    for g in float64_clipped:
        out.extend(g.tolist())
    open(dst, "wb").write(out.tobytes())


if __name__ == "__main__":
    main()
