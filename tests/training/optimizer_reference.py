"""Reference for optimizer_test: runs torch.optim on the parameters and per-step gradients the
test wrote, and writes the final parameters back.
Usage: optimizer_reference.py IN OUT NAME LR MOMENTUM
IN: int64 elements, int64 steps, float32 params[elements], float32 grads[steps][elements]."""
import array
import struct
import sys

import torch


def main():
    src, dst, name, lr, momentum = sys.argv[1:6]
    raw = open(src, "rb").read()
    elements, steps = struct.unpack("<qq", raw[:16])
    values = torch.tensor(array.array("f", raw[16:]), dtype=torch.float32)
    param = torch.nn.Parameter(values[:elements].clone())
    grads = values[elements:].reshape(steps, elements)
    lr, momentum = float(lr), float(momentum)
    if name == "adadelta":
        opt = torch.optim.Adadelta([param], lr=lr, foreach=False)
    elif name == "sgd":
        opt = torch.optim.SGD([param], lr=lr, momentum=momentum, foreach=False)
    elif name == "adam":
        opt = torch.optim.Adam([param], lr=lr, foreach=False)
    else:
        raise SystemExit("unknown optimizer " + name)
    for step in range(steps):
        param.grad = grads[step].clone()
        opt.step()
    open(dst, "wb").write(array.array("f", param.detach().tolist()).tobytes())


if __name__ == "__main__":
    main()
