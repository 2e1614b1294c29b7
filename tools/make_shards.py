#!/usr/bin/env python3
"""Writes a data set as WebDataset shards for `launcher --data webdataset`.

    tools/python tools/make_shards.py SOURCE OUT [--format imagefolder|cifar10|idx]
        [--shard-size 256M] [--samples-per-shard N] [--limit TRAIN[:VAL]]

SOURCE is read as
  imagefolder  SOURCE/train/<class>/<image> and SOURCE/val/ (or test/), torchvision's ImageFolder
               order (classes sorted, labels 0..K-1); images are stored as they are (.jpg, .jpeg,
               .png, .webp), not decoded again
  cifar10      the CIFAR-10 binary version (data_batch_1..5.bin, test_batch.bin), each image as a
               PNG
  idx          MNIST-format files (train-images-idx3-ubyte[.gz] ...; Fashion-MNIST), each image
               as a PNG
(the default guesses from SOURCE's files). OUT gets train/train-NNNNNN.tar and val/val-NNNNNN.tar
by the webdataset package's ShardWriter: one sample a key ("000000123"), its image and its class
as .cls text, shards of at most --shard-size bytes (default 256M) or --samples-per-shard samples.
Samples keep SOURCE's order (the launcher's sampler shuffles samples across all shards, so shards
need no shuffling). --limit writes only the first TRAIN (and VAL) samples.
"""
import argparse
import gzip
import io
import os
import re
import sys

import dpl_python

dpl_python.use_dpl_python()  # first: PIL and webdataset below are the environment's

IMAGE_EXTENSIONS = {".jpg": "jpg", ".jpeg": "jpeg", ".png": "png", ".webp": "webp"}


def size_in_bytes(text):
    match = re.fullmatch(r"(\d+)([KMG]?)", text.upper())
    if not match:
        raise argparse.ArgumentTypeError(f"expected a size such as 256M, got {text!r}")
    return int(match.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[match.group(2)]


def png_bytes(array):
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(array).save(out, "PNG")
    return out.getvalue()


def imagefolder_samples(root, split):
    """(image extension, bytes, label) in torchvision's ImageFolder order."""
    folder = os.path.join(root, split)
    classes = sorted(entry.name for entry in os.scandir(folder) if entry.is_dir())
    for label, name in enumerate(classes):
        for directory, _, names in sorted(os.walk(os.path.join(folder, name))):
            for file_name in sorted(names):
                extension = IMAGE_EXTENSIONS.get(os.path.splitext(file_name)[1].lower())
                if extension:
                    with open(os.path.join(directory, file_name), "rb") as f:
                        yield extension, f.read(), label


def cifar10_samples(root, split):
    import numpy

    names = [f"data_batch_{n}.bin" for n in range(1, 6)] if split == "train" else ["test_batch.bin"]
    for name in names:
        with open(os.path.join(root, name), "rb") as f:
            records = numpy.frombuffer(f.read(), numpy.uint8).reshape(-1, 3073)
        for record in records:
            yield "png", png_bytes(record[1:].reshape(3, 32, 32).transpose(1, 2, 0)), int(record[0])


def read_idx(path):
    import numpy

    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[:3] != b"\0\0\x08":
        sys.exit(f"make_shards.py: {path} is not an IDX file of bytes (its header is not 0 0 8 N)")
    ndim = data[3]
    extents = [int.from_bytes(data[4 + 4 * k:8 + 4 * k], "big") for k in range(ndim)]
    expected = 4 + 4 * ndim + int(numpy.prod(extents))
    if len(data) != expected:
        sys.exit(f"make_shards.py: {path} holds {len(data)} bytes, but its header "
                 f"{tuple(extents)} asks for {expected}: is it truncated?")
    return numpy.frombuffer(data, numpy.uint8, offset=4 + 4 * ndim).reshape(extents)


def idx_path(root, name):
    for candidate in (name + ".gz", name):
        if os.path.exists(os.path.join(root, candidate)):
            return os.path.join(root, candidate)
    sys.exit(f"make_shards.py: {root} has no {name} or {name}.gz")


def idx_samples(root, split):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(idx_path(root, f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(idx_path(root, f"{prefix}-labels-idx1-ubyte"))
    for image, label in zip(images, labels):
        yield "png", png_bytes(image), int(label)


def guess_format(root):
    if os.path.isdir(os.path.join(root, "train")):
        return "imagefolder"
    if os.path.exists(os.path.join(root, "data_batch_1.bin")):
        return "cifar10"
    if any(name.startswith("train-images-idx3-ubyte") for name in os.listdir(root)):
        return "idx"
    sys.exit(f"make_shards.py: cannot tell the format of {root}; pass --format")


def source_split(root, data_format, split):
    """The source's part for OUT's `split` ("train" or "val")."""
    if data_format != "imagefolder" or split == "train":
        return split
    for name in ("val", "test"):
        if os.path.isdir(os.path.join(root, name)):
            return name
    return None


def write_split(samples, out, split, args, limit):
    import webdataset

    os.makedirs(os.path.join(out, split), exist_ok=True)
    pattern = os.path.join(out, split, f"{split}-%06d.tar")
    count = 0
    with webdataset.ShardWriter(pattern, maxcount=args.samples_per_shard, maxsize=args.shard_size,
                                verbose=0) as sink:
        for extension, data, label in samples:
            if limit is not None and count >= limit:
                break
            sink.write({"__key__": f"{count:09d}", extension: data, "cls": label})
            count += 1
        shards = sink.shard
    print(f"{split}: {count} samples in {shards} shards under {os.path.join(out, split)}")


def positive(text):
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def sample_limits(text):
    """--limit TRAIN[:VAL]: the samples to write of each split (VAL defaults to TRAIN)."""
    parts = text.split(":")
    if len(parts) > 2 or not all(part.isdigit() for part in parts):
        raise argparse.ArgumentTypeError(f"expected TRAIN[:VAL], whole numbers, got {text!r}")
    return [int(part) for part in parts]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source")
    parser.add_argument("out")
    parser.add_argument("--format", choices=("imagefolder", "cifar10", "idx"))
    parser.add_argument("--shard-size", type=size_in_bytes, default=256 << 20)
    parser.add_argument("--samples-per-shard", type=positive, default=10 ** 9)
    parser.add_argument("--limit", type=sample_limits, help="TRAIN[:VAL] samples to write")
    args = parser.parse_args()
    if not os.path.isdir(args.source):
        parser.error(f"the source {args.source} is not a folder")
    data_format = args.format or guess_format(args.source)
    limits = args.limit or [None, None]
    readers = {"imagefolder": imagefolder_samples, "cifar10": cifar10_samples,
               "idx": idx_samples}
    for split, limit in zip(("train", "val"), limits + limits[-1:]):
        part = source_split(args.source, data_format, split)
        if part is None:
            print(f"{split}: {args.source} has no val/ or test/ folder; none written")
            continue
        write_split(readers[data_format](args.source, part), args.out, split, args, limit)


if __name__ == "__main__":
    main()
