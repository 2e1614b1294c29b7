#!/usr/bin/env python3
"""The data phase's share of a training step, per data format, from the launcher's own figures.

For each format the script writes a training set of --samples samples in that format into a
scratch folder, then trains --steps steps on it with 2 processes x 1 thread (--processes,
--threads) and reads rank 0's summary line, "time per step: data D ms, forward+backward F ms,
communication wait C ms, optimizer O ms": the share is D / (D + F + C + O). The data phase is
the step's wait for its batch (gathered by the prefetch thread while the step before ran) plus
starting the next batch's gathering. The first step of each epoch waits for a whole fill, which
nothing overlaps; the "steady" column leaves the first --log-interval steps out (from the
phase_ms of the --metrics file's step lines). Figures are medians over --repeats runs, the
formats taking turns within each round.

Formats and what they train (--model recipe, the default):
  idx          raw MNIST-format IDX files, the recipe's ConvNet (convnet)
  npy          x.npy uint8 (N, 1, 28, 28) and y.npy int64, convnet
  cifar10      data_batch_1..5.bin of random pixels, a ConvNet for 3x32x32 images (the recipe's
               ConvNet with 3 input channels) exported to TorchScript by tools/export_model.py
  imagefolder  28x28 greyscale PNGs (train/<label>/<i>.png), convnet
idx, npy and imagefolder take the first --samples Fashion-MNIST images when
/usr/share/datasets/fashion-mnist is there, else random pixels. --model mlp trains the MLP on
every format instead: a much shorter step, so a harder test of the data phase.

Usage: tools/bench/data_phase.py [--formats idx,npy,cifar10] [--samples 10000] [--steps 60]
       [--repeats 3] [--model recipe|mlp] [--launcher build/launcher/launcher]
       [--plugin-dir DIR] [--keep DIR] [-- extra launcher flags]
Runs under dpl's Python environment (tools/dpl_python.py): numpy, Pillow for imagefolder, torch
for cifar10 with --model recipe.
"""
import argparse
import gzip
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dpl_python  # noqa: E402  (tools/dpl_python.py)

dpl_python.use_dpl_python()  # first: the packages imported below are the environment's

import numpy  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FASHION_MNIST = "/usr/share/datasets/fashion-mnist"
FORMATS = ("idx", "npy", "cifar10", "imagefolder")
PHASES = re.compile(r"time per step: (.*)$", re.MULTILINE)
PHASE = re.compile(r"([a-z+ ]+?) ([0-9.]+) ms")

CIFAR_CONVNET = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class CifarConvNet(nn.Module):
    """The recipe's ConvNet for 3x32x32 images."""

    def __init__(self):
        super().__init__()
        self.cn1 = nn.Conv2d(3, 16, 3, 1)
        self.cn2 = nn.Conv2d(16, 32, 3, 1)
        self.dp1 = nn.Dropout2d(0.10)
        self.dp2 = nn.Dropout(0.25)  # Dropout2d on (batch, features) is this, with a warning
        self.fc1 = nn.Linear(32 * 14 * 14, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.cn1(x))
        x = F.relu(self.cn2(x))
        x = self.dp1(F.max_pool2d(x, 2))
        x = self.dp2(F.relu(self.fc1(torch.flatten(x, 1))))
        return F.log_softmax(self.fc2(x), dim=1)
