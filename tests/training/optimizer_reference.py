"""Reference for optimizer_test: runs torch.optim on the parameters and per-step gradients the
test wrote, and writes the final parameters back.
Usage: optimizer_reference.py IN OUT NAME LR MOMENTUM WEIGHT_DECAY [SCHEDULE WARMUP STEP_SIZE GAMMA]
IN: int64 elements, int64 steps, float32 params[elements], float32 grads[steps][elements].
With SCHEDULE, the learning rate follows that schedule of lr_schedule_reference.py over the steps.
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


def main():
    src, dst, name, lr, momentum, weight_decay = sys.argv[1:7]
    raw = open(src, "rb").read()
    elements, steps = struct.unpack("<qq", raw[:16])
    values = torch.tensor(array.array("f", raw[16:]), dtype=torch.float32)
    param = torch.nn.Parameter(values[:elements].clone())
    grads = values[elements:].reshape(steps, elements)
    lr, momentum, weight_decay = float(lr), float(momentum), float(weight_decay)
    if name == "adadelta":
        opt = torch.optim.Adadelta([param], lr=lr, weight_decay=weight_decay, foreach=False)
    elif name == "sgd":
        opt = torch.optim.SGD([param], lr=lr, momentum=momentum, weight_decay=weight_decay,
                              foreach=False)
    elif name == "adam":
        opt = torch.optim.Adam([param], lr=lr, weight_decay=weight_decay, foreach=False)
    else:
        raise SystemExit("unknown optimizer " + name)
    schedule = None
    if len(sys.argv) > 7:
        warnings.filterwarnings("ignore", category=UserWarning)
        schedule_name, warmup, step_size, gamma = sys.argv[7:11]
        schedule = build_schedule(opt, schedule_name, steps, int(warmup), int(step_size),
                                  float(gamma))
    for step in range(steps):
        param.grad = grads[step].clone()
        opt.step()
        if schedule is not None:
            schedule.step()
    open(dst, "wb").write(array.array("f", param.detach().tolist()).tobytes())


if __name__ == "__main__":
    main()
