"""Python torch's side of the compiled model's tests (dpl's pinned torch).

    compiled.py packages            compiles every package the tests use into the cache of
                                    tools/compile_model.py (a ctest fixture: parallel tests then
                                    compile none)
    compiled.py write DIR           the packages (from the cache), altered copies of one for the
                                    refusals, and the data: Fashion-MNIST's first samples as IDX
                                    files (mnist/), byte tokens of a text (tokens/), CIFAR-10
                                    shaped records (cifar/)
    compiled.py eager convnet|gpt DATA STEPS BATCH WORLD SEED LR
        the module trained eagerly at the global batch BATCH (SGD at LR) on the samples dpl's
        sampler gives WORLD ranks: prints "losses" and the loss of rank 0's part of each step
    compiled.py logits convnet|gpt PACKAGE STATE DATA
        STATE loaded strictly into the Python class; the logits of DATA's first test samples in
        eager PyTorch and from the package's evaluation program given STATE's tensors: prints
        "largest_difference X"
    compiled.py refuse NAME         tools/compile_model.py on a module it must refuse (NAME:
        data_dependent, numpy): prints what it printed and where the refused line is
"""
import os
import shutil
import struct
import subprocess
import sys
import zipfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "..", "tools")
sys.path.insert(0, TOOLS)
sys.path.insert(0, os.path.join(HERE, "..", "data_jobs"))

import compiled_package  # noqa: E402
from gpt_model import GPT  # noqa: E402
from interop import normalised, read_idx, write_idx  # noqa: E402  (tests/interop/interop.py)

FASHION = "/usr/share/datasets/fashion-mnist"
TEXT = "/usr/share/games/fortunes/cookie"
GPT_SIZES = {"vocab": 256, "block": 32, "layers": 2, "heads": 4, "dim": 64}
TRAIN_SAMPLES, TEST_SAMPLES = 512, 128

# The recipe's ConvNet without its dropout, so that eager PyTorch computes the same losses.
CONVNET_SOURCE = '''\
from recipe_convnet import ConvNet


class ConvNetWithoutDropout(ConvNet):
    def __init__(self):
        super().__init__()
        self.dp1.p = 0.0
        self.dp2.p = 0.0
'''

# Modules torch.export cannot take, each line that cannot be taken marked.
REFUSED_SOURCE = '''\
import torch
import torch.nn as nn


class DataDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        if x.sum() > 0:  # refused: data-dependent control flow
            return self.fc(x)
        return -self.fc(x)


class ThroughNumpy(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        scale = torch.from_numpy(x.numpy() * 2)  # refused: numpy
        return self.fc(scale)
'''


# A BatchNorm1d after a linear layer: one sample per channel in a batch of one.
BATCHNORM_SOURCE = '''\
import torch.nn as nn


class LinearBatchNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 16, bias=False)
        self.bn = nn.BatchNorm1d(16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x):
        return self.fc2(self.bn(self.fc1(x.flatten(1))).relu())
'''


def packages(directory=None):
    """(name, compile_model.py arguments) of every package; the module files go to `directory`."""
    directory = directory or os.path.join(os.path.expanduser("~"), ".cache", "dpl", "test-modules")
    os.makedirs(directory, exist_ok=True)
    convnet = os.path.join(directory, "convnet_without_dropout.py")
    with open(convnet, "w") as out:
        out.write(CONVNET_SOURCE)
    batchnorm = os.path.join(directory, "linear_batchnorm.py")
    with open(batchnorm, "w") as out:
        out.write(BATCHNORM_SOURCE)
    gpt = ["--module", os.path.join(TOOLS, "gpt_model.py") + ":GPT", "--input-shape",
           str(GPT_SIZES["block"]), "--token-ids", str(GPT_SIZES["vocab"])]
    sizes = '{"vocab": 256, "block": 32, "layers": 2, "heads": 4, "dim": 64'
    return [
        ("convnet", ["--module", convnet + ":ConvNetWithoutDropout", "--input-shape", "1,28,28"]),
        ("convnet_bf16", ["--module", convnet + ":ConvNetWithoutDropout", "--input-shape",
                          "1,28,28", "--precision", "bf16"]),
        ("gpt", gpt + ["--kwargs", sizes + "}"]),
        ("gpt_dropout", gpt + ["--kwargs", sizes + ', "dropout": 0.1}']),
        ("resnet18", ["--module", "torchvision.models:resnet18", "--kwargs",
                      '{"num_classes": 10}', "--input-shape", "3,32,32"]),
        ("batchnorm1d", ["--module", batchnorm + ":LinearBatchNorm", "--input-shape", "1,28,28"]),
    ]


def compile_package(output, arguments):
    command = [sys.executable, os.path.join(TOOLS, "compile_model.py"), output] + arguments
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}")
    print(done.stdout.strip().splitlines()[0])


def compile_all():
    with tempfile_folder() as scratch:
        for name, arguments in packages():
            compile_package(os.path.join(scratch, name + ".pt2"), arguments)


