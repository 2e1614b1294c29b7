"""MLPs of a chosen parameter count for the size sweep (scale_sweep.py): 784 inputs, three hidden
layers of one width, 10 classes, log-probabilities out (the shape of the 10M-parameter
784-2048-2048-2048-10 MLP the scaling targets were first measured on, whose width this picks for
10M). The width is the multiple of 8 whose count is nearest the one asked for.

    tools/export_model.py mlp.pt --module tools/bench/sized_mlp.py:SizedMLP \
        --kwargs "{\"hidden\": $(python3 tools/bench/sized_mlp.py 50M)}"
    launcher --model torchscript --model-options file=mlp.pt ...
"""
import json
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dpl_python  # noqa: E402  (tools/dpl_python.py)

dpl_python.use_dpl_python()  # first: the packages imported below are the environment's

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

INPUTS = 28 * 28
CLASSES = 10
HIDDEN_LAYERS = 3
WIDTH_STEP = 8  # widths stay multiples of a SIMD vector of floats


def parameter_count(hidden):
    """Weights and biases of INPUTS-hidden-hidden-hidden-CLASSES."""
    return (INPUTS + 1) * hidden + (HIDDEN_LAYERS - 1) * (hidden + 1) * hidden + \
        (hidden + 1) * CLASSES


def hidden_width(parameters):
    """The multiple of WIDTH_STEP whose parameter_count is nearest `parameters`."""
    # parameter_count(h) = a h^2 + b h + CLASSES: take the positive root, then the nearest step.
    a = HIDDEN_LAYERS - 1
    b = INPUTS + 1 + (HIDDEN_LAYERS - 1) + CLASSES
    root = (-b + math.sqrt(b * b + 4 * a * max(parameters - CLASSES, 0))) / (2 * a)
    below = max(WIDTH_STEP, int(root) // WIDTH_STEP * WIDTH_STEP)
    return min((below, below + WIDTH_STEP), key=lambda h: abs(parameter_count(h) - parameters))


def parse_size(text):
    """'1M', '500K', '2.5M' or a plain count -> parameters."""
    scale = {"K": 10**3, "M": 10**6, "G": 10**9}.get(text[-1:].upper(), 1)
    number = text[:-1] if scale != 1 else text
    try:
        value = float(number) * scale
    except ValueError:
        raise ValueError(f"size {text!r} is not a count like 1M, 500K or 2000000") from None
    if value < parameter_count(WIDTH_STEP):
        raise ValueError(f"size {text!r} is below the smallest MLP "
                         f"({parameter_count(WIDTH_STEP)} parameters)")
    return int(value)


def written_module(hidden, folder):
    """The TorchScript file of the MLP of width `hidden` in `folder`, written by
    tools/export_model.py the first time it is asked for; exits naming the file if that fails."""
    path = os.path.join(folder, f"mlp-{hidden}.pt")
    if not os.path.isfile(path):
        here = os.path.abspath(__file__)
        export = os.path.join(os.path.dirname(os.path.dirname(here)), "export_model.py")
        exported = subprocess.run(
            [sys.executable, export, path, "--module", here + ":SizedMLP", "--kwargs",
             json.dumps({"hidden": hidden})], capture_output=True, text=True)
        if exported.returncode != 0:
            sys.exit(f"tools/export_model.py {path} failed:\n{exported.stderr}")
    return path


class SizedMLP(nn.Module):
    def __init__(self, hidden: int = 2048):
        super().__init__()
        widths = [INPUTS] + [hidden] * HIDDEN_LAYERS
        self.hidden = nn.ModuleList(nn.Linear(i, o) for i, o in zip(widths, widths[1:]))
        self.out = nn.Linear(hidden, CLASSES)

    def forward(self, x):
        x = torch.flatten(x, 1)
        for layer in self.hidden:
            x = F.relu(layer(x))
        return F.log_softmax(self.out(x), dim=1)


if __name__ == "__main__":  # prints the width for a size: sized_mlp.py 50M
    print(hidden_width(parse_size(sys.argv[1])))
