"""Reference for optimizer_test: runs torch.optim on the parameters and per-step gradients the
test wrote, and writes the final parameters back.
Usage: optimizer_reference.py IN OUT NAME LR MOMENTUM WEIGHT_DECAY [SCHEDULE WARMUP STEP_SIZE GAMMA]
                              [betas=B1,B2] [eps=E] [shapes=S,S,...] [groups=nanogpt|all]
IN: int64 elements, int64 steps, float32 params[elements], float32 grads[steps][elements].
With SCHEDULE, the learning rate follows that schedule of lr_schedule_reference.py over the steps.
betas= and eps= go to adam and adamw. shapes= cuts the elements into tensors of these shapes
("20x30,30,4x5x6", in order; default one tensor of every element); groups=nanogpt makes two param
groups as nanoGPT's configure_optimizers does (weight decay on tensors of two or more dimensions,
none on the others), groups=all (the default) one group of every tensor.
Exits with 77 when torch cannot be imported."""
import array
import struct
import sys
import warnings

try:
    import torch
except ImportError as error:
    print("import torch failed:", error, file=sys.stderr)
    sys.exit(77)

from lr_schedule_reference import build_schedule


def build_optimizer(name, groups, lr, momentum, options):
    kwargs = {"lr": lr, "foreach": False}
    if name in ("adam", "adamw"):
        if "betas" in options:
            kwargs["betas"] = tuple(float(b) for b in options["betas"].split(","))
        if "eps" in options:
            kwargs["eps"] = float(options["eps"])
    if name == "adadelta":
        return torch.optim.Adadelta(groups, **kwargs)
    if name == "sgd":
        return torch.optim.SGD(groups, momentum=momentum, **kwargs)
    if name == "adam":
        return torch.optim.Adam(groups, **kwargs)
    if name == "adamw":
        return torch.optim.AdamW(groups, **kwargs)
    raise SystemExit("unknown optimizer " + name)


def main():
    positional = [a for a in sys.argv[1:] if "=" not in a]
    options = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
    src, dst, name, lr, momentum, weight_decay = positional[:6]
    raw = open(src, "rb").read()
    elements, steps = struct.unpack("<qq", raw[:16])
    values = torch.tensor(array.array("f", raw[16:]), dtype=torch.float32)
    grads = values[elements:].reshape(steps, elements)
    lr, momentum, weight_decay = float(lr), float(momentum), float(weight_decay)
    shapes = [[elements]]
    if "shapes" in options:
        shapes = [[int(d) for d in shape.split("x")] for shape in options["shapes"].split(",")]
    params, offsets, offset = [], [], 0
    for shape in shapes:
        count = 1
        for d in shape:
            count *= d
        params.append(torch.nn.Parameter(values[offset:offset + count].clone().reshape(shape)))
        offsets.append((offset, count))
        offset += count
    assert offset == elements, "the shapes do not cover the elements"
    if options.get("groups", "all") == "nanogpt":
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    else:
        groups = [{"params": params, "weight_decay": weight_decay}]
    opt = build_optimizer(name, groups, lr, momentum, options)
    schedule = None
    if len(positional) > 6:
        warnings.filterwarnings("ignore", category=UserWarning)
        schedule_name, warmup, step_size, gamma = positional[6:10]
        schedule = build_schedule(opt, schedule_name, steps, int(warmup), int(step_size),
                                  float(gamma))
    for step in range(steps):
        for param, (begin, count) in zip(params, offsets):
            param.grad = grads[step][begin:begin + count].clone().reshape(param.shape)
        opt.step()
        if schedule is not None:
            schedule.step()
    final = torch.cat([p.detach().reshape(-1) for p in params])
    open(dst, "wb").write(array.array("f", final.tolist()).tobytes())


if __name__ == "__main__":
    main()