class tempfile_folder:
    def __enter__(self):
        import tempfile
        self.path = tempfile.mkdtemp(prefix="dpl-compiled-")
        return self.path

    def __exit__(self, *unused):
        shutil.rmtree(self.path, ignore_errors=True)


def altered(source, output, key, value):
    """A copy of package `source` whose description says `key value` (the line replaced)."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(output, "w", zipfile.ZIP_STORED) as new:
        for entry in old.infolist():
            data = old.read(entry.filename)
            if entry.filename.endswith("/" + compiled_package.DESCRIPTION_RECORD):
                lines = [f"{key} {value}" if line.split(" ", 1)[0] == key else line
                         for line in data.decode().splitlines()]
                data = ("\n".join(lines) + "\n").encode()
            new.writestr(entry.filename, data)


def damaged(source, output):
    """A copy of package `source` with one byte of its largest record (a compiled program's shared
    library) flipped: the record's CRC-32 no longer holds."""
    shutil.copyfile(source, output)
    with zipfile.ZipFile(output) as archive:
        record = max(archive.infolist(), key=lambda info: info.file_size)
    with open(output, "r+b") as f:
        f.seek(record.header_offset + 26)
        name_length, extra_length = struct.unpack("<HH", f.read(4))
        at = record.header_offset + 30 + name_length + extra_length + record.file_size // 2
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0xFF]))


def write_data(directory):
    os.makedirs(os.path.join(directory, "mnist"))
    for prefix, count in (("train", TRAIN_SAMPLES), ("t10k", TEST_SAMPLES)):
        for kind in ("images", "labels"):
            stem = f"{prefix}-{kind}-idx{3 if kind == 'images' else 1}-ubyte"
            write_idx(os.path.join(directory, "mnist", stem), read_idx(FASHION, stem)[:count])
    os.makedirs(os.path.join(directory, "tokens"))
    with open(TEXT, "rb") as text:
        ids = np.frombuffer(text.read(), dtype=np.uint8).astype(np.uint16)
    cut = len(ids) * 9 // 10
    ids[:cut].tofile(os.path.join(directory, "tokens", "train.bin"))
    ids[cut:].tofile(os.path.join(directory, "tokens", "val.bin"))
    import write_data as data_jobs  # tests/data_jobs/write_data.py
    os.makedirs(os.path.join(directory, "cifar"))
    data_jobs.write_cifar10(os.path.join(directory, "cifar"))


def write(directory):
    for name, arguments in packages(directory):
        compile_package(os.path.join(directory, name + ".pt2"), arguments)
    convnet = os.path.join(directory, "convnet.pt2")
    altered(convnet, os.path.join(directory, "other_torch.pt2"), "torch", "2.14.1+cpu")
    altered(convnet, os.path.join(directory, "for_cuda.pt2"), "device", "cuda")
    altered(convnet, os.path.join(directory, "lacking_isa.pt2"), "cpu_needs",
            "avx2 fma3 amx_fp16 avx10_2")
    altered(convnet, os.path.join(directory, "other_format.pt2"), "format", "99")
    damaged(convnet, os.path.join(directory, "damaged.pt2"))
    write_data(directory)


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return state, z ^ (z >> 31)