'''


def grey_images(count, seed):
    """uint8 (count, 28, 28) and int64 labels: Fashion-MNIST's first images, else random."""
    images = os.path.join(FASHION_MNIST, "train-images-idx3-ubyte.gz")
    labels = os.path.join(FASHION_MNIST, "train-labels-idx1-ubyte.gz")
    if os.path.exists(images) and os.path.exists(labels):
        with gzip.open(images) as source:
            pixels = numpy.frombuffer(source.read(), numpy.uint8, offset=16)
        with gzip.open(labels) as source:
            classes = numpy.frombuffer(source.read(), numpy.uint8, offset=8)
        if len(classes) >= count:
            return pixels[:count * 784].reshape(count, 28, 28), classes[:count].astype(numpy.int64)
    rng = numpy.random.default_rng(seed)
    return (rng.integers(0, 256, (count, 28, 28), dtype=numpy.uint8),
            rng.integers(0, 10, count).astype(numpy.int64))


def write_idx(directory, images, labels):
    def header(magic, extents):
        return b"".join(int(v).to_bytes(4, "big") for v in [magic] + list(extents))

    with open(os.path.join(directory, "train-images-idx3-ubyte"), "wb") as out:
        out.write(header(0x803, images.shape) + images.tobytes())
    with open(os.path.join(directory, "train-labels-idx1-ubyte"), "wb") as out:
        out.write(header(0x801, labels.shape) + labels.astype(numpy.uint8).tobytes())


def write_data(fmt, directory, count):
    os.makedirs(directory, exist_ok=True)
    if fmt == "cifar10":
        rng = numpy.random.default_rng(1)
        for batch, part in enumerate(numpy.array_split(numpy.arange(count), 5), 1):
            records = rng.integers(0, 256, (len(part), 3073), dtype=numpy.uint8)
            records[:, 0] %= 10
            records.tofile(os.path.join(directory, f"data_batch_{batch}.bin"))
        return
    images, labels = grey_images(count, 2)
    if fmt == "idx":
        write_idx(directory, images, labels)
    elif fmt == "npy":
        numpy.save(os.path.join(directory, "x.npy"), images[:, None])
        numpy.save(os.path.join(directory, "y.npy"), labels)
    elif fmt == "imagefolder":
        from PIL import Image
        for i, (image, label) in enumerate(zip(images, labels)):
            folder = os.path.join(directory, "train", str(label))
            os.makedirs(folder, exist_ok=True)
            Image.fromarray(image, "L").save(os.path.join(folder, f"{i}.png"))


def export_cifar_convnet(scratch):
    source = os.path.join(scratch, "cifar_convnet.py")
    with open(source, "w") as out:
        out.write(CIFAR_CONVNET)
    model = os.path.join(scratch, "cifar_convnet.pt")
    subprocess.run([sys.executable, os.path.join(REPO, "tools", "export_model.py"), model,
                    "--module", source + ":CifarConvNet", "--input-shape", "3,32,32"],
                   check=True, stdout=subprocess.DEVNULL)
    return model


def model_flags(fmt, model, cifar_model):
    if model == "mlp":
        return ["--model", "mlp"]
    if fmt == "cifar10":
        return ["--model", "torchscript", "--model-options", "file=" + cifar_model]
    return ["--model", "convnet"]


def phases_of(output):
    """{phase: ms} of rank 0's "time per step" line."""
    found = PHASES.findall(output)
    if not found:
        return None
    return {name.strip(): float(ms) for name, ms in PHASE.findall(found[-1])}


def steady_share(metrics):
    """The data phase's share of the steps after the first logged interval, in percent."""
    with open(metrics) as lines:
        steps = [json.loads(line) for line in lines if line.startswith('{"kind": "step"')]
    data = total = 0.0
    for before, after in zip(steps, steps[1:]):
        count = after["step"] - before["step"]
        phases = after["phase_ms"]
        data += phases["data"] * count
        total += sum(phases.values()) * count
    return 100.0 * data / total if total > 0 else float("nan")


def run(args, fmt, directory, cifar_model, metrics):
    command = [args.launcher, "--data", fmt, "--data-dir", directory, "--data-cache", "none",
               "--num-processes", str(args.processes), "--threads-per-worker",
               str(args.threads), "--max-steps", str(args.steps), "--no-eval", "--no-progress",
               "--master-port", "0", "--log-time", "none", "--log-interval",
               str(args.log_interval), "--metrics", metrics]
    command += model_flags(fmt, args.model, cifar_model)
    for plugin_dir in args.plugin_dir:
        command += ["--plugin-dir", plugin_dir]
    finished = subprocess.run(command + args.extra, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, check=False)
    phases = phases_of(finished.stdout)
    if finished.returncode != 0 or not phases:
        sys.exit(f"{' '.join(command)} failed ({finished.returncode}):\n{finished.stdout}")
    return phases, steady_share(metrics)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--formats", default="idx,npy,cifar10")
    parser.add_argument("--samples", type=int, default=10000)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--log-interval", type=int, default=10)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--model", choices=("recipe", "mlp"), default="recipe")
    parser.add_argument("--launcher", default=os.path.join(REPO, "build/launcher/launcher"))
    parser.add_argument("--plugin-dir", action="append", default=[])
    parser.add_argument("--keep", help="write the data here and keep it (default: a temporary "
                                       "folder, removed at the end)")
    parser.add_argument("extra", nargs="*", help="more launcher flags (after --)")
    args = parser.parse_args(argv)
    formats = args.formats.split(",")
    unknown = [fmt for fmt in formats if fmt not in FORMATS]
    if unknown:
        parser.error(f"unknown format(s) {', '.join(unknown)}; known: {', '.join(FORMATS)}")
    if args.samples < 5 or args.steps < 1 or args.repeats < 1 or args.log_interval < 1:
        parser.error("--samples must be >= 5, --steps, --repeats and --log-interval >= 1")

    scratch = args.keep or tempfile.mkdtemp(prefix="dpl-data-phase-")
    try:
        cifar_model = None
        if "cifar10" in formats and args.model == "recipe":
            cifar_model = export_cifar_convnet(scratch)
        folders = {}
        for fmt in formats:
            folders[fmt] = os.path.join(scratch, fmt)
            write_data(fmt, folders[fmt], args.samples)
        runs = {fmt: [] for fmt in formats}
        for repeat in range(args.repeats):
            for fmt in formats:
                metrics = os.path.join(scratch, f"metrics-{fmt}-{repeat}.jsonl")
                runs[fmt].append(run(args, fmt, folders[fmt], cifar_model, metrics))
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)

    print(f"{args.processes} processes x {args.threads} thread(s), {args.steps} steps, "
          f"{args.samples} samples, model {args.model}; median of {args.repeats} runs")
    print(f"{'format':<12} {'step ms':>9} {'data ms':>9} {'data share':>11} {'steady':>8}  "
          "shares of the runs")
    for fmt in formats:
        shares = [100.0 * phases["data"] / sum(phases.values()) for phases, _ in runs[fmt]]
        steps = [sum(phases.values()) for phases, _ in runs[fmt]]
        data = [phases["data"] for phases, _ in runs[fmt]]
        steady = [share for _, share in runs[fmt]]
        print(f"{fmt:<12} {statistics.median(steps):9.3f} {statistics.median(data):9.3f} "
              f"{statistics.median(shares):10.2f}% {statistics.median(steady):7.2f}%  " +
              ", ".join(f"{share:.2f}%" for share in shares))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
