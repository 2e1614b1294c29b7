"""Writes small data sets in the formats the dataset plugins read, for training jobs of the
launcher (numpy and Pillow of dpl's Python, DPL_TEST_PYTHON).

    write_data.py npy DIR             x.npy, y.npy, x_test.npy, y_test.npy (numpy.save)
    write_data.py cifar10 DIR         data_batch_1..5.bin, test_batch.bin (CIFAR-10 binary)
    write_data.py imagefolder DIR     DIR/{train,test}/<class>/*.png|*.jpg (PIL)
    write_data.py idx-and-npy SOURCE IDX_DIR NPY_DIR TRAIN TEST
                                      the first TRAIN and TEST samples of the MNIST-format gzip
                                      files in SOURCE as raw IDX files and as npy files

The samples can be learnt: a sample of class c is noise (0..95) with band c of its rows raised
by 150, so a model's loss falls within a few steps. Everything is drawn from fixed seeds.
"""
import gzip
import os
import sys

import numpy
from PIL import Image


def banded(count, channels, height, width, classes, seed):
    """uint8 samples (count, channels, height, width) and int64 labels."""
    rng = numpy.random.default_rng(seed)
    labels = rng.integers(0, classes, count)
    samples = rng.integers(0, 96, (count, channels, height, width), dtype=numpy.uint8)
    band = height // classes
    for i, label in enumerate(labels):
        samples[i, :, label * band:(label + 1) * band, :] += 150
    return samples, labels.astype(numpy.int64)


def write_npy(directory):
    """float32 samples of shape (4, 10) (not an image: any shape trains), 4 classes."""
    for suffix, count, seed in (("", 256, 1), ("_test", 64, 2)):
        samples, labels = banded(count, 1, 4, 10, 4, seed)
        values = (samples[:, 0].astype(numpy.float32) / 255.0).astype(numpy.float32)
        numpy.save(os.path.join(directory, f"x{suffix}.npy"), values)
        numpy.save(os.path.join(directory, f"y{suffix}.npy"), labels)


def cifar_records(samples, labels):
    """Records of 3073 bytes: the label byte, then 1024 red, green and blue bytes."""
    flat = samples.reshape(len(samples), 3 * 32 * 32)
    return numpy.concatenate([labels.astype(numpy.uint8)[:, None], flat], axis=1).tobytes()


def write_cifar10(directory):
    for batch in range(1, 6):
        samples, labels = banded(32, 3, 32, 32, 10, 10 + batch)
        with open(os.path.join(directory, f"data_batch_{batch}.bin"), "wb") as out:
            out.write(cifar_records(samples, labels))
    samples, labels = banded(40, 3, 32, 32, 10, 20)
    with open(os.path.join(directory, "test_batch.bin"), "wb") as out:
        out.write(cifar_records(samples, labels))


CLASS_NAMES = ("bands0", "bands1", "bands2", "bands3")


def write_imagefolder(directory):
    """16x16 RGB images of 4 classes, every other one a JPEG."""
    for split, count, seed in (("train", 128, 3), ("test", 32, 4)):
        samples, labels = banded(count, 3, 16, 16, 4, seed)
        for i, (sample, label) in enumerate(zip(samples, labels)):
            folder = os.path.join(directory, split, CLASS_NAMES[label])
            os.makedirs(folder, exist_ok=True)
            image = Image.fromarray(sample.transpose(1, 2, 0), "RGB")
            if i % 2:
                image.save(os.path.join(folder, f"{i:03d}.png"))
            else:
                image.save(os.path.join(folder, f"{i:03d}.jpg"), quality=90)


def read_idx(path, count):
    """The header's extents after the count, and the first `count` items."""
    with gzip.open(path, "rb") as source:
        data = source.read()
    ndim = data[3]
    extents = [int.from_bytes(data[4 + 4 * k:8 + 4 * k], "big") for k in range(ndim)]
    item = int(numpy.prod(extents[1:], dtype=numpy.int64))
    offset = 4 + 4 * ndim
    items = numpy.frombuffer(data, numpy.uint8, count * item, offset)
    return data[:4], extents[1:], items.reshape([count] + extents[1:])


def write_idx(path, magic, extents, items):
    with open(path, "wb") as out:
        out.write(magic)
        for extent in [len(items)] + extents:
            out.write(int(extent).to_bytes(4, "big"))
        out.write(items.tobytes())


def write_idx_and_npy(source, idx_directory, npy_directory, train, test):
    for prefix, suffix, count in (("train", "", train), ("t10k", "_test", test)):
        for kind in ("images", "labels"):
            ndim = 3 if kind == "images" else 1
            name = f"{prefix}-{kind}-idx{ndim}-ubyte"
            magic, extents, items = read_idx(os.path.join(source, name + ".gz"), count)
            write_idx(os.path.join(idx_directory, name), magic, extents, items)
            if kind == "images":
                numpy.save(os.path.join(npy_directory, f"x{suffix}.npy"), items[:, None])
            else:
                numpy.save(os.path.join(npy_directory, f"y{suffix}.npy"),
                           items.astype(numpy.int64))


if __name__ == "__main__":
    command, arguments = sys.argv[1], sys.argv[2:]
    for folder in arguments[:1] if command != "idx-and-npy" else arguments[1:3]:
        os.makedirs(folder, exist_ok=True)
    if command == "npy":
        write_npy(*arguments)
    elif command == "cifar10":
        write_cifar10(*arguments)
    elif command == "imagefolder":
        write_imagefolder(*arguments)
    elif command == "idx-and-npy":
        write_idx_and_npy(arguments[0], arguments[1], arguments[2], int(arguments[3]),
                          int(arguments[4]))
    else:
        sys.exit(f"write_data.py: unknown command {command!r}")