def permutation(n, seed):
    """launcher/training/sampler.cpp's Permutation: splitmix64 and Fisher-Yates."""
    order, state = list(range(n)), seed & 0xFFFFFFFFFFFFFFFF
    for i in range(n - 1, 0, -1):
        state, draw = splitmix64(state)
        j = draw % (i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def rank_indices(n, world, rank, seed, epoch):
    """DistributedSampler's indices of `rank` for `epoch` (padded by repeating the start)."""
    order = permutation(n, seed + epoch)
    per_rank = (n + world - 1) // world
    order = (order * (per_rank * world // max(n, 1) + 1))[:per_rank * world]
    return order[rank::world]


def window_offset(seed, epoch, choices):
    """datasets/tokens' offset of the train split's windows in `epoch` (AugmentRandom(seed,
    epoch, -1).Below(choices))."""
    if choices <= 1:
        return 0
    mask = 0xFFFFFFFFFFFFFFFF
    step = lambda state: splitmix64(state)[1]  # noqa: E731
    state = step(step(step(seed) ^ epoch) ^ (-1 & mask))
    return splitmix64(state)[1] % choices


class Samples:
    """A training split as dpl's data sets serve it: sample i of an epoch, (input, target)."""

    def __init__(self, kind, data, seed):
        self.kind, self.seed = kind, seed
        if kind == "convnet":
            folder = os.path.join(data, "mnist")
            images = np.fromfile(os.path.join(folder, "train-images-idx3-ubyte"), np.uint8)[16:]
            self.images = normalised(images.reshape(-1, 28, 28))
            self.labels = torch.from_numpy(
                np.fromfile(os.path.join(folder, "train-labels-idx1-ubyte"), np.uint8)[8:]
                .astype(np.int64))
            self.count = len(self.labels)
        else:
            self.ids = torch.from_numpy(
                np.fromfile(os.path.join(data, "tokens", "train.bin"), np.uint16).astype(np.int64))
            block = GPT_SIZES["block"]
            full = (len(self.ids) - 1) // block
            self.count = full - 1 if full >= 2 else 1
            self.choices = min(block, len(self.ids) - 1 - self.count * block + 1)

    def batch(self, indices, epoch):
        if self.kind == "convnet":
            return self.images[indices], self.labels[indices]
        block = GPT_SIZES["block"]
        offset = window_offset(self.seed, epoch, self.choices)
        starts = [offset + i * block for i in indices]
        inputs = torch.stack([self.ids[s:s + block] for s in starts])
        targets = torch.stack([self.ids[s + 1:s + 1 + block] for s in starts])
        return inputs, targets


def module_of(kind):
    torch.manual_seed(0)  # tools/compile_model.py's --seed default: the package's initial values
    if kind == "convnet":
        sys.path.insert(0, os.path.join(os.path.expanduser("~"), ".cache", "dpl", "test-modules"))
        from recipe_convnet import ConvNet
        module = ConvNet()
        module.dp1.p = module.dp2.p = 0.0
        return module, "nll"
    return GPT(**GPT_SIZES), "cross_entropy"


def eager(kind, data, steps, batch, world, seed, lr):
    """The losses of rank 0's part of each step, the module trained at the global batch."""
    steps, batch, world, seed, lr = int(steps), int(batch), int(world), int(seed), float(lr)
    module, loss = module_of(kind)
    module.train()
    samples = Samples(kind, data, seed)
    optimizer = torch.optim.SGD(module.parameters(), lr=lr)
    local = batch // world
    per_rank = (samples.count + world - 1) // world
    batches_per_epoch = per_rank // local + (per_rank % local != 0)
    losses = []
    for step in range(steps):
        epoch, position = divmod(step, batches_per_epoch)
        parts = []
        for rank in range(world):
            indices = rank_indices(samples.count, world, rank, seed, epoch)
            parts.append(samples.batch(indices[position * local:(position + 1) * local], epoch))
        optimizer.zero_grad()
        total = 0
        for rank, (inputs, targets) in enumerate(parts):
            part = compiled_package.element_loss(loss, module(inputs), targets)
            if rank == 0:
                losses.append(part.item())
            total = total + part / world
        total.backward()
        optimizer.step()
    print("losses " + " ".join(repr(value) for value in losses))


def test_inputs(kind, data, count=8):
    if kind == "convnet":
        folder = os.path.join(data, "mnist")
        images = np.fromfile(os.path.join(folder, "t10k-images-idx3-ubyte"), np.uint8)[16:]
        return normalised(images.reshape(-1, 28, 28)[:count])
    ids = torch.from_numpy(np.fromfile(os.path.join(data, "tokens", "val.bin"), np.uint16)
                           .astype(np.int64))
    block = GPT_SIZES["block"]
    return torch.stack([ids[i * block:(i + 1) * block] for i in range(count)])


def logits(kind, package, state, data):
    """The exported state dict strictly in the Python class, against the package's evaluation
    program computing with the same tensors."""
    from torch._inductor.package import load_package
    # Inductor's check of this CPU's instructions, in the tool's cache (docs/compiled.md).
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(
        os.path.expanduser("~"), ".cache", "dpl", "compiled", "inductor"))
    compiled_package.use_torch_libraries_first()
    module, _ = module_of(kind)
    module.load_state_dict(torch.load(state, weights_only=True))  # strict
    module.eval()
    inputs = test_inputs(kind, data)
    with torch.no_grad():
        expected = module(inputs)
    lines, _ = compiled_package.read_package(package)
    saved = torch.load(state, weights_only=True)
    names = [words[1] for words in lines if words[0] in ("parameter", "buffer")]
    (compiled,) = load_package(package, "eval")(*[saved[name] for name in names], inputs)
    difference = (compiled - expected).abs().max().item()
    print(f"largest_difference {difference!r} scale {expected.abs().max().item()!r}")


def refuse(name, directory):
    """tools/compile_model.py on a module it must refuse; prints its output and the line."""
    path = os.path.join(directory, "refused_modules.py")
    with open(path, "w") as out:
        out.write(REFUSED_SOURCE)
    classes = {"data_dependent": "DataDependent", "numpy": "ThroughNumpy"}
    command = [sys.executable, os.path.join(TOOLS, "compile_model.py"),
               os.path.join(directory, name + ".pt2"), "--module", f"{path}:{classes[name]}",
               "--input-shape", "4", "--no-cache", "--cache", os.path.join(directory, "cache")]
    done = subprocess.run(command, capture_output=True, text=True)
    line = 1 + next(i for i, text in enumerate(REFUSED_SOURCE.splitlines())
                    if f"refused: {name.replace('_', '-')}" in text or
                    (name == "numpy" and "refused: numpy" in text))
    print(f"exit {done.returncode} file {path} line {line}")
    print(done.stdout + done.stderr)


def main():
    torch.set_num_threads(1)
    command, *args = sys.argv[1:]
    {"packages": compile_all, "write": write, "eager": eager, "logits": logits,
     "refuse": refuse}[command](*args)


if __name__ == "__main__":
    main()
