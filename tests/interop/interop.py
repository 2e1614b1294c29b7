"""Python torch's side of the interop tests (dpl's Python, DPL_TEST_PYTHON).

    interop.py write DIR                        modules, state dicts and data the tests train on
    interop.py evaluate script|state FILE DATA WORLD
        torch.jit.load(FILE), or torch.load(FILE) into the recipe's ConvNet, evaluated on DATA's
        t10k set as dpl evaluates it at WORLD ranks (each rank a contiguous shard, in chunks of
        128); prints "correct N count M loss_sum X training T"
    interop.py loss state FILE DATA             the mean nll loss of the state dict in FILE on all
                                                of DATA's training samples; prints "loss X"

DATA is a folder of MNIST-format IDX files (gzipped or raw). Pixels are normalised as dpl's idx
data set does, in float32: (p * float32(1 / 255) - 0.1302) / 0.3069.
"""
import gzip
import os
import struct
import sys
import warnings

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))

import export_model  # noqa: E402  (tools/export_model.py)
from recipe_convnet import ConvNet  # noqa: E402

EVALUATION_CHUNK = 128  # dpl's evaluation batch

# A model that is not in dpl's tree: the tests write it as its own file and export it from there.
RESIDUAL_CNN_SOURCE = '''\
import torch
import torch.nn as nn
import torch.nn.functional as F


class ResidualBnCnn(nn.Module):
    """A strided stem, one residual block with BatchNorm, global average pooling."""

    def __init__(self, width: int = 12):
        super().__init__()
        self.stem = nn.Conv2d(1, width, 3, stride=2, padding=1)
        self.stem_bn = nn.BatchNorm2d(width)
        self.conv1 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.head = nn.Linear(width, 10)

    def forward(self, x):
        x = F.relu(self.stem_bn(self.stem(x)))
        y = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(x + self.bn2(self.conv2(y)))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return F.log_softmax(self.head(x), dim=1)
'''

SMALL_SET = 64  # samples of the small data folder: one batch


def read_idx(folder, stem):
    for name in (stem, stem + ".gz"):
        path = os.path.join(folder, name)
        if os.path.exists(path):
            opener = gzip.open if name.endswith(".gz") else open
            with opener(path, "rb") as source:
                data = source.read()
            ndim = data[3]
            dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
            return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)
    raise SystemExit(f"no {stem}[.gz] in {folder}")


def write_idx(path, array):
    with open(path, "wb") as out:
        out.write(struct.pack(">BBBB", 0, 0, 0x08, array.ndim))
        out.write(struct.pack(">" + "I" * array.ndim, *array.shape))
        out.write(np.ascontiguousarray(array, dtype=np.uint8).tobytes())


def normalised(pixels):
    scale = np.float32(1) / np.float32(255)
    table = (np.arange(256, dtype=np.float32) * scale - np.float32(0.1302)) / np.float32(0.3069)
    return torch.from_numpy(table[pixels].astype(np.float32)).unsqueeze(1)


def split(folder, prefix):
    images = normalised(read_idx(folder, f"{prefix}-images-idx3-ubyte"))
    labels = torch.from_numpy(read_idx(folder, f"{prefix}-labels-idx1-ubyte").astype(np.int64))
    return images, labels


def export(*argv):
    if export_model.main(list(argv)) != 0:
        raise SystemExit(f"export_model.py {' '.join(argv)} failed")


def write(directory):
    path = lambda name: os.path.join(directory, name)  # noqa: E731
    export(path("convnet.pt"), "--module", os.path.join(HERE, "..", "..", "tools", "recipe_convnet.py") + ":ConvNet",
           "--input-shape", "1,28,28")
    with open(path("residual_bn_cnn.py"), "w") as out:
        out.write(RESIDUAL_CNN_SOURCE)
    export(path("residual_bn_cnn.pt"), "--module", path("residual_bn_cnn.py") + ":ResidualBnCnn",
           "--input-shape", "1,28,28")

    torch.manual_seed(2)
    state = ConvNet().state_dict()
    missing = dict(state)
    del missing["fc2.bias"]
    torch.save(missing, path("missing_tensor.pt"))
    misshapen = dict(state)
    misshapen["fc1.weight"] = torch.zeros(64, 4000)
    torch.save(misshapen, path("misshapen_tensor.pt"))
    # What DistributedDataParallel's own state_dict() gives: every name under "module.".
    torch.save({"module." + name: tensor for name, tensor in state.items()},
               path("ddp_state_dict.pt"))
    open(path("empty.pt"), "wb").close()

    # The first samples of Fashion-MNIST's training and test sets: a one-batch data folder.
    source = "/usr/share/datasets/fashion-mnist"
    os.makedirs(path("small"))
    for prefix in ("train", "t10k"):
        for kind in ("images", "labels"):
            stem = f"{prefix}-{kind}-idx{3 if kind == 'images' else 1}-ubyte"
            write_idx(os.path.join(path("small"), stem), read_idx(source, stem)[:SMALL_SET])


def load(kind, file):
    if kind == "script":
        return torch.jit.load(file)
    loaded = torch.load(file, weights_only=True)  # only tensors and plain containers
    if type(loaded) is not dict:
        raise SystemExit(f"torch.load({file}) gave a {type(loaded).__name__}, not a dict")
    model = ConvNet()
    model.load_state_dict(loaded)  # strict: exactly the module's names and shapes
    return model


def evaluate(kind, file, data, world):
    module = load(kind, file)
    training = int(module.training)
    module.eval()
    images, labels = split(data, "t10k")
    count = labels.shape[0]
    correct, loss_sum = 0, 0.0
    with torch.no_grad():
        for rank in range(int(world)):
            begin, end = count * rank // int(world), count * (rank + 1) // int(world)
            for first in range(begin, end, EVALUATION_CHUNK):
                last = min(first + EVALUATION_CHUNK, end)
                output = module(images[first:last])
                loss_sum += F.nll_loss(output, labels[first:last], reduction="sum").item()
                correct += int(output.argmax(1).eq(labels[first:last]).sum().item())
    print(f"correct {correct} count {count} loss_sum {loss_sum!r} training {training}")


def loss(kind, file, data):
    module = load(kind, file)
    module.eval()  # the ConvNet without dropout: what dpl trains with dropout=0
    images, labels = split(data, "train")
    with torch.no_grad():
        print(f"loss {F.nll_loss(module(images), labels).item()!r}")


def main():
    torch.set_num_threads(1)
    # The recipe runs Dropout2d on (batch, 64) features, which this torch warns about per call.
    warnings.filterwarnings("ignore", message="dropout2d: Received a 2-D input")
    command, *args = sys.argv[1:]
    {"write": write, "evaluate": evaluate, "loss": loss}[command](*args)


if __name__ == "__main__":
    main()
